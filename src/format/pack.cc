// Pack: ImageFolder or list file -> shards + gpufeed.json, in the format of
// the registry entry whose writer writes PackOptions::format.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "format/datasets.h"
#include "format/manifest.h"
#include "format/registry.h"
#include "gpufeed/writer.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

struct PackSource {
  std::string path;  // absolute
  std::vector<float> labels;
  std::optional<uint64_t> id;  // the index column of an MXNet .lst line
};

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

std::string ShardBaseName(uint64_t shard) {
  char name[32];
  std::snprintf(name, sizeof(name), "part-%05llu", static_cast<unsigned long long>(shard));
  return name;
}

bool IsUnsignedInteger(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

Status ParseLabel(const std::string& text, float* label, const std::string& where) {
  try {
    // Through double first, as im2rec does (Python float, then float32), so
    // that labels written with many digits round exactly as MXNet's do.
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used == text.size() && std::isfinite(value) && std::fabs(value) <= FLT_MAX) {
      *label = static_cast<float>(value);
      return Status::OK();
    }
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(where + ": label \"" + text +
                                 "\" is not a finite number in float32 range");
}

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

// Lines "path<TAB>label[,label...]". MXNet's .lst lines
// "index<TAB>label[<TAB>label...]<TAB>path" are accepted too.
Status ReadListFile(const std::string& list_path, bool allow_external_paths,
                    std::vector<PackSource>* sources) {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(list_path, &text));
  std::string base = Dirname(list_path);
  uint64_t line_number = 0;
  for (std::string line : Split(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[0] == '#') continue;
    std::string where = list_path + " line " + std::to_string(line_number);
    std::vector<std::string> fields = Split(line, '\t');
    for (std::string& field : fields) field = Trim(field);
    PackSource source;
    std::vector<std::string> label_texts;
    if (fields.size() == 2) {
      source.path = fields[0];
      label_texts = Split(fields[1], ',');
      for (std::string& label_text : label_texts) label_text = Trim(label_text);
    } else if (fields.size() >= 3 && IsUnsignedInteger(fields[0]) && fields[0].size() <= 19) {
      source.id = std::stoull(fields[0]);
      source.path = fields.back();
      label_texts.assign(fields.begin() + 1, fields.end() - 1);
    } else {
      return Status::InvalidArgument(where + ": expected \"path<TAB>label[,label...]\"");
    }
    if (source.path.empty()) return Status::InvalidArgument(where + ": empty path");
    if (line.find('\0') != std::string::npos) {
      return Status::InvalidArgument(where + ": contains a NUL byte");
    }
    for (const std::string& label_text : label_texts) {
      float label = 0;
      GPUFEED_RETURN_IF_ERROR(ParseLabel(label_text, &label, where));
      source.labels.push_back(label);
    }
    std::string resolved;
    GPUFEED_RETURN_IF_ERROR(
        ResolveInsideDirectory(base, source.path, allow_external_paths, where, &resolved));
    source.path = std::move(resolved);
    sources->push_back(std::move(source));
  }
  return Status::OK();
}

// Names Pack writes in any format: "part-" and five or more digits, then
// one of a writer's output_suffixes.
bool IsPackOutputName(const std::string& name) {
  if (!StartsWith(name, "part-")) return false;
  const size_t digits_end = name.find_first_not_of("0123456789", 5);
  const size_t digits = (digits_end == std::string::npos ? name.size() : digits_end) - 5;
  if (digits < 5) return false;
  const std::string suffix = name.substr(5 + digits);
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->writer.open == nullptr) continue;
    for (const std::string& written : entry->writer.output_suffixes) {
      if (suffix == written) return true;
    }
  }
  return false;
}

void RemovePackOutput(const std::string& destination) {
  std::vector<DirectoryEntry> entries;
  if (!ListDirectory(destination, &entries).ok()) return;
  for (const DirectoryEntry& entry : entries) {
    // Best effort: a file that cannot be removed makes the pack's own
    // create fail next, with the path.
    if (IsPackOutputName(entry.name)) (void)RemoveRecursively(JoinPath(destination, entry.name));
  }
}

