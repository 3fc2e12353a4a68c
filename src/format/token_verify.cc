// VerifyTokenCorpus (token_corpus.h): the headers and indexes as
// OpenTokenCorpus reads them, every token byte, and for a corpus opened from
// its manifest each file's xxh64, each Megatron .idx's size and xxh64, and
// every head of gpufeed.heads against the bytes it stands for.
#include <algorithm>
#include <memory>
#include <string>

#include "format/datasets.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "format/token_heads.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// A Megatron corpus opened from its manifest never reads the .idx files
// (their counts are in the manifest): verify checks that each is still the
// file `gpufeed index` described, by size and xxh64.
void VerifyMegatronIndexes(const std::string& path, const DatasetOptions& options,
                           const TokenCorpus& corpus, VerifyReport* report) {
  if (corpus.format != DatasetFormat::kMegatron || corpus.files.empty() ||
      !corpus.files.front().file->lazy()) {
    return;
  }
  std::string manifest_path;
  Manifest manifest;
  bool found = false;
  Status status = FindTokenManifest(AbsolutePath(path), options, &manifest_path, &manifest, &found);
  if (!status.ok() || !found) {
    if (!status.ok()) report->problems.push_back(status.ToString());
    return;
  }
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    if (shard.index.empty() || shard.index_xxh64.empty()) continue;
    std::string index;
    Status checked = ResolveInsideDirectory(Dirname(manifest_path), shard.index,
                                            options.allow_external_paths,
                                            manifest_path + " shard " + std::to_string(i), &index);
    uint64_t bytes = 0;
    if (checked.ok()) checked = FileSizeOf(index, &bytes);
    if (checked.ok() && bytes != shard.index_bytes) {
      checked = Status::Corruption(index + ": " + std::to_string(bytes) +
                                   " bytes, but the manifest says " +
                                   std::to_string(shard.index_bytes) +
                                   " (the file changed since `gpufeed index`: run it again)");
    }
    uint64_t digest = 0;
    if (checked.ok()) checked = FileXxh64(index, &digest);
    if (checked.ok() && Xxh64Hex(digest) != shard.index_xxh64) {
      checked = Status::Corruption(index + ": xxh64 " + Xxh64Hex(digest) +
                                   " differs from the manifest's " + shard.index_xxh64 +
                                   " (the file changed since `gpufeed index`: run it again)");
    }
    if (checked.ok()) {
      report->checksums_checked += 1;
    } else {
      report->problems.push_back(checked.ToString());
    }
  }
}

// The heads `gpufeed index` wrote beside the manifest, when there are any:
// a problem when they cannot be used. Null without heads.
std::shared_ptr<const TokenHeads> HeadsToVerify(const TokenCorpus& corpus, VerifyReport* report) {
  std::shared_ptr<const TokenHeads> heads;
  if (corpus.heads_path.empty()) return heads;
  Status opened = TokenHeads::Open(corpus.heads_path, &heads);
  if (!opened.ok() && opened.code() != Status::Code::kNotFound) {
    report->problems.push_back(opened.ToString());
  }
  return opened.ok() ? heads : nullptr;
}

}  // namespace

Status VerifyTokenCorpus(const std::string& path, const DatasetOptions& options,
                         VerifyReport* report, bool* recognised) {
  std::shared_ptr<Store> store;
  GPUFEED_RETURN_IF_ERROR(NewDatasetStore(CacheOptions(), AbsolutePath(path), &store));
  std::shared_ptr<const TokenCorpus> corpus;
  Status status = OpenTokenCorpus(path, options, store, &corpus, recognised);
  if (!*recognised) return status;
  report->format = options.format;
  if (!status.ok()) {
    if (status.code() != Status::Code::kCorruption) return status;
    report->problems.push_back(status.ToString());
    return Status::OK();
  }
  report->format = corpus->format;
  // Every byte of every file is read: a file shorter than its header or
  // index says, or one the disk cannot serve, is named here.
  std::string buffer(4u << 20, '\0');
  const std::shared_ptr<const TokenHeads> heads = HeadsToVerify(*corpus, report);
  const size_t item = TokenDtypeSize(corpus->dtype);
  for (const TokenFile& file : corpus->files) {
    report->shards_checked += 1;
    if (file.file->lazy()) {
      // Opened from a manifest: the file must still be what it describes.
      Status described = file.header_checked_at_first_read
                             ? CheckHeaderAgainstManifest(file, corpus->dtype)
                             : Status::OK();
      uint64_t digest = 0;
      if (described.ok()) described = FileXxh64(file.path, &digest);
      if (described.ok() && Xxh64Hex(digest) != file.file->xxh64()) {
        described = Status::Corruption(file.path + ": xxh64 " + Xxh64Hex(digest) +
                                       " differs from the manifest's " + file.file->xxh64());
      }
      if (!described.ok()) {
        report->problems.push_back(described.ToString());
        continue;
      }
      report->checksums_checked += 1;
    }
    uint64_t end = file.data_offset + file.tokens * item;
    const TokenHeadsEntry* entry = nullptr;
    if (heads != nullptr && file.file->lazy()) {
      entry = heads->token_bytes() == item
                  ? heads->Find(file.bytes, file.file->xxh64(), file.data_offset, end)
                  : nullptr;
      if (entry == nullptr) {
        report->problems.push_back(heads->path() + " does not describe " + file.path +
                                   " as the manifest does (run `gpufeed index` again)");
      }
    }
    Status heads_agree;
    for (uint64_t offset = file.data_offset; offset < end;) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), end - offset));
      size_t done = 0;
      Status read = file.file->ReadAt(offset, want, buffer.data(), &done);
      if (!read.ok() || done != want) {
        report->problems.push_back(read.ok() ? file.path + " at byte offset " +
                                                   std::to_string(offset + done) +
                                                   ": the file ends early"
                                             : read.ToString());
        break;
      }
      // Chunks start at data_offset and hold whole tokens: no head spans two.
      if (entry != nullptr && heads_agree.ok()) {
        heads_agree = heads->Compare(*entry, file.path, offset, buffer.data(), done);
        if (!heads_agree.ok()) report->problems.push_back(heads_agree.ToString());
      }
      offset += done;
    }
  }
  VerifyMegatronIndexes(path, options, *corpus, report);
  report->records_checked = corpus->tokens;
  return Status::OK();
}

}  // namespace gpufeed
