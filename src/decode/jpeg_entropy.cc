#include "decode/jpeg_entropy.h"

#include "decode/jpeg_bits.h"
#include "decode/jpeg_blocks.h"

#include <algorithm>
#include <cstring>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpufeed {
namespace jpeg_entropy {

bool HuffmanTable::Build(const uint8_t counts[17], const uint8_t symbols_in[256], bool dc) {
  static_assert(kLookupBits <= 15, "a kFull value (under kLookupBits magnitude bits) fits 15 bits");
  skip_built = false;  // skip and pair tables left from an earlier build no longer apply
  pair_built = false;
  std::memset(lookup, 0, sizeof(lookup));
  int total = 0;
  for (int length = 1; length <= 16; ++length) total += counts[length];
  if (total > 256) return false;
  // A DC symbol is a magnitude size; libjpeg refuses one over 15.
  for (int i = 0; dc && i < total; ++i) {
    if (symbols_in[i] > 15) return false;
  }
  std::memcpy(symbols, symbols_in, 256);
  int32_t code = 0;
  int index = 0;
  for (int length = 1; length <= 16; ++length) {
    value_offset[length] = index - code;
    for (int i = 0; i < counts[length]; ++i, ++index, ++code) {
      // Each code must fit in `length` bits, all-ones excluded (libjpeg's
      // test): checked before it is entered in the lookup.
      if (code >= (1 << length) - 1) return false;
      if (length <= kLookupBits) {
        const uint8_t symbol = symbols[index];
        const int run = symbol >> 4, size = symbol & 15;
        const int spare = kLookupBits - length;
        for (int fill = 0; fill < (1 << spare); ++fill) {
          const int peek = (code << spare) | fill;
          uint32_t entry;
          if (size == 0) {
            // End of block, or (run 15) sixteen zeros: a zero value after 15.
            entry = kFull | static_cast<uint32_t>(length) | (run << kRunShift) |
                    (run == 15 ? 0 : kEndOfBlock);
          } else if (length + size <= kLookupBits) {
            const int bits = (fill >> (spare - size)) & ((1 << size) - 1);
            const uint32_t value = static_cast<uint32_t>(Extend(bits, size));  // wraps: EntryValue
            entry = kFull | static_cast<uint32_t>(length + size) | (run << kRunShift) |
                    (size << kSizeShift) | (value << kValueShift);
          } else {
            entry = kCode | static_cast<uint32_t>(length) | (run << kRunShift) |
                    (size << kSizeShift);
          }
          lookup[peek] = entry;
        }
      }
    }
    max_code[length] = counts[length] ? code - 1 : -1;
    code <<= 1;
  }
  max_code[17] = 0x7fffffff;  // sentinel: ends the slow search
  return true;
}

namespace {

// The pair entry (kPair* layout) for the kLookupBits bits `index`, from a
// table's single-symbol lookup.
uint32_t PairEntry(const uint32_t* lookup, uint32_t index) {
  const uint32_t first = lookup[index];
  const int length1 = static_cast<int>(first & kLengthMask);
  const int size1 = static_cast<int>((first >> kSizeShift) & 15);
  if ((first & kFull) == 0 || size1 > 7) return 0;  // value1 holds 8 bits
  if (first & kEndOfBlock) return static_cast<uint32_t>(length1) | kPairFull | kPairEnd;
  const uint32_t run1 = (first >> kRunShift) & 15;
  const uint32_t value1 = static_cast<uint32_t>(EntryValue(first)) & 0xFF;
  uint32_t entry = kPairFull | run1 << kPairRun1Shift | value1 << kPairValue1Shift;
  const int left = kLookupBits - length1;
  // The second symbol, when it lies in the bits left (zeros past them: an
  // entry no longer than what is left depends on real bits only).
  const uint32_t second = left > 0 ? lookup[(index << length1) & ((1u << kLookupBits) - 1)] : 0;
  const int length2 = static_cast<int>(second & kLengthMask);
  const int size2 = static_cast<int>((second >> kSizeShift) & 15);
  if ((second & kFull) == 0 || length2 > left || size2 > 5) {
    return entry | static_cast<uint32_t>(length1) | 1u << kPairAdvance2Shift;
  }
  entry |= static_cast<uint32_t>(length1 + length2);
  if (second & kEndOfBlock) return entry | kPairEnd | 1u << kPairAdvance2Shift;
  const uint32_t advance2 = ((second >> kRunShift) & 15) + 1;
  const uint32_t value2 = static_cast<uint32_t>(EntryValue(second)) & 0x3F;
  return entry | kPairTwo | advance2 << kPairAdvance2Shift | value2 << kPairValue2Shift;
}

}  // namespace

void HuffmanTable::BuildPairs() {
  for (uint32_t index = 0; index < (1u << kLookupBits); ++index) {
    pair[index] = PairEntry(lookup, index);
  }
  pair_built = true;
}

void HuffmanTable::BuildSkip() {
  static_assert(kSkipBits >= kLookupBits && kSkipBits <= 63, "skip entries hold 6 bits of length");
  for (uint32_t index = 0; index < (1u << kSkipBits); ++index) {
    int used = 0, advance = 0;
    uint16_t end = 0;
    while (used < kSkipBits) {
      // The kLookupBits bits from `used` on, zeros past the index's bits: a
      // kFull entry no longer than what is left depends on real bits only.
      const uint32_t window = (index << used) & ((1u << kSkipBits) - 1);
      const uint32_t entry = lookup[window >> (kSkipBits - kLookupBits)];
      const int length = static_cast<int>(entry & kLengthMask);
      if ((entry & kFull) == 0 || used + length > kSkipBits) break;
      if (entry & kEndOfBlock) {
        used += length;
        end = kSkipEndOfBlock;
        break;
      }
      const int step = static_cast<int>((entry >> kRunShift) & 15) + 1;  // 16: sixteen zeros
      if (advance + step > 63) break;
      advance += step;
      used += length;
    }
    if (used == 0) advance = 63;  // with k >= 1, fails SkipRest's bound: one symbol at a time
    skip[index] = static_cast<uint16_t>(used | advance << kSkipAdvanceShift | end);
  }
  skip_built = true;
}

namespace {

struct CachedTable {
  bool valid = false;
  bool dc = false;
  uint64_t hash = 0;
  uint64_t last_use = 0;
  uint8_t counts[17] = {};
  uint8_t symbols[256] = {};
  HuffmanTable table;
};

struct TableCache {
  std::unique_ptr<CachedTable[]> entries{new CachedTable[kTableCacheSize]};
  uint64_t clock = 0;
};

}  // namespace

const HuffmanTable* SharedBaselineTable(const uint8_t counts[17], const uint8_t symbols[256],
                                        bool dc, bool pairs) {
  thread_local TableCache cache;
  int total = 0;
  for (int length = 1; length <= 16; ++length) total += counts[length];
  total = std::min(total, 256);  // Build refuses more
  uint64_t hash = dc ? 0x9E3779B97F4A7C15ull : 14695981039346656037ull;  // FNV-1a
  for (int length = 1; length <= 16; ++length) hash = (hash ^ counts[length]) * 1099511628211ull;
  for (int i = 0; i < total; ++i) hash = (hash ^ symbols[i]) * 1099511628211ull;
  CachedTable* oldest = &cache.entries[0];
  for (int i = 0; i < kTableCacheSize; ++i) {
    CachedTable& entry = cache.entries[i];
    if (entry.valid && entry.hash == hash && entry.dc == dc &&
        std::memcmp(entry.counts + 1, counts + 1, 16) == 0 &&
        std::memcmp(entry.symbols, symbols, total) == 0) {
      entry.last_use = ++cache.clock;
      if (pairs && !dc && !entry.table.pair_built) entry.table.BuildPairs();
      return &entry.table;
    }
    if (!entry.valid || (oldest->valid && entry.last_use < oldest->last_use)) oldest = &entry;
  }
  // The least recently used entry: one of this decode's own tables is among
  // the latest kTableCacheSize calls, so it is not replaced while in use.
  CachedTable& entry = *oldest;
  entry.valid = false;
  if (!entry.table.Build(counts, symbols, dc)) return nullptr;
  if (!dc) entry.table.BuildSkip();
  if (!dc && pairs) entry.table.BuildPairs();
  entry.valid = true;
  entry.dc = dc;
  entry.hash = hash;
  entry.last_use = ++cache.clock;
  std::memcpy(entry.counts, counts, 17);
  std::memcpy(entry.symbols, symbols, 256);
  return &entry.table;
}

int ZigZagLimit(int rows, int cols) {
  int limit = 1;
  for (int k = 0; k < 64; ++k) {
    if (kNatural[k] / 8 < rows && kNatural[k] % 8 < cols) limit = k + 1;
  }
  return limit;
}

Bits FillSlow(Bits in, Source* source) {
  uint64_t bits = in.count == 0 ? 0 : in.bits & (~0ull << (64 - in.count));  // drop read-ahead
  int count = in.count;
  while (count <= 56) {
    unsigned byte = 0;
    if (source->marker == 0 && source->next < source->end) {
      byte = *source->next;
      if (byte == 0xFF) {
        // 0xFF 0x00 is a data byte 0xFF; fill bytes 0xFF may precede a
        // marker. A run of 0xFF before a 0x00 (no encoder writes one) ends
        // the data here: libjpeg's fast path reads it as a marker, its slow
        // path as one data byte, and which one runs depends on where the
        // bytes lie, so the decoders leave such a file to libjpeg.
        const uint8_t* look = source->next + 1;
        while (look < source->end && *look == 0xFF) ++look;
        if (look == source->next + 1 && look < source->end && *look == 0) {
          source->next = look + 1;
        } else if (look < source->end && *look == 0) {
          source->marker = 0x100;
          source->next = source->end;
          byte = 0;
          source->padding += 8;
        } else {
          source->marker = look < source->end ? *look : 0x100;
          source->next = look < source->end ? look + 1 : source->end;
          byte = 0;
          source->padding += 8;
        }
      } else {
        ++source->next;
      }
    } else {
      if (source->marker == 0) source->marker = 0x100;
      source->padding += 8;
    }
    bits |= static_cast<uint64_t>(byte) << (56 - count);
    count += 8;
  }
  return {bits, count};
}

bool Restart(int expected, Bits b, Source* source) {
  if (!Sound(b, *source)) return false;
  // Whole unread bytes before the marker mean the interval held more data
  // than its MCUs: libjpeg skips it with a warning; leave that to libjpeg.
  if (b.count - source->padding >= 8) return false;
  if (source->marker == 0) {
    const uint8_t* look = source->next;
    while (look < source->end && *look == 0xFF) ++look;
    if (look == source->next || look >= source->end) return false;
    source->marker = *look;
    source->next = look + 1;
  }
  if (source->marker != 0xD0 + expected) return false;
  source->padding = 0;
  source->marker = 0;
  return true;
}

int NextMarker(const Source& source, const uint8_t** after) {
  if (source.marker != 0) {
    *after = source.next;
    return source.marker == 0x100 ? 0 : source.marker;
  }
  // memchr finds the 0xFF bytes (about one in 256 of entropy data: most
  // are stuffed, 0xFF 0x00); a fill byte 0xFF before a marker is passed.
  const uint8_t* look = source.next;
  while (look + 1 < source.end) {
    look = static_cast<const uint8_t*>(std::memchr(look, 0xFF, source.end - 1 - look));
    if (look == nullptr) return 0;
    if (look[1] != 0 && look[1] != 0xFF) {
      *after = look + 2;
      return look[1];
    }
    ++look;
  }
  return 0;
}

bool NextMarkerIs(const Source& source, int marker) {
  const uint8_t* after;
  return NextMarker(source, &after) == marker;
}

bool SkipToRestartMarker(int expected, Source* source) {
  const uint8_t* after = nullptr;
  if (NextMarker(*source, &after) != 0xD0 + expected) return false;
  *source = Source{after - 2, source->end};  // the marker's 0xFF: no padding, no marker met
  return true;
}

int DecodeSlowCode(uint64_t bits, const HuffmanTable& table) {
  for (int length = 1; length <= 16; ++length) {
    const int32_t code = static_cast<int32_t>(bits >> (64 - length));
    if (table.max_code[length] >= 0 && code <= table.max_code[length]) {
      return table.symbols[(table.value_offset[length] + code) & 0xFF] | length << 8;
    }
  }
  return -1;
}

namespace {

// Zeroes natural rows [0, kRows) of a block with 16-byte stores, written
// out: GCC turns a loop clearing a variable number of rows into a call to
// memset per block (2.4% of a high-resolution photograph's exact=False
// decode), and a fixed 128-byte memset into `rep stos`.
template <int kRows>
inline void ZeroRows(int16_t* block) {
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (int r = 0; r < kRows; ++r) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block + 8 * r), zero);
  }
