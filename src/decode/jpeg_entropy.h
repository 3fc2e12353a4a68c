// Baseline JPEG entropy (Huffman) decoding that keeps only the coefficients
// a DCT-scaled decode uses: the fast path of exact=False.
//
// A 1/2, 1/4 or 1/8 scaled decode needs only each block's low-frequency
// coefficients, yet every coefficient's code must be read to find the next
// block. libjpeg-turbo reads a code and then its magnitude bits in two
// steps; here one table lookup of the next kLookupBits bits gives a common
// symbol's code length, magnitude bits and value together (the approach of
// stb_image's fast AC table); below a limit of kPairLimit, up to two
// symbols per lookup where both fit (HuffmanTable::pair); coefficients past
// the block's limit are skipped without being stored, several whole symbols
// per lookup where their codes are short (HuffmanTable::skip).
//
// Scope: 8-bit baseline sequential JPEGs whose one scan holds every
// component (the JPEGs cameras and PIL write). Anything else, and any data
// this decoder cannot follow exactly as libjpeg would (a bad code, a missing
// or wrong restart marker, data that runs out), makes it return false: the
// caller then decodes with libjpeg, whose errors name the problem. It never
// reads outside [data, data + size).
//
// Thread safety: reentrant (HuffmanTable: one thread at a time while built,
// any number reading it afterwards).
#ifndef GPUFEED_DECODE_JPEG_ENTROPY_H_
#define GPUFEED_DECODE_JPEG_ENTROPY_H_

#include <cstddef>
#include <cstdint>

