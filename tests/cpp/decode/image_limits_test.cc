// Decompression bombs: an image header that declares more pixels than
// ImageTransformOptions::max_pixels is refused from the header, before any
// pixel buffer is sized by it. The headers are real images (encoded here)
// whose dimension fields were rewritten, as a hostile file would be.
#include <gtest/gtest.h>
#include <png.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "decode/image_decoder.h"
#include "decode/transform.h"
#include "jpeg_test_util.h"

namespace gpufeed {
namespace {

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// A real JPEG whose SOF0 claims width x height (at most 65535 each: the
// JPEG header has 16-bit dimensions, so 65500 x 65500 = 4.29 gigapixels is
// as large as a JPEG bomb gets; libjpeg's own ceiling is 65500).
std::string JpegClaiming(int width, int height) {
  std::string jpeg = EncodeJpeg(16, 16, JCS_RGB);
  for (size_t i = 0; i + 9 < jpeg.size(); ++i) {
    if (static_cast<uint8_t>(jpeg[i]) == 0xFF && static_cast<uint8_t>(jpeg[i + 1]) == 0xC0) {
      jpeg[i + 5] = static_cast<char>(height >> 8);
      jpeg[i + 6] = static_cast<char>(height & 0xFF);
      jpeg[i + 7] = static_cast<char>(width >> 8);
      jpeg[i + 8] = static_cast<char>(width & 0xFF);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF0 marker";
  return jpeg;
}

uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void PutBigEndian(std::string* bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) (*bytes)[at + i] = static_cast<char>(value >> (24 - 8 * i));
}

// A real 8x8 PNG whose IHDR (with a correct CRC) claims width x height.
std::string PngClaiming(uint32_t width, uint32_t height) {
  std::vector<uint8_t> pixels(8 * 8 * 3, 100);
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = 8;
  image.height = 8;
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::string png(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, png.data(), &size, 0, pixels.data(), 0, nullptr));
  png.resize(size);
  // Signature (8), IHDR length (4), "IHDR" (4), width at 16, height at 20,
  // 5 more bytes, CRC at 29 over "IHDR" + the 13 data bytes.
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  PutBigEndian(&png, 16, width);
  PutBigEndian(&png, 20, height);
  PutBigEndian(&png, 29, Crc32(png.substr(12, 17)));
  return png;
}

void ExpectRefusedByTheLimit(const std::string& data, uint64_t declared) {
  Image image;
  Status status = DecodeRegion(Bytes(data), data.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.ToString().find("declares " + std::to_string(declared) + " pixels"),
            std::string::npos) << status.ToString();
  EXPECT_NE(status.ToString().find("limit of 178956970"), std::string::npos) << status.ToString();
  EXPECT_EQ(image.pixels.capacity(), 0u);  // nothing was sized by the header
  // The transform (what the loader's decode threads call) refuses it too.
  ImageTransformOptions options;
  options.size = 8;
  std::vector<float> out(8 * 8 * 3);
  TransformScratch scratch;
  status = TransformImage(Bytes(data), data.size(), options, 0, 0, 0, out.data(), &scratch);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.ToString().find("limit"), std::string::npos) << status.ToString();
  EXPECT_EQ(scratch.decoded.pixels.capacity(), 0u);
}

TEST(ImageLimitsTest, JpegBombHeaderIsRefusedBeforeAllocation) {
  std::string jpeg = JpegClaiming(65500, 65500);
  ImageHeader header;
  ASSERT_TRUE(ReadImageHeader(Bytes(jpeg), jpeg.size(), &header).ok());
  EXPECT_EQ(header.width, 65500);
  EXPECT_EQ(header.height, 65500);
  ExpectRefusedByTheLimit(jpeg, 65500ull * 65500ull);
}

TEST(ImageLimitsTest, Png100000By100000HeaderIsRefusedBeforeAllocation) {
  std::string png = PngClaiming(100000, 100000);
  ImageHeader header;
  ASSERT_TRUE(ReadImageHeader(Bytes(png), png.size(), &header).ok());
  EXPECT_EQ(header.width, 100000);
  EXPECT_EQ(header.height, 100000);
  ExpectRefusedByTheLimit(png, 10000000000ull);
}

TEST(ImageLimitsTest, TheLimitIsConfigurable) {
  std::string jpeg = EncodeJpeg(200, 100, JCS_RGB);
  ImageTransformOptions options;
  options.size = 8;
  options.dtype = OutputDtype::kUint8;
  std::vector<uint8_t> out(8 * 8 * 3);
  TransformScratch scratch;
  options.max_pixels = 19999;
  Status status = TransformImage(Bytes(jpeg), jpeg.size(), options, 0, 0, 0, out.data(), &scratch);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.ToString().find("limit of 19999"), std::string::npos) << status.ToString();
  options.max_pixels = 20000;
  status = TransformImage(Bytes(jpeg), jpeg.size(), options, 0, 0, 0, out.data(), &scratch);
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// A header under the pixel limit whose buffer is still more than the memory
// left (here RLIMIT_AS, as in a container): the decode fails with a Status
// for that sample. Before, std::bad_alloc escaped from the decode thread and
// ended the process.
TEST(ImageLimitsTest, AnAllocationFailureIsAStatusNotAnException) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RLIMIT_AS cannot be lowered under a sanitizer (its shadow memory is reserved "
                  "address space)";
#endif
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // a fresh process, no other threads
  std::string png = PngClaiming(13000, 13000);  // 169 M pixels < 178956970: 507 MB of RGB
  EXPECT_EXIT(
      {
        long pages = 0;
        FILE* statm = std::fopen("/proc/self/statm", "r");
        if (statm == nullptr || std::fscanf(statm, "%ld", &pages) != 1) std::_Exit(3);
        std::fclose(statm);
        rlimit limit;
        limit.rlim_cur = limit.rlim_max =
            static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (256u << 20);
        if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(4);
        Image image;
        Status status = DecodeRegion(Bytes(png), png.size(), {}, 0, 0, &image);
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        std::_Exit(status.ok() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0),
      "out of memory: cannot allocate 507000000 bytes for the decoded pixels");
}

}  // namespace
}  // namespace gpufeed
