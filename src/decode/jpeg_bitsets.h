// Bit-mask helpers of the progressive decoder (jpeg_progressive.cc), on a
// block's 64 zig-zag positions. Internal to src/decode.
#ifndef GPUFEED_DECODE_JPEG_BITSETS_H_
#define GPUFEED_DECODE_JPEG_BITSETS_H_

#include <cstdint>
#include <cstring>

namespace gpufeed {
namespace jpeg_entropy {

// Bits set in `x` (the build targets x86-64 without POPCNT, where the
// builtin is a library call).
inline int PopCount(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

// Per byte value: the positions of its set bits in increasing order (byte
// j of the word; the rest 0), and how many there are.
struct BytePositions {
  uint64_t positions[256];
  uint8_t count[256];
};
constexpr BytePositions MakeBytePositions() {
  BytePositions table{};
  for (int v = 0; v < 256; ++v) {
    int n = 0;
    for (int bit = 0; bit < 8; ++bit) {
      if ((v >> bit) & 1) table.positions[v] |= static_cast<uint64_t>(bit) << (8 * n++);
    }
    table.count[v] = static_cast<uint8_t>(n);
  }
  return table;
}
constexpr BytePositions kBytePositions = MakeBytePositions();

// Writes the positions of x's set bits, in increasing order, to out[0, n)
// and returns n. out must hold 72 bytes (a byte's 8 are stored whole).
inline int SetBitPositions(uint64_t x, uint8_t* out) {
  int n = 0;
  for (int byte = 0; byte < 8; ++byte) {
    const unsigned v = static_cast<unsigned>(x >> (8 * byte)) & 0xFF;
    const uint64_t positions = kBytePositions.positions[v] + 0x0808080808080808ull * byte;
    std::memcpy(out + n, &positions, 8);
    n += kBytePositions.count[v];
  }
  return n;
}

// Bits k in [from, to] (0 <= from, to <= 63); 0 when from > to.
inline uint64_t Range(int from, int to) {
  if (from > to) return 0;
  const uint64_t upto = to == 63 ? ~0ull : (1ull << (to + 1)) - 1;
  return upto & ~((1ull << from) - 1);
}

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_BITSETS_H_
