// The format registry (format/registry.h): one entry per format, the names
// Python and C++ share, and the order format=auto asks the formats in.
#include <gtest/gtest.h>

#include <set>

#include "format/manifest.h"
#include "format/registry.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

TEST(RegistryTest, EveryFormatOnceWithItsNameBothWays) {
  std::set<int> formats;
  std::set<std::string> names;
  std::vector<std::string> expected_names = {"auto"};
  for (const FormatEntry* entry : RegisteredFormats()) {
    EXPECT_NE(entry->format, DatasetFormat::kAuto);
    EXPECT_TRUE(formats.insert(static_cast<int>(entry->format)).second) << entry->name;
    EXPECT_TRUE(names.insert(entry->name).second) << entry->name;
    EXPECT_EQ(FindFormat(entry->format), entry);
    EXPECT_STREQ(FormatName(entry->format), entry->name);
    DatasetFormat parsed = DatasetFormat::kAuto;
    ASSERT_TRUE(ParseFormat(entry->name, &parsed).ok()) << entry->name;
    EXPECT_EQ(parsed, entry->format);
    // Every format opens some way, and a file_names text goes with a file hook.
    EXPECT_TRUE(entry->open_before_stat || entry->open_directory || entry->open_file)
        << entry->name;
    EXPECT_EQ(entry->claims_file_name != nullptr, entry->file_names != nullptr) << entry->name;
    expected_names.push_back(entry->name);
  }
  // Every value of the public enum has its entry.
  for (DatasetFormat format :
       {DatasetFormat::kRecordIO, DatasetFormat::kLmdb, DatasetFormat::kCaffeLmdb,
        DatasetFormat::kImageFolder, DatasetFormat::kWebDataset, DatasetFormat::kMegatron,
        DatasetFormat::kLlmc, DatasetFormat::kTokens}) {
    EXPECT_NE(FindFormat(format), nullptr) << static_cast<int>(format);
  }
  EXPECT_EQ(FindFormat(DatasetFormat::kAuto), nullptr);
  EXPECT_STREQ(FormatName(DatasetFormat::kAuto), "auto");
  EXPECT_EQ(FormatNames(), expected_names);
}

TEST(RegistryTest, AFormatsValueNeedsNoNamedEnumerator) {
  // docs/extending.md: a new format takes an unused value from 20 up in its
  // own file; until its entry is in the list, nothing knows it (99: a value
  // no format has taken).
  constexpr DatasetFormat unnamed = DatasetFormat{99};
  EXPECT_EQ(FindFormat(unnamed), nullptr);
  EXPECT_STREQ(FormatName(unnamed), "unknown");
  EXPECT_FALSE(IsTokenFormat(unnamed));
  constexpr ShardFormat unnamed_writer = ShardFormat{20};
  EXPECT_EQ(FindWriter(unnamed_writer), nullptr);
  EXPECT_STREQ(ShardFormatName(unnamed_writer), "unknown");
}

TEST(RegistryTest, AnUnknownNameIsAnErrorListingEveryName) {
  DatasetFormat format = DatasetFormat::kRecordIO;
  Status status = ParseFormat("no-such-format", &format);
  ASSERT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_EQ(format, DatasetFormat::kRecordIO);  // untouched
  for (const std::string& name : FormatNames()) {
    EXPECT_NE(status.message().find(name), std::string::npos) << name << ": " << status.message();
  }
}

void WriteRecordIOShard(const std::string& path, int records) {
  std::unique_ptr<ShardWriter> writer;
  ASSERT_TRUE(ShardWriter::Open(path, ShardFormat::kRecordIO, &writer).ok());
  for (int i = 0; i < records; ++i) {
    std::string data = "sample-" + std::to_string(i);
    SampleToWrite sample;
    sample.index = static_cast<uint64_t>(i);
    sample.labels = {static_cast<float>(i)};
    sample.data = data;
    ASSERT_TRUE(writer->Append(sample).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());
}

TEST(RegistryTest, AutoAsksTheFormatsInRegistryOrder) {
  TempDir dir;
  // RecordIO shards and an image class folder side by side: RecordIO comes
  // first in the registry, ImageFolder takes a directory only when none
  // before it did.
  WriteRecordIOShard(JoinPath(dir.path(), "a.rec"), 3);
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "cats")).ok());
  WriteBytes(JoinPath(dir.path(), "cats/1.jpg"), "not decoded by Open");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(dir.path(), {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kRecordIO);
  EXPECT_EQ(dataset->size(), 3u);
  // Asked for, the format after it opens the same directory its own way.
  DatasetOptions options;
  options.format = DatasetFormat::kImageFolder;
  status = Dataset::Open(dir.path(), options, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kImageFolder);
  EXPECT_EQ(dataset->size(), 1u);
}

