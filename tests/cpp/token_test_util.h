// Test helpers: token corpora written byte by byte, independently of
// gpufeed's parsers (token_test, token_manifest_test).
#ifndef GPUFEED_TESTS_CPP_TOKEN_TEST_UTIL_H_
#define GPUFEED_TESTS_CPP_TOKEN_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "format/token_corpus.h"
#include "test_util.h"

namespace gpufeed {

template <typename T>
inline void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Megatron-Core's _IndexWriter, one sequence per document.
inline std::vector<uint16_t> WriteMegatron(const std::string& prefix,
                                           const std::vector<std::vector<uint16_t>>& documents) {
  std::string bin, idx("MMIDIDX\0\0", 9);
  std::vector<uint16_t> stream;
  Append<uint64_t>(&idx, 1);
  idx.push_back(8);  // uint16
  Append<uint64_t>(&idx, documents.size());
  Append<uint64_t>(&idx, documents.size() + 1);
  for (const auto& d : documents) Append<int32_t>(&idx, static_cast<int32_t>(d.size()));
  int64_t pointer = 0;
  for (const auto& d : documents) {
    Append<int64_t>(&idx, pointer);
    pointer += static_cast<int64_t>(d.size() * 2);
  }
  for (size_t i = 0; i <= documents.size(); ++i) Append<int64_t>(&idx, static_cast<int64_t>(i));
  for (const auto& d : documents) {
    for (uint16_t t : d) {
      Append(&bin, t);
      stream.push_back(t);
    }
  }
  WriteBytes(prefix + ".bin", bin);
  WriteBytes(prefix + ".idx", idx);
  return stream;
}

inline std::vector<uint16_t> WriteLlmc(const std::string& path, size_t count, uint32_t seed) {
  std::string bytes;
  Append<int32_t>(&bytes, kLlmcMagicUint16);
  Append<int32_t>(&bytes, 1);
  Append<int32_t>(&bytes, static_cast<int32_t>(count));
  bytes.resize(kLlmcHeaderBytes, '\0');
  std::vector<uint16_t> tokens(count);
  std::mt19937 rng(seed);
  for (auto& t : tokens) {
    t = static_cast<uint16_t>(rng() % 50257);
    Append(&bytes, t);
  }
  WriteBytes(path, bytes);
  return tokens;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_CPP_TOKEN_TEST_UTIL_H_
