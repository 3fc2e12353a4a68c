// WebDataset datasets: tar shards read in place through a member index
// (tar_index.h), one sample per key, the image and the label chosen by
// WebDatasetOptions.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "format/datasets.h"
#include "format/tar_index.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// A sample's needed members farther apart than this are read one by one
// (Read) instead of as one range (Locate), so that a huge unrelated member
// between them is never read.
constexpr uint64_t kMaxSampleSpan = 64 << 20;
// A sample's range takes in the headers and other members around its image
// and label when they add at most this: the ranges of consecutive samples
// then touch, and the kernel's read-ahead sees one sequential stream, as it
// does for RecordIO.
constexpr uint64_t kMaxSpanSlack = 64 << 10;
// Bytes per read while the headers are scanned.
constexpr size_t kScanWindow = 4 << 20;

struct TarShard {
  std::string path;
  std::shared_ptr<const StoreFile> file;
  TarIndex index;
};

// The index of `file` (a tar), from beside it or `fallback_dir`, else built
// by scanning and saved beside it (or in `fallback_dir` when that fails).
// An index whose tar size or mtime differs from the tar's is built again.
Status LoadOrBuildIndex(const StoreFile& file, const std::string& fallback_dir, TarIndex* index) {
  const std::string& tar_path = file.path();
  std::vector<std::string> candidates = {TarIndexPathBeside(tar_path)};
  if (!fallback_dir.empty()) candidates.push_back(TarIndexPathInDirectory(tar_path, fallback_dir));
  for (const std::string& candidate : candidates) {
    std::string data;
    if (!PathExists(candidate) || !ReadFileToString(candidate, &data).ok()) continue;
    Status decoded = DecodeTarIndex(data, candidate, index);
    if (!decoded.ok()) {
      Log().warn("{}; building it again", decoded.ToString());
    } else if (index->tar_size == file.size() && index->tar_mtime_ns == file.mtime_ns()) {
      return Status::OK();
    } else {
      Log().info("{} is stale (the tar's size or mtime changed); building it again", candidate);
    }
  }
  Log().info("{} has no member index; scanning its headers (`gpufeed index {}` writes one ahead)",
             tar_path, tar_path);
  GPUFEED_RETURN_IF_ERROR(ScanTar(
      tar_path, file.size(),
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        return file.ReadAt(offset, length, destination, done);
      },
      index, kScanWindow));
  index->tar_mtime_ns = file.mtime_ns();
  std::string encoded;
  EncodeTarIndex(*index, &encoded);
  Status saved = WriteFileAtomically(candidates[0], encoded);
  if (!saved.ok() && candidates.size() > 1) {
    saved = CreateDirectories(Dirname(candidates[1]));
    if (saved.ok()) saved = WriteFileAtomically(candidates[1], encoded);
  }
  if (!saved.ok()) {
    Log().warn("could not save the member index of {} ({}); it is built again next time", tar_path,
               saved.ToString());
  }
  return Status::OK();
}

class WebDatasetDataset final : public DatasetBase {
 public:
  WebDatasetDataset(std::string path, std::shared_ptr<Store> store, WebDatasetOptions options)
      : DatasetBase(DatasetFormat::kWebDataset, std::move(path), std::move(store)),
        options_(std::move(options)) {
    json_label_ = options_.label_key == "json" || EndsWith(options_.label_key, ".json");
    integer_labels_ = !json_label_;
  }

  // `xxh64` (from a manifest, or empty) lets a node cache verify its copy.
  Status AddTar(const std::string& tar_path, const std::string& fallback_dir,
                const std::string& xxh64) {
    auto shard = std::make_unique<TarShard>();
    shard->path = tar_path;
    GPUFEED_RETURN_IF_ERROR(store_->Open(tar_path, xxh64, &shard->file));
    GPUFEED_RETURN_IF_ERROR(LoadOrBuildIndex(*shard->file, fallback_dir, &shard->index));
    ShardInfo info;
    info.path = tar_path;
    info.first_record = total_;
    info.records = shard->index.samples.size();
    info.bytes = shard->file->size();
    info.xxh64 = xxh64;
    shards_.push_back(info);
    first_records_.push_back(total_);
    total_ += info.records;
    tars_.push_back(std::move(shard));
    return Status::OK();
  }

