// gpufeed's own JPEG entropy decoders against libjpeg's coefficients
// (jpeg_read_coefficients): shared by tests/cpp/decode/jpeg_entropy_test.cc
// and benchmarks/jpeg_check.cc (files written by other tools).
#ifndef GPUFEED_TESTS_JPEG_COMPARE_UTIL_H_
#define GPUFEED_TESTS_JPEG_COMPARE_UTIL_H_

#include <setjmp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <string>
#include <vector>

#include <jpeglib.h>

#include "decode/image_decoder.h"
#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "decode/jpeg_progressive.h"
#include "decode/jpeg_scans.h"

namespace gpufeed {

// libjpeg errors that longjmp to `jump` (set it with setjmp before any
// libjpeg call that may fail); warnings are dropped.
struct JpegLongjmpErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
};

// Creates `info` reporting its errors through *errors.
inline void CreateDecompressWithLongjmp(jpeg_decompress_struct* info, JpegLongjmpErrors* errors) {
  info->err = jpeg_std_error(&errors->manager);
  errors->manager.error_exit = [](j_common_ptr common) {
    longjmp(reinterpret_cast<JpegLongjmpErrors*>(common->err)->jump, 1);
  };
  errors->manager.emit_message = [](j_common_ptr, int) {};
  jpeg_create_decompress(info);
}

// One DecodeRegion of `crop` of the JPEG in data[0, size) (min sizes
// min_w x min_h: the DCT scale) through `decoder`, with gpufeed's entropy
// decoder inside libjpeg (`own`, jpeg_mcu.h) or libjpeg's, the transform's
// way (`with_columns`) or exactly cropped: what the two ways must agree on.
struct RegionDecode {
  Status status;
  Image image;
  DecodedColumns columns;
  int denominator = 0;
  bool own_used = false;  // gpufeed's decoder went to the end
};

inline RegionDecode DecodeRegionWith(JpegDecoder* decoder, const uint8_t* data, size_t size,
                                     const CropRect& crop, int min_w, int min_h,
                                     uint64_t max_pixels, bool own, bool with_columns) {
  RegionDecode r;
  decoder->set_own_entropy(own);
  ImageHeader header;
  r.status = decoder->Start(data, size, &header);
  if (r.status.ok()) {
    r.status = decoder->DecodeRegion(crop, min_w, min_h, &r.image, &r.denominator, max_pixels,
                                     with_columns ? &r.columns : nullptr);
  }
  r.own_used = decoder->own_entropy_used();
  return r;
}

// Whether two decodes agree: status (its message too), geometry, columns,
// scale and pixels.
inline bool SameDecode(const RegionDecode& a, const RegionDecode& b) {
  return a.status.ToString() == b.status.ToString() && a.image.width == b.image.width &&
         a.image.height == b.image.height && a.columns.skipped == b.columns.skipped &&
         a.columns.width == b.columns.width && a.denominator == b.denominator &&
         a.image.pixels == b.image.pixels;
}

// The zig-zag index of each natural (row-major) position.
constexpr int kZigZagOfNatural[64] = {
    0,  1,  5,  6,  14, 15, 27, 28, 2,  4,  7,  13, 16, 26, 29, 42, 3,  8,  12, 17, 25, 30,
    41, 43, 9,  11, 18, 24, 31, 40, 44, 53, 10, 19, 23, 32, 39, 45, 52, 54, 20, 22, 33, 38,
    46, 51, 55, 60, 21, 34, 37, 47, 50, 56, 59, 61, 35, 36, 48, 49, 57, 58, 62, 63};

// The scan of a baseline JPEG whose header `info` read, as DecodeScan takes
// it, keeping `limit` coefficients per block; the file ends at `end`; its
// tables are the thread's shared ones, as the scaled decode takes them
// (jpeg_entropy::SharedBaselineTable: the scan is valid until this thread
// makes kTableCacheSize further lookups). *ok false
// when a table is missing, out of range (libjpeg checks the numbers only
// when it decodes) or refused.
inline jpeg_entropy::Scan BaselineScanOf(const jpeg_decompress_struct& info, const uint8_t* end,
                                         int limit, bool* ok) {
  jpeg_entropy::Scan scan;
  scan.data = info.src->next_input_byte;
  scan.end = end;
  scan.components = info.comps_in_scan;
  *ok = true;
  for (int c = 0; c < info.comps_in_scan; ++c) {
    const jpeg_component_info* comp = info.cur_comp_info[c];
    const jpeg_entropy::HuffmanTable* dc_table = jpeg_entropy::SharedTableOf(info, *comp, true);
    const jpeg_entropy::HuffmanTable* ac_table = jpeg_entropy::SharedTableOf(info, *comp, false);
    *ok = *ok && dc_table != nullptr && ac_table != nullptr;
    scan.component[c] = {comp->h_samp_factor, comp->v_samp_factor, dc_table, ac_table, limit};
  }
  if (scan.components == 1) {  // one block per MCU, the component's own grid
    scan.component[0].h = scan.component[0].v = 1;
    scan.mcus_per_row = static_cast<int>(info.cur_comp_info[0]->width_in_blocks);
    scan.mcu_rows = static_cast<int>(info.cur_comp_info[0]->height_in_blocks);
  } else {
    const int hmax = info.max_h_samp_factor, vmax = info.max_v_samp_factor;
    scan.mcus_per_row = static_cast<int>((info.image_width + 8 * hmax - 1) / (8 * hmax));
    scan.mcu_rows = static_cast<int>((info.image_height + 8 * vmax - 1) / (8 * vmax));
  }
  scan.restart_interval = static_cast<int>(info.restart_interval);
  return scan;
}

