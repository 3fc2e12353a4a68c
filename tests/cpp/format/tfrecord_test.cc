// TFRecord files: framing and tf.train.Example wire bytes written by hand
// here (a bitwise CRC32C, independent of the library's), read through the
// record index; bad CRCs, cut records, compressed files and stale indexes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>

#include "format/dataset_base.h"
#include "format/tfrecord.h"
#include "gpufeed/dataset.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

uint32_t BitwiseCrc32c(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

uint32_t Masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string Le(uint64_t v, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string Field(int field, const std::string& bytes) {  // wire type 2
  return Varint(field << 3 | 2) + Varint(bytes.size()) + bytes;
}

std::string Frame(const std::string& data) {
  std::string length = Le(data.size(), 8);
  return length + Le(Masked(BitwiseCrc32c(length)), 4) + data +
         Le(Masked(BitwiseCrc32c(data)), 4);
}

// feature map entry: key -> Feature{kind: list}
std::string Entry(const std::string& key, int kind, const std::string& list) {
  return Field(1, Field(1, key) + Field(2, Field(kind, list)));
}

std::string Example(const std::string& image, int64_t label, bool packed = true) {
  std::string labels = packed ? Field(1, Varint(label)) : Varint(1 << 3 | 0) + Varint(label);
  std::string features = Entry("image/format", 1, Field(1, "JPEG")) +
                         Entry("image/encoded", 1, Field(1, image)) +
                         Entry("image/class/label", 3, labels);
  return Field(1, features);
}

std::string FloatExample(const std::string& image, float a, float b) {
  uint32_t wa = 0, wb = 0;
  std::memcpy(&wa, &a, 4);
  std::memcpy(&wb, &b, 4);
  std::string unpacked = Varint(1 << 3 | 5) + Le(wa, 4) + Varint(1 << 3 | 5) + Le(wb, 4);
  return Field(1, Entry("image/encoded", 1, Field(1, image)) + Entry("y", 2, unpacked));
}

class TfRecordTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, int records, int64_t first_label = 0) {
    std::string bytes;
    for (int i = 0; i < records; ++i) {
      bytes += Frame(Example("img" + std::to_string(i) + std::string(i * 37, 'x'),
                             first_label + i, i % 2 == 0));
    }
    std::string path = JoinPath(dir_.path(), name);
    WriteBytes(path, bytes);
    return path;
  }
  std::unique_ptr<Dataset> Open(const std::string& path, DatasetOptions options = {}) {
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(path, options, &dataset);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return dataset;
  }
  TempDir dir_;
};

TEST(TfRecordCrcTest, MatchesCastagnoliAndBitwise) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xe3069283u);
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 999}) {
    EXPECT_EQ(Crc32c(data.data(), n), BitwiseCrc32c(data.substr(0, n))) << n;
    // Both paths (the hardware one where the CPU has it), at every alignment
    // and continued from a previous CRC.
    for (size_t start : {size_t{0}, size_t{1}, size_t{3}}) {
      if (start > n) continue;
      const uint32_t head = Crc32cPortable(data.data(), start);
      EXPECT_EQ(Crc32c(data.data() + start, n - start, head),
                Crc32cPortable(data.data() + start, n - start, head))
          << n << " from " << start;
    }
  }
  EXPECT_EQ(EncodeTfRecord("abc"), Frame("abc"));
}

