#include "decode/jpeg_progressive.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "decode/jpeg_bits.h"
#include "decode/jpeg_bitsets.h"
#include "decode/jpeg_entropy.h"
#include "decode/jpeg_scans.h"

namespace gpufeed {
namespace jpeg_entropy {

namespace {

// The corner slot of each zig-zag index (natural row and column below 4),
// or -1; kCornerMask has bit k set for each index with a slot.
struct CornerSlots {
  int8_t slot[64];
  uint64_t mask;
};
constexpr CornerSlots MakeCornerSlots() {
  CornerSlots slots{};
  for (int k = 0; k < 64; ++k) {
    const int row = kNatural[k] / 8, column = kNatural[k] % 8;
    slots.slot[k] = static_cast<int8_t>(row < 4 && column < 4 ? row * 4 + column : -1);
    if (slots.slot[k] >= 0) slots.mask |= 1ull << k;
  }
  return slots;
}
constexpr CornerSlots kCorner = MakeCornerSlots();

// JPEG's largest sampling factor (libjpeg refuses a larger one, and so does
// Setup): the planes' slack past their last row.
constexpr int kMaxSampling = 4;

inline int16_t Wrap16(uint32_t value) { return static_cast<int16_t>(static_cast<uint16_t>(value)); }

// A DC refinement's bit (0 or 1) for one block: ORed in at the point
// transform's position, as libjpeg does on its 16-bit coefficient.
inline void RefineDc(CornerBlock* block, uint32_t bit, int al) {
  block->corner[0] = Wrap16(block->corner[0] | (bit << al));
}

// Reads the end-of-band run's extra bits: the blocks it covers, this one
// included.
inline uint32_t EndOfBandRun(Bits* b, Source* source, int r) {
  uint32_t run = 1u << r;
  if (r > 0) {
    Fill(b, source);
    run += Peek(*b, r);
    Skip(b, r);
  }
  return run;
}

// The correction bits of the nonzero coefficients in `positions` (one bit
// each, in zig-zag order): applied to the kept ones (`keep`: positions with
// a corner slot), the others skipped. Up to 24 bits are taken at once; the
// positions are walked only while a kept position remains, and the update
// is branch-free (the bits are data).
inline void Corrections(Bits* b, Source* source, uint64_t positions, uint64_t keep, int al,
                        CornerBlock* block) {
  if (positions == 0) return;  // most of a last refinement's symbols pass no nonzero coefficient
  const int p1 = 1 << al;
  for (int n = PopCount(positions); n > 0;) {
    Fill(b, source);
    const int m = std::min(n, 24);
    uint64_t word = b->bits;  // its top m bits: the m lowest positions' bits, in order
    Skip(b, m);
    n -= m;
    for (int i = 0; i < m && (positions & keep) != 0; ++i, word <<= 1) {
      const int k = __builtin_ctzll(positions);
      positions &= positions - 1;
      if (((keep >> k) & 1) == 0) continue;
      int16_t& coefficient = block->corner[kCorner.slot[k]];
      const bool apply = (word >> 63) != 0 && (coefficient & p1) == 0;
      const int step = coefficient >= 0 ? p1 : -p1;
      coefficient = Wrap16(static_cast<uint32_t>(coefficient + (apply ? step : 0)));
    }
  }
}

class ProgressiveDecoder {
 public:
  ProgressiveDecoder(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                     int last_mcu_row, CornerPlane* planes, AcBits ac_bits)
      : info_(info), data_(data), end_(data + size), planes_(planes), ac_bits_(ac_bits) {
    hmax_ = info.max_h_samp_factor;
    vmax_ = info.max_v_samp_factor;
    mcus_per_row_ = static_cast<int>((info.image_width + 8 * hmax_ - 1) / (8 * hmax_));
    mcu_rows_ = static_cast<int>((info.image_height + 8 * vmax_ - 1) / (8 * vmax_));
    last_mcu_row_ = std::min(last_mcu_row, mcu_rows_ - 1);
  }

  bool Run();