// Counts the coefficients of each MCU's blocks that differ from libjpeg's
// arrays (`arrays`, from jpeg_read_coefficients on the same header): libjpeg's
// value below the scan's limit in zig-zag order, 0 past it. No libjpeg call
// may longjmp while one lives (its destructor would be skipped).
class CoefficientCompareSink : public jpeg_entropy::BlockSink {
 public:
  CoefficientCompareSink(j_decompress_ptr info, jvirt_barray_ptr* arrays,
                         const jpeg_entropy::Scan& scan)
      : info_(info), arrays_(arrays), scan_(scan) {}
  void Mcu(int x, int y, const int16_t* const* blocks) override {
    for (int c = 0; c < scan_.components; ++c) {
      const int h = scan_.component[c].h, v = scan_.component[c].v;
      const int limit = scan_.component[c].limit;
      // libjpeg's arrays are indexed by the frame's component order.
      const int index = info_->cur_comp_info[c]->component_index;
      JBLOCKARRAY rows = info_->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(info_),
                                                        arrays_[index], y * v, v, FALSE);
      for (int by = 0; by < v; ++by) {
        for (int bx = 0; bx < h; ++bx) {
          const JCOEF* expected = rows[by][x * h + bx];
          const int16_t* got = blocks[c] + jpeg_entropy::kBlockStride * (by * h + bx);
          for (int k = 0; k < 64; ++k) {
            differences += got[k] != (kZigZagOfNatural[k] < limit ? expected[k] : 0);
          }
          ++blocks_seen;
        }
      }
    }
  }
  long differences = 0;
  long blocks_seen = 0;

 private:
  j_decompress_ptr info_;
  jvirt_barray_ptr* arrays_;
  const jpeg_entropy::Scan& scan_;
};

// The differences between DecodeProgressive's corners and nonzero masks
// (planes[c] for frame component c) and libjpeg's final coefficients, over
// the rows both hold; *blocks (optional) counts the blocks compared. A
// plane whose keep holds no AC position of the corner must have empty masks.
inline long CompareCorners(j_decompress_ptr info, jvirt_barray_ptr* arrays,
                           jpeg_entropy::CornerPlane* planes, long* blocks = nullptr) {
  long differences = 0;
  for (int c = 0; c < info->num_components; ++c) {
    const jpeg_component_info& comp = info->comp_info[c];
    const int rows = std::min<int>(planes[c].rows, static_cast<int>(comp.height_in_blocks));
    // With only the DC kept, the AC scans are skipped unread: no mask.
    const bool masked = (planes[c].keep & jpeg_entropy::CornerPositions(4, 4) & ~1ull) != 0;
    for (int y = 0; y < rows; ++y) {
      JBLOCKARRAY row = info->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(info),
                                                      arrays[c], y, 1, FALSE);
      for (int x = 0; x < static_cast<int>(comp.width_in_blocks); ++x) {
        const JCOEF* expected = row[0][x];
        const jpeg_entropy::CornerBlock& got = planes[c].at(x, y);
        for (int r = 0; r < 4; ++r) {
          for (int col = 0; col < 4; ++col) {
            const int k = kZigZagOfNatural[8 * r + col];
            const bool kept = k == 0 || ((planes[c].keep >> k) & 1);  // DC: always kept
            differences += got.corner[4 * r + col] != (kept ? expected[8 * r + col] : 0);
          }
        }
        for (int n = 1; n < 64; ++n) {
          differences += static_cast<int>((got.nonzero >> kZigZagOfNatural[n]) & 1) !=
                         (masked && expected[n] != 0);
        }
        if (blocks != nullptr) ++*blocks;
      }
    }
  }
  return differences;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_JPEG_COMPARE_UTIL_H_
