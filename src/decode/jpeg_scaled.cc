#include <cstdio>  // jpeglib.h needs FILE declared first

#include "decode/jpeg_scaled.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "decode/jpeg_progressive.h"
#include "decode/jpeg_scans.h"
#include "decode/scaled_transform.h"
#include "decode/ycc_rgb.h"

namespace gpufeed {

namespace {

using jpeg_entropy::BlockSink;
using jpeg_entropy::HuffmanTable;
using jpeg_entropy::kBlockStride;
using jpeg_entropy::kMaxComponents;
using jpeg_entropy::Scan;
using scaled_transform::PickTransform;
using scaled_transform::TransformFunction;

// How one component's blocks become pixels of the scaled image.
struct Plan {
  int idct_w = 1, idct_h = 1;        // transform size (1, 2 or 4)
  int repeat_x = 1, repeat_y = 1;    // pixel replication after it (1 or 2)
  int plane = 0;                     // 0 = Y (or gray), 1 = Cb, 2 = Cr
  int h = 1, v = 1;                  // sampling factors
  float quant[16];                   // the corner's steps, [v * idct_w + u]
  TransformFunction transform = nullptr;
};

// Turns the MCUs of the wanted rows and columns into RGB rows of *out.
class ScaledSink : public BlockSink {
 public:
  ScaledSink(const Plan* plans, int components, int mcu_w, int mcu_h, int first_col, int end_col,
             int y0, int y1, Image* out)
      : components_(components), mcu_w_(mcu_w), mcu_h_(mcu_h), first_col_(first_col), y0_(y0),
        y1_(y1), out_(out), stride_(static_cast<size_t>(end_col - first_col) * mcu_w) {
    strip_.assign(stride_ * mcu_h * components, 128);
    // An MCU's blocks as a flat list (at most kMaxBlocksPerMcu: the
    // decoders refuse more), so that Mcu is one loop of calls.
    for (int c = 0; c < components; ++c) {
      const Plan& plan = plans[c];
      const int block_w = plan.idct_w * plan.repeat_x, block_h = plan.idct_h * plan.repeat_y;
      for (int by = 0; by < plan.v; ++by) {
        for (int bx = 0; bx < plan.h && jobs_ < jpeg_entropy::kMaxBlocksPerMcu; ++bx) {
          job_[jobs_++] = {plan.transform, plan.quant, c, kBlockStride * (by * plan.h + bx),
                           stride_ * mcu_h * plan.plane + by * block_h * stride_ + bx * block_w};
        }
      }
    }
  }

  // REQUIRES: first_col <= mcu_x < end_col.
  void Mcu(int mcu_x, int, const int16_t* const* blocks) override {
    uint8_t* base = strip_.data() + static_cast<size_t>(mcu_x - first_col_) * mcu_w_;
    for (int j = 0; j < jobs_; ++j) {
      const Job& job = job_[j];
      job.transform(job.quant, blocks[job.component] + job.block, base + job.pixels, stride_);
    }
  }

  // Converts the strip's rows that lie in [y0, y1) to RGB rows of *out.
  void RowDone(int mcu_y) override {
    const int top = mcu_y * mcu_h_;
    for (int r = std::max(top, y0_); r < std::min(top + mcu_h_, y1_); ++r) {
      const uint8_t* luma = strip_.data() + (r - top) * stride_;
      uint8_t* rgb = out_->row(r - y0_);
      if (components_ == 1) {
        GrayToRgbRow(luma, out_->width, rgb);
        continue;
      }
      const uint8_t* cb = luma + stride_ * mcu_h_;
      const uint8_t* cr = cb + stride_ * mcu_h_;
      YccToRgbRow(luma, cb, cr, out_->width, rgb);
    }
  }

