// The Criteo TSV line parser (src/format/criteo_line.h) on Kaggle-style
// lines written by hand, on every kind of bad line, and on random lines
// (and bad lines) written by Python together with the values Python expects.
#include "format/criteo_line.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// The first line of Kaggle's train.txt style: I12 and C22 are missing.
const char kKaggleLine[] =
    "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t"
    "25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t"
    "1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\t"
    "c5c50484\te8b83407\t9727dd16";

// Parses `text` from a buffer of exactly its size, so that reading past
// the end is a heap overflow under ASan, not a read of the string's NUL.
Status Parse(const std::string& text, CriteoRow* row) {
  std::unique_ptr<char[]> exact(new char[text.size() + 1]);
  text.copy(exact.get(), text.size());
  return ParseCriteoLine(exact.get(), text.size(), row);
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (!line.empty() && line.back() == '\t') fields.push_back("");
  return fields;
}

std::string Join(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "\t" : "") + fields[i];
  return line;
}

// kKaggleLine with field `column` (0-based) replaced by `value`.
std::string WithField(size_t column, const std::string& value) {
  std::vector<std::string> fields = Fields(kKaggleLine);
  fields.at(column) = value;
  return Join(fields);
}

TEST(CriteoLineTest, ParsesAKaggleLine) {
  CriteoRow row;
  Status status = Parse(kKaggleLine, &row);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(row.label, 0);
  const int64_t dense[13] = {1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2};
  for (int i = 0; i < 13; ++i) EXPECT_EQ(row.dense[i], dense[i]) << "I" << i + 1;
  EXPECT_EQ(row.dense_missing, 1u << 11);
  EXPECT_EQ(row.sparse[0], 0x68fd1e64u);
  EXPECT_EQ(row.sparse[1], 0x80e26c9bu);
  EXPECT_EQ(row.sparse[20], 0x07b5194cu);
  EXPECT_EQ(row.sparse[21], 0u);
  EXPECT_EQ(row.sparse[25], 0x9727dd16u);
  EXPECT_EQ(row.sparse_missing, 1u << 21);
}

TEST(CriteoLineTest, NewlineAndCrlfAreNotPartOfTheLine) {
  CriteoRow plain, lf, crlf;
  ASSERT_TRUE(Parse(kKaggleLine, &plain).ok());
  ASSERT_TRUE(Parse(std::string(kKaggleLine) + "\n", &lf).ok());
  Status status = Parse(std::string(kKaggleLine) + "\r\n", &crlf);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(crlf.sparse[25], plain.sparse[25]);
  EXPECT_EQ(lf.sparse[25], plain.sparse[25]);
  // A lone '\r' is a byte of the last field; two newlines are one too many.
  EXPECT_TRUE(Parse(std::string(kKaggleLine) + "\r", &crlf).IsCorruption());
  EXPECT_TRUE(Parse(std::string(kKaggleLine) + "\n\n", &crlf).IsCorruption());
}

TEST(CriteoLineTest, MissingNegativeSignedAndExtremeValues) {
  // Every feature missing: only the label and 39 tabs.
  CriteoRow row;
  ASSERT_TRUE(Parse("1" + std::string(39, '\t') + "\n", &row).ok());
  EXPECT_EQ(row.label, 1);
  EXPECT_EQ(row.dense_missing, (1u << 13) - 1);
  EXPECT_EQ(row.sparse_missing, (1u << 26) - 1);
  for (int64_t value : row.dense) EXPECT_EQ(value, 0);
  for (uint64_t value : row.sparse) EXPECT_EQ(value, 0u);

  std::vector<std::string> fields = Fields(kKaggleLine);
  fields[1] = "-1";
  fields[2] = "+7";
  fields[3] = "-9223372036854775808";
  fields[4] = "9223372036854775807";
  fields[5] = "000000000000000000000000042";
  fields[6] = "-0";
  fields[14] = "FFFFFFFFFFFFFFFF";
  fields[15] = "0";
  fields[16] = "aBcDeF";
  fields[39] = "";
  ASSERT_TRUE(Parse(Join(fields), &row).ok()) << Join(fields);
  EXPECT_EQ(row.dense[0], -1);
  EXPECT_EQ(row.dense[1], 7);
  EXPECT_EQ(row.dense[2], INT64_MIN);
  EXPECT_EQ(row.dense[3], INT64_MAX);
  EXPECT_EQ(row.dense[4], 42);
  EXPECT_EQ(row.dense[5], 0);
  EXPECT_EQ(row.dense_missing, 1u << 11);
  EXPECT_EQ(row.sparse[0], UINT64_MAX);
  EXPECT_EQ(row.sparse[1], 0u);
  EXPECT_EQ(row.sparse[2], 0xabcdefu);
  EXPECT_EQ(row.sparse_missing, (1u << 21) | (1u << 25));  // "0" is a value, not missing
}

