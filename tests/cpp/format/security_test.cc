// Untrusted datasets (docs/security.md): manifests, shard directories and
// list files that point outside the dataset, and size fields that would
// size an allocation. Real files, real symlinks, real LMDB.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/manifest.h"
#include "format/recordio.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "lmdb_test_util.h"
#include "protobuf_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

bool Contains(const Status& status, const std::string& needle) {
  return status.ToString().find(needle) != std::string::npos;
}

class UntrustedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = JoinPath(dir_.path(), "source");
    ASSERT_TRUE(CreateDirectories(source_).ok());
    std::string list;
    for (int i = 0; i < 6; ++i) {
      std::string name = std::to_string(i) + ".bin";
      WriteBytes(JoinPath(source_, name), "sample-" + std::to_string(i));
      list += name + "\t" + std::to_string(i) + "\n";
    }
    WriteBytes(JoinPath(source_, "list.txt"), list);
    dataset_ = JoinPath(dir_.path(), "dataset");
    PackOptions options;
    PackSummary summary;
    Status status = Pack(JoinPath(source_, "list.txt"), dataset_, options, &summary);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(summary.shards, 1u);
    manifest_path_ = JoinPath(dataset_, kManifestName);
    ASSERT_TRUE(ReadManifest(manifest_path_, &manifest_).ok());
  }

  // Rewrites shard 0's file and index names in gpufeed.json.
  void RenameShard(const std::string& file, const std::string& index) {
    Manifest manifest = manifest_;
    manifest.shards[0].file = file;
    manifest.shards[0].index = index;
    ASSERT_TRUE(WriteManifest(manifest_path_, manifest).ok());
  }

  Status Open(bool allow_external_paths, std::unique_ptr<Dataset>* dataset) {
    DatasetOptions options;
    options.allow_external_paths = allow_external_paths;
    return Dataset::Open(dataset_, options, dataset);
  }

  void ExpectReadable(Dataset* dataset) {
    ASSERT_EQ(dataset->size(), 6u);
    Record record;
    ASSERT_TRUE(dataset->Read(5, &record).ok());
    EXPECT_EQ(record.data, "sample-5");
  }

  TempDir dir_;
  std::string source_, dataset_, manifest_path_;
  Manifest manifest_;
};

TEST_F(UntrustedDatasetTest, ManifestNamingEtcPasswdIsRefused) {
  RenameShard("/etc/passwd", "part-00000.idx");
  std::unique_ptr<Dataset> dataset;
  Status status = Open(false, &dataset);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "/etc/passwd")) << status.ToString();
  EXPECT_TRUE(Contains(status, "absolute path")) << status.ToString();
  EXPECT_TRUE(Contains(status, manifest_path_ + " shard 0")) << status.ToString();
  EXPECT_TRUE(Contains(status, "allow_external_paths")) << status.ToString();
  // An absolute index name is refused the same way.
  RenameShard("part-00000.rec", "/etc/passwd");
  status = Open(false, &dataset);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  // Opting in follows the name; /etc/passwd is then no shard of this size
  // (found at the first read: the manifest's sizes make the open lazy).
  RenameShard("/etc/passwd", "part-00000.idx");
  status = Open(true, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  Record record;
  status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, "/etc/passwd")) << status.ToString();
}

TEST_F(UntrustedDatasetTest, DotDotOutsideIsRefusedUnlessAllowed) {
  ASSERT_EQ(::rename(JoinPath(dataset_, "part-00000.rec").c_str(),
                     JoinPath(dir_.path(), "outside.rec").c_str()), 0);
  ASSERT_EQ(::rename(JoinPath(dataset_, "part-00000.idx").c_str(),
                     JoinPath(dir_.path(), "outside.idx").c_str()), 0);
  RenameShard("../outside.rec", "../outside.idx");
  std::unique_ptr<Dataset> dataset;
  Status status = Open(false, &dataset);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "\"..\" segment")) << status.ToString();
  // `verify` refuses it too, as a problem in its report.
  VerifyReport report;
  ASSERT_TRUE(Verify(dataset_, {}, &report).ok());
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.problems[0].find("\"..\" segment"), std::string::npos) << report.problems[0];
  // A ".." that stays inside is still refused: the rule is simple to state.
  RenameShard("sub/../part-00000.rec", "part-00000.idx");
  EXPECT_TRUE(Open(false, &dataset).IsPermissionDenied());
  // The user's opt-in: the external shard is read.
  RenameShard("../outside.rec", "../outside.idx");
  status = Open(true, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectReadable(dataset.get());
  DatasetOptions allow;
  allow.allow_external_paths = true;
  ASSERT_TRUE(Verify(dataset_, allow, &report).ok());
  EXPECT_TRUE(report.ok()) << report.problems[0];
}