TEST(RegistryTest, WhatNoFormatTakesIsAClearError) {
  TempDir dir;
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(dir.path(), {}, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("the directory is empty"), std::string::npos) << status.message();
  // A file no format's names take: the message lists what would be read.
  std::string file = JoinPath(dir.path(), "data.bin.unknown");
  WriteBytes(file, "???");
  status = Dataset::Open(file, {}, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("cannot tell the dataset format"), std::string::npos);
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->file_names == nullptr) continue;
    EXPECT_NE(status.message().find(entry->file_names), std::string::npos) << status.message();
  }
  // A format asked for that opens no file: the same error, not a guess.
  DatasetOptions options;
  options.format = DatasetFormat::kLmdb;
  WriteRecordIOShard(JoinPath(dir.path(), "b.rec"), 2);
  status = Dataset::Open(JoinPath(dir.path(), "b.rec"), options, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  // Nor does ImageFolder, which opens only directories.
  options.format = DatasetFormat::kImageFolder;
  status = Dataset::Open(JoinPath(dir.path(), "b.rec"), options, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
}

TEST(RegistryTest, WritersByShardFormatAndName) {
  std::vector<std::string> writers;
  std::set<int> shard_formats;
  for (const FormatEntry* entry : RegisteredFormats()) {
    const WriterEntry& writer = entry->writer;
    if (writer.open == nullptr) continue;
    writers.push_back(entry->name);
    // Every hook of a writer is there, and its shard format is its own.
    EXPECT_NE(writer.name_shard, nullptr) << entry->name;
    EXPECT_NE(writer.data_file, nullptr) << entry->name;
    EXPECT_FALSE(writer.output_suffixes.empty()) << entry->name;
    EXPECT_NE(entry->open_manifest, nullptr) << entry->name << ": Pack writes a gpufeed.json";
    EXPECT_TRUE(shard_formats.insert(static_cast<int>(writer.shard_format)).second);
    EXPECT_EQ(FindWriter(writer.shard_format), entry);
    EXPECT_STREQ(ShardFormatName(writer.shard_format), entry->name);
    ShardFormat parsed = ShardFormat::kRecordIO;
    ASSERT_TRUE(ParseShardFormat(entry->name, &parsed).ok()) << entry->name;
    EXPECT_EQ(parsed, writer.shard_format);
  }
  EXPECT_EQ(ShardFormatNames(), writers);
  EXPECT_EQ(writers, (std::vector<std::string>{"recordio", "lmdb", "webdataset"}));
  ShardFormat format = ShardFormat::kLmdb;
  Status status = ParseShardFormat("imagefolder", &format);  // read only
  ASSERT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_EQ(format, ShardFormat::kLmdb);  // untouched
  for (const std::string& name : writers) {
    EXPECT_NE(status.message().find("\"" + name + "\""), std::string::npos) << status.message();
  }
  EXPECT_EQ(FindWriter(static_cast<ShardFormat>(99)), nullptr);
  std::unique_ptr<ShardWriter> writer;
  TempDir dir;
  EXPECT_TRUE(ShardWriter::Open(JoinPath(dir.path(), "x"), static_cast<ShardFormat>(99), &writer)
                  .IsInvalidArgument());
}

TEST(RegistryTest, TokenCorporaShareTheirHooks) {
  std::vector<std::string> tokens;
  const FormatEntry* first = nullptr;
  for (const FormatEntry* entry : RegisteredFormats()) {
    EXPECT_EQ(IsTokenFormat(entry->format), entry->token_corpus) << entry->name;
    if (!entry->token_corpus) {
      EXPECT_EQ(entry->verify_before_stat, nullptr) << entry->name;
      continue;
    }
    tokens.push_back(entry->name);
    // One finder tells the corpora apart: one open and one verify hook.
    if (first == nullptr) first = entry;
    EXPECT_EQ(entry->open_before_stat, first->open_before_stat) << entry->name;
    EXPECT_EQ(entry->verify_before_stat, first->verify_before_stat) << entry->name;
    EXPECT_NE(entry->parse_manifest_shard, nullptr) << entry->name;
    EXPECT_NE(entry->write_manifest_shard, nullptr) << entry->name;
    EXPECT_EQ(entry->writer.open, nullptr) << entry->name;
    EXPECT_EQ(entry->warm_sources, nullptr) << entry->name;
  }
  EXPECT_EQ(TokenFormatNames(), tokens);
  EXPECT_EQ(tokens, (std::vector<std::string>{"megatron", "llmc", "tokens"}));
  EXPECT_FALSE(IsTokenFormat(DatasetFormat::kAuto));
}

// A list file of `count` small files, "name<TAB>label" lines.
std::string WriteListFile(const std::string& directory, int count) {
  std::string list;
  for (int i = 0; i < count; ++i) {
    std::string name = "s" + std::to_string(i) + ".jpg";
    WriteBytes(JoinPath(directory, name), "bytes of sample " + std::to_string(i));
    list += name + "\t" + std::to_string(i % 3) + "\n";
  }
  std::string path = JoinPath(directory, "list.txt");
  WriteBytes(path, list);
  return path;
}

TEST(RegistryTest, PackWritesEachWritersShardsAndManifest) {
  TempDir dir;
  std::string list = WriteListFile(dir.path(), 5);
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->writer.open == nullptr) continue;
    SCOPED_TRACE(entry->name);
    std::string out = JoinPath(dir.path(), std::string("out-") + entry->name);
    PackOptions options;
    options.format = entry->writer.shard_format;
    options.shard_size = 64;  // a few samples per shard
    PackSummary summary;
    Status status = Pack(list, out, options, &summary);
    ASSERT_TRUE(status.ok()) << status.ToString();
    Manifest manifest;
    ASSERT_TRUE(ReadManifest(JoinPath(out, kManifestName), &manifest).ok());
    EXPECT_EQ(manifest.format, entry->format);
    EXPECT_EQ(manifest.records, 5u);
    ASSERT_GT(manifest.shards.size(), 1u);
    for (size_t i = 0; i < manifest.shards.size(); ++i) {
      ManifestShard named;
      char base[32];
      std::snprintf(base, sizeof(base), "part-%05zu", i);
      entry->writer.name_shard(base, &named);
      EXPECT_EQ(manifest.shards[i].file, named.file);
      EXPECT_EQ(manifest.shards[i].index, named.index);
      uint64_t bytes = 0;
      ASSERT_TRUE(
          FileSizeOf(entry->writer.data_file(JoinPath(out, named.file)), &bytes).ok());
      EXPECT_EQ(manifest.shards[i].bytes, bytes);
    }
    std::unique_ptr<Dataset> dataset;
    status = Dataset::Open(out, {}, &dataset);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(dataset->format(), entry->format);
    EXPECT_EQ(dataset->size(), 5u);
  }
}

