// gpufeed_jpeg_check: gpufeed's own JPEG entropy decoders against
// libjpeg-turbo on real files, for files written by other tools.
//
//   gpufeed_jpeg_check FILE_OR_DIR...
//
// Per JPEG:
// - exact: the exact decode (scale 1) with gpufeed's entropy decoder inside
//   libjpeg (jpeg_mcu.h) against libjpeg's own, whole image and two crops:
//   the same status and bytes;
// whether exact=False's own decoders take it (baseline: jpeg_entropy.h;
// progressive: jpeg_progressive.h), and then
// - coefficients: the own decoder's against libjpeg's jpeg_read_coefficients
//   (baseline: all 64 of every block, then the corners a 1/2 and a 1/4
//   decode keep in the middle half of the rows and columns, the rest read
//   past; progressive: each block's 4x4 corner and which coefficients are
//   nonzero; tests/cpp/jpeg_compare_util.h), any difference named;
// - pixels: JpegDecoder's scaled decode of the whole image at 1/2, 1/4 and
//   1/8, own path against libjpeg's: the same geometry, and the PSNR.
// Prints one line per problem, then
//   RESULT files=... baseline=... progressive=... other=... refused=...
//          coefficient_mismatches=... pixel_checks=... min_pixel_psnr_db=...
//          exact_checks=... exact_own=... (of them through gpufeed's decoder)
//          exact_mismatches=...
// Exit status 1 when a coefficient or an exact byte differs, or a geometry
// disagrees.
// (PSNR against libjpeg is not a verdict: libjpeg's reduced transforms are
// approximations too; tests/cpp/decode/jpeg_entropy_test.cc measures both
// against the image's box averages.)
#include <dirent.h>
#include <setjmp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "decode/jpeg_progressive.h"
#include "jpeg_compare_util.h"

using namespace gpufeed;
using namespace gpufeed::jpeg_entropy;

namespace {


struct Totals {
  long files = 0, baseline = 0, progressive = 0, other = 0, refused = 0, mismatches = 0;
  long pixel_checks = 0, geometry_errors = 0;
  long exact_checks = 0, exact_mismatches = 0, exact_own = 0;
  double min_psnr = INFINITY;
};

// Regular files named *.jpg / *.jpeg under `path` (links are not followed:
// no cycles, no FIFOs).
void Collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISREG(st.st_mode)) {
    std::string lower = path;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.size() > 4 && (lower.rfind(".jpg") == lower.size() - 4 ||
                             lower.rfind(".jpeg") == lower.size() - 5)) {
      files->push_back(path);
    }
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') Collect(path + "/" + entry->d_name, files);
  }
  closedir(dir);
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::vector<uint8_t> data;
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return data;
  std::fseek(file, 0, SEEK_END);
  data.resize(static_cast<size_t>(std::ftell(file)));
  std::fseek(file, 0, SEEK_SET);
  if (std::fread(data.data(), 1, data.size(), file) != data.size()) data.clear();
  std::fclose(file);
  return data;
}