 private:
  bool Setup();
  bool DecodeOneScan(const ScanParams& scan, const uint8_t* start, int* marker,
                     const uint8_t** after);
  bool SkipToMarker(const Source& source, int* marker, const uint8_t** after);
  // Inlined into the scan loops: the bit buffer's address is never taken
  // by a call, so that it stays in registers.
  __attribute__((always_inline)) inline bool AtMcu(Bits* b, Source* source);
  // A scan's kind; each gets its own decoding loop (DecodeInterleaved,
  // DecodeSingle), so that no block asks and each loop keeps its bit
  // buffer in registers.
  enum Kind { kDcFirst, kDcRefine, kAcFirst, kAcRefine };
  template <int kKind>
  __attribute__((noinline)) bool DecodeInterleaved(const ScanParams& scan, Bits* b,
                                                   Source* source);
  template <int kKind>
  __attribute__((noinline)) bool DecodeSingle(const ScanParams& scan, Bits* b, Source* source);
  template <int kKind>
  inline bool DecodeBlock(const ScanParams& scan, int index, Bits* b, Source* source,
                          CornerBlock* block);
  inline bool AcFirst(const ScanParams& scan, const HuffmanTable& table, Bits* b, Source* source,
                      CornerBlock* block);
  inline bool AcRefine(const ScanParams& scan, const HuffmanTable& table, Bits* b,
                       Source* source, CornerBlock* block);

