// The one list of dataset formats, the names Python and C++ share, and the
// helpers several entries use.
#include "format/registry.h"

#include "util/path.h"

namespace gpufeed {

// Each format's entry, defined beside its reader.
const FormatEntry& RecordIOFormat();     // recordio_format.cc
const FormatEntry& CaffeLmdbFormat();    // lmdb_format.cc
const FormatEntry& LmdbFormat();         // lmdb_format.cc
const FormatEntry& WebDatasetFormat();   // webdataset_format.cc
const FormatEntry& CriteoNpyFormat();    // criteo_npy_format.cc
const FormatEntry& ImageFolderFormat();  // imagefolder_format.cc
const FormatEntry& MegatronFormat();     // token_format.cc
const FormatEntry& LlmcFormat();         // token_format.cc
const FormatEntry& TokensFormat();       // token_format.cc
const FormatEntry& RecordsFormat();      // records_format.cc
const FormatEntry& CriteoTsvFormat();    // criteo_tsv_format.cc
const FormatEntry& MdsFormat();          // mds_format.cc
const FormatEntry& TfRecordFormat();     // tfrecord_format.cc

const std::vector<const FormatEntry*>& RegisteredFormats() {
  // The order format=auto tries them in: on a directory, RecordIO shards
  // before an LMDB (a Caffe one before a gpufeed one), tars, and an
  // ImageFolder last (it takes any directory that is not empty); before a
  // path is stat'ed, a list or pattern of tars before the token corpora.
  // Never destroyed: a thread still opening a dataset at exit reads it.
  static const std::vector<const FormatEntry*>& formats = *new std::vector<const FormatEntry*>{
      &RecordIOFormat(),    &CaffeLmdbFormat(), &LmdbFormat(),
      &TfRecordFormat(),  // before tars: a list or glob of .tfrecord files is its own
      &WebDatasetFormat(),
      &CriteoNpyFormat(),  // .npy triplets: after the shard formats, before ImageFolder
      &MdsFormat(),        // Streaming's index.json: before ImageFolder
      &ImageFolderFormat(), &MegatronFormat(),  &LlmcFormat(), &TokensFormat(),
      &RecordsFormat(),  // never claims under auto: raw records have no signature
      &CriteoTsvFormat(),  // never claims under auto: text has no signature
  };
  return formats;
}

const FormatEntry* FindFormat(DatasetFormat format) {
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->format == format) return entry;
  }
  return nullptr;
}

const FormatEntry* FindWriter(ShardFormat format) {
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->writer.open != nullptr && entry->writer.shard_format == format) return entry;
  }
  return nullptr;
}

bool IsTokenFormat(DatasetFormat format) {
  const FormatEntry* entry = FindFormat(format);
  return entry != nullptr && entry->token_corpus;
}

Status WarmEachShardFile(const Dataset& dataset, const char* member,
                         std::vector<WarmSource>* sources) {
  for (const ShardInfo& shard : dataset.shards()) {
    WarmSource warm;
    GPUFEED_RETURN_IF_ERROR(StatCacheSource(
        member == nullptr ? shard.path : JoinPath(shard.path, member), &warm.source));
    warm.source.xxh64 = shard.xxh64;
    sources->push_back(std::move(warm));
  }
  return Status::OK();
}

const char* FormatName(DatasetFormat format) {
  if (format == DatasetFormat::kAuto) return "auto";
  const FormatEntry* entry = FindFormat(format);
  return entry != nullptr ? entry->name : "unknown";
}

std::vector<std::string> FormatNames() {
  std::vector<std::string> names = {"auto"};
  for (const FormatEntry* entry : RegisteredFormats()) names.push_back(entry->name);
  return names;
}

Status ParseFormat(const std::string& name, DatasetFormat* format) {
  if (name == "auto") {
    *format = DatasetFormat::kAuto;
    return Status::OK();
  }
  std::string expected = "auto";
  const std::vector<const FormatEntry*>& formats = RegisteredFormats();
  for (size_t i = 0; i < formats.size(); ++i) {
    if (name == formats[i]->name) {
      *format = formats[i]->format;
      return Status::OK();
    }
    expected += (i + 1 == formats.size() ? " or " : ", ") + std::string(formats[i]->name);
  }
  return Status::InvalidArgument("unknown format \"" + name + "\" (expected " + expected + ")");
}

const char* ShardFormatName(ShardFormat format) {
  const FormatEntry* entry = FindWriter(format);
  return entry != nullptr ? entry->name : "unknown";
}

std::vector<std::string> ShardFormatNames() {
  std::vector<std::string> names;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->writer.open != nullptr) names.push_back(entry->name);
  }
  return names;
}

Status ParseShardFormat(const std::string& name, ShardFormat* format) {
  std::string expected;
  const std::vector<std::string> names = ShardFormatNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (name == names[i]) {
      DatasetFormat dataset_format = DatasetFormat::kAuto;
      GPUFEED_RETURN_IF_ERROR(ParseFormat(name, &dataset_format));
      *format = FindFormat(dataset_format)->writer.shard_format;
      return Status::OK();
    }
    if (i > 0) expected += i + 1 == names.size() ? " or " : ", ";
    expected += "\"" + names[i] + "\"";
  }
  return Status::InvalidArgument("pack format must be " + expected + ", not \"" + name + "\"");
}

std::vector<std::string> TokenFormatNames() {
  std::vector<std::string> names;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->token_corpus) names.push_back(entry->name);
  }
  return names;
}

}  // namespace gpufeed
