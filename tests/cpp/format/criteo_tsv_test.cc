// Raw Criteo TSV datasets (format "criteo_tsv", src/format/criteo_tsv.h) on
// files Python writes as plain text: the line index built, reused, rebuilt
// when stale or corrupt, kept under index_dir when the file's directory is
// read-only; CRLF lines and a last line without '\n'; a directory in
// natural order; bad lines reported by Read and verify with file and line.
#include "format/criteo_tsv.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "format/registry.h"
#include "format/tabular.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// Writes `lines` random Criteo lines (missing and negative dense values,
// missing categoricals) with seed `seed`. `ending` "\n" or "\r\n";
// `final_newline` false: the last line has none; `bad` (1-based lines) get
// a non-hex categorical; `empty` (1-based) are empty lines.
constexpr char kWriter[] = R"(import random, sys
path, count, seed, ending, final_newline = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
bad = {int(x) for x in sys.argv[6].split(",") if x}
empty = {int(x) for x in sys.argv[7].split(",") if x}
ending = "\r\n" if ending == "crlf" else "\n"
rng = random.Random(seed)
out = []
for number in range(1, count + 1):
    if number in empty:
        out.append("")
        continue
    label = str(rng.randint(0, 1))
    dense = ["" if rng.random() < 0.2 else str(rng.randint(-3, 5000)) for _ in range(13)]
    sparse = ["" if rng.random() < 0.1 else "%08x" % rng.getrandbits(32) for _ in range(26)]
    if number in bad:
        sparse[6] = "zz"
    out.append("\t".join([label] + dense + sparse))
text = ending.join(out) + (ending if final_newline else "")
open(path, "w", newline="").write(text)
)";

class CriteoTsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::chmod(dir_.path().c_str(), 0755);  // a child dropped to "nobody" goes in
    options_.format = kCriteoTsvFormat;
    options_.tabular.index_dir = JoinPath(dir_.path(), "no-index-dir");  // never $HOME
  }

  // The file Python writes; false when python3 could not run.
  bool Write(const std::string& path, int lines, int seed, const std::string& ending = "lf",
             bool final_newline = true, const std::string& bad = "",
             const std::string& empty = "") {
    const std::string script = JoinPath(dir_.path(), "write.py");
    WriteBytes(script, kWriter);
    const std::string command = "/usr/bin/python3 " + script + " " + path + " " +
                                std::to_string(lines) + " " + std::to_string(seed) + " " + ending +
                                " " + (final_newline ? "1" : "0") + " '" + bad + "' '" + empty +
                                "'";
    return std::system(command.c_str()) == 0;
  }

  // The lines of `path` as written, without their "\n" or "\r\n".
  static std::vector<std::string> LinesOf(const std::string& path) {
    const std::string text = ReadBytes(path);
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
      start = end + 1;
    }
    return lines;
  }

  Status Open(const std::string& path, std::unique_ptr<Dataset>* dataset) {
    return Dataset::Open(path, options_, dataset);
  }

  // Every row of `dataset` is `lines`, its label the line's first field.
  static void ExpectRows(const Dataset& dataset, const std::vector<std::string>& lines) {
    ASSERT_EQ(dataset.size(), lines.size());
    Record record;
    for (uint64_t i = 0; i < lines.size(); ++i) {
      Status status = dataset.Read(i, &record);
      ASSERT_TRUE(status.ok()) << i << ": " << status.ToString();
      EXPECT_EQ(record.data, lines[i]) << i;
      ASSERT_EQ(record.labels.size(), 1u);
      EXPECT_EQ(record.labels[0], static_cast<float>(std::stoi(lines[i].substr(0, 1)))) << i;
    }
  }

  // (inode, mtime) of a file: a rebuilt index is a new file.
  static std::pair<ino_t, int64_t> Identity(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {0, 0};
    return {st.st_ino, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }

  static void SetMtime(const std::string& path, int64_t seconds) {
    struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }

  TempDir dir_;
  DatasetOptions options_;
};

#define WRITE_OR_SKIP(...) \
  if (!Write(__VA_ARGS__)) GTEST_SKIP() << "/usr/bin/python3 could not write the TSV file"