#else
  std::memset(block, 0, kRows * 8 * sizeof(int16_t));
#endif
}

// Zeroes the kept positions (zig-zag indices below the limit) of every
// block of an MCU, the only ones DecodeBlock writes besides the spare slot:
// the block's first 4 natural rows when those hold them (the limits of a
// 2x2 corner or smaller), else all 8 (the rows' other positions are never
// written, so they are 0 already).
inline void ClearKept(const Scan& scan, const int* rows, int16_t* const* component_blocks) {
  for (int c = 0; c < scan.components; ++c) {
    const Component& component = scan.component[c];
    const bool upper_half = rows[c] <= 4;
    for (int i = 0; i < component.h * component.v; ++i) {
      int16_t* block = component_blocks[c] + kBlockStride * i;
      if (upper_half) {
        ZeroRows<4>(block);
      } else {
        ZeroRows<8>(block);
      }
    }
  }
}

// Whether the restart interval that starts at MCU `first` (in scan order)
// holds no MCU of the window (rows up to last_row) and ends before the
// scan's last MCU (so that a restart marker follows it).
bool IntervalUnwanted(const Scan& scan, const McuWindow& window, int last_row, long first) {
  const long per_row = scan.mcus_per_row;
  const long end = first + scan.restart_interval;  // exclusive
  if (end >= per_row * scan.mcu_rows) return false;
  const long from_row = std::max<long>(first / per_row, window.first_row);
  const long to_row = std::min<long>((end - 1) / per_row, last_row);
  for (long row = from_row; row <= to_row; ++row) {
    const long from = row == first / per_row ? first % per_row : 0;
    const long to = row == (end - 1) / per_row ? (end - 1) % per_row + 1 : per_row;
    if (from < window.end_col && to > window.first_col) return false;
  }
  return true;
}

