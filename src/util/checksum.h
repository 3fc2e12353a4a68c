// xxh64 (xxHash, seed 0): the checksum of shards in the manifest.
#ifndef GPUFEED_UTIL_CHECKSUM_H_
#define GPUFEED_UTIL_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "gpufeed/status.h"

namespace gpufeed {

// Incremental xxh64 over a stream of bytes.
class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;

  void Update(const void* data, size_t length);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH64_state_t, kept out of this header
};

// 16 lowercase hex digits, as the manifest stores it.
std::string Xxh64Hex(uint64_t digest);

// xxh64 of a whole file, read in large sequential chunks.
Status FileXxh64(const std::string& path, uint64_t* digest);
// The same, handing each chunk read (its offset in the file, its bytes; at
// most 4 MiB, each starting at a multiple of 4 MiB) to `chunk` as well.
Status FileXxh64(const std::string& path, uint64_t* digest,
                 const std::function<void(uint64_t offset, const char* data, size_t size)>& chunk);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_CHECKSUM_H_