TEST_F(CriteoTsvTest, IndexIsBuiltOnceThenReused) {
  const std::string file = JoinPath(dir_.path(), "train.txt");
  WRITE_OR_SKIP(file, 300, 1);
  std::unique_ptr<Dataset> dataset;
  Status status = Open(file, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_STREQ(FormatName(dataset->format()), "criteo_tsv");
  ExpectRows(*dataset, LinesOf(file));
  const std::string index = LineIndexPathBeside(file);
  ASSERT_TRUE(IsRegularFile(index));
  const auto built = Identity(index);
  dataset.reset();
  ASSERT_TRUE(Open(file, &dataset).ok());
  EXPECT_EQ(Identity(index), built);  // read, not written again
  ExpectRows(*dataset, LinesOf(file));
  // The index holds what a fresh scan finds.
  LineIndex loaded;
  ASSERT_TRUE(LoadLineIndex(index, &loaded).ok());
  EXPECT_EQ(loaded.lines(), 300u);
  EXPECT_EQ(loaded.file_size, ReadBytes(file).size());
  const TabularRows* rows = AsTabularRows(*dataset);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(*rows->table().segments[0].line_offsets, *loaded.offsets);
  EXPECT_TRUE(rows->table().schema.text);
  EXPECT_EQ(rows->table().schema.dense.count, 13u);
  EXPECT_EQ(rows->table().schema.sparse.type, FieldType::kUint64);
}

TEST_F(CriteoTsvTest, StaleOrCorruptIndexIsBuiltAgain) {
  const std::string file = JoinPath(dir_.path(), "day_0");
  WRITE_OR_SKIP(file, 50, 2);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(file, &dataset).ok());
  const std::string index = LineIndexPathBeside(file);
  // More lines: another size.
  WRITE_OR_SKIP(file, 80, 3);
  ASSERT_TRUE(Open(file, &dataset).ok());
  ExpectRows(*dataset, LinesOf(file));
  // The same size, other bytes and mtime: still rebuilt.
  const std::string before = ReadBytes(file);
  std::string changed = before;
  changed[0] = changed[0] == '0' ? '1' : '0';
  WriteBytes(file, changed);
  SetMtime(file, 1000000000);
  auto old_index = Identity(index);
  ASSERT_TRUE(Open(file, &dataset).ok());
  EXPECT_NE(Identity(index), old_index);
  ExpectRows(*dataset, LinesOf(file));
  // A damaged index is not trusted.
  for (const std::string& garbage : {std::string("not an index"), ReadBytes(index).substr(0, 60),
                                     std::string(ReadBytes(index)).replace(40, 1, "\x7f")}) {
    WriteBytes(index, garbage);
    Status status = Open(file, &dataset);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ExpectRows(*dataset, LinesOf(file));
    LineIndex loaded;
    EXPECT_TRUE(LoadLineIndex(index, &loaded).ok());
  }
  LineIndex loaded;
  WriteBytes(index, "GFLINIX1 but nothing else of one");
  Status status = LoadLineIndex(index, &loaded);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(index), std::string::npos);
}

TEST_F(CriteoTsvTest, ReadOnlyDirectoryKeepsTheIndexInIndexDir) {
  const std::string data = JoinPath(dir_.path(), "ro");
  ASSERT_TRUE(CreateDirectories(data).ok());
  const std::string file = JoinPath(data, "train.txt");
  WRITE_OR_SKIP(file, 40, 4);
  const std::string index_dir = JoinPath(dir_.path(), "indexes");
  ASSERT_TRUE(CreateDirectories(index_dir).ok());
  ::chmod(index_dir.c_str(), 0777);
  ::chmod(data.c_str(), 0555);
  const std::vector<std::string> lines = LinesOf(file);
  options_.tabular.index_dir = index_dir;
  // Root ignores permissions: the reader runs as "nobody".
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    std::unique_ptr<Dataset> dataset;
    if (!Open(file, &dataset).ok() || dataset->size() != lines.size()) ::_exit(1);
    Record record;
    if (!dataset->Read(7, &record).ok() || record.data != lines[7]) ::_exit(2);
    ::_exit(0);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ::chmod(data.c_str(), 0755);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop privileges to test read-only";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_FALSE(PathExists(LineIndexPathBeside(file)));
  const std::string kept = LineIndexPathInDirectory(file, index_dir);
  ASSERT_TRUE(IsRegularFile(kept));
  // Found there next time, not built again.
  const auto built = Identity(kept);
  ::chmod(data.c_str(), 0555);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(file, &dataset).ok());
  ::chmod(data.c_str(), 0755);
  EXPECT_EQ(Identity(kept), built);
}