TEST(CriteoLineTest, NeverReadsPastTheLength) {
  // The bytes after `length` would change every field if they were read.
  const std::string line = std::string(kKaggleLine) + "ab\t1";
  CriteoRow row;
  ASSERT_TRUE(ParseCriteoLine(line.data(), std::strlen(kKaggleLine), &row).ok());
  EXPECT_EQ(row.sparse[25], 0x9727dd16u);
  const std::string dense_end = "1\t12";
  EXPECT_TRUE(ParseCriteoLine(dense_end.data(), 3, &row).IsCorruption());
  EXPECT_TRUE(Parse("", &row).IsCorruption());
  EXPECT_TRUE(Parse("\n", &row).IsCorruption());
}

TEST(CriteoLineTest, EveryByteInEveryPositionOfAnEightDigitId) {
  // Eight digits take the word-at-a-time path; any other byte must fail it.
  for (int position = 0; position < 8; ++position) {
    for (int byte = 0; byte < 256; ++byte) {
      std::string id = "9aF0b1C2";
      id[position] = static_cast<char>(byte);
      CriteoRow row;
      Status status = Parse(WithField(14, id), &row);
      const bool hex = std::isxdigit(byte) != 0;
      if (byte == '\t') {
        EXPECT_EQ(status.message(), "41 fields, expected 40");
      } else if (!hex) {
        EXPECT_TRUE(status.IsCorruption()) << position << " " << byte;
        EXPECT_NE(status.message().find("field C1 (column 15)"), std::string::npos);
      } else {
        ASSERT_TRUE(status.ok()) << position << " " << byte << ": " << status.ToString();
        EXPECT_EQ(row.sparse[0], std::stoull(id, nullptr, 16)) << id;
      }
    }
  }
}

struct BadLine {
  std::string line;
  std::string message;  // the exact Corruption message
};

TEST(CriteoLineTest, EveryErrorNamesTheFieldAndQuotesIt) {
  const std::string long_garbage(50, 'x');
  const BadLine cases[] = {
      {std::string(kKaggleLine) + "\t", "41 fields, expected 40"},
      {std::string(kKaggleLine) + "\t\t\t", "43 fields, expected 40"},
      {WithField(39, "") + "\tff\n", "41 fields, expected 40"},
      {std::string(kKaggleLine).substr(0, std::string(kKaggleLine).rfind('\t')),
       "39 fields, expected 40"},
      {"0\t1\t2", "3 fields, expected 40"},
      {"", "1 fields, expected 40"},
      {WithField(3, "x1"), "field I3 (column 4): 'x1' is not an integer"},
      {WithField(1, "1.5"), "field I1 (column 2): '1.5' is not an integer"},
      {WithField(1, "-"), "field I1 (column 2): '-' is not an integer"},
      {WithField(1, "+-3"), "field I1 (column 2): '+-3' is not an integer"},
      {WithField(13, " 7"), "field I13 (column 14): ' 7' is not an integer"},
      {WithField(2, "9223372036854775808"),
       "field I2 (column 3): '9223372036854775808' overflows int64"},
      {WithField(2, "-9223372036854775809"),
       "field I2 (column 3): '-9223372036854775809' overflows int64"},
      {WithField(0, "99999999999999999999"),
       "field label (column 1): '99999999999999999999' overflows int64"},
      {WithField(0, ""), "field label (column 1): the label is empty"},
      {WithField(0, "y"), "field label (column 1): 'y' is not an integer"},
      {WithField(20, "zz"), "field C7 (column 21): 'zz' is not hexadecimal"},
      {WithField(14, "0x1f"), "field C1 (column 15): '0x1f' is not hexadecimal"},
      {WithField(39, "-1"), "field C26 (column 40): '-1' is not hexadecimal"},
      {WithField(39, "68fd1e64\r"), "field C26 (column 40): '68fd1e64\\x0d' is not hexadecimal"},
      {WithField(25, "0123456789abcdef0"),
       "field C12 (column 26): '0123456789abcdef0' has more than 16 hex digits"},
      {WithField(4, long_garbage),
       "field I4 (column 5): '" + std::string(32, 'x') + "'... is not an integer"},
      {WithField(30, std::string("a\x01\xff'\\", 5)),
       "field C17 (column 31): 'a\\x01\\xff\\'\\\\' is not hexadecimal"},
  };
  for (const BadLine& c : cases) {
    CriteoRow row;
    Status status = Parse(c.line, &row);
    EXPECT_TRUE(status.IsCorruption()) << c.line << ": " << status.ToString();
    EXPECT_EQ(status.message(), c.message) << c.line;
  }
}