  void SetClasses(std::vector<std::string> classes, bool integer_labels) {
    classes_ = std::move(classes);
    integer_labels_ = integer_labels;
  }

  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data, size_t size,
                      Record* record) const override;
  bool CanLocate() const override { return total_ > 0; }

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    return tars_[ShardIndexOf(index)]->file.get();
  }

 private:
  size_t ShardIndexOf(uint64_t index) const {
    return ShardContaining(first_records_, index);
  }
  // The sample's image and label members; Corruption naming the tar, the
  // sample's first member and its offset when one is missing.
  Status Members(const TarShard& shard, const TarSample& sample, const TarMember** image,
                 const TarMember** label) const;
  // The bytes one read of the sample takes: its image and label members,
  // widened to the whole sample (headers, other members) within
  // kMaxSpanSlack on each side.
  static void SampleSpan(const TarShard& shard, const TarSample& sample, const TarMember& image,
                         const TarMember& label, uint64_t* begin, uint64_t* end);
  // Fills *record from the members' bytes (`image_bytes`, `label_bytes`).
  Status Build(const TarShard& shard, const TarSample& sample, const TarMember& label,
               std::string_view image_bytes, std::string_view label_bytes, uint64_t index,
               const TarMember& image, Record* record) const;
  std::string MemberName(const TarShard& shard, const TarSample& sample,
                         const TarMember& member) const {
    return sample.key + "." + shard.index.extensions[member.extension];
  }

  WebDatasetOptions options_;
  bool json_label_ = false;
  std::vector<std::unique_ptr<TarShard>> tars_;
  std::vector<uint64_t> first_records_;
  uint64_t total_ = 0;
};

Status WebDatasetDataset::Members(const TarShard& shard, const TarSample& sample,
                                  const TarMember** image, const TarMember** label) const {
  *image = nullptr;
  for (const std::string& key : options_.image_keys) {
    *image = shard.index.Find(sample, key);
    if (*image != nullptr) break;
  }
  *label = shard.index.Find(sample, options_.label_key);
  if (*image != nullptr && *label != nullptr) return Status::OK();
  std::string wanted = *image == nullptr ? "no image member (." : "no label member (.";
  if (*image == nullptr) {
    for (size_t i = 0; i < options_.image_keys.size(); ++i) {
      wanted += (i > 0 ? ", ." : "") + options_.image_keys[i];
    }
  } else {
    wanted += options_.label_key;
  }
  std::string present;
  for (uint32_t i = 0; i < sample.member_count; ++i) {
    const TarMember& member = shard.index.members[sample.first_member + i];
    present += (i > 0 ? ", " : "") + MemberName(shard, sample, member);
  }
  const TarMember& first = shard.index.members[sample.first_member];
  return Status::Corruption(shard.path + ": sample \"" + sample.key + "\" (members " + present +
                            ", from byte offset " + std::to_string(first.header_offset) + ") has " +
                            wanted + ")");
}

