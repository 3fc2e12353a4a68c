#include "decode/jpeg_mcu.h"

#include <new>

#include "decode/jpeg_blocks.h"
#include "decode/jpeg_scans.h"

namespace gpufeed {
namespace jpeg_entropy {

namespace {

// libjpeg's `struct jpeg_entropy_decoder` (jpegint.h, not installed): the
// entropy module every decompression has once jpeg_start_decompress has
// run. Only decode_mcu is replaced.
struct EntropyModule {
  void (*start_pass)(j_decompress_ptr info);
  boolean (*decode_mcu)(j_decompress_ptr info, JBLOCKROW* blocks);
  boolean insufficient_data;
};

// The scan of a single-scan baseline image as libjpeg decodes it (every
// coefficient kept), or false for any other image.
bool PlanScan(const jpeg_decompress_struct& info, Scan* scan) {
  if (info.progressive_mode || info.arith_code || info.data_precision != 8) return false;
  if (info.comps_in_scan != info.num_components) return false;
  if (info.num_components != 1 && info.num_components != kMaxComponents) return false;
  if (info.Ss != 0 || info.Se != 63 || info.Ah != 0 || info.Al != 0) return false;
  scan->components = info.comps_in_scan;
  int blocks = 0;
  for (int c = 0; c < info.comps_in_scan; ++c) {
    const jpeg_component_info* comp = info.cur_comp_info[c];
    Component& component = scan->component[c];
    // A single-component scan is not interleaved: one block per MCU.
    component.h = info.comps_in_scan == 1 ? 1 : comp->h_samp_factor;
    component.v = info.comps_in_scan == 1 ? 1 : comp->v_samp_factor;
    component.dc = SharedTableOf(info, *comp, true);
    // Every coefficient is kept (limit 64): the pair table is not used.
    component.ac = SharedTableOf(info, *comp, false, /*pairs=*/false);
    component.limit = 64;
    if (component.dc == nullptr || component.ac == nullptr || !component.ac->skip_built) {
      return false;
    }
    blocks += component.h * component.v;
  }
  if (blocks != info.blocks_in_MCU || blocks > kMaxBlocksPerMcu) return false;
  scan->mcus_per_row = static_cast<int>(info.MCUs_per_row);
  scan->mcu_rows = static_cast<int>(info.MCU_rows_in_scan);
  scan->restart_interval = static_cast<int>(info.restart_interval);
  return scan->mcus_per_row > 0 && scan->mcu_rows > 0;
}

// The last marker in [start, end) (its 0xFF), or start - 1 when there is
// none: a 0xFF followed by a byte other than 0x00 (stuffing) and 0xFF (fill).
const uint8_t* LastMarker(const uint8_t* start, const uint8_t* end) {
  for (const uint8_t* p = end - 1; p > start; --p) {
    if (p[-1] == 0xFF && *p != 0x00 && *p != 0xFF) return p - 1;
  }
  return start - 1;
}

// Whether `n` data bytes (0xFF 0x00: one), or a marker, follow `p` before
// `end`: libjpeg's read-ahead, at most 8 data bytes past the bits it has
// used, stops at a marker and warns (JWRN_JPEG_EOF) at the file's end.
bool DataOrMarkerAhead(const uint8_t* p, const uint8_t* end, int n) {
  for (int count = 0; count < n;) {
    if (p >= end) return false;
    if (*p != 0xFF) {
      ++count;
      ++p;
      continue;
    }
    const uint8_t* q = p + 1;
    while (q < end && *q == 0xFF) ++q;  // fill bytes
    if (q >= end) return false;
    if (*q != 0x00) return true;
    ++count;
    p = q + 1;
  }
  return true;
}

}  // namespace

bool McuHook::Install(jpeg_decompress_struct* info, const uint8_t* end, int first_col,
                      int end_col, Fail fail) {
  installed_ = false;
  if (info->entropy == nullptr || info->src == nullptr || fail == nullptr) return false;
  try {
    if (!PlanScan(*info, &scan_)) return false;
  } catch (const std::bad_alloc&) {  // the thread's first table cache
    return false;
  }
  const uint8_t* start = info->src->next_input_byte;
  if (start == nullptr || start > end ||
      static_cast<size_t>(end - start) != info->src->bytes_in_buffer) {
    return false;  // not the memory source over the whole file
  }
  scan_.data = start;
  scan_.end = end;
  last_marker_ = LastMarker(start, end);
  source_ = Source{start, end};
  bits_ = {0, 0};
  for (int& dc : dc_) dc = 0;
  restart_ = {scan_.restart_interval, 0};
  column_ = 0;
  first_col_ = first_col;
  end_col_ = end_col;
  remaining_ = static_cast<long>(scan_.mcus_per_row) * scan_.mcu_rows;
  total_ = remaining_;
  deferred_ = 0;
  fail_ = fail;
  info->client_data = this;
  reinterpret_cast<EntropyModule*>(info->entropy)->decode_mcu = &McuHook::DecodeMcu;
  installed_ = true;
  return true;
}

boolean McuHook::DecodeMcu(j_decompress_ptr info, JBLOCKROW* blocks) {
  McuHook* hook = static_cast<McuHook*>(info->client_data);
  if (!hook->Next(blocks)) hook->fail_(info);  // does not return
  return TRUE;
}

// One MCU, as libjpeg's decode_mcu: its blocks into blocks[0..] (zeroed by
// libjpeg; natural order) when libjpeg passes them and the MCU lies in the
// kept columns, else only read past. False (libjpeg decodes instead) for
// data this decoder does not follow, data that ends within libjpeg's
// read-ahead, and anything but EOI after the scan's last MCU.
bool McuHook::Next(JBLOCKROW* blocks) {
  if (remaining_ <= 0) return false;
  Bits b = bits_;
  if (deferred_ > 0 && restart_.until == 0) {
    // The interval ended with none of its MCUs needed: on to its marker,
    // which must be the one expected (else libjpeg decodes the file).
    if (!SkipToRestartMarker(restart_.next, &source_)) return false;
    b = {0, 0};
    deferred_ = 0;
  }
  if (!BeforeMcu(scan_.restart_interval, &restart_, &b, &source_, dc_)) return false;
  const bool store = blocks != nullptr && column_ >= first_col_ && column_ < end_col_;
  if (++column_ == scan_.mcus_per_row) column_ = 0;
  if (scan_.restart_interval > 0) {
    if (Deferred(store)) {
      bits_ = b;
      --remaining_;
      return true;
    }
    // A needed MCU after deferred ones: they are read past first, from
    // their interval's start.
    if (deferred_ > 0) {
      Bits read = b;  // a copy: b's address is never taken, so it stays in registers
      if (!ReadDeferred(&read)) return false;
      b = read;
    }
  }
  int n = 0;
  for (int c = 0; c < scan_.components; ++c) {
    const Component& component = scan_.component[c];
    for (int i = 0; i < component.h * component.v; ++i, ++n) {
      // kNatural sends a corrupt run past 63 to 63, where libjpeg's
      // jpeg_natural_order sends it too.
      if (!(store ? DecodeBlock(&b, &source_, component, kNatural, &dc_[c], blocks[n][0])
                  : SkipBlock(&b, &source_, component, &dc_[c]))) {
        return false;
      }
    }
  }
  bits_ = b;
  if (!Sound(b, source_)) return false;
  // libjpeg reads up to 8 data bytes past the bits it has used (a 57-bit
  // refill), stopping at a marker. Where that reaches the file's end
  // without one (a truncated file) it warns, JWRN_JPEG_EOF, which
  // JpegDecoder turns into an error even when every bit used was there:
  // leave data that ends that close to libjpeg. Before the last marker it
  // cannot; past it, 9 data bytes after this decoder's read position
  // (which is at or past the bits used) are enough.
  if (source_.marker == 0x100) return false;
  if (source_.marker == 0 && source_.next > last_marker_ &&
      !DataOrMarkerAhead(source_.next, source_.end, 9)) {
    return false;
  }
  if (--remaining_ > 0) return true;
  return NextMarkerIs(source_, 0xD9);
}

// After BeforeMcu, in a file with restart markers: whether this MCU, not
// needed, joins the deferred ones: those of an interval read no further
// than its start, other than the scan's last (a marker follows it).
bool McuHook::Deferred(bool store) {
  if (store) return false;
  const int interval = scan_.restart_interval;
  const long index = total_ - remaining_;  // this MCU's
  if (deferred_ == 0 && (restart_.until != interval - 1 || index + interval >= total_)) {
    return false;
  }
  ++deferred_;
  return true;
}

bool McuHook::DeferredDataWhole() const {
  return deferred_ == 0 || NextMarkerIs(source_, 0xD0 + restart_.next);
}

// Reads past the deferred MCUs from their interval's start.
bool McuHook::ReadDeferred(Bits* b) {
  for (; deferred_ > 0; --deferred_) {
    for (int c = 0; c < scan_.components; ++c) {
      const Component& component = scan_.component[c];
      for (int i = 0; i < component.h * component.v; ++i) {
        if (!SkipBlock(b, &source_, component, &dc_[c])) return false;
      }
    }
  }
  return true;
}

}  // namespace jpeg_entropy
}  // namespace gpufeed