namespace gpufeed {
namespace jpeg_entropy {

constexpr int kLookupBits = 11;
// Bits a skip lookup (HuffmanTable::skip) reads at once.
constexpr int kSkipBits = 12;
constexpr int kMaxComponents = 3;
// JPEG's limit on the blocks of an MCU.
constexpr int kMaxBlocksPerMcu = 10;
// int16 slots per block handed to a BlockSink: 64 coefficients and spare.
constexpr int kBlockStride = 72;

// A Huffman table ready for decoding (Build), from a DHT segment's counts of
// codes per length (bits[1..16]) and symbols.
struct HuffmanTable {
  // Indexed by the next kLookupBits bits: a code of at most kLookupBits bits
  // with its magnitude bits (kFull: length = code + magnitude bits, value
  // sign-extended), or the code alone (kCode: length, run, size), or 0: a
  // longer code, decoded through max_code.
  uint32_t lookup[1 << kLookupBits];
  int32_t max_code[18];    // per length, the largest code; -1 when none
  int32_t value_offset[17];
  uint8_t symbols[256];
  // For the coefficients a scaled decode does not keep (BuildSkip; a
  // sequential scan's AC table only): indexed by the next kSkipBits bits,
  // the whole symbols (codes and magnitude bits) that lie within them, read
  // greedily while their zero runs add up to at most 63 and up to the first
  // end of block: bits 0-5 the bits they take (the low six bits, so that a
  // 64-bit shift by the entry needs no mask), bits 6-11 how far they move
  // through the block (run + 1 each, 16 for a run of sixteen zeros), bit 12
  // (kSkipEndOfBlock) they end with an end of block. When the first symbol
  // does not fit, the bits are 0 and the move 63, past any block from
  // position 1 on: the decoder then reads one symbol (through lookup).
  uint16_t skip[1 << kSkipBits];
  // For the kept coefficients of an AC table (BuildPairs; DecodeBlock with
  // a limit of at most kPairLimit, which only the DCT-scaled decode uses):
  // indexed by the next kLookupBits bits, up to two whole symbols at once
  // (kPair* layout below), else 0 (the symbol goes through `lookup`).
  uint32_t pair[1 << kLookupBits];
  bool skip_built = false;
  bool pair_built = false;
  // False for a table libjpeg refuses too (codes that do not fit their
  // lengths; a DC symbol over 15). REQUIRES: 256 readable symbols_in.
  bool Build(const uint8_t counts[17], const uint8_t symbols_in[256], bool dc);
  // Builds `skip` from `lookup`. REQUIRES: Build returned true for an AC table.
  void BuildSkip();
  // Builds `pair` from `lookup` (about 8 us: left out of the tables only
  // the exact path uses). REQUIRES: Build returned true for an AC table.
  void BuildPairs();
};

constexpr uint16_t kSkipLengthMask = 63;
constexpr int kSkipAdvanceShift = 6;
constexpr uint16_t kSkipEndOfBlock = 1u << 12;

// Pair entry layout: bits 0-5 the bits taken (a 64-bit shift by the entry
// needs no mask); kPairFull: the first symbol (code and magnitude bits)
// lies in the entry; kPairEnd: the entry ends the block (its first symbol
// is an end of block, or its second is); kPairTwo: a second symbol
// follows the first. The first lands run1 past k with value1; the second,
// if any, advance2 (its run + 1) past the first, with value2; without one,
// advance2 is 1 and value2 0 (a zero stored at the next position, which is
// still zero). Sixteen zeros are a symbol of run 15 and value 0.
constexpr uint32_t kPairFull = 1u << 6;
constexpr uint32_t kPairEnd = 1u << 7;
constexpr uint32_t kPairTwo = 1u << 8;
constexpr int kPairRun1Shift = 9;       // 4 bits
constexpr int kPairAdvance2Shift = 13;  // 5 bits
constexpr int kPairValue1Shift = 18;    // 8 bits, two's complement
constexpr int kPairValue2Shift = 26;    // 6 bits, two's complement
// The largest limit DecodeBlock reads pairs for: two symbols from k below
// it land at most at 31 + 15 + 16 = 62, inside the block, where an end of
// block may still follow.
constexpr int kPairLimit = 32;

// The tables of baseline scans, built once per thread and reused while a
// DHT's contents repeat (a dataset's files mostly share their encoder's
// tables): the table Build makes from (counts, symbols) as a DC or an AC
// table (AC: with its skip table, and its pair table when `pairs`; a cached
// table asked for pairs gets them then), or nullptr when Build refuses it.
// The pointer stays valid on this thread until kTableCacheSize further
// calls. An AC table takes about 25 us to build (its skip table 15, its
// pair table 8), which files that each carry their own tables (jpegtran
// -optimize) pay per image.
// May throw std::bad_alloc (its first call on a thread allocates the cache).
constexpr int kTableCacheSize = 8;
const HuffmanTable* SharedBaselineTable(const uint8_t counts[17], const uint8_t symbols[256],
                                        bool dc, bool pairs = true);

// One component of the scan.
struct Component {
  int h = 1, v = 1;  // sampling factors
  const HuffmanTable* dc = nullptr;
  const HuffmanTable* ac = nullptr;
  // Coefficients kept per block: zig-zag positions [0, limit) (1..64).
  int limit = 64;
};

// Receives each MCU's blocks: coefficients in natural (row-major) order,
// quantized, DC predicted (the true DC); only positions below the
// component's limit in zig-zag order are set, the rest are 0.
class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // The blocks of MCU (mcu_x, mcu_y): block (bx, by) of component c at
  // blocks[c] + kBlockStride * (by * h + bx). Called only for the MCUs the
  // sink asked for (McuWindow), left to right, row by row.
  virtual void Mcu(int mcu_x, int mcu_y, const int16_t* const* blocks) = 0;
  // After each wanted row mcu_y (its last wanted MCU), also when the
  // window has no column.
  virtual void RowDone(int mcu_y) { (void)mcu_y; }
};

// The MCUs handed to a sink: rows [first_row, last_row], columns
// [first_col, end_col). The rest of the scan, down to last_row, is only read
// past (DC predictors kept, nothing stored), except a restart interval that
// holds none of the window's MCUs: it is not decoded at all (the decoder
// goes on from the marker after it, where the DC predictors restart), so
// damage inside it is not seen.
struct McuWindow {
  int first_row = 0, last_row = 0;
  int first_col = 0, end_col = 0;
};

struct Scan {
  const uint8_t* data = nullptr;  // the entropy-coded data (after SOS)
  const uint8_t* end = nullptr;   // the end of the file
  int components = 0;             // 1 (a single-component image) or 3
  Component component[kMaxComponents];
  int mcus_per_row = 0;
  int mcu_rows = 0;
  int restart_interval = 0;  // in MCUs; 0 when none
};

// Decodes MCU rows [0, window.last_row] of `scan`, handing the window's
// MCUs to `sink`. Returns false for data it does not follow (the caller
// then uses libjpeg). REQUIRES: scan.data <= scan.end; 1 <=
// scan.components <= 3; every component's dc and ac tables non-null and
// built (Build returned true; each ac table's BuildSkip called, and
// BuildPairs for a limit of at most kPairLimit, else the scan is refused), h and v >= 1, limit in 1..64; sink non-null.
bool DecodeScan(const Scan& scan, const McuWindow& window, BlockSink* sink);

// The zig-zag index after the last natural position (r, c) with r < rows
// and c < cols: the limit that keeps a rows x cols low-frequency corner.
int ZigZagLimit(int rows, int cols);

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_ENTROPY_H_
