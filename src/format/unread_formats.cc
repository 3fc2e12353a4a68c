// Datasets gpufeed recognises but does not read (registry.h:
// RefuseUnreadDirectory, RefuseUnreadFile): one table of what each looks
// like, its name and what to do instead. Only the first bytes, the last
// bytes and an index file's JSON are read: a refusal costs one small read.
#include <nlohmann/json.hpp>

#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// What a row is shown of a path: a file's name and first and last bytes, or
// a directory's entries and its index.json (parsed when it is an object).
struct Probe {
  std::string path;
  std::string name;  // the file's base name; empty for a directory
  std::string head;  // the first 16 bytes (fewer in a smaller file)
  std::string tail;  // the last 8 bytes
  const DirectoryListing* listing = nullptr;
  nlohmann::json index_json;  // a directory's index.json; null when none or not JSON
};

// One recognised format gpufeed does not read. `unless_format`: the row
// stands down when a format of that name is registered (it reads the path).
struct UnreadFormat {
  const char* name;
  bool (*looks_like)(const Probe& probe);
  const char* advice;
  const char* unless_format = nullptr;
};

bool Registered(const char* name) {
  DatasetFormat format = DatasetFormat::kAuto;
  return ParseFormat(name, &format).ok();
}

bool HasEntry(const Probe& probe, const std::string& name) {
  if (probe.listing == nullptr) return false;
  for (const DirectoryEntry& entry : probe.listing->entries) {
    if (entry.name == name) return true;
  }
  return false;
}

bool HasEntryEndingWith(const Probe& probe, const std::string& suffix) {
  if (probe.listing == nullptr) return false;
  for (const DirectoryEntry& entry : probe.listing->entries) {
    if (entry.is_regular_file && EndsWith(entry.name, suffix)) return true;
  }
  return false;
}

bool FfcvBeton(const Probe& probe) {
  // FFCV's header has no magic (version u16, fields u16, page size u32,
  // samples u64, allocation table u64): the name tells it.
  return EndsWith(probe.name, ".beton");
}

bool Parquet(const Probe& probe) {
  // "PAR1" opens and closes the file ("PARE" closes an encrypted footer).
  return probe.head.compare(0, 4, "PAR1") == 0 &&
         (probe.tail.size() >= 4 && (probe.tail.compare(probe.tail.size() - 4, 4, "PAR1") == 0 ||
                                     probe.tail.compare(probe.tail.size() - 4, 4, "PARE") == 0));
}

bool ArrowFile(const Probe& probe) {
  // The Arrow IPC file format, which Feather v2 is: "ARROW1" at both ends.
  return probe.head.compare(0, 6, "ARROW1") == 0;
}

bool FeatherV1(const Probe& probe) { return probe.head.compare(0, 4, "FEA1") == 0; }

bool ArrowStream(const Probe& probe) {
  // An IPC stream has no magic: it opens with its schema message, the
  // 0xFFFFFFFF continuation marker then the length; the name tells it too.
  const bool named = EndsWith(probe.name, ".arrow") || EndsWith(probe.name, ".arrows");
  return named && probe.head.compare(0, 4, "\xff\xff\xff\xff") == 0;
}

bool HuggingFaceDirectory(const Probe& probe) {
  // datasets' save_to_disk: a Dataset (state.json, dataset_info.json, Arrow
  // stream files) or a DatasetDict (dataset_dict.json and one Dataset per split).
  return HasEntry(probe, "dataset_dict.json") ||
         (HasEntry(probe, "state.json") && HasEntry(probe, "dataset_info.json") &&
          HasEntryEndingWith(probe, ".arrow"));
}

bool LitData(const Probe& probe) {
  // litdata.optimize: index.json {"chunks": [...], "config": {...}}
  // beside chunk-*.bin files.
  const nlohmann::json& index = probe.index_json;
  return index.is_object() && index.contains("chunks") && index.contains("config");
}

// Streaming's index.json: {"version": 2, "shards": [{"format": ...}, ...]}.
// `mds`: whether a shard of format "mds" is asked for, or one of another
// (jsonl, csv, tsv, xsv).
bool StreamingIndex(const Probe& probe, bool mds) {
  const nlohmann::json& index = probe.index_json;
  if (!index.is_object() || !index.contains("shards") || !index["shards"].is_array()) return false;
  for (const nlohmann::json& shard : index["shards"]) {
    if (!shard.is_object() || !shard.contains("format") || !shard["format"].is_string()) continue;
    if ((shard["format"].get<std::string>() == "mds") == mds) return true;
  }
  return false;
}

bool StreamingMds(const Probe& probe) { return StreamingIndex(probe, true); }
bool StreamingText(const Probe& probe) { return StreamingIndex(probe, false); }

bool TfRecord(const Probe& probe) {
  return EndsWith(probe.name, ".tfrecord") || EndsWith(probe.name, ".tfrec") ||
         probe.name.find(".tfrecord-") != std::string::npos;
}

constexpr char kExport[] =
    "export the samples as an ImageFolder (root/<class>/<image>) or as WebDataset tars "
    "(<key>.jpg + <key>.cls per sample), which gpufeed reads as they are, or `gpufeed pack` "
    "such an ImageFolder into RecordIO";

