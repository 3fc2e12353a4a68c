// WidenTokens: token ids of the file's dtype -> the batch's int64 / int32,
// the token-window transform's whole arithmetic. On x86-64 the common cases
// (uint16 GPT-2 tokens, uint32 Llama-3 tokens) use SSE2 (always present
// there) with non-temporal stores: a batch row is written once and read
// later by the consumer or the copy stage, so fetching its cache lines
// first (what ordinary stores do) only halves the write bandwidth, which is
// what bounds this loop (16 bytes written per uint16 token: x and y).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "format/token_corpus.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpufeed {

namespace {

// Through a small aligned chunk: the source may be unaligned, and a typed,
// non-aliasing inner loop is what the compiler vectorizes.
template <typename From, typename To>
void Widen(const char* source, size_t count, To* __restrict destination) {
  constexpr size_t kChunk = 512;
  alignas(64) From chunk[kChunk];
  for (size_t start = 0; start < count; start += kChunk) {
    const size_t n = std::min(kChunk, count - start);
    std::memcpy(chunk, source + start * sizeof(From), n * sizeof(From));
    for (size_t i = 0; i < n; ++i) destination[start + i] = static_cast<To>(chunk[i]);
  }
}

#if defined(__SSE2__)
// The elements before the first 16-byte-aligned destination element, done
// one by one (a row starts aligned unless seq_len is odd).
template <typename From, typename To>
size_t Head(const char* source, size_t count, To* destination) {
  size_t i = 0;
  while (i < count && (reinterpret_cast<uintptr_t>(destination + i) & 15) != 0) {
    From value;
    std::memcpy(&value, source + i * sizeof(From), sizeof(From));
    destination[i] = static_cast<To>(value);
    ++i;
  }
  return i;
}

template <typename To>
bool WidenStreaming(TokenDtype from, const char* source, size_t count, To* destination) {
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  if (from == TokenDtype::kUint16) {
    i = Head<uint16_t>(source, count, destination);
    for (; i + 8 <= count; i += 8) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
      __m128i lo = _mm_unpacklo_epi16(v, zero), hi = _mm_unpackhi_epi16(v, zero);
      auto* out = reinterpret_cast<__m128i*>(destination + i);
      if (sizeof(To) == 8) {
        _mm_stream_si128(out, _mm_unpacklo_epi32(lo, zero));
        _mm_stream_si128(out + 1, _mm_unpackhi_epi32(lo, zero));
        _mm_stream_si128(out + 2, _mm_unpacklo_epi32(hi, zero));
        _mm_stream_si128(out + 3, _mm_unpackhi_epi32(hi, zero));
      } else {
        _mm_stream_si128(out, lo);
        _mm_stream_si128(out + 1, hi);
      }
    }
    Widen<uint16_t>(source + 2 * i, count - i, destination + i);
  } else if (from == TokenDtype::kUint32 && sizeof(To) == 8) {
    i = Head<uint32_t>(source, count, destination);
    for (; i + 4 <= count; i += 4) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 4 * i));
      auto* out = reinterpret_cast<__m128i*>(destination + i);
      _mm_stream_si128(out, _mm_unpacklo_epi32(v, zero));
      _mm_stream_si128(out + 1, _mm_unpackhi_epi32(v, zero));
    }
    Widen<uint32_t>(source + 4 * i, count - i, destination + i);
  } else {
    return false;
  }
  // Non-temporal stores are weakly ordered: fence them before the row is
  // marked done (a mutex release orders ordinary stores only).
  _mm_sfence();
  return true;
}
#else
template <typename To>
bool WidenStreaming(TokenDtype, const char*, size_t, To*) {
  return false;
}
#endif

template <typename To>
void WidenTo(TokenDtype from, const char* source, size_t count, To* destination) {
  if (WidenStreaming(from, source, count, destination)) return;
  switch (from) {
    case TokenDtype::kUint8: Widen<uint8_t>(source, count, destination); break;
    case TokenDtype::kInt8: Widen<int8_t>(source, count, destination); break;
    case TokenDtype::kInt16: Widen<int16_t>(source, count, destination); break;
    case TokenDtype::kUint16: Widen<uint16_t>(source, count, destination); break;
    case TokenDtype::kInt32: Widen<int32_t>(source, count, destination); break;
    case TokenDtype::kUint32: Widen<uint32_t>(source, count, destination); break;
    case TokenDtype::kInt64: Widen<int64_t>(source, count, destination); break;
    case TokenDtype::kAuto: break;
  }
}

}  // namespace

void WidenTokens(TokenDtype from, const char* source, size_t count, TensorDtype to,
                 void* destination) {
  if (to == TensorDtype::kInt32) {
    WidenTo(from, source, count, static_cast<int32_t*>(destination));
  } else {
    WidenTo(from, source, count, static_cast<int64_t*>(destination));
  }
}

}  // namespace gpufeed
