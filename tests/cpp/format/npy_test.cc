// The .npy header parser (src/format/npy.h) on files NumPy itself writes
// (np.save, np.lib.format.write_array for versions 2.0 and 3.0) and on
// hand-made bad headers.
#include "format/npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

class NpyTest : public ::testing::Test {
 protected:
  // Runs NumPy code with `path` bound to `out`; false when NumPy is missing.
  bool WriteWithNumpy(const std::string& out, const std::string& code) {
    const std::string script = JoinPath(dir_.path(), "write.py");
    WriteBytes(script, "import sys\nimport numpy as np\npath = sys.argv[1]\n" + code + "\n");
    const std::string command = "/usr/bin/python3 " + script + " " + out + " 2>/dev/null";
    return std::system(command.c_str()) == 0;
  }
  Status Parse(const std::string& path, NpyHeader* header) {
    const std::string bytes = ReadBytes(path);
    GPUFEED_RETURN_IF_ERROR(ParseNpyHeader(bytes.data(), bytes.size(), path, header));
    return CheckNpyFileSize(*header, bytes.size(), path);
  }
  Status ParseText(const std::string& bytes, NpyHeader* header) {
    return ParseNpyHeader(bytes.data(), bytes.size(), "made.npy", header);
  }
  // A version 1.0 file's preamble and the dict, padded as NumPy pads it.
  static std::string Version1(std::string dict) {
    while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::string bytes("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(dict.size() & 0xff);
    bytes += static_cast<char>(dict.size() >> 8);
    return bytes + dict;
  }

  TempDir dir_;
};

TEST_F(NpyTest, ReadsWhatNumpyWritesInEveryVersion) {
  struct Case {
    const char* code;
    char kind;
    size_t item_size;
    std::vector<uint64_t> shape;
    int major;
  };
  const Case cases[] = {
      {"np.save(path, np.arange(39, dtype=np.float32).reshape(3, 13))", 'f', 4, {3, 13}, 1},
      {"np.save(path, np.arange(52, dtype=np.int64).reshape(2, 26))", 'i', 8, {2, 26}, 1},
      {"np.save(path, np.array([True, False, True]))", 'b', 1, {3}, 1},
      {"np.save(path, np.arange(5, dtype=np.int32).reshape(5, 1))", 'i', 4, {5, 1}, 1},
      {"np.save(path, np.float16(1.5))", 'f', 2, {}, 1},
      {"np.save(path, np.zeros((0, 13), np.float32))", 'f', 4, {0, 13}, 1},
      {"np.lib.format.write_array(open(path, 'wb'), np.arange(6, dtype=np.uint16).reshape(2, 3), "
       "version=(2, 0))", 'u', 2, {2, 3}, 2},
      {"np.lib.format.write_array(open(path, 'wb'), np.arange(4, dtype=np.uint8), version=(3, 0))",
       'u', 1, {4}, 3},
  };
  for (const Case& c : cases) {
    const std::string path = JoinPath(dir_.path(), "a.npy");
    if (!WriteWithNumpy(path, c.code)) GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
    NpyHeader header;
    Status status = Parse(path, &header);
    ASSERT_TRUE(status.ok()) << c.code << ": " << status.ToString();
    EXPECT_EQ(header.kind, c.kind) << c.code;
    EXPECT_EQ(header.item_size, c.item_size) << c.code;
    EXPECT_EQ(header.shape, c.shape) << c.code;
    EXPECT_EQ(header.major, c.major) << c.code;
    EXPECT_EQ(header.data_offset % 16, 0u) << c.code;  // NumPy aligns the data
  }
  // The bytes after data_offset are the array's, in C order.
  const std::string path = JoinPath(dir_.path(), "rows.npy");
  ASSERT_TRUE(WriteWithNumpy(path, "np.save(path, np.arange(6, dtype='<i4').reshape(2, 3))"));
  NpyHeader header;
  ASSERT_TRUE(Parse(path, &header).ok());
  const std::string bytes = ReadBytes(path);
  int32_t values[6];
  std::memcpy(values, bytes.data() + header.data_offset, sizeof(values));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], i);
}

TEST_F(NpyTest, RefusesBigEndianFortranAndStructuredArraysNamingTheFile) {
  const struct {
    const char* code;
    const char* says;
  } cases[] = {
      {"np.save(path, np.arange(4, dtype='>f4'))", "big-endian"},
      {"np.save(path, np.asfortranarray(np.zeros((3, 2), np.float32)))", "Fortran order"},
      {"np.save(path, np.zeros(2, dtype=[('a', '<i4'), ('b', '<f4')]))", "structured"},
      {"np.save(path, np.array(['ab', 'c']))", "not supported"},
      {"np.save(path, np.zeros(2, dtype=np.complex64))", "not supported"},
  };
  for (const auto& c : cases) {
    const std::string path = JoinPath(dir_.path(), "bad.npy");
    if (!WriteWithNumpy(path, c.code)) GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
    NpyHeader header;
    Status status = Parse(path, &header);
    EXPECT_TRUE(status.IsNotSupported()) << c.code << ": " << status.ToString();
    EXPECT_NE(status.message().find(c.says), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(path), std::string::npos) << status.ToString();
  }
}

TEST_F(NpyTest, TruncatedOrExtendedFilesAreCorruptionWithTheSizes) {
  const std::string path = JoinPath(dir_.path(), "t.npy");
  if (!WriteWithNumpy(path, "np.save(path, np.zeros((4, 13), np.float32))")) {
    GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
  }
  std::string bytes = ReadBytes(path);
  NpyHeader header;
  ASSERT_TRUE(ParseNpyHeader(bytes.data(), bytes.size(), path, &header).ok());
  Status cut = CheckNpyFileSize(header, bytes.size() - 1, path);
  EXPECT_TRUE(cut.IsCorruption()) << cut.ToString();
  EXPECT_NE(cut.message().find("truncated"), std::string::npos) << cut.ToString();
  Status longer = CheckNpyFileSize(header, bytes.size() + 8, path);
  EXPECT_TRUE(longer.IsCorruption()) << longer.ToString();
  EXPECT_NE(longer.message().find("8 bytes after its array"), std::string::npos);
}

TEST_F(NpyTest, MalformedHeadersAreCorruptionAtAByteOffset) {
  NpyHeader header;
  EXPECT_TRUE(ParseText("not a numpy file", &header).IsCorruption());
  const std::string good = Version1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  ASSERT_TRUE(ParseText(good, &header).ok());
  EXPECT_EQ(header.data_offset, good.size());  // the header is padded to 64 bytes
  EXPECT_EQ(good.size() % 64, 0u);
  EXPECT_EQ(header.data_bytes, 24u);
  EXPECT_TRUE(ParseText(good.substr(0, 30), &header).IsCorruption());  // header cut short
  const char* bad[] = {
      "{'descr': '<f4', 'fortran_order': False}",                          // no shape
      "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}",          // not a bool
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}",       // negative
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",  // unknown key
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",  // no closing brace
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999)}",
  };
  for (const char* dict : bad) {
    Status status = ParseText(Version1(dict), &header);
    EXPECT_TRUE(status.IsCorruption()) << dict << ": " << status.ToString();
    EXPECT_NE(status.message().find("made.npy"), std::string::npos) << status.ToString();
  }
  std::string version9 = good;
  version9[6] = 9;
  EXPECT_TRUE(ParseText(version9, &header).IsNotSupported());
}

}  // namespace
}  // namespace gpufeed
