// gpufeed LMDB shards: round trip, random access by key, read-only media.
#include <gtest/gtest.h>

#include <functional>
#include <lmdb.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/datasets.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "lmdb_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

const std::string kMagic("\x0A\x23\xD7\xCE", 4);

void WriteLmdb(const std::string& path, const std::vector<std::pair<std::vector<float>, std::string>>& samples,
               uint64_t first = 0) {
  std::unique_ptr<ShardWriter> writer;
  ASSERT_TRUE(ShardWriter::Open(path, ShardFormat::kLmdb, &writer).ok());
  for (size_t i = 0; i < samples.size(); ++i) {
    SampleToWrite sample;
    sample.index = first + i;
    sample.labels = samples[i].first;
    sample.data = samples[i].second;
    ASSERT_TRUE(writer->Append(sample).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());
}

TEST(LmdbTest, RoundTrip) {
  TempDir dir;
  std::string env = JoinPath(dir.path(), "part-00000");
  std::vector<std::pair<std::vector<float>, std::string>> samples = {
      {{1}, ""}, {{2}, "a"}, {{3}, "abcdefg"}, {{0.25f, 4, 5}, "multi"},
      {{9}, kMagic + "x" + kMagic}, {{7}, std::string(3 << 20, 'z')}};
  WriteLmdb(env, samples);
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(env, {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kLmdb);
  ASSERT_EQ(dataset->size(), samples.size());
  Record record;
  for (size_t i = samples.size(); i-- > 0;) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.labels, samples[i].first);
    EXPECT_EQ(record.data, samples[i].second);
    EXPECT_EQ(record.key, LmdbKeyFor(i));
  }
  EXPECT_TRUE(dataset->Read(samples.size(), &record).IsOutOfRange());
}

TEST(LmdbTest, KeysMustIncrease) {
  TempDir dir;
  std::unique_ptr<ShardWriter> writer;
  ASSERT_TRUE(ShardWriter::Open(JoinPath(dir.path(), "e"), ShardFormat::kLmdb, &writer).ok());
  SampleToWrite sample;
  sample.index = 5;
  ASSERT_TRUE(writer->Append(sample).ok());
  sample.index = 4;
  EXPECT_TRUE(writer->Append(sample).IsInvalidArgument());
}

TEST(LmdbTest, ReadOnlyDirectoryOpensWithoutLock) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  std::string env = JoinPath(dir.path(), "ro");
  WriteLmdb(env, {{{1}, "one"}, {{2}, "two"}});
  ::unlink(JoinPath(env, "lock.mdb").c_str());
  ::chmod(JoinPath(env, "data.mdb").c_str(), 0444);
  ::chmod(env.c_str(), 0555);
  // Root ignores permissions, so the reader runs in a child that drops to
  // "nobody": for it the directory is really read-only.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    std::unique_ptr<Dataset> dataset;
    if (!Dataset::Open(env, {}, &dataset).ok()) ::_exit(1);
    Record record;
    if (!dataset->Read(1, &record).ok() || record.data != "two") ::_exit(2);
    ::_exit(0);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ::chmod(env.c_str(), 0755);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop privileges to test read-only";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_FALSE(PathExists(JoinPath(env, "lock.mdb")));
}

// Changes an environment behind gpufeed's back, with LMDB itself: `edit`
// runs inside one write transaction (put/del on the main database).
void EditLmdb(const std::string& env, const std::function<void(MDB_txn*, MDB_dbi)>& edit) {
  LmdbWriteTxn lmdb;
  ASSERT_EQ(lmdb.Begin(env), 0);
  edit(lmdb.txn(), lmdb.dbi());
  ASSERT_EQ(lmdb.Commit(), 0);
}

void Put(MDB_txn* txn, MDB_dbi dbi, std::string key, std::string value) {
  MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
  ASSERT_EQ(mdb_put(txn, dbi, &k, &v, 0), 0);
}

TEST(LmdbTest, MissingKeyIsCorruptionNamingTheShard) {
  TempDir dir;
  std::string env = JoinPath(dir.path(), "gap");
  WriteLmdb(env, {{{1}, "one"}, {{2}, "two"}, {{3}, "three"}});
  EditLmdb(env, [](MDB_txn* txn, MDB_dbi dbi) {
    // Delete the middle key; keep the count at 3 with a key past the end, so
    // that open succeeds and the gap shows at read time.
    std::string key = LmdbKeyFor(1);
    MDB_val k{key.size(), key.data()};
    ASSERT_EQ(mdb_del(txn, dbi, &k, nullptr), 0);
    Put(txn, dbi, LmdbKeyFor(9), std::string(24, '\0'));
  });
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(env, {}, &dataset).ok());
  Record record;
  Status status = dataset->Read(1, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(env), std::string::npos);
  EXPECT_NE(status.message().find("sample 1"), std::string::npos);
}

TEST(LmdbTest, ShortValueIsCorruptionNamingKey) {
  TempDir dir;
  std::string env = JoinPath(dir.path(), "short");
  WriteLmdb(env, {{{1}, "one"}});
  EditLmdb(env, [](MDB_txn* txn, MDB_dbi dbi) {
    Put(txn, dbi, LmdbKeyFor(0), std::string(10, '\0'));  // shorter than an IRHeader
  });
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(env, {}, &dataset).ok());
  Record record;
  Status status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("0000000000"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
