// WidenTokens: token ids of the file's dtype -> the batch's int64 / int32,
// the token-window transform's whole arithmetic. On x86-64 the common cases
// (uint16 GPT-2 tokens, uint32 Llama-3 tokens) use AVX2 when the CPU has it
// (checked once at run time; the library is built for the baseline), else
// SSE2 (always there). Ordinary stores, not streaming ones: a batch row
// goes to the ring's few MiB, reused batch after batch, whose lines stay in
// the cache for the consumer or the copy stage (streaming stores would send
// every row to memory and back; figures in docs/tokens.md).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "format/token_corpus.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__SSE2__)
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

#if defined(__x86_64__) && defined(__GNUC__)
// AVX2 (nearly every x86-64 server since 2013; checked at run time, the
// library is built for the baseline): one 16-byte load of 8 uint16 tokens
// becomes two 32-byte stores of int64. Ordinary stores, not streaming
// ones: the batch ring is a few MiB reused batch after batch, so its lines
// stay in the cache, where the consumer (or the copy stage) reads them
// next; streaming stores sent every row to memory and back.
__attribute__((target("avx2"))) void WidenUint16Avx2(const char* source, size_t count,
                                                     int64_t* destination) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
    auto* out = reinterpret_cast<__m256i*>(destination + i);
    _mm256_storeu_si256(out, _mm256_cvtepu16_epi64(v));
    _mm256_storeu_si256(out + 1, _mm256_cvtepu16_epi64(_mm_srli_si128(v, 8)));
  }
  Widen<uint16_t>(source + 2 * i, count - i, destination + i);
}

__attribute__((target("avx2"))) void WidenUint16To32Avx2(const char* source, size_t count,
                                                         int32_t* destination) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i + 16));
    auto* out = reinterpret_cast<__m256i*>(destination + i);
    _mm256_storeu_si256(out, _mm256_cvtepu16_epi32(a));
    _mm256_storeu_si256(out + 1, _mm256_cvtepu16_epi32(b));
  }
  Widen<uint16_t>(source + 2 * i, count - i, destination + i);
}

__attribute__((target("avx2"))) void WidenUint32Avx2(const char* source, size_t count,
                                                     int64_t* destination) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 4 * i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 4 * i + 16));
    auto* out = reinterpret_cast<__m256i*>(destination + i);
    _mm256_storeu_si256(out, _mm256_cvtepu32_epi64(a));
    _mm256_storeu_si256(out + 1, _mm256_cvtepu32_epi64(b));
  }
  Widen<uint32_t>(source + 4 * i, count - i, destination + i);
}

bool HaveAvx2() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return have;
}

bool WidenAvx2(TokenDtype from, const char* source, size_t count, int64_t* destination) {
  if (from == TokenDtype::kUint16) {
    WidenUint16Avx2(source, count, destination);
    return true;
  }
  if (from == TokenDtype::kUint32) {
    WidenUint32Avx2(source, count, destination);
    return true;
  }
  return false;
}

bool WidenAvx2(TokenDtype from, const char* source, size_t count, int32_t* destination) {
  if (from != TokenDtype::kUint16) return false;
  WidenUint16To32Avx2(source, count, destination);
  return true;
}
#else
bool HaveAvx2() { return false; }
template <typename To>
bool WidenAvx2(TokenDtype, const char*, size_t, To*) {
  return false;
}
#endif

#if defined(__SSE2__)
// SSE2 (always there on x86-64): the same with 16-byte stores.
template <typename To>
bool WidenSse2(TokenDtype from, const char* source, size_t count, To* destination) {
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  if (from == TokenDtype::kUint16) {
    for (; i + 8 <= count; i += 8) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 2 * i));
      __m128i lo = _mm_unpacklo_epi16(v, zero), hi = _mm_unpackhi_epi16(v, zero);
      auto* out = reinterpret_cast<__m128i*>(destination + i);
      if (sizeof(To) == 8) {
        _mm_storeu_si128(out, _mm_unpacklo_epi32(lo, zero));
        _mm_storeu_si128(out + 1, _mm_unpackhi_epi32(lo, zero));
        _mm_storeu_si128(out + 2, _mm_unpacklo_epi32(hi, zero));
        _mm_storeu_si128(out + 3, _mm_unpackhi_epi32(hi, zero));
      } else {
        _mm_storeu_si128(out, lo);
        _mm_storeu_si128(out + 1, hi);
      }
    }
    Widen<uint16_t>(source + 2 * i, count - i, destination + i);
    return true;
  }
  if (from == TokenDtype::kUint32 && sizeof(To) == 8) {
    for (; i + 4 <= count; i += 4) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source + 4 * i));
      auto* out = reinterpret_cast<__m128i*>(destination + i);
      _mm_storeu_si128(out, _mm_unpacklo_epi32(v, zero));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi32(v, zero));
    }
    Widen<uint32_t>(source + 4 * i, count - i, destination + i);
    return true;
  }
  return false;
}
#else
template <typename To>
bool WidenSse2(TokenDtype, const char*, size_t, To*) {
  return false;
}
#endif

template <typename To>
void WidenTo(TokenWidening how, TokenDtype from, const char* source, size_t count,
             To* destination) {
  if (how == TokenWidening::kAuto && HaveAvx2()) how = TokenWidening::kAvx2;
  if (how == TokenWidening::kAvx2 && WidenAvx2(from, source, count, destination)) return;
  if (how != TokenWidening::kScalar && WidenSse2(from, source, count, destination)) return;
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

bool TokenWideningAvailable(TokenWidening how) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (how == TokenWidening::kAvx2) return HaveAvx2();
#else
  if (how == TokenWidening::kAvx2) return false;
#endif
#if !defined(__SSE2__)
  if (how == TokenWidening::kSse2) return false;
#endif
  return true;
}

void WidenTokensWith(TokenWidening how, TokenDtype from, const char* source, size_t count,
                     TensorDtype to, void* destination) {
  if (to == TensorDtype::kInt32) {
    WidenTo(how, from, source, count, static_cast<int32_t*>(destination));
  } else {
    WidenTo(how, from, source, count, static_cast<int64_t*>(destination));
  }
}

void WidenTokens(TokenDtype from, const char* source, size_t count, TensorDtype to,
                 void* destination) {
  WidenTokensWith(TokenWidening::kAuto, from, source, count, to, destination);
}

}  // namespace gpufeed
