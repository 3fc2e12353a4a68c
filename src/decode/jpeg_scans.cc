#include "decode/jpeg_scans.h"

#include <cstring>

namespace gpufeed {
namespace jpeg_entropy {

bool ScanHeaders::Start(const jpeg_decompress_struct& info, ScanParams* first) {
  info_ = &info;
  restart_interval = static_cast<int>(info.restart_interval);
  std::memset(coef_bits_, 0xFF, sizeof(coef_bits_));
  for (int t = 0; t < 4; ++t) {
    const JHUFF_TBL* tables[2] = {info.dc_huff_tbl_ptrs[t], info.ac_huff_tbl_ptrs[t]};
    for (int cls = 0; cls < 2; ++cls) {
      if (tables[cls] == nullptr) continue;
      defined_[cls][t] = true;
      std::memcpy(counts_[cls][t], tables[cls]->bits, 17);
      std::memcpy(symbols_[cls][t], tables[cls]->huffval, 256);
    }
  }
  first->count = info.comps_in_scan;
  if (first->count < 1 || first->count > kMaxScanComponents) return false;
  for (int i = 0; i < first->count; ++i) {
    first->component[i] = info.cur_comp_info[i]->component_index;
    first->dc_table[i] = info.cur_comp_info[i]->dc_tbl_no;
    first->ac_table[i] = info.cur_comp_info[i]->ac_tbl_no;
  }
  first->ss = info.Ss, first->se = info.Se, first->ah = info.Ah, first->al = info.Al;
  return true;
}

bool ScanHeaders::Prepare(const ScanParams& scan) {
  return CheckProgression(scan) && BuildTables(scan);
}

bool ScanHeaders::CheckProgression(const ScanParams& scan) {
  if (scan.ss == 0) {
    if (scan.se != 0) return false;
  } else if (scan.se < scan.ss || scan.se > 63 || scan.count != 1) {
    return false;
  }
  if ((scan.ah != 0 && scan.al != scan.ah - 1) || scan.al > 13) return false;
  for (int i = 0; i < scan.count; ++i) {
    int8_t* bits = coef_bits_[scan.component[i]];
    if (scan.ss != 0 && bits[0] < 0) return false;  // AC before the DC's first scan
    for (int k = scan.ss; k <= scan.se; ++k) {
      if (scan.ah != (bits[k] < 0 ? 0 : bits[k])) return false;
      bits[k] = static_cast<int8_t>(scan.al);
    }
  }
  return true;
}

// Builds the tables the scan uses from the DHT contents (libjpeg's, then
// the segments read between scans). False for a missing or refused table.
bool ScanHeaders::BuildTables(const ScanParams& scan) {
  for (int i = 0; i < scan.count; ++i) {
    const bool dc = scan.ss == 0;
    if (dc && scan.ah != 0) continue;  // DC refinement reads bare bits
    const int cls = dc ? 0 : 1;
    const int t = dc ? scan.dc_table[i] : scan.ac_table[i];
    if (t < 0 || t > 3 || !defined_[cls][t]) return false;
    if (!built_valid_[cls][t]) {
      if (!built_[4 * cls + t].Build(counts_[cls][t], symbols_[cls][t], dc)) return false;
      built_valid_[cls][t] = true;
    }
  }
  return true;
}

// From the marker `marker` (its code read; `at` just after it): the
// segments between scans, up to the next SOS (*scan, *start: its data) or
// EOI (*done).
bool ScanHeaders::ReadMarkers(int marker, const uint8_t* at, const uint8_t* end, ScanParams* scan,
                              const uint8_t** start, bool* done) {
  for (;;) {
    if (marker == 0xD9) {
      *done = true;
      return true;
    }
    if (end - at < 2) return false;
    const size_t length = static_cast<size_t>(at[0]) << 8 | at[1];
    if (length < 2 || length > static_cast<size_t>(end - at)) return false;
    const uint8_t* segment = at + 2;
    const size_t bytes = length - 2;
    if (marker == 0xDA) {
      *start = at + length;
      return ReadSos(segment, bytes, scan);
    }
    if (marker == 0xC4) {
      if (!ReadDht(segment, bytes)) return false;
    } else if (marker == 0xDD) {
      if (bytes != 2) return false;
      restart_interval = segment[0] << 8 | segment[1];
    } else if (marker != 0xFE && (marker < 0xE0 || marker > 0xEF)) {
      return false;  // DQT, DNL, another frame, ...: left to libjpeg
    }
    at += length;
    if (at >= end || *at != 0xFF) return false;
    while (at < end && *at == 0xFF) ++at;
    if (at >= end || *at == 0) return false;
    marker = *at++;
  }
}

bool ScanHeaders::ReadDht(const uint8_t* segment, size_t bytes) {
  while (bytes > 0) {
    if (bytes < 17) return false;
    const int cls = segment[0] >> 4, t = segment[0] & 15;
    if (cls > 1 || t > 3) return false;
    int total = 0;
    for (int length = 1; length <= 16; ++length) total += segment[length];
    if (total > 256 || static_cast<size_t>(17 + total) > bytes) return false;
    counts_[cls][t][0] = 0;
    std::memcpy(counts_[cls][t] + 1, segment + 1, 16);
    std::memset(symbols_[cls][t], 0, 256);
    std::memcpy(symbols_[cls][t], segment + 17, static_cast<size_t>(total));
    defined_[cls][t] = true;
    built_valid_[cls][t] = false;
    segment += 17 + total;
    bytes -= static_cast<size_t>(17 + total);
  }
  return true;
}

bool ScanHeaders::ReadSos(const uint8_t* segment, size_t bytes, ScanParams* scan) {
  if (bytes < 1) return false;
  const int count = segment[0];
  if (count < 1 || count > info_->num_components || bytes != static_cast<size_t>(1 + 2 * count + 3)) {
    return false;
  }
  scan->count = count;
  for (int i = 0; i < count; ++i) {
    const int id = segment[1 + 2 * i], tables = segment[2 + 2 * i];
    int index = -1;
    for (int c = 0; c < info_->num_components; ++c) {
      if (info_->comp_info[c].component_id == id) index = c;
    }
    // In the frame's order, each once (T.81 B.2.3). libjpeg refuses repeats
    // and accepts other orders: those are left to it.
    if (index < 0 || (i > 0 && index <= scan->component[i - 1])) return false;
    scan->component[i] = index;
    scan->dc_table[i] = tables >> 4;
    scan->ac_table[i] = tables & 15;
  }
  scan->ss = segment[1 + 2 * count];
  scan->se = segment[2 + 2 * count];
  scan->ah = segment[3 + 2 * count] >> 4;
  scan->al = segment[3 + 2 * count] & 15;
  return true;
}

const HuffmanTable* SharedTableOf(const jpeg_decompress_struct& info,
                                  const jpeg_component_info& comp, bool dc, bool pairs) {
  const int number = dc ? comp.dc_tbl_no : comp.ac_tbl_no;
  if (number < 0 || number >= NUM_HUFF_TBLS) return nullptr;
  const JHUFF_TBL* table = dc ? info.dc_huff_tbl_ptrs[number] : info.ac_huff_tbl_ptrs[number];
  if (table == nullptr) return nullptr;
  return SharedBaselineTable(table->bits, table->huffval, dc, pairs);
}

}  // namespace jpeg_entropy
}  // namespace gpufeed