TEST_F(CriteoTsvTest, CrlfLinesAndALastLineWithoutNewline) {
  for (const char* ending : {"lf", "crlf"}) {
    for (bool final_newline : {true, false}) {
      SCOPED_TRACE(std::string(ending) + (final_newline ? " with" : " without") + " final newline");
      const std::string file =
          JoinPath(dir_.path(), std::string("t-") + ending + (final_newline ? "1" : "0") + ".tsv");
      WRITE_OR_SKIP(file, 25, 5, ending, final_newline);
      std::unique_ptr<Dataset> dataset;
      Status status = Open(file, &dataset);
      ASSERT_TRUE(status.ok()) << status.ToString();
      const std::vector<std::string> lines = LinesOf(file);
      ASSERT_EQ(lines.size(), 25u);
      ExpectRows(*dataset, lines);
      Record record;
      ASSERT_TRUE(dataset->Read(24, &record).ok());
      EXPECT_EQ(record.source, file + " line 25");
    }
  }
}

TEST_F(CriteoTsvTest, DirectoryOfFilesInNaturalOrder) {
  const std::string data = JoinPath(dir_.path(), "days");
  ASSERT_TRUE(CreateDirectories(data).ok());
  const std::vector<std::string> order = {"day_1", "day_2", "day_10"};
  for (size_t i = 0; i < order.size(); ++i) {
    WRITE_OR_SKIP(JoinPath(data, order[i]), 10 + static_cast<int>(i), 10 + static_cast<int>(i));
  }
  WriteBytes(JoinPath(data, ".hidden"), "not\ta\tcriteo\tline\n");
  WriteBytes(JoinPath(data, "day_3"), "");  // no lines: no segment
  std::unique_ptr<Dataset> dataset;
  Status status = Open(data, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::vector<std::string> lines;
  ASSERT_EQ(dataset->shards().size(), 3u);
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(Basename(dataset->shards()[i].path), order[i]);
    for (const std::string& line : LinesOf(JoinPath(data, order[i]))) lines.push_back(line);
  }
  ExpectRows(*dataset, lines);
  // Opened again with the index files now in the directory.
  ASSERT_TRUE(PathExists(LineIndexPathBeside(JoinPath(data, "day_10"))));
  ASSERT_TRUE(Open(data, &dataset).ok());
  EXPECT_EQ(dataset->shards().size(), 3u);
  ExpectRows(*dataset, lines);
  // A cache warm copies the TSV files, in order (their indexes are not sources).
  std::vector<WarmSource> sources;
  ASSERT_TRUE(FindFormat(kCriteoTsvFormat)->warm_sources(*dataset, &sources).ok());
  ASSERT_EQ(sources.size(), 3u);
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(sources[i].source.path, JoinPath(data, order[i]));
    EXPECT_EQ(sources[i].source.size, ReadBytes(JoinPath(data, order[i])).size());
    EXPECT_TRUE(sources[i].counts_as_shard);
  }
  // Not detected: text is read only when asked for.
  EXPECT_FALSE(Dataset::Open(JoinPath(data, "day_1"), {}, &dataset).ok());
  // A compressed day is refused, naming it.
  WriteBytes(JoinPath(data, "day_4.gz"), "\x1f\x8b");
  status = Open(data, &dataset);
  EXPECT_TRUE(status.IsNotSupported()) << status.ToString();
  EXPECT_NE(status.message().find("day_4.gz"), std::string::npos);
}

TEST_F(CriteoTsvTest, ScanFindsEveryLineWhateverTheWindow) {
  const std::vector<std::string> texts = {"",
                                          "a",
                                          "a\n",
                                          "\n",
                                          "\n\n",
                                          "ab\ncd",
                                          "ab\r\ncd\r\n",
                                          "x\n\ny\nzz\n",
                                          "long line here\nshort\n"};
  for (const std::string& text : texts) {
    std::vector<uint64_t> expected = {0};
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') expected.push_back(i + 1);
    }
    if (expected.back() != text.size()) expected.push_back(text.size());
    for (size_t window = 1; window <= 9; ++window) {
      LineIndex index;
      Status status = ScanLines(
          "mem", text.size(),
          [&](uint64_t offset, size_t length, char* destination, size_t* done) {
            *done = text.copy(destination, length, offset);
            return Status::OK();
          },
          &index, window);
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(*index.offsets, expected) << "'" << text << "' window " << window;
    }
  }
  // A file that shrinks while it is scanned.
  LineIndex index;
  Status status = ScanLines(
      "shrinking.txt", 100,
      [](uint64_t, size_t, char*, size_t* done) {
        *done = 0;
        return Status::OK();
      },
      &index);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("shrinking.txt: ends at byte offset 0"), std::string::npos);
}