  // One block of an MCU: its transform, the component's quantization
  // steps, where its coefficients are (blocks[component] + block) and where
  // its pixels go (from the MCU's column in the strip).
  struct Job {
    TransformFunction transform;
    const float* quant;
    int component;
    int block;
    size_t pixels;
  };
  int components_, mcu_w_, mcu_h_, first_col_, y0_, y1_;
  Image* out_;
  size_t stride_;
  std::vector<uint8_t> strip_;  // per plane, mcu_h rows of the wanted columns
  Job job_[jpeg_entropy::kMaxBlocksPerMcu];
  int jobs_ = 0;
};

// Whether this path decodes the frame's colours: YCbCr (3 components) or
// grayscale, 8-bit Huffman-coded.
bool DecodableFrame(const jpeg_decompress_struct& info, bool* gray) {
  if (info.arith_code || info.data_precision != 8) return false;
  *gray = info.num_components == 1 && info.jpeg_color_space == JCS_GRAYSCALE;
  return *gray || (info.num_components == 3 && info.jpeg_color_space == JCS_YCbCr);
}

// How `comp` becomes pixels at 1/denominator, or false for sampling this
// path does not handle (factors other than 1 and 2 of the largest).
bool PlanComponent(const jpeg_decompress_struct& info, const jpeg_component_info& comp,
                   int denominator, bool gray, Plan* plan) {
  const int hmax = info.max_h_samp_factor, vmax = info.max_v_samp_factor;
  const int block = 8 / denominator;  // scaled pixels per block at full sampling
  plan->h = comp.h_samp_factor;
  plan->v = comp.v_samp_factor;
  if (plan->h < 1 || plan->v < 1 || hmax % plan->h != 0 || vmax % plan->v != 0) return false;
  const int fx = hmax / plan->h, fy = vmax / plan->v;
  if (fx > 2 || fy > 2) return false;
  // Chroma is enlarged by the transform while that stays within 4 points.
  plan->idct_w = block * fx <= 4 ? block * fx : block;
  plan->idct_h = block * fy <= 4 ? block * fy : block;
  plan->repeat_x = block * fx / plan->idct_w;
  plan->repeat_y = block * fy / plan->idct_h;
  plan->transform = PickTransform(plan->idct_w, plan->idct_h, plan->repeat_x, plan->repeat_y);
  plan->plane = gray ? 0 : comp.component_index;
  if (plan->plane < 0 || plan->plane >= kMaxComponents) return false;
  // Replicating luma (a file whose luma is sampled less than a chroma
  // component, decoded at 1/2) would blur what the eye sees most: libjpeg's
  // larger transform decodes those.
  if (plan->plane == 0 && (plan->repeat_x > 1 || plan->repeat_y > 1)) return false;
  const JQUANT_TBL* quant = comp.quant_tbl_no >= 0 && comp.quant_tbl_no < NUM_QUANT_TBLS
                                ? info.quant_tbl_ptrs[comp.quant_tbl_no] : nullptr;
  if (quant == nullptr) return false;
  for (int v = 0; v < plan->idct_h; ++v) {
    for (int u = 0; u < plan->idct_w; ++u) plan->quant[v * plan->idct_w + u] = quant->quantval[v * 8 + u];
  }
  return true;
}

// The MCU grid: a single-component image has one block per MCU (its own
// block grid; its plan's sampling becomes 1x1).
void McuGrid(const jpeg_decompress_struct& info, Plan* plans, int* mcus_per_row, int* mcu_rows) {
  const int hmax = info.max_h_samp_factor, vmax = info.max_v_samp_factor;
  if (info.num_components == 1) {
    const long width = (static_cast<long>(info.image_width) * plans[0].h + hmax - 1) / hmax;
    const long height = (static_cast<long>(info.image_height) * plans[0].v + vmax - 1) / vmax;
    *mcus_per_row = static_cast<int>((width + 7) / 8);
    *mcu_rows = static_cast<int>((height + 7) / 8);
    plans[0].h = plans[0].v = 1;
  } else {
    *mcus_per_row = static_cast<int>((info.image_width + 8 * hmax - 1) / (8 * hmax));
    *mcu_rows = static_cast<int>((info.image_height + 8 * vmax - 1) / (8 * vmax));
  }
}

// A baseline scan's layout and each component's plan (in scan order), or
// false when this path does not decode the image.
static_assert(2 * kMaxComponents <= jpeg_entropy::kTableCacheSize,
              "a decode's own tables must outlive its lookups");

bool PlanBaseline(const jpeg_decompress_struct& info, int denominator, Scan* scan, Plan* plans) {
  bool gray = false;
  if (info.progressive_mode || !DecodableFrame(info, &gray)) return false;
  if (info.comps_in_scan != info.num_components) return false;  // one scan holds them all
  if (info.Ss != 0 || info.Se != 63 || info.Ah != 0 || info.Al != 0) return false;
  scan->components = info.comps_in_scan;
  for (int c = 0; c < info.comps_in_scan; ++c) {
    const jpeg_component_info* comp = info.cur_comp_info[c];
    Plan& plan = plans[c];
    if (!PlanComponent(info, *comp, denominator, gray, &plan)) return false;
    // Built once per thread while the files' tables repeat (valid through
    // this decode: it looks up at most 2 * kMaxComponents tables).
    const HuffmanTable* dc_table = jpeg_entropy::SharedTableOf(info, *comp, true);
    const HuffmanTable* ac_table = jpeg_entropy::SharedTableOf(info, *comp, false);
    if (dc_table == nullptr || ac_table == nullptr) return false;
    scan->component[c] = {plan.h, plan.v, dc_table, ac_table,
                          jpeg_entropy::ZigZagLimit(plan.idct_h, plan.idct_w)};
  }
  McuGrid(info, plans, &scan->mcus_per_row, &scan->mcu_rows);
  scan->component[0].h = plans[0].h;
  scan->component[0].v = plans[0].v;
  scan->restart_interval = static_cast<int>(info.restart_interval);
  return true;
}

// A progressive frame's plans (in frame order), or false. A grayscale one
// must have 1x1 sampling (its scans' block grid is then its MCU grid).
bool PlanProgressive(const jpeg_decompress_struct& info, int denominator, Plan* plans,
                     int* mcus_per_row, int* mcu_rows) {
  bool gray = false;
  if (!info.progressive_mode || !DecodableFrame(info, &gray)) return false;
  int blocks_per_mcu = 0;
  for (int c = 0; c < info.num_components; ++c) {
    if (!PlanComponent(info, info.comp_info[c], denominator, gray, &plans[c])) return false;
    blocks_per_mcu += plans[c].h * plans[c].v;
  }
  // The MCU FeedCorners assembles (JPEG's limit for an interleaved scan).
  if (blocks_per_mcu > jpeg_entropy::kMaxBlocksPerMcu) return false;
  if (gray && (plans[0].h != 1 || plans[0].v != 1)) return false;
  McuGrid(info, plans, mcus_per_row, mcu_rows);
  return true;
}

// Hands the window's MCUs from the progressive decode's corners to the
// sink, with its RowDone after each row.
// REQUIRES: corners[c] covers those MCUs' blocks (rows up to (last_row + 1)
// * v, columns below end_col * h); at most kMaxBlocksPerMcu blocks per MCU.
void FeedCorners(jpeg_entropy::CornerPlane* corners, const Plan* plans, int components,
                 const jpeg_entropy::McuWindow& window, BlockSink* sink) {
  // Zeroed once: each block's 4 x 4 corner, all a transform reads, is
  // overwritten below; the rest stays 0.
  alignas(64) int16_t storage[jpeg_entropy::kMaxBlocksPerMcu * kBlockStride] = {};
  const int16_t* blocks[kMaxComponents];
  for (int y = window.first_row; y <= window.last_row; ++y) {
    for (int x = window.first_col; x < window.end_col; ++x) {
      int used = 0;
      for (int c = 0; c < components; ++c) {
        blocks[c] = storage + used * kBlockStride;
        for (int by = 0; by < plans[c].v; ++by) {
          for (int bx = 0; bx < plans[c].h; ++bx, ++used) {
            int16_t* block = storage + used * kBlockStride;
            const jpeg_entropy::CornerBlock& kept =
                corners[c].at(x * plans[c].h + bx, y * plans[c].v + by);
            for (int r = 0; r < 4; ++r) std::memcpy(block + 8 * r, kept.corner + 4 * r, 8);
          }
        }
      }
      sink->Mcu(x, y, blocks);
    }
    sink->RowDone(y);
  }
}

bool DecodeScaledUnchecked(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                           const CropRect& crop, int denominator, Image* out,
                           DecodedColumns* columns) {
  Scan scan;
  Plan plans[kMaxComponents];
  const bool progressive = info.progressive_mode;
  if (progressive ? !PlanProgressive(info, denominator, plans, &scan.mcus_per_row, &scan.mcu_rows)
                  : !PlanBaseline(info, denominator, &scan, plans)) {
    return false;
  }
  const int components = info.num_components;
  const uint8_t* start = info.src->next_input_byte;
  if (start < data || start > data + size) return false;
  scan.data = start;
  scan.end = data + size;
  // The MCU's size in scaled pixels: the plan of any component covers it.
  const int mcu_w = plans[0].h * plans[0].idct_w * plans[0].repeat_x;
  const int mcu_h = plans[0].v * plans[0].idct_h * plans[0].repeat_y;
  // Output as libjpeg sizes it: ceil(size / denominator).
  const int out_w = static_cast<int>((info.image_width + denominator - 1) / denominator);
  const int out_h = static_cast<int>((info.image_height + denominator - 1) / denominator);
  const int x0 = crop.x / denominator;
  const int y0 = crop.y / denominator;
  const int x1 = std::max(x0 + 1, std::min(out_w, (crop.x + crop.width + denominator - 1) / denominator));
  const int y1 = std::max(y0 + 1, std::min(out_h, (crop.y + crop.height + denominator - 1) / denominator));
  const int first_col = x0 / mcu_w;
  const int end_col = std::min(scan.mcus_per_row, (x1 + mcu_w - 1) / mcu_w);
  out->width = std::min(out_w, end_col * mcu_w) - first_col * mcu_w;
  out->height = y1 - y0;
  if (out->width <= 0 || out->height <= 0) return false;
  if (!decode_internal::TryResize(&out->pixels, static_cast<size_t>(out->width) * out->height * 3)) {
    return false;
  }
  *columns = {x0 - first_col * mcu_w, x1 - x0};
  ScaledSink sink(plans, components, mcu_w, mcu_h, first_col, end_col, y0, y1, out);
  const int first_row = y0 / mcu_h, last_row = (y1 - 1) / mcu_h;
  const jpeg_entropy::McuWindow window{first_row, last_row, first_col, end_col};
  if (!progressive) return jpeg_entropy::DecodeScan(scan, window, &sink);
  // Kept per thread: a photograph's planes are megabytes, which a fresh
  // allocation per image would fault in page by page. Released after a
  // decode that needed more than jpeg_entropy::kRetainedCornerBytes.
  thread_local jpeg_entropy::CornerPlane corners[kMaxComponents];
  for (int c = 0; c < components; ++c) {
    corners[c].keep = jpeg_entropy::CornerPositions(plans[c].idct_h, plans[c].idct_w);
  }
  // The last bit of the AC coefficients is not read: at most one
  // quantization step on a kept coefficient, about half the decode's time.
  const bool decoded = jpeg_entropy::DecodeProgressive(
      info, data, size, last_row, corners, jpeg_entropy::AcBits::kSkipLastRefinement);
  if (decoded) FeedCorners(corners, plans, components, window, &sink);
  size_t held = 0;
  for (const jpeg_entropy::CornerPlane& plane : corners) {
    held += plane.blocks.capacity() * sizeof(jpeg_entropy::CornerBlock);
  }
  if (held > jpeg_entropy::kRetainedCornerBytes) {
    for (jpeg_entropy::CornerPlane& plane : corners) {
      plane.blocks.clear();
      plane.blocks.shrink_to_fit();
    }
  }
  return decoded;
}

}  // namespace

bool DecodeScaledOwn(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                     const CropRect& crop, int denominator, Image* out, DecodedColumns* columns) {
  // Out of memory for the tables or the strip: libjpeg's path then reports
  // it as a Status, as it would without this path.
  try {
    return DecodeScaledUnchecked(info, data, size, crop, denominator, out, columns);
  } catch (const std::bad_alloc&) {
    return false;
  }
}

}  // namespace gpufeed