  const jpeg_decompress_struct& info_;
  const uint8_t* data_;
  const uint8_t* end_;
  CornerPlane* planes_;
  AcBits ac_bits_;
  int hmax_ = 1, vmax_ = 1, mcus_per_row_ = 0, mcu_rows_ = 0, last_mcu_row_ = 0;
  int h_[kMaxComponents] = {}, v_[kMaxComponents] = {};
  int width_in_blocks_[kMaxComponents] = {}, height_in_blocks_[kMaxComponents] = {};
  ScanHeaders headers_;  // tables, restart interval, progression
  // Per scan state.
  uint64_t keep_[kMaxComponents] = {};  // per component, its plane's keep within the corner
  int dc_[kMaxComponents] = {};
  uint32_t end_of_band_ = 0;  // blocks left in the current end-of-band run
  int until_restart_ = 0, next_restart_ = 0;
};

bool ProgressiveDecoder::Setup() {
  if (info_.num_components > kMaxComponents || info_.arith_code || info_.data_precision != 8) {
    return false;
  }
  // Each plane's blocks down to the image's last row, with the slack.
  size_t whole[kMaxComponents] = {}, whole_blocks = 0;
  for (int c = 0; c < info_.num_components; ++c) {
    const int h = info_.comp_info[c].h_samp_factor, v = info_.comp_info[c].v_samp_factor;
    // libjpeg refuses larger factors; the planes' slack relies on it.
    if (h < 1 || h > kMaxSampling || v < 1 || v > kMaxSampling) return false;
    whole[c] = static_cast<size_t>(mcus_per_row_) * h * mcu_rows_ * v + kMaxSampling;
    whole_blocks += whole[c];
  }
  const bool whole_fits = whole_blocks * sizeof(CornerBlock) <= kRetainedCornerBytes;
  for (int c = 0; c < info_.num_components; ++c) {
    const jpeg_component_info& comp = info_.comp_info[c];
    // Duplicate component ids make a scan's components ambiguous (libjpeg
    // resolves them by a rule of its own): left to it.
    for (int other = 0; other < c; ++other) {
      if (info_.comp_info[other].component_id == comp.component_id) return false;
    }
    h_[c] = comp.h_samp_factor;
    v_[c] = comp.v_samp_factor;
    const long width = (static_cast<long>(info_.image_width) * h_[c] + hmax_ - 1) / hmax_;
    const long height = (static_cast<long>(info_.image_height) * v_[c] + vmax_ - 1) / vmax_;
    width_in_blocks_[c] = static_cast<int>((width + 7) / 8);
    height_in_blocks_[c] = static_cast<int>((height + 7) / 8);
    CornerPlane& plane = planes_[c];
    keep_[c] = plane.keep & kCorner.mask;
    plane.blocks_per_row = mcus_per_row_ * h_[c];
    plane.rows = (last_mcu_row_ + 1) * v_[c];
    // Room for the whole image where its planes may be kept (per thread):
    // crops reaching lower would otherwise regrow them and fault pages in.
    if (whole_fits) plane.blocks.reserve(whole[c]);
    // Slack past the last row: DecodeInterleaved's block pointers end there.
    plane.blocks.assign(static_cast<size_t>(plane.blocks_per_row) * plane.rows + kMaxSampling,
                        CornerBlock{});
  }
  return true;
}

bool ProgressiveDecoder::Run() {
  if (!Setup()) return false;
  ScanParams scan;
  if (!headers_.Start(info_, &scan)) return false;
  const uint8_t* start = info_.src->next_input_byte;
  if (start < data_ || start > end_) return false;
  for (int scans = 0; scans < 1000; ++scans) {
    const uint8_t* after = nullptr;
    int marker = 0;
    if (!DecodeOneScan(scan, start, &marker, &after)) return false;
    bool done = false;
    if (!headers_.ReadMarkers(marker, after, end_, &scan, &start, &done)) return false;
    if (done) return true;
  }
  return false;  // more scans than any encoder writes: leave it to libjpeg
}

bool ProgressiveDecoder::DecodeOneScan(const ScanParams& scan, const uint8_t* start, int* marker,
                                       const uint8_t** after) {
  if (!headers_.Prepare(scan)) return false;
  Source source{start, end_};
  // An AC scan of a component of which only the DC coefficient is kept (a
  // 1/8 scale) changes nothing kept: its coefficients and nonzero masks are
  // read only by that component's later AC scans. Skipped to its end
  // marker unread, as the rows below the crop are.
  if (scan.ss > 0 && (keep_[scan.component[0]] >> 1) == 0) {
    return SkipToMarker(source, marker, after);
  }
  // The AC coefficients' last bit, when the caller lets it go (AcBits):
  // no later scan reads what this one would set (Al 0 ends the band's
  // progression).
  if (scan.ss > 0 && scan.ah != 0 && scan.al == 0 && ac_bits_ == AcBits::kSkipLastRefinement) {
    return SkipToMarker(source, marker, after);
  }
  Bits b{0, 0};
  std::fill(std::begin(dc_), std::end(dc_), 0);
  end_of_band_ = 0;
  const Kind kind = scan.ss == 0 ? (scan.ah == 0 ? kDcFirst : kDcRefine)
                                 : (scan.ah == 0 ? kAcFirst : kAcRefine);
  bool ok = false;
  if (scan.count > 1) {  // DC only (Prepare refuses an interleaved AC scan, as libjpeg does)
    if (kind == kDcFirst) ok = DecodeInterleaved<kDcFirst>(scan, &b, &source);
    if (kind == kDcRefine) ok = DecodeInterleaved<kDcRefine>(scan, &b, &source);
  } else {
    switch (kind) {
      case kDcFirst: ok = DecodeSingle<kDcFirst>(scan, &b, &source); break;
      case kDcRefine: ok = DecodeSingle<kDcRefine>(scan, &b, &source); break;
      case kAcFirst: ok = DecodeSingle<kAcFirst>(scan, &b, &source); break;
      case kAcRefine: ok = DecodeSingle<kAcRefine>(scan, &b, &source); break;
    }
  }
  if (!ok || !Sound(b, source)) return false;
  // The rest of the scan (its rows below the crop) is skipped.
  return SkipToMarker(source, marker, after);
}

// On from `source` to the next marker that is not a restart marker: its
// code in *marker, *after just past it. False when the data ends first.
bool ProgressiveDecoder::SkipToMarker(const Source& source, int* marker, const uint8_t** after) {
  *marker = NextMarker(source, after);
  while (*marker >= 0xD0 && *marker <= 0xD7) {
    const Source rest{*after, end_};
    *marker = NextMarker(rest, after);
  }
  return *marker != 0;
}

// Restart markers every headers_.restart_interval MCUs of a scan: checked, and the
// predictors and the end-of-band run reset. False for a missing one.
inline bool ProgressiveDecoder::AtMcu(Bits* b, Source* source) {
  if (headers_.restart_interval == 0) return true;
  if (until_restart_ == 0) {
    if (!Restart(next_restart_, *b, source)) return false;
    *b = {0, 0};
    next_restart_ = (next_restart_ + 1) & 7;
    until_restart_ = headers_.restart_interval;
    std::fill(std::begin(dc_), std::end(dc_), 0);
    end_of_band_ = 0;
  }
  --until_restart_;
  return true;
}

template <int kKind>
bool ProgressiveDecoder::DecodeInterleaved(const ScanParams& scan, Bits* b, Source* source) {
  // The MCU's blocks in scan order: each one's scan component, and its
  // block in the current MCU (advanced by `step`, its component's h, per
  // MCU; past a plane's last row it points into the plane's slack).
  int index[kMaxBlocksPerMcu];
  int step[kMaxBlocksPerMcu];
  CornerBlock* block[kMaxBlocksPerMcu];
  int blocks_per_mcu = 0;
  for (int i = 0; i < scan.count; ++i) {
    const int c = scan.component[i];
    if (blocks_per_mcu + h_[c] * v_[c] > kMaxBlocksPerMcu) return false;  // libjpeg refuses it
    for (int by = 0; by < v_[c]; ++by) {
      for (int bx = 0; bx < h_[c]; ++bx, ++blocks_per_mcu) {
        index[blocks_per_mcu] = i;
        step[blocks_per_mcu] = h_[c];
      }
    }
  }
  until_restart_ = headers_.restart_interval;
  next_restart_ = 0;
  Bits bits = *b;  // a local, kept in registers through the loop
  for (int y = 0; y <= last_mcu_row_; ++y) {
    for (int j = 0, i = 0; i < scan.count; ++i) {
      const int c = scan.component[i];
      for (int by = 0; by < v_[c]; ++by) {
        for (int bx = 0; bx < h_[c]; ++bx) block[j++] = &planes_[c].at(bx, y * v_[c] + by);
      }
    }
    for (int x = 0; x < mcus_per_row_; ++x) {
      if (!AtMcu(&bits, source)) return false;
      if constexpr (kKind == kDcRefine) {
        // One bit per block, at most kMaxBlocksPerMcu: one fill serves the MCU.
        Fill(&bits, source);
        for (int j = 0; j < blocks_per_mcu; ++j) {
          RefineDc(block[j], static_cast<uint32_t>(bits.bits >> 63), scan.al);
          bits.bits <<= 1;
          block[j] += step[j];
        }
        bits.count -= blocks_per_mcu;
      } else {
        for (int j = 0; j < blocks_per_mcu; ++j) {
          if (!DecodeBlock<kKind>(scan, index[j], &bits, source, block[j])) return false;
          block[j] += step[j];
        }
      }
    }
    if (!Sound(bits, *source)) return false;
  }
  *b = bits;
  return true;
}

// A single-component scan covers the component's own block grid, one block
// per MCU, down to the rows the crop needs.
template <int kKind>
bool ProgressiveDecoder::DecodeSingle(const ScanParams& scan, Bits* b, Source* source) {
  until_restart_ = headers_.restart_interval;
  next_restart_ = 0;
  const int c = scan.component[0];
  const int rows = std::min(height_in_blocks_[c], planes_[c].rows);
  Bits bits = *b;  // a local, kept in registers through the loop
  for (int y = 0; y < rows; ++y) {
    CornerBlock* row = &planes_[c].at(0, y);
    for (int x = 0; x < width_in_blocks_[c]; ++x) {
      if (!AtMcu(&bits, source) || !DecodeBlock<kKind>(scan, 0, &bits, source, row + x)) {
        return false;
      }
    }
    if (!Sound(bits, *source)) return false;
  }
  *b = bits;
  return true;
}

template <int kKind>
__attribute__((always_inline)) inline bool ProgressiveDecoder::DecodeBlock(
    const ScanParams& scan, int index, Bits* b, Source* source, CornerBlock* block) {
  if constexpr (kKind == kDcRefine) {  // one bit
    Fill(b, source);
    RefineDc(block, Peek(*b, 1), scan.al);
    Skip(b, 1);
    return true;
  } else if constexpr (kKind == kDcFirst) {
    const int c = scan.component[index];
    int diff;
    if (!DecodeDcDiff(b, source, headers_.table(0, scan.dc_table[index]), &diff)) return false;
    dc_[c] = Wrap16(static_cast<uint32_t>(dc_[c] + diff));
    block->corner[0] = Wrap16(static_cast<uint32_t>(dc_[c]) << scan.al);
    return true;
  } else {
    const HuffmanTable& table = headers_.table(1, scan.ac_table[0]);
    return kKind == kAcFirst ? AcFirst(scan, table, b, source, block)
                             : AcRefine(scan, table, b, source, block);
  }
}

__attribute__((always_inline)) inline bool ProgressiveDecoder::AcFirst(
    const ScanParams& scan, const HuffmanTable& table, Bits* b,
                                 Source* source, CornerBlock* block) {
  if (end_of_band_ > 0) {
    --end_of_band_;
    return true;
  }
  for (int k = scan.ss; k <= scan.se; ++k) {
    int run, size, value = 0;
    const int kind = DecodeAcSymbol(b, source, table, &run, &size, &value);
    if (kind == kBad) return false;
    if (kind == kEnd) {
      end_of_band_ = EndOfBandRun(b, source, run) - 1;
      return true;
    }
    k += run;
    if (size == 0) continue;   // sixteen zeros
    if (k > scan.se) return false;  // a value past the band: corrupt
    // A value that the shift wraps to 0 in libjpeg's 16 bits is zero there,
    // and a later refinement reads no correction bit for it: no encoder
    // writes one; left to libjpeg.
    if (Wrap16(static_cast<uint32_t>(value) << scan.al) == 0) return false;
    block->nonzero |= 1ull << k;
    if ((keep_[scan.component[0]] >> k) & 1) {
      block->corner[kCorner.slot[k]] = Wrap16(static_cast<uint32_t>(value) << scan.al);
    }
  }
  return true;
}

// libjpeg's decode_mcu_AC_refine with the nonzero coefficients as a bit
// mask: a run's zeros are counted off a list of the block's zeros, and the
// correction bits of the nonzero coefficients between are found with mask
// operations.
__attribute__((always_inline)) inline bool ProgressiveDecoder::AcRefine(
    const ScanParams& scan, const HuffmanTable& table, Bits* b,
                                  Source* source, CornerBlock* block) {
  const int p1 = 1 << scan.al;
  const uint64_t keep = keep_[scan.component[0]];
  const uint64_t band = Range(scan.ss, scan.se);
  int k = scan.ss;
  if (end_of_band_ == 0) {
    // The band's zeros before this scan, in order: the new coefficients go
    // to them (a zero that gets one lies behind k from then on).
    uint8_t zero_at[72];
    const int zeros = SetBitPositions(~block->nonzero & band, zero_at);
    int next_zero = 0;  // the index in zero_at of the first zero at or after k
    for (; k <= scan.se; ++k) {
      int run, size, value = 0;
      const int kind = DecodeAcSymbol(b, source, table, &run, &size, &value);
      if (kind == kBad) return false;
      if (kind == kEnd) {
        end_of_band_ = EndOfBandRun(b, source, run);
        break;
      }
      if (size > 1) return false;  // libjpeg warns and reads one bit: leave it to libjpeg
      // Past the nonzero coefficients (each taking a correction bit) and
      // `run` zeros, to the next zero: the new coefficient's place.
      const uint64_t from_k = band & (~0ull << k);  // k <= se <= 63 here
      const int index = next_zero + run;
      const int target = index < zeros ? zero_at[index] : scan.se + 1;
      next_zero = index + 1;
      const uint64_t below_target = target >= 64 ? ~0ull : (1ull << target) - 1;
      Corrections(b, source, block->nonzero & from_k & below_target, keep, scan.al, block);
      k = target;
      if (size == 1) {
        if (k > scan.se) return false;
        block->nonzero |= 1ull << k;
        if ((keep >> k) & 1) {
          block->corner[kCorner.slot[k]] = static_cast<int16_t>(value > 0 ? p1 : -p1);
        }
      }
    }
  }
  if (end_of_band_ > 0) {
    Corrections(b, source, block->nonzero & Range(k, scan.se), keep, scan.al, block);
    --end_of_band_;
  }
  return true;
}

}  // namespace

uint64_t CornerPositions(int rows, int cols) {
  uint64_t positions = 0;
  for (int k = 0; k < 64; ++k) {
    if (kNatural[k] / 8 < rows && kNatural[k] % 8 < cols) positions |= 1ull << k;
  }
  return positions;
}

bool DecodeProgressive(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                       int last_mcu_row, CornerPlane* planes, AcBits ac_bits) {
  ProgressiveDecoder decoder(info, data, size, last_mcu_row, planes, ac_bits);
  return decoder.Run();
}

}  // namespace jpeg_entropy
}  // namespace gpufeed