Status WebDatasetDataset::Build(const TarShard& shard, const TarSample& sample,
                                const TarMember& label, std::string_view image_bytes,
                                std::string_view label_bytes, uint64_t index,
                                const TarMember& image, Record* record) const {
  auto bad_label = [&](const std::string& what) {
    return Status::Corruption(shard.path + ": member " + MemberName(shard, sample, label) +
                              " at byte offset " + std::to_string(label.header_offset) + ": " +
                              what);
  };
  float value = 0;
  if (json_label_) {
    nlohmann::json parsed = nlohmann::json::parse(label_bytes.begin(), label_bytes.end(), nullptr,
                                                  /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return bad_label("not valid JSON");
    if (!parsed.is_object() || !parsed.contains(options_.label_field) ||
        !parsed[options_.label_field].is_number()) {
      return bad_label("no number in field \"" + options_.label_field + "\"");
    }
    double number = parsed[options_.label_field].get<double>();
    if (!std::isfinite(number) || std::fabs(number) > 3.4e38)
      return bad_label("label out of range");
    value = static_cast<float>(number);
  } else {
    std::string text(label_bytes);
    size_t begin = text.find_first_not_of(" \t\r\n");
    size_t end = text.find_last_not_of(" \t\r\n");
    text = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
    char* stop = nullptr;
    errno = 0;
    long long parsed = text.empty() ? 0 : std::strtoll(text.c_str(), &stop, 10);
    if (text.empty() || *stop != '\0' || errno != 0 || std::llabs(parsed) > (1LL << 24)) {
      return bad_label("label \"" + text.substr(0, 40) +
                       "\" is not an integer (a class index as text)");
    }
    value = static_cast<float>(parsed);
  }
  record->data.assign(image_bytes.data(), image_bytes.size());
  record->labels.assign(1, value);
  record->key = sample.key;
  record->id = index;
  record->shape.clear();
  record->encoded = true;
  record->layout = Record::PixelLayout::kChw;
  record->source = shard.path + " at byte offset " + std::to_string(image.offset) + " (member " +
                   MemberName(shard, sample, image) + ")";
  return Status::OK();
}

void WebDatasetDataset::SampleSpan(const TarShard& shard, const TarSample& sample,
                                   const TarMember& image, const TarMember& label, uint64_t* begin,
                                   uint64_t* end) {
  *begin = std::min(image.offset, label.offset);
  *end = std::max(image.offset + image.size, label.offset + label.size);
  const TarMember& first = shard.index.members[sample.first_member];
  const TarMember& last = shard.index.members[sample.first_member + sample.member_count - 1];
  if (*begin - first.header_offset <= kMaxSpanSlack) *begin = first.header_offset;
  uint64_t last_end = (last.offset + last.size + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize;
  last_end = std::min(last_end, shard.index.tar_size);
  if (last_end >= *end && last_end - *end <= kMaxSpanSlack) *end = last_end;
}

Status WebDatasetDataset::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  const TarShard& shard = *tars_[ShardIndexOf(index)];
  const TarSample& sample = shard.index.samples[index - first_records_[ShardIndexOf(index)]];
  const TarMember* image = nullptr;
  const TarMember* label = nullptr;
  Status status = Members(shard, sample, &image, &label);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  uint64_t begin = 0, end = 0;
  SampleSpan(shard, sample, *image, *label, &begin, &end);
  // One read of the sample's range, or one per member when they lie far
  // apart (a large unrelated member between them).
  thread_local std::string span, image_bytes, label_bytes;
  std::vector<std::pair<const TarMember*, std::string*>> reads;
  if (end - begin <= kMaxSampleSpan) {
    reads = {{nullptr, &span}};
  } else {
    reads = {{image, &image_bytes}, {label, &label_bytes}};
  }
  for (auto [member, bytes] : reads) {
    uint64_t offset = member != nullptr ? member->offset : begin;
    uint64_t length = member != nullptr ? member->size : end - begin;
    bytes->resize(length);
    size_t done = 0;
    status = shard.file->ReadAt(offset, length, &(*bytes)[0], &done);
    if (status.ok() && done < length) {
      const TarMember& named = member != nullptr ? *member : *image;
      status = Status::Corruption(shard.path + ": member " + MemberName(shard, sample, named) +
                                  " at byte offset " + std::to_string(named.header_offset) +
                                  " runs past the end of the tar (changed since it was indexed?)");
    }
    if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  }
  if (reads.size() == 1) {
    std::string_view bytes(span);
    status = Build(shard, sample, *label, bytes.substr(image->offset - begin, image->size),
                   bytes.substr(label->offset - begin, label->size), index, *image, record);
  } else {
    status = Build(shard, sample, *label, image_bytes, label_bytes, index, *image, record);
  }
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  return Status::OK();
}

bool WebDatasetDataset::Locate(uint64_t index, RecordLocation* location) const {
  if (index >= total_) return false;
  const TarShard& shard = *tars_[ShardIndexOf(index)];
  const TarSample& sample = shard.index.samples[index - first_records_[ShardIndexOf(index)]];
  const TarMember* image = nullptr;
  const TarMember* label = nullptr;
  if (!Members(shard, sample, &image, &label).ok()) return false;  // Read says why
  uint64_t begin = 0, end = 0;
  SampleSpan(shard, sample, *image, *label, &begin, &end);
  if (end - begin > kMaxSampleSpan) return false;
  return LocateRange(*shard.file, shard.path, begin, end - begin, location);
}

Status WebDatasetDataset::ParseLocated(uint64_t index, const RecordLocation& location,
                                       const char* data, size_t size, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  const TarShard& shard = *tars_[ShardIndexOf(index)];
  const TarSample& sample = shard.index.samples[index - first_records_[ShardIndexOf(index)]];
  FileView engine_view;  // what the engine read: counted, never read again
  engine_view.local = location.local;
  shard.file->Count(engine_view, size);
  const TarMember* image = nullptr;
  const TarMember* label = nullptr;
  GPUFEED_RETURN_IF_ERROR(Members(shard, sample, &image, &label));
  for (const TarMember* member : {image, label}) {
    if (member->offset < location.offset ||
        member->offset + member->size > location.offset + size) {
      return Status::Corruption(shard.path + ": member " + MemberName(shard, sample, *member) +
                                " at byte offset " + std::to_string(member->header_offset) +
                                " runs past the end of the tar (changed since it was indexed?)");
    }
  }
  std::string_view bytes(data, size);
  return Build(shard, sample, *label, bytes.substr(image->offset - location.offset, image->size),
               bytes.substr(label->offset - location.offset, label->size), index, *image, record);
}

}  // namespace