// Refuses a non-empty destination unless overwriting; when overwriting
// removes only what Pack writes (shards and manifest), never other files.
Status PrepareDestination(const std::string& destination, bool overwrite) {
  if (!PathExists(destination)) return CreateDirectories(destination);
  if (!IsDirectory(destination)) {
    return Status::AlreadyExists(destination + ": exists and is not a directory");
  }
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(destination, &entries));
  if (entries.empty()) return Status::OK();
  if (!overwrite) {
    return Status::AlreadyExists(destination + ": destination is not empty (" +
                                 std::to_string(entries.size()) +
                                 " entries); pass overwrite=True (--overwrite) to replace it");
  }
  for (const DirectoryEntry& entry : entries) {
    if (entry.name == kManifestName || IsPackOutputName(entry.name)) {
      GPUFEED_RETURN_IF_ERROR(RemoveRecursively(JoinPath(destination, entry.name)));
    }
  }
  return Status::OK();
}

// Reads the source files on `workers` threads, at most `window` ahead of the
// writer, and hands them to `consume` in order on the calling thread.
class OrderedReader {
 public:
  OrderedReader(const std::vector<PackSource>& sources, int workers,
                const std::function<bool(std::string*)>& rewrite)
      : sources_(sources), rewrite_(rewrite), window_(static_cast<size_t>(workers) * 4),
        slots_(window_) {
    for (int i = 0; i < workers; ++i) {
      try {
        threads_.emplace_back([this] { Work(); });
      } catch (const std::system_error&) {
        break;  // fewer threads than asked (thread limit): still correct
      }
    }
  }

  bool started() const { return !threads_.empty(); }

  ~OrderedReader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  // Waits for source `index` (called with 0, 1, 2, ... in order); *rewritten:
  // whether the rewrite changed it.
  Status Take(size_t index, std::string* data, bool* rewritten) {
    std::unique_lock<std::mutex> lock(mutex_);
    Slot& slot = slots_[index % window_];
    changed_.wait(lock, [&] { return slot.ready; });
    Status status = std::move(slot.status);
    data->swap(slot.data);
    *rewritten = slot.rewritten;
    slot.ready = false;
    consumed_ = index + 1;
    changed_.notify_all();
    return status;
  }

 private:
  struct Slot {
    std::string data;
    Status status;
    bool rewritten = false;
    bool ready = false;
  };

  void Work() {
    std::string data;
    while (true) {
      size_t index = next_.fetch_add(1);
      if (index >= sources_.size()) return;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || index < consumed_ + window_; });
        if (stop_) return;
      }
      Status status;
      bool rewritten = false;
      try {
        // A sample must fit one RecordIO record (29-bit length).
        status = ReadFileToString(sources_[index].path, &data, (1u << 29) - 1024);
        if (status.ok() && rewrite_) rewritten = rewrite_(&data);
      } catch (const std::exception& error) {
        status = Status::IOError(sources_[index].path + ": " + error.what());
      }
      std::lock_guard<std::mutex> lock(mutex_);
      Slot& slot = slots_[index % window_];
      slot.data.swap(data);
      slot.status = std::move(status);
      slot.rewritten = rewritten;
      slot.ready = true;
      changed_.notify_all();
    }
  }

  const std::vector<PackSource>& sources_;
  const std::function<bool(std::string*)>& rewrite_;
  const size_t window_;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t consumed_ = 0;
  bool stop_ = false;
};