// Checks one file's coefficients; returns whether the own decoders took it
// (*kind: 0 other, 1 baseline, 2 progressive). *libjpeg_failed: libjpeg
// refused the file (worth naming when the own decoders took it). Images over
// the library's pixel limit are skipped (kind 0), as the loader refuses them.
bool CheckCoefficients(const std::vector<uint8_t>& data, int* kind, long* differences,
                       bool* libjpeg_failed) {
  JpegLongjmpErrors failure;
  jpeg_decompress_struct info;
  CreateDecompressWithLongjmp(&info, &failure);
  // Read after a longjmp out of libjpeg: volatile.
  volatile bool taken = false;
  *kind = 0;
  *differences = 0;
  *libjpeg_failed = false;
  CornerPlane planes[kMaxComponents];
  if (setjmp(failure.jump) != 0) {
    *libjpeg_failed = true;
  } else {
    jpeg_mem_src(&info, data.data(), data.size());
    jpeg_read_header(&info, TRUE);
    const uint64_t pixels = static_cast<uint64_t>(info.image_width) * info.image_height;
    const bool colours = (info.num_components == 3 && info.jpeg_color_space == JCS_YCbCr) ||
                         (info.num_components == 1 && info.jpeg_color_space == JCS_GRAYSCALE);
    if (colours && !info.arith_code && info.data_precision == 8 && pixels <= 178956970) {
      if (info.progressive_mode) {
        *kind = 2;
        taken = DecodeProgressive(info, data.data(), data.size(), 1 << 30, planes);
        jvirt_barray_ptr* arrays = jpeg_read_coefficients(&info);
        if (taken) *differences = CompareCorners(&info, arrays, planes);
      } else if (info.comps_in_scan == info.num_components) {
        *kind = 1;
        // Every coefficient of every block; then the corners a 1/2 and a
        // 1/4 decode keep (limits 25 and 5), in the middle half of the
        // rows and columns, the rest read past.
        bool ok = false;
        const Scan scans[3] = {BaselineScanOf(info, data.data() + data.size(), 64, &ok),
                               BaselineScanOf(info, data.data() + data.size(), 25, &ok),
                               BaselineScanOf(info, data.data() + data.size(), 5, &ok)};
        jvirt_barray_ptr* arrays = jpeg_read_coefficients(&info);
        taken = ok;
        for (int i = 0; i < 3 && taken; ++i) {
          const Scan& scan = scans[i];
          const McuWindow window =
              i == 0 ? McuWindow{0, scan.mcu_rows - 1, 0, scan.mcus_per_row}
                     : McuWindow{scan.mcu_rows / 4, scan.mcu_rows - 1 - scan.mcu_rows / 4,
                                 scan.mcus_per_row / 4, scan.mcus_per_row - scan.mcus_per_row / 4};
          CoefficientCompareSink sink(&info, arrays, scan);  // no libjpeg call while it lives
          taken = DecodeScan(scan, window, &sink);
          *differences += sink.differences;
        }
      }
    }
  }
  jpeg_destroy_decompress(&info);
  return taken;
}

// Own scaled decode against libjpeg's at 1/denominator, whole image.
void CheckPixels(const std::string& path, const std::vector<uint8_t>& data, Totals* totals) {
  for (int denominator : {2, 4, 8}) {
    JpegDecoder own, reference;
    reference.set_own_entropy(false);
    ImageHeader header;
    if (!own.Start(data.data(), data.size(), &header).ok() ||
        !reference.Start(data.data(), data.size(), &header).ok()) {
      return;
    }
    if (header.width / denominator < 1 || header.height / denominator < 1) continue;
    const CropRect crop{0, 0, header.width, header.height};
    Image a, b;
    DecodedColumns ca, cb;
    int da = 0, db = 0;
    const Status sa = own.DecodeRegion(crop, header.width / denominator, header.height / denominator,
                                       &a, &da, 1ull << 31, &ca, true);
    const Status sb = reference.DecodeRegion(crop, header.width / denominator,
                                             header.height / denominator, &b, &db, 1ull << 31, &cb,
                                             false);
    if (sa.ok() != sb.ok() || (sa.ok() && (a.height != b.height || ca.width != cb.width))) {
      std::printf("GEOMETRY %s 1/%d: %s / %s\n", path.c_str(), denominator, sa.ToString().c_str(),
                  sb.ToString().c_str());
      ++totals->geometry_errors;
      continue;
    }
    if (!sa.ok()) continue;
    double squares = 0;
    long count = 0;
    for (int y = 0; y < a.height; ++y) {
      const uint8_t* ra = a.row(y) + 3 * ca.skipped;
      const uint8_t* rb = b.row(y) + 3 * cb.skipped;
      for (int i = 0; i < 3 * ca.width; ++i, ++count) squares += (ra[i] - rb[i]) * (ra[i] - rb[i]);
    }
    const double psnr = squares == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 * count / squares);
    ++totals->pixel_checks;
    totals->min_psnr = std::min(totals->min_psnr, psnr);
  }
}

