// The inverse transforms of the DCT-scaled decode (scaled_transform.h): the
// SIMD versions give the portable loops' bytes for every corner size and
// replication, on random corners, flat ones and corners whose products
// clamp; and the portable loops give the corner's pixels as the transform
// defines them (a double-precision reference, within one level).
#include "decode/scaled_transform.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace gpufeed {
namespace {

using scaled_transform::PickPortableTransform;
using scaled_transform::PickTransform;

constexpr int kSizes[] = {1, 2, 4};

struct Corner {
  int16_t coef[64] = {};  // natural order, 8 per row; only the w x h corner is read
  float quant[16] = {};   // [v * w + u]
};

// A random w x h corner: `flat` keeps only the DC; `extreme` draws values and
// steps large enough to clamp (16-bit coefficients times 16-bit steps).
Corner RandomCorner(std::mt19937* rng, int w, int h, bool flat, bool extreme) {
  Corner c;
  std::uniform_int_distribution<int> small(-300, 300), large(-32768, 32767);
  std::uniform_int_distribution<int> step(1, 40), big_step(1, 65535);
  for (int v = 0; v < h; ++v) {
    for (int u = 0; u < w; ++u) {
      const bool dc = u == 0 && v == 0;
      c.coef[v * 8 + u] = static_cast<int16_t>(flat && !dc ? 0 : extreme ? large(*rng) : small(*rng));
      c.quant[v * w + u] = static_cast<float>(extreme ? big_step(*rng) : step(*rng));
    }
  }
  return c;
}

// The block's pixels from its corner by the transform's definition: the
// n-point inverse DCT basis C(u)/2 cos((2x+1) u pi / 2n) on each axis, + 128,
// rounded and clamped.
uint8_t Reference(const Corner& c, int w, int h, int x, int y) {
  const double pi = std::acos(-1.0);
  auto basis = [&](int n, int p, int u) {
    return 0.5 * (u == 0 ? std::sqrt(0.5) : 1.0) * std::cos((2 * p + 1) * u * pi / (2 * n));
  };
  double sum = 128.0;
  for (int v = 0; v < h; ++v) {
    for (int u = 0; u < w; ++u) {
      sum += basis(w, x, u) * basis(h, y, v) * c.coef[v * 8 + u] * c.quant[v * w + u];
    }
  }
  return static_cast<uint8_t>(std::min(255.0, std::max(0.0, std::floor(sum + 0.5))));
}

// Calls fn(w, h, rx, ry) for every corner size and replication.
template <typename Fn>
void ForEachTransform(Fn fn) {
  for (int w : kSizes) {
    for (int h : kSizes) {
      for (int rx = 1; rx <= 2; ++rx) {
        for (int ry = 1; ry <= 2; ++ry) fn(w, h, rx, ry);
      }
    }
  }
}

TEST(ScaledTransformTest, SimdVersionsGiveThePortableLoopsBytes) {
  std::mt19937 rng(7);
  const size_t stride = 16;  // wider than any block's pixels
  ForEachTransform([&](int w, int h, int rx, int ry) {
    const auto simd = PickTransform(w, h, rx, ry);
    const auto portable = PickPortableTransform(w, h, rx, ry);
    ASSERT_NE(simd, nullptr);
    ASSERT_NE(portable, nullptr);
    for (int i = 0; i < 3000; ++i) {
      const Corner c = RandomCorner(&rng, w, h, i % 5 == 0, i % 3 == 0);
      std::vector<uint8_t> a(stride * 8, 0xAB), b(stride * 8, 0xAB);
      simd(c.quant, c.coef, a.data(), stride);
      portable(c.quant, c.coef, b.data(), stride);
      ASSERT_EQ(a, b) << w << "x" << h << " corner, replication " << rx << "x" << ry
                      << ", case " << i;
    }
  });
}

TEST(ScaledTransformTest, PixelsFollowTheBasisAndEachIsReplicated) {
  std::mt19937 rng(11);
  const size_t stride = 16;
  ForEachTransform([&](int w, int h, int rx, int ry) {
    const auto transform = PickTransform(w, h, rx, ry);
    for (int i = 0; i < 500; ++i) {
      const Corner c = RandomCorner(&rng, w, h, i % 5 == 0, i % 7 == 0);
      std::vector<uint8_t> out(stride * 8, 0xAB);
      transform(c.quant, c.coef, out.data(), stride);
      for (int y = 0; y < 8; ++y) {
        for (int x = 0; x < static_cast<int>(stride); ++x) {
          const uint8_t got = out[y * stride + x];
          if (y >= h * ry || x >= w * rx) {
            ASSERT_EQ(got, 0xAB) << "wrote outside the block at " << x << "," << y;
            continue;
          }
          const int want = Reference(c, w, h, x / rx, y / ry);
          ASSERT_LE(std::abs(got - want), 1)
              << w << "x" << h << " corner, pixel " << x << "," << y << ", case " << i;
        }
      }
    }
  });
}

}  // namespace
}  // namespace gpufeed