// Passes over the restart interval that starts at the next MCU without
// decoding it: reads past the marker before it (`after_marker`; the first
// interval has none; `b` the bits left before it), then goes to the marker
// after it, which must be RST count->next (false otherwise: libjpeg
// decodes the file), for BeforeMcu to read once the caller has emptied its
// bit buffer. The DC predictors restart there, so nothing of the interval
// reaches a later MCU.
bool PassInterval(bool after_marker, RestartCount* count, Bits b, Source* source) {
  if (after_marker) {
    if (!Restart(count->next, b, source)) return false;
    count->next = (count->next + 1) & 7;
  }
  if (!SkipToRestartMarker(count->next, source)) return false;
  count->until = 0;
  return true;
}

}  // namespace

bool DecodeScan(const Scan& scan, const McuWindow& window, BlockSink* sink) {
  if (scan.components < 1 || scan.components > kMaxComponents) return false;
  int blocks_per_mcu = 0;
  for (int c = 0; c < scan.components; ++c) {
    blocks_per_mcu += scan.component[c].h * scan.component[c].v;
    const Component& component = scan.component[c];
    if (!component.ac->skip_built) return false;
    if (component.limit <= kPairLimit && !component.ac->pair_built) return false;
  }
  if (blocks_per_mcu > kMaxBlocksPerMcu) return false;
  // Zeroed once: DecodeBlock writes only the kept positions (below the
  // limit) and the spare slot 64, so every other position stays 0; a wanted
  // MCU clears just the natural rows holding the kept ones first (ClearKept).
  alignas(64) int16_t storage[kMaxBlocksPerMcu * kBlockStride] = {};
  const int16_t* blocks[kMaxComponents];
  int16_t* component_blocks[kMaxComponents];
  // Per component, where zig-zag index k goes: its natural position below
  // the limit, else the spare slot 64 (stores need no test).
  uint8_t position[kMaxComponents][80];
  int clear_rows[kMaxComponents] = {};  // natural rows holding a kept position
  for (int c = 0, used = 0; c < scan.components; ++c) {
    for (int k = 0; k < scan.component[c].limit; ++k) {
      clear_rows[c] = std::max(clear_rows[c], kNatural[k] / 8 + 1);
    }
    component_blocks[c] = storage + used * kBlockStride;
    blocks[c] = component_blocks[c];
    used += scan.component[c].h * scan.component[c].v;
    for (int k = 0; k < 80; ++k) position[c][k] = k < scan.component[c].limit ? kNatural[k] : 64;
  }
  Source source{scan.data, scan.end};
  Bits b{0, 0};
  int dc[kMaxComponents] = {0, 0, 0};
  RestartCount restart{scan.restart_interval, 0};
  const int last_row = std::min(window.last_row, scan.mcu_rows - 1);
  int passing = 0;  // MCUs left of an interval passed over unread
  for (int y = 0; y <= last_row; ++y) {
    const bool row_wanted = y >= window.first_row;
    for (int x = 0; x < scan.mcus_per_row; ++x) {
      if (passing > 0) {
        --passing;
        continue;
      }
      const long index = static_cast<long>(y) * scan.mcus_per_row + x;
      if (scan.restart_interval > 0 && (restart.until == 0 || index == 0) &&
          IntervalUnwanted(scan, window, last_row, index)) {
        if (!PassInterval(index > 0, &restart, b, &source)) return false;
        b = {0, 0};
        passing = scan.restart_interval - 1;
        continue;
      }
      if (!BeforeMcu(scan.restart_interval, &restart, &b, &source, dc)) return false;
      const bool wanted = row_wanted && x >= window.first_col && x < window.end_col;
      if (wanted) ClearKept(scan, clear_rows, component_blocks);
      for (int c = 0; c < scan.components; ++c) {
        const Component& component = scan.component[c];
        for (int i = 0; i < component.h * component.v; ++i) {
          if (!(wanted ? DecodeBlock(&b, &source, component, position[c], &dc[c],
                                     component_blocks[c] + kBlockStride * i)
                       : SkipBlock(&b, &source, component, &dc[c]))) {
            return false;
          }
        }
      }
      if (wanted) sink->Mcu(x, y, blocks);
    }
    if (row_wanted) sink->RowDone(y);
    if (!Sound(b, source)) return false;
  }
  // Data that ran out without a marker (no EOI: a truncated file) is left
  // to libjpeg, which reports it, even when the wanted rows were whole.
  if (!Sound(b, source) || source.marker == 0x100) return false;
  return last_row < scan.mcu_rows - 1 || NextMarkerIs(source, 0xD9);
}

}  // namespace jpeg_entropy
}  // namespace gpufeed
