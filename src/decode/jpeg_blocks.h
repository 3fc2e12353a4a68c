// The block decoding shared by gpufeed's baseline entropy decoders: the
// scan loop of the DCT-scaled decode (jpeg_entropy.cc, DecodeScan) and the
// MCU-at-a-time decoder behind libjpeg (jpeg_mcu.cc). Internal to
// src/decode.
//
// A block's coefficients land in natural (row-major) order through a
// position map: zig-zag index k goes to position[k] (80 entries, so that a
// corrupt run past 63 still indexes the map).
#ifndef GPUFEED_DECODE_JPEG_BLOCKS_H_
#define GPUFEED_DECODE_JPEG_BLOCKS_H_

#include <cstdint>

#include "decode/jpeg_bits.h"
#include "decode/jpeg_entropy.h"

namespace gpufeed {
namespace jpeg_entropy {
// Reads past one AC symbol and its magnitude bits: how far it moves through
// the block (run + 1; 16 for sixteen zeros), 0 for an end of block, -1 for
// an invalid code.
inline int SkipSymbol(Bits* b, Source* source, const HuffmanTable& table) {
  int run, size, value;
  const int kind = DecodeAcSymbol(b, source, table, &run, &size, &value);
  if (kind != kSymbol) return kind == kEnd ? 0 : -1;
  return size == 0 ? 16 : run + 1;
}

// Reads past a block's AC symbols from zig-zag index k on: as many whole
// symbols per lookup as the skip table holds while they stay inside the
// block (k + advance <= 63: the block cannot end within them but by their
// end of block), else one. Up to four lookups per refill (kGroupBits).
// False for an invalid code.
__attribute__((always_inline)) inline bool SkipRest(Bits* b, Source* source,
                                                     const HuffmanTable& table, int k) {
  static_assert(4 * kSkipBits <= kGroupBits, "a group's lookups fit the bits a refill holds");
  const uint16_t* skip = table.skip;
  while (k < 64) {
    Fill(b, source, kGroupBits);
    for (int lookup = 0; lookup < 4; ++lookup) {
      const uint32_t entry = skip[Peek(*b, kSkipBits)];
      const int advance = static_cast<int>(entry >> kSkipAdvanceShift) & 63;
      if (__builtin_expect(k + advance < 64, 1)) {  // never for a length-0 entry: k >= 1
        Skip(b, static_cast<int>(entry & kSkipLengthMask));
        if (entry & kSkipEndOfBlock) return true;
        k += advance;
        continue;
      }
      const int step = SkipSymbol(b, source, table);
      if (step <= 0) return step == 0;
      k += step;
      break;
    }
  }
  return true;
}

// Decodes one AC symbol through the table's lookup, storing its value at
// position[k + run]: how far it moves (run + 1; 16 for sixteen zeros), 0 for
// an end of block, -1 for an invalid code.
inline int DecodeOne(Bits* b, Source* source, const HuffmanTable& table, const uint8_t* position,
                     int16_t* block, int k) {
  int run, size, value;
  const int kind = DecodeAcSymbol(b, source, table, &run, &size, &value);
  if (kind != kSymbol) return kind == kEnd ? 0 : -1;
  if (size == 0) return 16;
  block[position[k + run]] = static_cast<int16_t>(value);
  return run + 1;
}

// Decodes one block into `block` (natural order, zeroed by the caller; slot
// 64 takes the coefficients past the limit); *dc is the component's DC
// predictor. False for an invalid code.
__attribute__((always_inline)) inline bool DecodeBlock(Bits* b, Source* source,
                                                        const Component& component,
                                                        const uint8_t* position, int* dc,
                                                        int16_t* block) {
  int diff;
  if (!DecodeDcDiff(b, source, *component.dc, &diff)) return false;
  // The predictor wraps as libjpeg's 16-bit coefficient does (a hostile
  // file can push it past any int).
  *dc = static_cast<int16_t>(static_cast<uint16_t>(*dc + diff));
  block[0] = static_cast<int16_t>(*dc);
  const uint32_t* lookup = component.ac->lookup;
  int k = 1;
  if (component.limit <= kPairLimit) {
    // The kept coefficients (below the limit), up to two symbols a lookup,
    // up to four lookups per refill (kGroupBits).
    static_assert(4 * kLookupBits <= kGroupBits, "a group's lookups fit the bits a refill holds");
    const uint32_t* pair = component.ac->pair;
    while (k < component.limit) {
      Fill(b, source, kGroupBits);
      for (int lookup = 0; lookup < 4 && k < component.limit; ++lookup) {
        const uint32_t entry = pair[Peek(*b, kLookupBits)];
        if (__builtin_expect(entry == 0, 0)) {
          const int step = DecodeOne(b, source, *component.ac, position, block, k);
          if (step <= 0) return step == 0;
          k += step;
          break;
        }
        Skip(b, entry & kLengthMask);
        const int first = k + static_cast<int>((entry >> kPairRun1Shift) & 15);
        block[position[first]] = static_cast<int16_t>(static_cast<int32_t>(entry << 6) >> 24);
        if (entry & kPairEnd) return true;
        const int second = first + static_cast<int>((entry >> kPairAdvance2Shift) & 31);
        block[position[second]] =
            static_cast<int16_t>(static_cast<int32_t>(entry) >> kPairValue2Shift);
        k = second + ((entry & kPairTwo) != 0);
      }
    }
    return SkipRest(b, source, *component.ac, k);
  }
  // The kept coefficients (below the limit), a symbol at a time.
  for (; k < component.limit; ++k) {
    Fill(b, source);
    const uint32_t entry = lookup[Peek(*b, kLookupBits)];
    int value;
    if (__builtin_expect((entry & kFull) != 0, 1)) {
      Skip(b, entry & kLengthMask);
      if (entry & kEndOfBlock) return true;
      value = EntryValue(entry);
      k += (entry >> kRunShift) & 15;
    } else {
      int symbol;
      if (entry & kCode) {
        Skip(b, entry & kLengthMask);
        symbol = static_cast<int>((entry >> kRunShift) & 15) << 4 | ((entry >> kSizeShift) & 15);
      } else {
        symbol = DecodeSlow(b, *component.ac);
        if (symbol < 0) return false;
      }
      const int size = symbol & 15;
      if (size == 0) {
        if ((symbol >> 4) != 15) return true;
        k += 15;
        continue;
      }
      Fill(b, source);
      value = Extend(static_cast<int>(Peek(*b, size)), size);
      Skip(b, size);
      k += symbol >> 4;
    }
    block[position[k]] = static_cast<int16_t>(value);
  }
  return SkipRest(b, source, *component.ac, k);
}

// Reads past one block, keeping only its DC predictor *dc. False for an
// invalid code.
__attribute__((always_inline)) inline bool SkipBlock(Bits* b, Source* source,
                                                      const Component& component, int* dc) {
  int diff;
  if (!DecodeDcDiff(b, source, *component.dc, &diff)) return false;
  *dc = static_cast<int16_t>(static_cast<uint16_t>(*dc + diff));
  return SkipRest(b, source, *component.ac, 1);
}

// Where a scan stands between restart markers: MCUs left in the interval
// and the number (0-7) of the marker that ends it.
struct RestartCount {
  int until = 0;
  int next = 0;
};

// Before each MCU of a scan with a restart interval (`interval` MCUs; 0:
// none): at an interval's end, reads past its marker RST `count->next`
// (false when that is not what follows: libjpeg would resynchronize, with
// a warning), empties the bit buffer and resets the DC predictors; then
// counts the MCU. Inlined into the decoding loops, so the buffer stays in
// registers.
__attribute__((always_inline)) inline bool BeforeMcu(int interval, RestartCount* count, Bits* b,
                                                    Source* source, int* dc) {
  if (interval <= 0) return true;
  if (count->until == 0) {
    if (!Restart(count->next, *b, source)) return false;
    *b = {0, 0};
    count->next = (count->next + 1) & 7;
    count->until = interval;
    for (int c = 0; c < kMaxComponents; ++c) dc[c] = 0;
  }
  --count->until;
  return true;
}

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_BLOCKS_H_
