#include "util/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <vector>

#include "util/file.h"

namespace gpufeed {

Xxh64::Xxh64() : state_(XXH64_createState()) {
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}

Xxh64::~Xxh64() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }

void Xxh64::Update(const void* data, size_t length) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), data, length);
}

uint64_t Xxh64::Digest() const { return XXH64_digest(static_cast<XXH64_state_t*>(state_)); }

std::string Xxh64Hex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

Status FileXxh64(const std::string& path, uint64_t* digest) {
  return FileXxh64(path, digest, [](uint64_t, const char*, size_t) {});
}

Status FileXxh64(const std::string& path, uint64_t* digest,
                 const std::function<void(uint64_t offset, const char* data, size_t size)>& chunk) {
  UniqueFd fd;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd));
  Xxh64 hasher;
  std::vector<char> buffer(4 << 20);
  uint64_t offset = 0;
  while (true) {
    size_t got = 0;
    GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), buffer.data(), buffer.size(), offset, path, &got));
    if (got == 0) break;
    hasher.Update(buffer.data(), got);
    chunk(offset, buffer.data(), got);
    offset += got;
    if (got < buffer.size()) break;
  }
  *digest = hasher.Digest();
  return Status::OK();
}

}  // namespace gpufeed