TEST_F(CriteoTsvTest, ABadLineIsCorruptionNamingTheFileAndLine) {
  const std::string file = JoinPath(dir_.path(), "train.txt");
  WRITE_OR_SKIP(file, 20, 6, "lf", true, "3,17", "9");
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(file, &dataset).ok());
  ASSERT_EQ(dataset->size(), 20u);
  Record record;
  Status status = dataset->Read(2, &record);
  ASSERT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(file + " line 3 (sample 2)"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("'zz' is not hexadecimal"), std::string::npos)
      << status.message();
  // An empty line is a line that does not parse.
  status = dataset->Read(8, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(file + " line 9"), std::string::npos) << status.message();
  EXPECT_TRUE(dataset->Read(3, &record).ok());
  VerifyReport report;
  ASSERT_TRUE(Verify(file, options_, &report).ok());
  EXPECT_STREQ(FormatName(report.format), "criteo_tsv");
  EXPECT_EQ(report.records_checked, 20u);
  EXPECT_EQ(report.shards_checked, 1u);
  ASSERT_EQ(report.problems.size(), 3u);
  EXPECT_NE(report.problems[0].find(file + " line 3"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[1].find(file + " line 9"), std::string::npos) << report.problems[1];
  EXPECT_NE(report.problems[2].find(file + " line 17"), std::string::npos) << report.problems[2];
}

TEST_F(CriteoTsvTest, VerifyListsAHundredProblemsAndCountsTheRest) {
  const std::string file = JoinPath(dir_.path(), "bad.txt");
  std::string bad;
  for (int line = 1; line <= 150; ++line) bad += (line > 1 ? "," : "") + std::to_string(line);
  WRITE_OR_SKIP(file, 160, 7, "lf", true, bad);
  VerifyReport report;
  ASSERT_TRUE(Verify(file, options_, &report).ok());
  EXPECT_EQ(report.records_checked, 160u);
  ASSERT_EQ(report.problems.size(), 101u);
  EXPECT_NE(report.problems[99].find("line 100"), std::string::npos);
  EXPECT_EQ(report.problems[100], "50 more lines that do not parse (not listed)");
  // A clean file verifies.
  const std::string good = JoinPath(dir_.path(), "good.txt");
  WRITE_OR_SKIP(good, 30, 8);
  ASSERT_TRUE(Verify(good, options_, &report).ok());
  EXPECT_TRUE(report.ok()) << report.problems[0];
}

TEST_F(CriteoTsvTest, WriteLineIndexBuildsWhatOpenReads) {
  const std::string data = JoinPath(dir_.path(), "days");
  ASSERT_TRUE(CreateDirectories(data).ok());
  WRITE_OR_SKIP(JoinPath(data, "day_0"), 12, 9);
  WRITE_OR_SKIP(JoinPath(data, "day_1"), 7, 10, "crlf", false);
  std::vector<LineIndexWritten> written;
  Status status = WriteLineIndex(data, options_, &written);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0].lines, 12u);
  EXPECT_EQ(written[1].lines, 7u);
  EXPECT_EQ(written[1].index_path, LineIndexPathBeside(JoinPath(data, "day_1")));
  const auto built = Identity(written[0].index_path);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(data, &dataset).ok());
  EXPECT_EQ(dataset->size(), 19u);
  EXPECT_EQ(Identity(written[0].index_path), built);
  // Written again on request (gpufeed index rebuilds).
  ASSERT_TRUE(WriteLineIndex(JoinPath(data, "day_0"), options_, &written).ok());
  ASSERT_EQ(written.size(), 1u);
  EXPECT_NE(Identity(written[0].index_path), built);
  EXPECT_TRUE(WriteLineIndex(JoinPath(data, "missing"), options_, &written).IsNotFound());
}

}  // namespace
}  // namespace gpufeed
