// The line index of a Criteo TSV file: the scan, the index file (save with
// a temporary file and a rename, load with every check), where it is kept,
// and WriteLineIndex (`gpufeed index --format criteo_tsv`).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "format/criteo_tsv.h"
#include "gpufeed/writer.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the line index stores little-endian uint64s as they lie in memory");

constexpr char kMagic[] = "GFLINIX1";
constexpr size_t kMagicSize = 8;
// Magic, file size, mtime, line count.
constexpr size_t kHeaderSize = kMagicSize + 3 * sizeof(uint64_t);
constexpr char kBesideSuffix[] = ".gpufeed-lines";

void EncodeHeader(const LineIndex& index, char* header) {
  const uint64_t fields[3] = {index.file_size, static_cast<uint64_t>(index.file_mtime_ns),
                              index.lines()};
  std::memcpy(header, kMagic, kMagicSize);
  std::memcpy(header + kMagicSize, fields, sizeof(fields));
}

// Writes the index to an open temporary file.
Status WriteIndexTo(int fd, const LineIndex& index, const std::string& shown) {
  char header[kHeaderSize];
  EncodeHeader(index, header);
  const std::vector<uint64_t>& offsets = *index.offsets;
  const size_t offset_bytes = offsets.size() * sizeof(uint64_t);
  Xxh64 hash;
  hash.Update(header, kHeaderSize);
  hash.Update(offsets.data(), offset_bytes);
  const uint64_t digest = hash.Digest();
  GPUFEED_RETURN_IF_ERROR(WriteFull(fd, header, kHeaderSize, shown));
  GPUFEED_RETURN_IF_ERROR(WriteFull(fd, offsets.data(), offset_bytes, shown));
  GPUFEED_RETURN_IF_ERROR(WriteFull(fd, &digest, sizeof(digest), shown));
  if (::fsync(fd) != 0) return Status::FromErrno(errno, shown);
  return Status::OK();
}

// Checks what the checksum cannot: the offsets describe lines of the file.
Status CheckOffsets(const LineIndex& index, const std::string& index_path) {
  const std::vector<uint64_t>& offsets = *index.offsets;
  auto bad = [&](const std::string& what) {
    return Status::Corruption(index_path + ": not a valid line index (" + what +
                              "); delete it and it is built again");
  };
  if (offsets.front() != 0) return bad("the first line does not start at byte 0");
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] <= offsets[i - 1]) {
      return bad("line " + std::to_string(i) + " does not end after it starts");
    }
  }
  if (offsets.back() != index.file_size) return bad("the last line does not end the file");
  return Status::OK();
}

}  // namespace

Status ScanLines(const std::string& path, uint64_t file_size, const LineReader& read,
                 LineIndex* index, size_t window) {
  auto offsets = std::make_shared<std::vector<uint64_t>>();
  offsets->push_back(0);
  std::vector<char> buffer(
      static_cast<size_t>(std::max<uint64_t>(1, std::min<uint64_t>(window, file_size))));
  for (uint64_t at = 0; at < file_size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), file_size - at));
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(read(at, want, buffer.data(), &done));
    if (done != want) {
      return Status::Corruption(path + ": ends at byte offset " + std::to_string(at + done) +
                                " while its lines were indexed, before its size " +
                                std::to_string(file_size) + " (the file shrank)");
    }
    const char* const begin = buffer.data();
    const char* const end = begin + want;
    for (const char* p = begin; (p = static_cast<const char*>(std::memchr(p, '\n', end - p)));) {
      ++p;
      offsets->push_back(at + static_cast<uint64_t>(p - begin));
    }
    if (at == 0 && offsets->size() > 1 && want < file_size) {
      // The first window's mean line length foretells the count.
      offsets->reserve(static_cast<size_t>(file_size / (want / (offsets->size() - 1)) * 9 / 8));
    }
    at += want;
  }
  if (offsets->back() != file_size) offsets->push_back(file_size);  // a last line without '\n'
  offsets->shrink_to_fit();
  index->file_size = file_size;
  index->offsets = std::move(offsets);
  return Status::OK();
}