// Random lines from Python: values of every size and sign, missing fields,
// hex of 1..16 digits in both cases, LF / CRLF / no newline, and ~10% bad
// lines. expected.txt has, per line, "OK" and 40 values ('-' for missing,
// sparse in decimal) or "ERR" and the message's start.
constexpr char kGenerator[] = R"PY(
import random, sys
out = sys.argv[1]
random.seed(29)
def dense():
    r = random.random()
    if r < 0.2: return None
    if r < 0.5: return random.randint(-5, 100)
    if r < 0.8: return random.randint(-2**31, 2**31)
    return random.randint(-2**63, 2**63 - 1)
def sparse():
    r = random.random()
    if r < 0.15: return None, ''
    n = 8 if r < 0.8 else random.randint(1, 16)
    value = random.getrandbits(4 * n)
    text = format(value, '0%dx' % n)
    if random.random() < 0.2: text = text.upper()
    return value, text
with open(out + '/lines.tsv', 'wb') as lines, open(out + '/expected.txt', 'w') as expected:
    for i in range(2000):
        label = random.randint(0, 1)
        d = [dense() for _ in range(13)]
        s = [sparse() for _ in range(26)]
        plus = lambda v: '+' if v >= 0 and random.random() < 0.05 else ''
        fields = ([str(label)] + ['' if v is None else plus(v) + str(v) for v in d] +
                  [t for _, t in s])
        want = 'OK ' + ' '.join([str(label)] + ['-' if v is None else str(v) for v in d] +
                                ['-' if v is None else str(v) for v, _ in s])
        if random.random() < 0.1:
            kind = random.randint(0, 3)
            if kind == 0:
                fields.append('1')
                want = 'ERR 41 fields, expected 40'
            elif kind == 1:
                del fields[random.randint(1, 39)]
                want = 'ERR 39 fields, expected 40'
            elif kind == 2:
                k = random.randint(1, 13)
                fields[k] = str(random.randint(0, 99)) + 'q'
                want = 'ERR field I%d (column %d): ' % (k, k + 1)
            else:
                k = random.randint(1, 26)
                fields[13 + k] = 'g' + fields[13 + k]
                want = 'ERR field C%d (column %d): ' % (k, 14 + k)
        end = random.choice([b'\n', b'\r\n', b'\n', b''])
        lines.write('\t'.join(fields).encode() + end + b'\x00')
        expected.write(want + '\n')
)PY";

TEST(CriteoLineTest, AgreesWithPythonOnRandomLines) {
  TempDir dir;
  const std::string script = JoinPath(dir.path(), "generate.py");
  WriteBytes(script, kGenerator);
  const std::string command = "/usr/bin/python3 " + script + " " + dir.path();
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "/usr/bin/python3 did not run";
  // Lines are NUL-terminated so that each keeps its own "\n" / "\r\n".
  std::istringstream lines(ReadBytes(JoinPath(dir.path(), "lines.tsv")));
  std::istringstream expected(ReadBytes(JoinPath(dir.path(), "expected.txt")));
  std::string line, want;
  int count = 0, bad = 0;
  while (std::getline(lines, line, '\0')) {
    ASSERT_TRUE(std::getline(expected, want));
    ++count;
    CriteoRow row;
    Status status = Parse(line, &row);
    if (want.rfind("ERR ", 0) == 0) {
      ++bad;
      EXPECT_TRUE(status.IsCorruption()) << line;
      EXPECT_EQ(status.message().rfind(want.substr(4), 0), 0u) << status.ToString() << "\n" << want;
      continue;
    }
    ASSERT_TRUE(status.ok()) << "line " << count << ": " << status.ToString();
    std::istringstream values(want.substr(3));
    std::string value;
    values >> value;
    EXPECT_EQ(row.label, std::stoll(value));
    for (uint32_t i = 0; i < kCriteoDense; ++i) {
      values >> value;
      const bool missing = value == "-";
      EXPECT_EQ((row.dense_missing >> i) & 1, missing ? 1u : 0u) << "line " << count;
      EXPECT_EQ(row.dense[i], missing ? 0 : std::stoll(value)) << "line " << count << " I" << i + 1;
    }
    for (uint32_t i = 0; i < kCriteoSparse; ++i) {
      values >> value;
      const bool missing = value == "-";
      EXPECT_EQ((row.sparse_missing >> i) & 1, missing ? 1u : 0u) << "line " << count;
      EXPECT_EQ(row.sparse[i], missing ? 0 : std::stoull(value))
          << "line " << count << " C" << i + 1;
    }
  }
  EXPECT_EQ(count, 2000);
  EXPECT_GT(bad, 100);
}

}  // namespace
}  // namespace gpufeed