TEST(RegistryTest, OverwriteRemovesEveryWritersOutputAndNothingElse) {
  TempDir dir;
  std::string list = WriteListFile(dir.path(), 3);
  std::string out = JoinPath(dir.path(), "out");
  PackOptions options;
  options.shard_size = 16;
  PackSummary summary;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->writer.open == nullptr) continue;
    options.format = entry->writer.shard_format;
    options.overwrite = true;
    ASSERT_TRUE(Pack(list, out, options, &summary).ok()) << entry->name;
  }
  WriteBytes(JoinPath(out, "notes.txt"), "kept");
  WriteBytes(JoinPath(out, "part-1.rec"), "kept: not five digits");
  options.format = ShardFormat::kRecordIO;
  ASSERT_TRUE(Pack(list, out, options, &summary).ok());
  std::vector<DirectoryEntry> entries;
  ASSERT_TRUE(ListDirectory(out, &entries).ok());
  std::set<std::string> names;
  for (const DirectoryEntry& entry : entries) names.insert(entry.name);
  EXPECT_EQ(names.count("notes.txt"), 1u);
  EXPECT_EQ(names.count("part-1.rec"), 1u);
  for (const std::string& name : names) {
    // Only the last pack's RecordIO shards remain of what packs write.
    EXPECT_TRUE(name == kManifestName || name == "notes.txt" || name == "part-1.rec" ||
                EndsWith(name, ".rec") || EndsWith(name, ".idx"))
        << name;
  }
}