// Writes the shards and the manifest; the caller cleans up on failure.
Status PackInto(const std::vector<PackSource>& sources, const std::string& destination_path,
                const PackOptions& options, const WriterEntry& format, Manifest* manifest_out,
                uint64_t* rewritten_out) {
  Manifest& manifest = *manifest_out;
  int workers = options.workers > 0
                    ? std::min(options.workers, 512)
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  OrderedReader reader(sources, workers, options.rewrite);
  if (!reader.started()) return Status::IOError("cannot start any pack worker thread");

  std::unique_ptr<ShardWriter> writer;
  std::string shard_path;
  ManifestShard current;
  auto finish_shard = [&]() -> Status {
    if (!writer) return Status::OK();
    GPUFEED_RETURN_IF_ERROR(writer->Finish());
    current.records = writer->records();
    const std::string data_file = format.data_file(shard_path);
    GPUFEED_RETURN_IF_ERROR(FileSizeOf(data_file, &current.bytes));
    uint64_t digest = 0;
    GPUFEED_RETURN_IF_ERROR(FileXxh64(data_file, &digest));
    current.xxh64 = Xxh64Hex(digest);
    if (!current.index.empty()) {
      // The .idx is identified as the .rec is: a reader of the manifest
      // then needs to stat neither (manifest.h).
      std::string index_file = JoinPath(destination_path, current.index);
      GPUFEED_RETURN_IF_ERROR(FileSizeOf(index_file, &current.index_bytes));
      GPUFEED_RETURN_IF_ERROR(FileXxh64(index_file, &digest));
      current.index_xxh64 = Xxh64Hex(digest);
    }
    manifest.shards.push_back(current);
    writer.reset();
    return Status::OK();
  };

  std::string data;
  for (size_t index = 0; index < sources.size(); ++index) {
    if (options.cancel != nullptr && options.cancel->load()) {
      return Status::Cancelled("packing stopped after " + std::to_string(index) + " records");
    }
    bool rewritten = false;
    Status status = reader.Take(index, &data, &rewritten);
    *rewritten_out += rewritten;
    if (!status.ok()) return status.WithContext("packing sample " + std::to_string(index));
    if (!writer) {
      std::string base = ShardBaseName(manifest.shards.size());
      current = ManifestShard();
      format.name_shard(base, &current);
      shard_path = JoinPath(destination_path, current.file);
      GPUFEED_RETURN_IF_ERROR(format.open(shard_path, &writer));
    }
    SampleToWrite sample;
    sample.index = index;
    sample.id = sources[index].id;
    sample.labels = sources[index].labels;
    sample.data = data;
    GPUFEED_RETURN_IF_ERROR(writer->Append(sample));
    if (writer->bytes() >= options.shard_size) GPUFEED_RETURN_IF_ERROR(finish_shard());
    if (options.progress) options.progress(index + 1, sources.size());
  }
  GPUFEED_RETURN_IF_ERROR(finish_shard());
  manifest.records = sources.size();
  GPUFEED_RETURN_IF_ERROR(WriteManifest(JoinPath(destination_path, kManifestName), manifest));

  return Status::OK();
}

}  // namespace

Status Pack(const std::string& source, const std::string& destination, const PackOptions& options,
            PackSummary* summary) {
  auto started = std::chrono::steady_clock::now();
  if (options.shard_size == 0) return Status::InvalidArgument("shard_size must be positive");
  std::string source_path = AbsolutePath(source);
  std::string destination_path = AbsolutePath(destination);
  if (!PathExists(source_path)) return Status::FromErrno(ENOENT, source_path);
  if (source_path == destination_path || StartsWith(source_path, destination_path + "/")) {
    return Status::InvalidArgument(source_path + ": the source lies inside the destination " +
                                   destination_path);
  }

  const FormatEntry* format = FindWriter(options.format);
  if (format == nullptr) {
    return Status::InvalidArgument("no format writes shard format " +
                                   std::to_string(static_cast<int>(options.format)));
  }
  Manifest manifest;
  manifest.format = format->format;
  std::vector<PackSource> sources;
  if (IsDirectory(source_path)) {
    std::vector<ImageFolderEntry> entries;
    GPUFEED_RETURN_IF_ERROR(ScanImageFolder(source_path, &manifest.classes, &entries));
    for (const ImageFolderEntry& entry : entries) {
      sources.push_back({JoinPath(source_path, entry.relative_path),
                         {static_cast<float>(entry.class_index)},
                         std::nullopt});
    }
    manifest.integer_labels = true;
  } else {
    GPUFEED_RETURN_IF_ERROR(ReadListFile(source_path, options.allow_external_paths, &sources));
  }
  if (sources.empty()) {
    return Status::InvalidArgument(source_path + ": nothing to pack (no samples)");
  }
  if (destination_path == source_path || StartsWith(destination_path, source_path + "/")) {
    if (IsDirectory(source_path)) {
      return Status::InvalidArgument(destination_path + ": the destination lies inside the source");
    }
  }
  GPUFEED_RETURN_IF_ERROR(PrepareDestination(destination_path, options.overwrite));
  Status status;
  uint64_t rewritten = 0;
  try {
    status = PackInto(sources, destination_path, options, format->writer, &manifest,
                      &rewritten);
  } catch (const std::exception& error) {
    status = Status::Internal(std::string("pack failed: ") + error.what());
  }
  if (!status.ok()) {
    // Leave nothing that could be mistaken for a complete dataset.
    RemovePackOutput(destination_path);
    return status;
  }

  if (summary != nullptr) {
    summary->records = manifest.records;
    summary->shards = manifest.shards.size();
    summary->rewritten = rewritten;
    summary->bytes = 0;
    for (const ManifestShard& shard : manifest.shards) summary->bytes += shard.bytes;
    summary->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  Log().debug("packed {} records into {} {} shard(s) under {}", manifest.records,
             manifest.shards.size(), FormatName(manifest.format), destination_path);
  return Status::OK();
}

}  // namespace gpufeed