TEST_F(UntrustedDatasetTest, SymlinkedShardLeadingOutsideIsRefused) {
  std::string rec = JoinPath(dataset_, "part-00000.rec");
  std::string elsewhere = JoinPath(dir_.path(), "elsewhere.rec");
  ASSERT_EQ(::rename(rec.c_str(), elsewhere.c_str()), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), rec.c_str()), 0);
  std::unique_ptr<Dataset> dataset;
  Status status = Open(false, &dataset);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "symlink")) << status.ToString();
  EXPECT_TRUE(Contains(status, elsewhere)) << status.ToString();
  // Without the manifest, the shard found by listing the directory too.
  ASSERT_EQ(::unlink(manifest_path_.c_str()), 0);
  status = Open(false, &dataset);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  status = Open(true, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectReadable(dataset.get());
}

TEST_F(UntrustedDatasetTest, SymlinksThatStayInsideAndASymlinkedRootAreFine) {
  // part-00000.rec -> store/part-00000.rec inside the dataset directory.
  std::string store = JoinPath(dataset_, "store");
  ASSERT_TRUE(CreateDirectories(store).ok());
  std::string rec = JoinPath(dataset_, "part-00000.rec");
  ASSERT_EQ(::rename(rec.c_str(), JoinPath(store, "part-00000.rec").c_str()), 0);
  ASSERT_EQ(::symlink("store/part-00000.rec", rec.c_str()), 0);
  std::unique_ptr<Dataset> dataset;
  Status status = Open(false, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectReadable(dataset.get());
  // The dataset directory itself reached through a symlink (/data -> /mnt/...).
  std::string link = JoinPath(dir_.path(), "link-to-dataset");
  ASSERT_EQ(::symlink(dataset_.c_str(), link.c_str()), 0);
  status = Dataset::Open(link, {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ExpectReadable(dataset.get());
}

TEST_F(UntrustedDatasetTest, ShardSizeDisagreeingWithTheManifestIsCorruption) {
  std::string rec = JoinPath(dataset_, "part-00000.rec");
  uint64_t size = 0;
  ASSERT_TRUE(FileSizeOf(rec, &size).ok());
  ASSERT_EQ(::truncate(rec.c_str(), static_cast<off_t>(size - 4)), 0);
  std::unique_ptr<Dataset> dataset;
  // Opened lazily (the manifest identifies every file): the first read of
  // the shard finds it, by name.
  ASSERT_TRUE(Open(false, &dataset).ok());
  Record record;
  Status status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, rec)) << status.ToString();
  EXPECT_TRUE(Contains(status, "manifest")) << status.ToString();
  EXPECT_TRUE(Contains(status, std::to_string(size))) << status.ToString();
}

TEST_F(UntrustedDatasetTest, HugeManifestIsRefusedUnread) {
  // A sparse 65 MiB gpufeed.json: refused by size, never read into memory.
  ASSERT_EQ(::truncate(manifest_path_.c_str(), static_cast<off_t>(kMaxManifestBytes + 1)), 0);
  std::unique_ptr<Dataset> dataset;
  Status status = Open(false, &dataset);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status, manifest_path_)) << status.ToString();
  EXPECT_TRUE(Contains(status, std::to_string(kMaxManifestBytes))) << status.ToString();
}

TEST(UntrustedIndexTest, MoreEntriesThanTheRecCanHoldIsCorruption) {
  // 40 bytes of .rec hold at most 5 records: a 6th line is refused as it is
  // read, so an index cannot size the offset table beyond the data.
  std::string text;
  for (int i = 0; i < 6; ++i) text += std::to_string(i) + "\t0\n";
  std::vector<uint64_t> offsets;
  std::vector<std::string> keys;
  Status status = ParseRecordIOIndex(text, "x.idx", 40, &offsets, &keys);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, "x.idx line 6")) << status.ToString();
  EXPECT_TRUE(ParseRecordIOIndex(text, "x.idx", 48, &offsets, &keys).ok());
}