TEST(RegistryTest, ManifestHooksDecideWhatAManifestIdentifies) {
  Manifest manifest;
  manifest.records = 1;
  ManifestShard shard;
  shard.file = "part-00000.rec";
  shard.index = "part-00000.idx";
  shard.records = 1;
  shard.bytes = 100;
  shard.xxh64 = "0123456789abcdef";
  shard.index_bytes = 10;
  shard.index_xxh64 = "fedcba9876543210";
  manifest.shards = {shard};
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->open_manifest == nullptr) {
      EXPECT_EQ(entry->manifest_identifies_every_file, nullptr) << entry->name;
      continue;
    }
    manifest.format = entry->format;
    EXPECT_EQ(ManifestIdentifiesEveryFile(manifest),
              entry->manifest_identifies_every_file != nullptr &&
                  entry->manifest_identifies_every_file(manifest))
        << entry->name;
  }
  manifest.format = DatasetFormat::kRecordIO;
  EXPECT_TRUE(ManifestIdentifiesEveryFile(manifest));
  manifest.format = DatasetFormat::kLmdb;  // no hook: opened eagerly
  EXPECT_FALSE(ManifestIdentifiesEveryFile(manifest));
  // A format's own shard fields go through its hooks both ways.
  manifest.format = DatasetFormat::kLlmc;
  manifest.shards[0].index.clear();
  manifest.shards[0].index_bytes = 0;
  manifest.shards[0].index_xxh64.clear();
  manifest.shards[0].bytes = 1024 + 2;
  manifest.shards[0].data_offset = 1024;
  manifest.shards[0].token_dtype = TokenDtype::kUint16;
  std::string text = SerializeManifest(manifest);
  EXPECT_NE(text.find("\"token_dtype\": \"uint16\""), std::string::npos) << text;
  Manifest read;
  Status status = ParseManifest(text, "gpufeed.json", &read);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(read.shards[0].data_offset, 1024u);
  EXPECT_EQ(read.shards[0].token_dtype, TokenDtype::kUint16);
  EXPECT_TRUE(ManifestIdentifiesEveryFile(read));
  // The hook's error follows "invalid manifest: ", naming the shard.
  text.replace(text.find("\"uint16\""), 8, "\"float\"");
  status = ParseManifest(text, "gpufeed.json", &read);
  ASSERT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("gpufeed.json: invalid manifest: shard 0 (\"part-00000.rec\"): "
                                  "\"token_dtype\" must be"),
            std::string::npos)
      << status.message();
}

TEST(RegistryTest, WarmSourcesAreTheFilesTheStoreReads) {
  TempDir dir;
  std::string list = WriteListFile(dir.path(), 4);
  for (ShardFormat format : {ShardFormat::kRecordIO, ShardFormat::kLmdb, ShardFormat::kWebDataset}) {
    const FormatEntry* entry = FindWriter(format);
    ASSERT_NE(entry, nullptr);
    SCOPED_TRACE(entry->name);
    ASSERT_NE(entry->warm_sources, nullptr);
    std::string out = JoinPath(dir.path(), std::string("warm-") + entry->name);
    PackOptions options;
    options.format = format;
    options.shard_size = 64;
    PackSummary summary;
    ASSERT_TRUE(Pack(list, out, options, &summary).ok());
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(out, {}, &dataset).ok());
    std::vector<WarmSource> sources;
    Status status = entry->warm_sources(*dataset, &sources);
    ASSERT_TRUE(status.ok()) << status.ToString();
    uint64_t shards = 0;
    for (const WarmSource& warm : sources) {
      EXPECT_FALSE(warm.source.bundle());
      EXPECT_TRUE(IsRegularFile(warm.source.path)) << warm.source.path;
      EXPECT_GT(warm.source.size, 0u) << warm.source.path;
      EXPECT_FALSE(warm.source.xxh64.empty()) << warm.source.path;
      shards += warm.counts_as_shard ? 1 : 0;
    }
    EXPECT_EQ(shards, dataset->shards().size());
    if (format == ShardFormat::kRecordIO) {
      // Pack's manifest identifies every .rec and .idx: keyed on it.
      ASSERT_EQ(sources.size(), 2 * shards);
      EXPECT_TRUE(sources[0].source.identified_by_checksum);
      EXPECT_TRUE(EndsWith(sources[1].source.path, ".idx"));
      EXPECT_FALSE(sources[1].counts_as_shard);
    }
    if (format == ShardFormat::kLmdb) EXPECT_EQ(Basename(sources[0].source.path), "data.mdb");
  }
  // ImageFolder: bundles of its files, nothing stat'ed.
  std::string root = JoinPath(dir.path(), "folder");
  ASSERT_TRUE(CreateDirectories(JoinPath(root, "cats")).ok());
  WriteBytes(JoinPath(root, "cats/1.jpg"), "x");
  WriteBytes(JoinPath(root, "cats/2.jpg"), "y");
  std::unique_ptr<Dataset> folder;
  ASSERT_TRUE(Dataset::Open(root, {}, &folder).ok());
  std::vector<WarmSource> bundles;
  ASSERT_TRUE(FindFormat(DatasetFormat::kImageFolder)->warm_sources(*folder, &bundles).ok());
  ASSERT_EQ(bundles.size(), 1u);
  EXPECT_TRUE(bundles[0].source.bundle());
  EXPECT_EQ(bundles[0].source.members.size(), 2u);
  EXPECT_EQ(bundles[0].source.size, 0u);
}

}  // namespace
}  // namespace gpufeed