Status SaveLineIndex(const LineIndex& index, const std::string& index_path) {
  static std::atomic<uint64_t> counter{0};
  const std::string temporary = index_path + ".tmp." + std::to_string(::getpid()) + "." +
                                std::to_string(counter.fetch_add(1));
  int raw = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (raw < 0) return Status::FromErrno(errno, temporary);
  UniqueFd fd(raw);
  Status status = WriteIndexTo(fd.get(), index, temporary);
  fd.reset();
  if (status.ok() && ::rename(temporary.c_str(), index_path.c_str()) != 0) {
    status = Status::FromErrno(errno, index_path);
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  return SyncDirectory(Dirname(index_path));
}

Status LoadLineIndex(const std::string& index_path, LineIndex* index) {
  UniqueFd fd;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(index_path, &fd, &size, &mtime_ns));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(index_path + ": not a valid line index (" + what +
                              "); delete it and it is built again");
  };
  char header[kHeaderSize];
  size_t done = 0;
  if (size >= kHeaderSize + 2 * sizeof(uint64_t)) {
    GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), header, kHeaderSize, 0, index_path, &done));
  }
  if (done != kHeaderSize || std::memcmp(header, kMagic, kMagicSize) != 0) {
    return bad("bad magic");
  }
  uint64_t fields[3];
  std::memcpy(fields, header + kMagicSize, sizeof(fields));
  const uint64_t lines = fields[2];
  if (lines > (size - kHeaderSize) / sizeof(uint64_t) - 2 ||
      size != kHeaderSize + (lines + 2) * sizeof(uint64_t)) {
    return bad("its size does not match its line count");
  }
  auto offsets = std::make_shared<std::vector<uint64_t>>(lines + 1);
  const size_t offset_bytes = offsets->size() * sizeof(uint64_t);
  uint64_t stored = 0;
  GPUFEED_RETURN_IF_ERROR(
      PreadFull(fd.get(), offsets->data(), offset_bytes, kHeaderSize, index_path, &done));
  if (done != offset_bytes) return bad("truncated");
  GPUFEED_RETURN_IF_ERROR(
      PreadFull(fd.get(), &stored, sizeof(stored), kHeaderSize + offset_bytes, index_path, &done));
  if (done != sizeof(stored)) return bad("truncated");
  Xxh64 hash;
  hash.Update(header, kHeaderSize);
  hash.Update(offsets->data(), offset_bytes);
  if (hash.Digest() != stored) return bad("checksum mismatch");
  index->file_size = fields[0];
  index->file_mtime_ns = static_cast<int64_t>(fields[1]);
  index->offsets = std::move(offsets);
  return CheckOffsets(*index, index_path);
}

std::string LineIndexPathBeside(const std::string& path) { return path + kBesideSuffix; }

bool IsLineIndexName(const std::string& name) {
  return EndsWith(name, kBesideSuffix) ||
         name.find(std::string(kBesideSuffix) + ".tmp.") != std::string::npos;
}

std::string LineIndexPathInDirectory(const std::string& path, const std::string& directory) {
  return IndexPathInDirectory(path, directory, kBesideSuffix);
}

std::string LineIndexFallbackDirectory(const DatasetOptions& options) {
  return IndexFallbackDirectory(options.tabular.index_dir, options.cache.cache_dir, "line-index");
}

namespace {

// Saves `index` of `path` beside it, else in `fallback_dir`; *saved_at gets
// where it went. The error of the last place tried when none took it.
Status SaveBesideOrIn(const LineIndex& index, const std::string& path,
                      const std::string& fallback_dir, std::string* saved_at) {
  *saved_at = LineIndexPathBeside(path);
  Status saved = SaveLineIndex(index, *saved_at);
  if (saved.ok() || fallback_dir.empty()) return saved;
  *saved_at = LineIndexPathInDirectory(path, fallback_dir);
  saved = CreateDirectories(fallback_dir);
  if (saved.ok()) saved = SaveLineIndex(index, *saved_at);
  return saved;
}

}  // namespace

Status LoadOrBuildLineIndex(const StoreFile& file, const std::string& fallback_dir,
                            LineIndex* index) {
  const std::string& path = file.path();
  std::vector<std::string> candidates = {LineIndexPathBeside(path)};
  if (!fallback_dir.empty()) candidates.push_back(LineIndexPathInDirectory(path, fallback_dir));
  for (const std::string& candidate : candidates) {
    if (!PathExists(candidate)) continue;
    Status loaded = LoadLineIndex(candidate, index);
    if (!loaded.ok()) {
      Log().warn("{}; building it again", loaded.ToString());
    } else if (index->file_size == file.size() && index->file_mtime_ns == file.mtime_ns()) {
      return Status::OK();
    } else {
      Log().info("{} is stale (the file's size or mtime changed); building it again", candidate);
    }
  }
  Log().info(
      "{} has no line index; indexing its lines (`gpufeed index {} --format criteo_tsv` "
      "builds it ahead)",
      path, path);
  GPUFEED_RETURN_IF_ERROR(ScanLines(
      path, file.size(),
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        return file.ReadAt(offset, length, destination, done);
      },
      index));
  index->file_mtime_ns = file.mtime_ns();
  std::string saved_at;
  Status saved = SaveBesideOrIn(*index, path, fallback_dir, &saved_at);
  if (!saved.ok()) {
    Log().warn("could not save the line index of {} ({}); it is built again next time", path,
               saved.ToString());
  }
  return Status::OK();
}

Status WriteLineIndex(const std::string& path, const DatasetOptions& options,
                      std::vector<LineIndexWritten>* written) {
  written->clear();
  std::vector<std::string> files;
  GPUFEED_RETURN_IF_ERROR(ListCriteoTsvFiles(AbsolutePath(path), options, &files));
  const std::string fallback = LineIndexFallbackDirectory(options);
  for (const std::string& file : files) {
    UniqueFd fd;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    GPUFEED_RETURN_IF_ERROR(OpenForRead(file, &fd, &size, &mtime_ns));
    LineIndex index;
    GPUFEED_RETURN_IF_ERROR(ScanLines(
        file, size,
        [&](uint64_t offset, size_t length, char* destination, size_t* done) {
          return PreadFull(fd.get(), destination, length, offset, file, done);
        },
        &index));
    index.file_mtime_ns = mtime_ns;
    LineIndexWritten entry;
    entry.file = file;
    entry.lines = index.lines();
    GPUFEED_RETURN_IF_ERROR(SaveBesideOrIn(index, file, fallback, &entry.index_path));
    written->push_back(std::move(entry));
  }
  return Status::OK();
}

}  // namespace gpufeed