// The exact decode (scale 1) with gpufeed's entropy decoder inside libjpeg
// against libjpeg's own (jpeg_mcu.h): the same status and the same bytes,
// for the whole image and two crops (the middle, the bottom-right corner).
void CheckExact(const std::string& path, const std::vector<uint8_t>& data, Totals* totals) {
  ImageHeader header;
  {
    JpegDecoder probe;
    if (!probe.Start(data.data(), data.size(), &header).ok()) return;
  }
  const int w = header.width, h = header.height;
  for (const CropRect& crop : {CropRect{0, 0, w, h}, CropRect{w / 4, h / 4, w / 2, h / 2},
                               CropRect{w / 2, h - h / 3, w - w / 2, h / 3}}) {
    if (crop.width < 1 || crop.height < 1) continue;
    JpegDecoder own, reference;
    const RegionDecode a = DecodeRegionWith(&own, data.data(), data.size(), crop, 0, 0,
                                            1ull << 31, true, false);
    const RegionDecode b = DecodeRegionWith(&reference, data.data(), data.size(), crop, 0, 0,
                                            1ull << 31, false, false);
    ++totals->exact_checks;
    totals->exact_own += a.own_used;
    if (!SameDecode(a, b)) {
      ++totals->exact_mismatches;
      std::printf("EXACT-MISMATCH %s crop %d,%d %dx%d: %s / %s\n", path.c_str(), crop.x, crop.y,
                  crop.width, crop.height, a.status.ToString().c_str(),
                  b.status.ToString().c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  std::sort(files.begin(), files.end());
  Totals totals;
  for (const std::string& path : files) {
    const std::vector<uint8_t> data = ReadFile(path);
    if (data.size() < 4) continue;
    ++totals.files;
    try {
      CheckExact(path, data, &totals);
    } catch (const std::bad_alloc&) {
      std::printf("SKIPPED %s exact (out of memory)\n", path.c_str());
    }
    int kind = 0;
    long differences = 0;
    bool libjpeg_failed = false, taken = false;
    try {
      taken = CheckCoefficients(data, &kind, &differences, &libjpeg_failed);
    } catch (const std::bad_alloc&) {
      std::printf("SKIPPED %s (out of memory)\n", path.c_str());
      continue;
    }
    if (libjpeg_failed && taken) {
      ++totals.mismatches;
      std::printf("LIBJPEG-ERROR %s: libjpeg refuses a file the own decoders took\n", path.c_str());
      continue;
    }
    if (kind == 0) {
      ++totals.other;
      continue;
    }
    (kind == 1 ? totals.baseline : totals.progressive) += 1;
    if (!taken) {
      ++totals.refused;
      std::printf("REFUSED %s (left to libjpeg)\n", path.c_str());
      continue;
    }
    if (differences != 0) {
      ++totals.mismatches;
      std::printf("MISMATCH %s: %ld coefficients differ from libjpeg's\n", path.c_str(), differences);
    }
    try {
      CheckPixels(path, data, &totals);
    } catch (const std::bad_alloc&) {
      std::printf("SKIPPED %s pixels (out of memory)\n", path.c_str());
    }
  }
  std::printf("RESULT files=%ld baseline=%ld progressive=%ld other=%ld refused=%ld "
              "coefficient_mismatches=%ld geometry_errors=%ld pixel_checks=%ld "
              "min_pixel_psnr_db=%.1f exact_checks=%ld exact_own=%ld exact_mismatches=%ld\n",
              totals.files, totals.baseline, totals.progressive, totals.other, totals.refused,
              totals.mismatches, totals.geometry_errors, totals.pixel_checks,
              totals.pixel_checks ? totals.min_psnr : 0.0, totals.exact_checks, totals.exact_own,
              totals.exact_mismatches);
  return totals.mismatches == 0 && totals.geometry_errors == 0 && totals.exact_mismatches == 0
             ? 0
             : 1;
}
