// The bit reading shared by gpufeed's JPEG entropy decoders (baseline:
// jpeg_entropy.cc; progressive: jpeg_progressive.cc). Internal to
// src/decode.
//
// Invariant of the bit buffer: the top `count` bits of Bits::bits are the
// next bits of the scan; the bits below are the following data bytes (the
// 8-byte refill takes no 0xFF byte) or zero. After the data stops (a marker,
// or the end of the file) zero bits are supplied and counted in
// Source::padding: using one makes Sound() false, and the decoders then
// refuse the image (libjpeg decodes it instead).
#ifndef GPUFEED_DECODE_JPEG_BITS_H_
#define GPUFEED_DECODE_JPEG_BITS_H_

#include <cstdint>
#include <cstring>

#include "decode/jpeg_entropy.h"

namespace gpufeed {
namespace jpeg_entropy {

// Natural (row-major) position of each zig-zag index; indices 64..79 (a
// corrupt run) map to 63, so a lookup cannot index past a block. The
// decoder's stores go through a position map that sends them to a spare
// slot instead (libjpeg writes them to 63; no scaled transform reads 63).
constexpr uint8_t kNatural[80] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

// Lookup entry layout. The length is the low six bits, so that a 64-bit
// shift by the entry needs no mask (the shift that each next lookup waits
// on).
constexpr uint32_t kLengthMask = 63;      // bits consumed
constexpr int kRunShift = 6;              // zero run (4 bits)
constexpr int kSizeShift = 10;            // magnitude bits (4 bits)
constexpr uint32_t kFull = 1u << 14;      // length covers the magnitude bits too
constexpr uint32_t kEndOfBlock = 1u << 15;
constexpr uint32_t kCode = 1u << 16;      // code only; the magnitude bits follow
constexpr int kValueShift = 17;           // the value (kFull), two's complement in 15 bits

// A kFull entry's value (at most 10 magnitude bits: within 15 signed bits).
inline int EntryValue(uint32_t entry) { return static_cast<int32_t>(entry) >> kValueShift; }

// The signed value of `size` magnitude bits (JPEG's EXTEND). REQUIRES:
// 1 <= size <= 15.
inline int Extend(int bits, int size) {
  return bits < (1 << (size - 1)) ? bits - (1 << size) + 1 : bits;
}

// The bit buffer: the top `count` bits of `bits` are the next ones; bits
// below may hold the following bytes (never a marker, never stuffing).
// Kept in locals of the decoding loop (registers); Source holds the rest.
struct Bits {
  uint64_t bits;
  int count;
};

// Where the entropy-coded bytes come from: undoes 0xFF 0x00 stuffing, stops
// at a marker and then supplies zero bits, counted in `padding` so that
// using them is detected as an error.
struct Source {
  const uint8_t* next;
  const uint8_t* end;
  int marker = 0;   // the marker the data stopped at (0x100: the data ended); 0 while none
  int padding = 0;  // zero bits supplied after the data stopped, in the buffer or used
};

// Bits that four lookups of up to 12 bits take (kSkipBits; a pair lookup
// takes at most kLookupBits).
constexpr int kGroupBits = 48;

// Refills to at least 57 bits, byte by byte.
Bits FillSlow(Bits in, Source* source);

// At least `at_least` bits in the buffer (some may be padding). REQUIRES:
// at_least <= 56 (a refill takes whole bytes up to 63 bits).
//
// A refill is a branch on the count, which follows the data: the decoding
// loops that read past many codes ask for kGroupBits and then take up to
// four lookups without asking again (SkipRest; DecodeBlock's pairs), which
// mispredicts that branch less often than a test per lookup.
__attribute__((always_inline)) inline void Fill(Bits* b, Source* source, int at_least = 32) {
  if (b->count >= at_least) return;
  if (source->end - source->next >= 8 && source->marker == 0) {
    uint64_t raw;
    std::memcpy(&raw, source->next, 8);
    // No 0xFF byte among the eight: take whole bytes without looking.
    const uint64_t inverted = ~raw;
    if (((inverted - 0x0101010101010101ull) & ~inverted & 0x8080808080808080ull) == 0) {
      b->bits |= __builtin_bswap64(raw) >> b->count;
      const int taken = (63 - b->count) >> 3;
      source->next += taken;
      b->count += taken * 8;
      return;
    }
  }
  *b = FillSlow(*b, source);
}

// The next n bits. REQUIRES: 1 <= n <= 32, n bits in the buffer (Fill).
inline uint32_t Peek(const Bits& b, int n) { return static_cast<uint32_t>(b.bits >> (64 - n)); }
inline void Skip(Bits* b, int n) {
  b->bits <<= n;
  b->count -= n;
}
// True while no padding bit has been used.
inline bool Sound(const Bits& b, const Source& source) { return b.count >= source.padding; }

// Whether the bits `b` leaves end the interval at a restart marker RST
// `expected` (0..7): only the partial byte before it, which is discarded
// with the marker (the caller then empties its buffer). Takes the buffer by
// value so that a decoder's buffer never has its address taken (it stays
// in registers).
bool Restart(int expected, Bits b, Source* source);

// After the last MCU of a scan: whether the next marker (past fill bytes
// and any stray bytes, which libjpeg skips with a warning) is `marker`.
bool NextMarkerIs(const Source& source, int marker);

// The next marker's code (past fill bytes and stray bytes) and the byte
// after it, from where the source stopped; 0 when the data ends first.
int NextMarker(const Source& source, const uint8_t** after);

// Passes over the rest of a restart interval without decoding it: finds
// the next marker from where the source stands, which must be RST
// `expected` (0..7; false otherwise, nothing changed), and leaves the
// source at it, as at the end of a decoded interval once the caller has
// emptied its bit buffer (its next BeforeMcu reads the marker). REQUIRES:
// the source stands inside the interval's data, no marker met yet.
bool SkipToRestartMarker(int expected, Source* source);

// A code longer than kLookupBits at the top of `bits`: canonical search by
// length. Returns the symbol | its code's length << 8, or -1 for no such
// code. Takes the bits by value: a decoding loop's buffer never has its
// address taken by a call, so that it stays in registers.
int DecodeSlowCode(uint64_t bits, const HuffmanTable& table);

// DecodeSlowCode on the buffer, the code consumed: the symbol, or -1.
// REQUIRES: 16 bits in the buffer.
inline int DecodeSlow(Bits* b, const HuffmanTable& table) {
  const int found = DecodeSlowCode(b->bits, table);
  if (found < 0) return -1;
  Skip(b, found >> 8);
  return found & 0xFF;
}

// Decodes a DC difference (its size's code, then the magnitude bits) into
// *diff. False for an invalid code.
__attribute__((always_inline)) inline bool DecodeDcDiff(Bits* b, Source* source,
                                                         const HuffmanTable& table, int* diff) {
  Fill(b, source);
  const uint32_t entry = table.lookup[Peek(*b, kLookupBits)];
  if (entry & kFull) {
    Skip(b, entry & kLengthMask);
    *diff = EntryValue(entry);
    return true;
  }
  int size;
  if (entry & kCode) {
    Skip(b, entry & kLengthMask);
    size = (entry >> kSizeShift) & 15;
  } else {
    size = DecodeSlow(b, table);
    if (size < 0) return false;
  }
  *diff = size == 0 ? 0 : Extend(static_cast<int>(Peek(*b, size)), size);
  if (size) Skip(b, size);
  return true;
}

// Reads an AC symbol and its magnitude bits: kSymbol with its run, size
// and value (size and value 0 for sixteen zeros), or kEnd for a size-0
// symbol other than sixteen zeros (the end of a block; in a progressive
// scan, run r starts an end-of-band run of 2^r + r more bits of blocks), or
// kBad for an invalid code.
constexpr int kSymbol = 0, kEnd = 1, kBad = -1;

inline int DecodeAcSymbol(Bits* b, Source* source, const HuffmanTable& table, int* run, int* size,
                          int* value) {
  Fill(b, source);
  const uint32_t entry = table.lookup[Peek(*b, kLookupBits)];
  int symbol;
  if (entry & kFull) {
    Skip(b, entry & kLengthMask);
    *run = (entry >> kRunShift) & 15;
    *size = (entry >> kSizeShift) & 15;
    if (entry & kEndOfBlock) return kEnd;
    *value = EntryValue(entry);
    return kSymbol;
  }
  if (entry & kCode) {
    Skip(b, entry & kLengthMask);
    symbol = static_cast<int>((entry >> kRunShift) & 15) << 4 | ((entry >> kSizeShift) & 15);
  } else {
    symbol = DecodeSlow(b, table);
    if (symbol < 0) return kBad;
  }
  *run = symbol >> 4;
  *size = symbol & 15;
  if (*size == 0) {
    *value = 0;
    return *run == 15 ? kSymbol : kEnd;
  }
  Fill(b, source);
  *value = Extend(static_cast<int>(Peek(*b, *size)), *size);
  Skip(b, *size);
  return kSymbol;
}

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_BITS_H_