std::string TarIndexPathInDirectory(const std::string& tar_path, const std::string& directory) {
  return IndexPathInDirectory(tar_path, directory, ".gpufeed-index");
}

std::string TarIndexFallbackDirectory(const DatasetOptions& options) {
  return IndexFallbackDirectory(options.webdataset.index_dir, options.cache.cache_dir, "tar-index");
}

Status OpenWebDatasetDataset(const std::string& path, const std::vector<std::string>& tars,
                             const DatasetOptions& options, const std::shared_ptr<Store>& store,
                             std::unique_ptr<Dataset>* dataset, const Manifest* manifest) {
  if (tars.empty()) return Status::NotFound(path + ": no .tar files (format=\"webdataset\")");
  if (options.webdataset.image_keys.empty() || options.webdataset.label_key.empty()) {
    return Status::InvalidArgument("webdataset: image_key and label_key must not be empty");
  }
  auto result = std::make_unique<WebDatasetDataset>(path, store, options.webdataset);
  std::string fallback = TarIndexFallbackDirectory(options);
  for (size_t i = 0; i < tars.size(); ++i) {
    GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(tars[i]));
    bool listed = manifest != nullptr && i < manifest->shards.size();
    GPUFEED_RETURN_IF_ERROR(
        result->AddTar(tars[i], fallback, listed ? manifest->shards[i].xxh64 : std::string()));
    uint64_t found = result->shards().back().records;
    if (manifest != nullptr && i < manifest->shards.size() &&
        found != manifest->shards[i].records) {
      return Status::Corruption(tars[i] + ": holds " + std::to_string(found) +
                                " samples but the manifest says " +
                                std::to_string(manifest->shards[i].records));
    }
  }
  if (manifest != nullptr) result->SetClasses(manifest->classes, manifest->integer_labels);
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no samples in its tars)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

Status WriteTarIndex(const std::string& tar_path, const std::string& index_path,
                     uint64_t* samples) {
  GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(tar_path));
  UniqueFd fd;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(tar_path, &fd, &size, &mtime_ns));
  TarIndex index;
  GPUFEED_RETURN_IF_ERROR(ScanTar(
      tar_path, size,
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        return PreadFull(fd.get(), destination, length, offset, tar_path, done);
      },
      &index, kScanWindow));
  index.tar_mtime_ns = mtime_ns;
  std::string encoded;
  EncodeTarIndex(index, &encoded);
  GPUFEED_RETURN_IF_ERROR(
      WriteFileAtomically(index_path.empty() ? TarIndexPathBeside(tar_path) : index_path, encoded));
  if (samples != nullptr) *samples = index.samples.size();
  return Status::OK();
}

}  // namespace gpufeed