TEST_F(TfRecordTest, ReadsEveryRecordAndBuildsItsIndex) {
  std::string path = Write("a.tfrecord", 5, 3);
  auto dataset = Open(path);
  ASSERT_EQ(dataset->size(), 5u);
  EXPECT_STREQ(FormatName(dataset->format()), "tfrecord");
  EXPECT_TRUE(dataset->integer_labels());
  for (uint64_t i = 0; i < 5; ++i) {
    Record record;
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, "img" + std::to_string(i) + std::string(i * 37, 'x'));
    ASSERT_EQ(record.labels.size(), 1u);
    EXPECT_EQ(record.labels[0], 3.0f + i);
    EXPECT_TRUE(record.encoded);
    // The engine's path: Locate's range parsed.
    RecordLocation location;
    ASSERT_TRUE(ReadPathOf(*dataset).Locate(i, &location));
    std::string bytes = ReadBytes(path).substr(location.offset, location.length);
    Record located;
    ASSERT_TRUE(ReadPathOf(*dataset).ParseLocated(i, location, bytes.data(), bytes.size(), &located)
                    .ok());
    EXPECT_EQ(located.data, record.data);
  }
  // The index was saved beside the file in DALI's text format.
  std::string index = ReadBytes(path + ".idx");
  std::vector<TfRecordEntry> entries;
  ASSERT_TRUE(ParseTfRecordIndex(index, path + ".idx", &entries).ok());
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(index.substr(0, index.find('\n')), "0 " + std::to_string(Frame(Example("img0", 3)).size()));
}

TEST_F(TfRecordTest, ReadsADaliIndexAndRebuildsAStaleOne) {
  std::string path = Write("b.tfrecord", 3);
  std::string bytes = ReadBytes(path);
  uint64_t first = Frame(Example("img0", 0)).size();
  uint64_t second = Frame(Example("img1" + std::string(37, 'x'), 1, false)).size();
  std::string dali = "0 " + std::to_string(first) + "\n" + std::to_string(first) + " " +
                     std::to_string(second) + "\n" + std::to_string(first + second) + " " +
                     std::to_string(bytes.size() - first - second) + "\n";
  WriteBytes(path + ".idx", dali);
  EXPECT_EQ(Open(path)->size(), 3u);
  EXPECT_EQ(ReadBytes(path + ".idx"), dali);  // a valid index is kept as it is
  WriteBytes(path + ".idx", "0 " + std::to_string(first) + "\n");  // stale: covers one record
  EXPECT_EQ(Open(path)->size(), 3u);
  EXPECT_EQ(ReadBytes(path + ".idx"), dali);
  WriteBytes(path + ".idx", "0 x\n");  // malformed: built again too
  EXPECT_EQ(Open(path)->size(), 3u);
  std::vector<TfRecordEntry> entries;
  Status bad = ParseTfRecordIndex("0 20\n5 -3\n", "i.idx", &entries);
  EXPECT_NE(bad.ToString().find("i.idx line 2"), std::string::npos) << bad.ToString();
}

// The index cannot be saved beside the file (a directory holds its name,
// as a read-only directory would refuse it, even to root): the fallback.
TEST_F(TfRecordTest, UnsavableIndexGoesToTheFallbackDirectory) {
  std::string path = Write("c.tfrecord", 2);
  ASSERT_TRUE(CreateDirectories(path + ".idx").ok());
  DatasetOptions options;
  options.webdataset.index_dir = JoinPath(dir_.path(), "indexes");
  EXPECT_EQ(Open(path, options)->size(), 2u);
  std::vector<DirectoryEntry> entries;
  ASSERT_TRUE(ListDirectory(options.webdataset.index_dir, &entries).ok());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(EndsWith(entries[0].name, ".idx"));
  EXPECT_EQ(Open(path, options)->size(), 2u);  // read back from there
}

TEST_F(TfRecordTest, BadCrcsAndCutRecordsNameTheFileAndOffset) {
  std::string path = Write("d.tfrecord", 3);
  std::string good = ReadBytes(path);
  uint64_t second = Frame(Example("img0", 0)).size();
  std::unique_ptr<Dataset> dataset;
  for (size_t flip : {second + 2, second + 9, second + 20, good.size() - 30, good.size() - 1}) {
    std::string bad = good;
    bad[flip] ^= 0x10;
    WriteBytes(path, bad);
    std::remove((path + ".idx").c_str());
    Status status = Dataset::Open(path, {}, &dataset);
    EXPECT_EQ(status.code(), Status::Code::kCorruption) << flip;
    EXPECT_NE(status.ToString().find(path + ": the record at byte offset"), std::string::npos)
        << status.ToString();
  }
  WriteBytes(path, good.substr(0, good.size() - 3));
  std::remove((path + ".idx").c_str());
  Status cut = Dataset::Open(path, {}, &dataset);
  EXPECT_NE(cut.ToString().find("cut short"), std::string::npos) << cut.ToString();
  // Changed after indexing: reading the sample names it.
  WriteBytes(path, good);
  dataset = Open(path);
  std::string bad = good;
  bad[second + 20] ^= 1;
  WriteBytes(path, bad);
  Record record;
  Status read = dataset->Read(1, &record);
  EXPECT_EQ(read.code(), Status::Code::kCorruption);
  EXPECT_NE(read.ToString().find("sample 1"), std::string::npos) << read.ToString();
  EXPECT_NE(read.ToString().find("byte offset " + std::to_string(second)), std::string::npos);
}