TEST(UntrustedRecordIOTest, A500MiBLengthInA1KiBFileIsNotAllocated) {
  TempDir dir;
  std::string rec = JoinPath(dir.path(), "bomb.rec");
  std::string bytes;
  uint32_t header[2] = {kRecordIOMagic, 500u << 20};  // cflag 0, length 500 MiB
  bytes.append(reinterpret_cast<const char*>(header), sizeof(header));
  bytes.resize(1024, 'x');
  WriteBytes(rec, bytes);
  // Scanned at open (no .idx): the length is checked against the bytes left.
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(rec, {}, &dataset);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, rec + " at byte offset 0")) << status.ToString();
  EXPECT_TRUE(Contains(status, "length 524288000 runs past the end of the file (1016 bytes left"))
      << status.ToString();
  // Through an .idx, the same at read time, naming the sample.
  WriteBytes(IndexPathFor(rec), "0\t0\n");
  ASSERT_TRUE(Dataset::Open(rec, {}, &dataset).ok());
  Record record;
  status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, "sample 0")) << status.ToString();
  EXPECT_TRUE(Contains(status, "524288000")) << status.ToString();
}


std::string DatumClaiming3x10000x10000With10Bytes() {
  return Varint(1 << 3) + Varint(3) + Varint(2 << 3) + Varint(10000) + Varint(3 << 3) +
         Varint(10000) + Varint((4 << 3) | 2) + Varint(10) + std::string(10, '\x7f') +
         Varint(5 << 3) + Varint(1);
}

TEST(UntrustedDatumTest, ShapeMustMatchTheDataLength) {
  CaffeDatum datum;
  Status status = DecodeCaffeDatum(DatumClaiming3x10000x10000With10Bytes(), &datum);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, "shape 3x10000x10000 needs 300000000 bytes of data, the datum has 10"))
      << status.ToString();
  // The same record in a real Caffe LMDB: the read fails naming the key.
  TempDir dir;
  std::string env = JoinPath(dir.path(), "caffe");
  ASSERT_TRUE(CreateDirectories(env).ok());
  std::string key = "00000000_bomb", value = DatumClaiming3x10000x10000With10Bytes();
  LmdbWriteTxn lmdb;
  ASSERT_EQ(lmdb.Begin(env), 0);
  ASSERT_EQ(lmdb.Put(key, value), 0);
  ASSERT_EQ(lmdb.Commit(), 0);
  DatasetOptions options;
  options.format = DatasetFormat::kCaffeLmdb;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(env, options, &dataset).ok());
  Record record;
  status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_TRUE(Contains(status, key)) << status.ToString();
  EXPECT_TRUE(Contains(status, "300000000")) << status.ToString();
}

class UntrustedListFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lists_ = JoinPath(dir_.path(), "lists");
    ASSERT_TRUE(CreateDirectories(JoinPath(lists_, "images")).ok());
    WriteBytes(JoinPath(lists_, "images/a.bin"), "inside");
    WriteBytes(JoinPath(dir_.path(), "secret.bin"), "outside");
  }

  Status PackList(const std::string& lines, bool allow_external_paths) {
    std::string list = JoinPath(lists_, "list.txt");
    WriteBytes(list, lines);
    PackOptions options;
    options.allow_external_paths = allow_external_paths;
    options.overwrite = true;
    PackSummary summary;
    return Pack(list, JoinPath(dir_.path(), "out"), options, &summary);
  }

  TempDir dir_;
  std::string lists_;
};

TEST_F(UntrustedListFileTest, PathsLeavingTheListDirectoryAreRefused) {
  ASSERT_TRUE(PackList("images/a.bin\t0\n", false).ok());
  Status status = PackList("images/a.bin\t0\n/etc/passwd\t1\n", false);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "list.txt line 2")) << status.ToString();
  EXPECT_TRUE(Contains(status, "absolute path")) << status.ToString();
  status = PackList("../secret.bin\t1\n", false);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "list.txt line 1")) << status.ToString();
  // MXNet .lst lines ("index<TAB>label<TAB>path") are held to the same rule.
  status = PackList("0\t1\t../secret.bin\n", false);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  ASSERT_EQ(::symlink(JoinPath(dir_.path(), "secret.bin").c_str(),
                      JoinPath(lists_, "images/link.bin").c_str()), 0);
  status = PackList("images/link.bin\t1\n", false);
  EXPECT_TRUE(status.IsPermissionDenied()) << status.ToString();
  EXPECT_TRUE(Contains(status, "symlink")) << status.ToString();
  // Opted in: every one of them is packed.
  std::string all = "images/a.bin\t0\n" + JoinPath(dir_.path(), "secret.bin") +
                    "\t1\n../secret.bin\t2\nimages/link.bin\t3\n";
  status = PackList(all, true);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(JoinPath(dir_.path(), "out"), {}, &dataset).ok());
  ASSERT_EQ(dataset->size(), 4u);
  Record record;
  ASSERT_TRUE(dataset->Read(3, &record).ok());
  EXPECT_EQ(record.data, "outside");
}

}  // namespace
}  // namespace gpufeed