const std::vector<UnreadFormat>& UnreadFormats() {
  static const std::vector<UnreadFormat>& formats = *new std::vector<UnreadFormat>{
      {"an FFCV .beton file", FfcvBeton,
       "gpufeed reads the images it was written from: point it at them, or "},
      {"a Parquet file", Parquet, "for images in a binary column, "},
      {"an Arrow IPC file (Feather v2)", ArrowFile, "for images in a binary column, "},
      {"a Feather v1 file", FeatherV1, "for images in a binary column, "},
      {"an Arrow IPC stream (a HuggingFace datasets shard)", ArrowStream,
       "with datasets, iterate the split and "},
      {"a HuggingFace datasets directory (save_to_disk)", HuggingFaceDirectory,
       "with datasets, load_from_disk() it, iterate the split and "},
      {"a LitData optimized dataset (index.json of chunks)", LitData,
       "gpufeed reads the images it was optimized from: point it at them, or "},
      {"a Mosaic Streaming dataset of MDS shards", StreamingMds,
       "this build of gpufeed has no \"mds\" format; ", "mds"},
      {"a Mosaic Streaming dataset of jsonl/csv/tsv shards", StreamingText,
       "gpufeed reads Streaming's MDS shards only: rewrite it with streaming.MDSWriter, or "},
      {"a TFRecord file", TfRecord, "this build of gpufeed has no \"tfrecord\" format; ",
       "tfrecord"},
  };
  return formats;
}

Status Refuse(const Probe& probe) {
  for (const UnreadFormat& format : UnreadFormats()) {
    if (format.unless_format != nullptr && Registered(format.unless_format)) continue;
    if (!format.looks_like(probe)) continue;
    return Status::NotSupported(probe.path + " is " + format.name +
                                ", a format gpufeed recognises but does not read; " +
                                format.advice + kExport);
  }
  return Status::OK();
}

Status ProbeFile(const std::string& path, Probe* probe) {
  probe->path = path;
  probe->name = Basename(path);
  UniqueFd fd;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd, &size, &mtime_ns));
  size_t got = 0;
  probe->head.resize(16);
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), &probe->head[0], probe->head.size(), 0, path, &got));
  probe->head.resize(got);
  const uint64_t tail = size < 8 ? size : 8;
  probe->tail.resize(tail);
  if (tail > 0) {
    GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), &probe->tail[0], tail, size - tail, path, &got));
    probe->tail.resize(got);
  }
  return Status::OK();
}

// A file that may be a side file of a data directory (a _SUCCESS marker, a
// README, a checksum): it does not stop the directory being refused.
bool IsSideFile(const std::string& name) {
  return name.empty() || name[0] == '.' || name[0] == '_' || EndsWith(name, ".json") ||
         EndsWith(name, ".md") || EndsWith(name, ".txt") || EndsWith(name, ".crc");
}

// A flat directory whose data files are all of one refused format: the
// first such file's refusal, naming the directory. OK when a subdirectory
// or a file of no refused format is there.
Status RefuseFlatDirectory(const DirectoryListing& listing) {
  Status first = Status::OK();
  for (const DirectoryEntry& entry : listing.entries) {
    if (entry.is_directory) return Status::OK();
    if (!entry.is_regular_file || IsSideFile(entry.name)) continue;
    Probe probe;
    if (!ProbeFile(JoinPath(listing.directory, entry.name), &probe).ok()) return Status::OK();
    Status refused = Refuse(probe);
    if (refused.ok()) return Status::OK();
    if (first.ok()) first = refused;
  }
  if (first.ok()) return first;
  return Status::NotSupported(listing.directory + " holds only files of a format gpufeed does "
                              "not read: " + first.message());
}

}  // namespace

Status RefuseUnreadDirectory(const DirectoryListing& listing) {
  Probe probe;
  probe.path = listing.directory;
  probe.listing = &listing;
  if (HasEntry(probe, "index.json")) {
    std::string text;
    const std::string index = JoinPath(listing.directory, "index.json");
    if (ReadFileToString(index, &text, uint64_t{64} << 20).ok()) {
      probe.index_json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (probe.index_json.is_discarded()) probe.index_json = nullptr;
    }
  }
  GPUFEED_RETURN_IF_ERROR(Refuse(probe));
  return RefuseFlatDirectory(listing);
}

Status RefuseUnreadFile(const std::string& path) {
  const std::string name = Basename(path);
  if (name == "index.json" || name == "dataset_info.json" || name == "state.json" ||
      name == "dataset_dict.json") {
    // A dataset's index names its directory, as a gpufeed.json does.
    DirectoryListing listing;
    listing.directory = Dirname(path);
    GPUFEED_RETURN_IF_ERROR(ListDirectory(listing.directory, &listing.entries));
    return RefuseUnreadDirectory(listing);
  }
  Probe probe;
  if (!ProbeFile(path, &probe).ok()) return Status::OK();  // the format's own open says why
  return Refuse(probe);
}

}  // namespace gpufeed
