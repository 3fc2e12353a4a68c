// The format registry (format/registry.h): one entry per format, the names
// Python and C++ share, and the order format=auto asks the formats in.
#include <gtest/gtest.h>

#include <set>

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

TEST(RegistryTest, AnUnknownNameIsAnErrorListingEveryName) {
  DatasetFormat format = DatasetFormat::kRecordIO;
  Status status = ParseFormat("tfrecord", &format);
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

}  // namespace
}  // namespace gpufeed
