// Animated WebP files for tests and fuzz seeds, assembled chunk by chunk as
// the WebP container specification lays them out (libwebp's animation
// encoder lives in libwebpmux, which gpufeed does not link).
#ifndef GPUFEED_TESTS_WEBP_TEST_UTIL_H_
#define GPUFEED_TESTS_WEBP_TEST_UTIL_H_

#include <cstdint>
#include <string>

namespace gpufeed {

inline std::string WebpLe(uint32_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

// A chunk: tag, little-endian size, payload, a pad byte to an even size.
inline std::string WebpChunk(const std::string& tag, const std::string& payload) {
  std::string out = tag + WebpLe(static_cast<uint32_t>(payload.size()), 4) + payload;
  if (payload.size() % 2 != 0) out += '\0';
  return out;
}

// A one-frame animation on a canvas_width x canvas_height canvas (with the
// alpha flag) whose frame, frame_width x frame_height, is `frame_chunks`
// (a whole "VP8L" or "ALPH" + "VP8 " chunk sequence) drawn at (x, y), both
// even. A background colour is set (opaque red); decoders clear the canvas
// to transparent black for a first frame all the same.
inline std::string WebpAnimation(const std::string& frame_chunks, int frame_width, int frame_height,
                                 int canvas_width, int canvas_height, int x, int y) {
  const std::string vp8x = std::string(1, '\x12') + std::string(3, '\0') +
                           WebpLe(canvas_width - 1, 3) + WebpLe(canvas_height - 1, 3);
  const std::string anim = WebpLe(0xFFFF0000u, 4) + WebpLe(0, 2);
  const std::string anmf = WebpLe(x / 2, 3) + WebpLe(y / 2, 3) + WebpLe(frame_width - 1, 3) +
                           WebpLe(frame_height - 1, 3) + WebpLe(100, 3) + std::string(1, '\0') +
                           frame_chunks;
  const std::string body =
      "WEBP" + WebpChunk("VP8X", vp8x) + WebpChunk("ANIM", anim) + WebpChunk("ANMF", anmf);
  return "RIFF" + WebpLe(static_cast<uint32_t>(body.size()), 4) + body;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_WEBP_TEST_UTIL_H_
