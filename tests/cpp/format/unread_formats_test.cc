// Datasets gpufeed recognises but does not read: Dataset::Open under
// format=auto refuses each with NotSupported naming the format seen and
// what to do instead (unread_formats.cc), before ImageFolder can claim it.
#include <gtest/gtest.h>

#include <string>

#include "format/registry.h"
#include "gpufeed/dataset.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::string U32(uint32_t value) { return std::string(reinterpret_cast<const char*>(&value), 4); }

// A Parquet file's framing: "PAR1", a column chunk, the footer, its length, "PAR1".
std::string ParquetBytes() {
  const std::string footer(23, '\x15');
  return "PAR1" + std::string(40, '\x01') + footer + U32(footer.size()) + "PAR1";
}

// An Arrow IPC file: "ARROW1" and two bytes of padding, a stream, the
// footer, its length, "ARROW1".
std::string ArrowFileBytes() {
  const std::string footer(24, '\x0c');
  return std::string("ARROW1\0\0", 8) + "\xff\xff\xff\xff" + U32(120) + std::string(120, '\x10') +
         footer + U32(footer.size()) + "ARROW1";
}

// The error of opening `path` under format=auto; it must be NotSupported.
std::string Refusal(const std::string& path) {
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(path, {}, &dataset);
  EXPECT_TRUE(status.IsNotSupported()) << path << ": " << status.ToString();
  return status.message();
}

void ExpectMentions(const std::string& message, const std::string& format) {
  EXPECT_NE(message.find(format), std::string::npos) << message;
  EXPECT_NE(message.find("recognises but does not read"), std::string::npos) << message;
  EXPECT_NE(message.find("ImageFolder"), std::string::npos) << message;  // the advice
  EXPECT_NE(message.find("WebDataset tars"), std::string::npos) << message;
}

TEST(UnreadFormatsTest, FilesAreRefusedByTheirMagicOrName) {
  TempDir dir;
  const std::string beton = JoinPath(dir.path(), "cifar_train.beton");
  // FFCV's header: version 1, 2 fields, page size, 50000 samples, table offset.
  WriteBytes(beton, std::string("\x01\x00\x02\x00", 4) + U32(1 << 21) +
                        std::string("\x50\xc3\0\0\0\0\0\0", 8) + std::string(8, '\0'));
  ExpectMentions(Refusal(beton), "FFCV .beton");
  const std::string parquet = JoinPath(dir.path(), "train-00000-of-00001.parquet");
  WriteBytes(parquet, ParquetBytes());
  ExpectMentions(Refusal(parquet), "Parquet file");
  const std::string arrow = JoinPath(dir.path(), "table.feather");
  WriteBytes(arrow, ArrowFileBytes());
  ExpectMentions(Refusal(arrow), "Arrow IPC file (Feather v2)");
  const std::string stream = JoinPath(dir.path(), "data-00000-of-00001.arrow");
  WriteBytes(stream, "\xff\xff\xff\xff" + U32(120) + std::string(120, '\x10'));
  ExpectMentions(Refusal(stream), "Arrow IPC stream");
  // The name alone is not enough: a text file named .parquet is not one.
  const std::string fake = JoinPath(dir.path(), "notes.parquet");
  WriteBytes(fake, "PAR1 is how a Parquet file starts");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(fake, {}, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("cannot tell the dataset format"), std::string::npos);
}

TEST(UnreadFormatsTest, LitDataDirectoryAndItsIndexAreRefused) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "index.json"),
             R"({"chunks": [{"chunk_bytes": 2048, "chunk_size": 4, "dim": null,
                 "filename": "chunk-0-0.bin"}],
                 "config": {"chunk_bytes": 67108864, "chunk_size": null, "compression": null,
                 "data_format": ["int", "jpeg"], "data_spec": "[1, {}]"},
                 "updated_at": "1700000000.0"})");
  WriteBytes(JoinPath(dir.path(), "chunk-0-0.bin"), std::string(2048, '\x07'));
  ExpectMentions(Refusal(dir.path()), "LitData optimized dataset");
  ExpectMentions(Refusal(JoinPath(dir.path(), "index.json")), "LitData");
}