TEST_F(TfRecordTest, CompressedFilesAreRefusedWithAWayToDecompress) {
  std::string gz = JoinPath(dir_.path(), "e.tfrecord");
  WriteBytes(gz, std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + "junk");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(gz, {}, &dataset);
  EXPECT_EQ(status.code(), Status::Code::kNotSupported) << status.ToString();
  EXPECT_NE(status.ToString().find("gzip.open"), std::string::npos) << status.ToString();
  WriteBytes(gz, std::string("\x78\x9c", 2) + std::string(20, 'z'));
  status = Dataset::Open(gz, {}, &dataset);
  EXPECT_EQ(status.code(), Status::Code::kNotSupported) << status.ToString();
  EXPECT_NE(status.ToString().find("ZLIB"), std::string::npos);
  // A record whose length starts with 78 9c (40056 bytes) is a record.
  std::string record = Frame(std::string(0x9c78, 'q'));
  ASSERT_EQ(record.substr(0, 2), std::string("\x78\x9c", 2));
  EXPECT_TRUE(CheckNotCompressedTfRecord(record.data(), record.size(), gz).ok());
}

TEST_F(TfRecordTest, FloatLabelsKeysDirectoriesGlobsAndLists) {
  std::string path = JoinPath(dir_.path(), "f.tfrec");
  WriteBytes(path, Frame(FloatExample("p", 0.5f, -2.0f)) + Frame(FloatExample("q", 1.5f, 3.0f)));
  DatasetOptions options;
  options.webdataset.label_key = "y";
  auto dataset = Open(path, options);
  EXPECT_FALSE(dataset->integer_labels());
  Record record;
  ASSERT_TRUE(dataset->Read(1, &record).ok());
  EXPECT_EQ(record.data, "q");
  EXPECT_EQ(record.labels, (std::vector<float>{1.5f, 3.0f}));
  Status missing = Dataset::Open(path, {}, &dataset);
  EXPECT_NE(missing.ToString().find("no label feature \"image/class/label\""), std::string::npos)
      << missing.ToString();

  std::string sub = JoinPath(dir_.path(), "g");
  ASSERT_TRUE(CreateDirectories(sub).ok());
  Write("g/part-10.tfrecord", 1, 10);
  Write("g/part-2.tfrecord", 2, 2);
  dataset = Open(sub);
  ASSERT_EQ(dataset->size(), 3u);
  EXPECT_TRUE(EndsWith(dataset->shards()[0].path, "part-2.tfrecord"));  // natural order
  dataset = Open(JoinPath(sub, "part-*.tfrecord"));
  EXPECT_EQ(dataset->size(), 3u);
  WriteBytes(JoinPath(sub, "files.txt"), "# two\npart-10.tfrecord\n\npart-2.tfrecord\n");
  DatasetOptions asked;
  asked.format = kTfRecordFormat;
  dataset = Open(JoinPath(sub, "files.txt"), asked);
  ASSERT_EQ(dataset->size(), 3u);
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  EXPECT_EQ(record.labels[0], 10.0f);
  DatasetOptions listed;
  listed.webdataset.tars = {JoinPath(sub, "part-2.tfrecord")};
  EXPECT_EQ(Open(dir_.path(), listed)->size(), 2u);
}

}  // namespace
}  // namespace gpufeed