TEST(UnreadFormatsTest, StreamingTextShardsAreRefused) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "index.json"),
             R"({"version": 2, "shards": [{"format": "jsonl", "version": 2, "samples": 3,
                 "raw_data": {"basename": "shard.00000.jsonl", "bytes": 30, "hashes": {}},
                 "raw_meta": {"basename": "shard.00000.jsonl.meta", "bytes": 16, "hashes": {}},
                 "columns": {"text": "str"}, "compression": null, "hashes": [],
                 "newline": "\n", "size_limit": 67108864, "zip_data": null,
                 "zip_meta": null}]})");
  WriteBytes(JoinPath(dir.path(), "shard.00000.jsonl"), "{\"text\": \"a\"}\n");
  const std::string message = Refusal(dir.path());
  ExpectMentions(message, "jsonl/csv/tsv shards");
  EXPECT_NE(message.find("MDSWriter"), std::string::npos) << message;
}

// MDS shards and TFRecords are refused only by a build without the format
// that reads them; with it, the format opens them (and names its own errors).
TEST(UnreadFormatsTest, MdsAndTfRecordAreRefusedOnlyWithoutTheirFormat) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "index.json"),
             R"({"version": 2, "shards": [{"format": "mds", "version": 2, "samples": 0,
                 "column_names": ["jpg", "cls"], "column_encodings": ["jpeg", "int"],
                 "column_sizes": [null, 8], "compression": null, "hashes": [],
                 "raw_data": {"basename": "shard.00000.mds", "bytes": 4, "hashes": {}},
                 "size_limit": 67108864, "zip_data": null}]})");
  WriteBytes(JoinPath(dir.path(), "shard.00000.mds"), std::string(4, '\0'));
  const std::string tfrecord = JoinPath(dir.path(), "train-00000-of-00001.tfrecord");
  WriteBytes(tfrecord, std::string(16, '\0'));
  DatasetFormat format = DatasetFormat::kAuto;
  for (const std::string& path : {dir.path(), tfrecord}) {
    const bool mds = path == dir.path();
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(path, {}, &dataset);
    if (ParseFormat(mds ? "mds" : "tfrecord", &format).ok()) {
      EXPECT_EQ(status.message().find("recognises but does not read"), std::string::npos)
          << status.ToString();
    } else {
      EXPECT_TRUE(status.IsNotSupported()) << status.ToString();
      ExpectMentions(status.message(), mds ? "Mosaic Streaming dataset of MDS shards"
                                           : "a TFRecord file");
    }
  }
}

TEST(UnreadFormatsTest, HuggingFaceDirectoriesAreRefused) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "dataset_info.json"), R"({"features": {}})");
  WriteBytes(JoinPath(dir.path(), "state.json"),
             R"({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})");
  WriteBytes(JoinPath(dir.path(), "data-00000-of-00001.arrow"),
             "\xff\xff\xff\xff" + U32(8) + std::string(8, '\0'));
  ExpectMentions(Refusal(dir.path()), "HuggingFace datasets directory");
  TempDir dict;
  ASSERT_TRUE(CreateDirectories(JoinPath(dict.path(), "train")).ok());
  WriteBytes(JoinPath(dict.path(), "dataset_dict.json"), R"({"splits": ["train"]})");
  WriteBytes(JoinPath(dict.path(), "train/state.json"), "{}");
  ExpectMentions(Refusal(dict.path()), "HuggingFace datasets directory");
}

TEST(UnreadFormatsTest, FlatDirectoryOfRefusedFilesIsRefused) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "part-0.parquet"), ParquetBytes());
  WriteBytes(JoinPath(dir.path(), "part-1.parquet"), ParquetBytes());
  WriteBytes(JoinPath(dir.path(), "_SUCCESS"), "");
  WriteBytes(JoinPath(dir.path(), "README.md"), "# a table");
  const std::string message = Refusal(dir.path());
  ExpectMentions(message, "Parquet file");
  EXPECT_NE(message.find("part-0.parquet"), std::string::npos) << message;
}

TEST(UnreadFormatsTest, ImageFolderStillOpens) {
  TempDir dir;
  // A class folder beside a stray Parquet file: still an ImageFolder.
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "cat")).ok());
  WriteBytes(JoinPath(dir.path(), "cat/1.jpg"), "jpeg bytes");
  WriteBytes(JoinPath(dir.path(), "labels.parquet"), ParquetBytes());
  WriteBytes(JoinPath(dir.path(), "index.json"), R"({"cat": 0})");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(dir.path(), {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kImageFolder);
  EXPECT_EQ(dataset->size(), 1u);
}

TEST(UnreadFormatsTest, AFormatAskedForIsTried) {
  TempDir dir;
  const std::string parquet = JoinPath(dir.path(), "t.parquet");
  WriteBytes(parquet, ParquetBytes());
  DatasetOptions options;
  options.format = DatasetFormat::kRecordIO;
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(parquet, options, &dataset);
  EXPECT_FALSE(status.ok());
  EXPECT_FALSE(status.IsNotSupported()) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
