// MDS shard files: zstd shards decompressed once into a local file, and the
// hashes index.json records, for verify (format/mds.h).
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "format/mds.h"
#include "util/file.h"

#ifdef GPUFEED_HAVE_ZSTD
#include <zstd.h>
#endif

namespace gpufeed {

namespace {

constexpr size_t kChunk = 4 << 20;

// Calls `update(data, size)` over `path`'s bytes, in sequential chunks.
template <typename Update>
Status ReadChunks(const std::string& path, Update update) {
  UniqueFd fd;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd, &size, &mtime_ns));
  std::string buffer(kChunk, '\0');
  for (uint64_t offset = 0; offset < size;) {
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), &buffer[0], kChunk, offset, path, &done));
    if (done == 0) break;
    GPUFEED_RETURN_IF_ERROR(update(buffer.data(), done));
    offset += done;
  }
  return Status::OK();
}

std::string Hex(const unsigned char* bytes, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < size; ++i) {
    hex += kDigits[bytes[i] >> 4];
    hex += kDigits[bytes[i] & 15];
  }
  return hex;
}

}  // namespace

bool IsMdsCheckedHash(const std::string& algorithm) {
  return algorithm == "xxh32" || algorithm == "xxh64" || algorithm == "xxh3_64" ||
         algorithm == "xxh128" || algorithm == "xxh3_128";
}

// Python xxhash's hexdigest is the canonical (big-endian) form, as here.
Status MdsFileHash(const std::string& path, const std::string& algorithm, std::string* hex) {
  if (!IsMdsCheckedHash(algorithm)) {
    return Status::NotSupported("hash \"" + algorithm +
                                "\" is not checked (libxxhash computes "
                                "xxh32, xxh64, xxh3_64, xxh128)");
  }
  XXH32_state_t* s32 = XXH32_createState();
  XXH64_state_t* s64 = XXH64_createState();
  XXH3_state_t* s3 = XXH3_createState();
  XXH32_reset(s32, 0);
  XXH64_reset(s64, 0);
  XXH3_64bits_reset(s3);
  bool wide = algorithm == "xxh128" || algorithm == "xxh3_128";
  if (wide) XXH3_128bits_reset(s3);
  Status status = ReadChunks(path, [&](const char* data, size_t size) {
    if (algorithm == "xxh32") XXH32_update(s32, data, size);
    if (algorithm == "xxh64") XXH64_update(s64, data, size);
    if (algorithm == "xxh3_64") XXH3_64bits_update(s3, data, size);
    if (wide) XXH3_128bits_update(s3, data, size);
    return Status::OK();
  });
  if (status.ok()) {
    if (algorithm == "xxh32") {
      XXH32_canonical_t c;
      XXH32_canonicalFromHash(&c, XXH32_digest(s32));
      *hex = Hex(c.digest, sizeof(c.digest));
    } else if (algorithm == "xxh64" || algorithm == "xxh3_64") {
      XXH64_canonical_t c;
      XXH64_canonicalFromHash(&c,
                              algorithm == "xxh64" ? XXH64_digest(s64) : XXH3_64bits_digest(s3));
      *hex = Hex(c.digest, sizeof(c.digest));
    } else {
      XXH128_canonical_t c;
      XXH128_canonicalFromHash(&c, XXH3_128bits_digest(s3));
      *hex = Hex(c.digest, sizeof(c.digest));
    }
  }
  XXH32_freeState(s32);
  XXH64_freeState(s64);
  XXH3_freeState(s3);
  return status;
}

#ifdef GPUFEED_HAVE_ZSTD

bool MdsZstdAvailable() { return true; }

Status DecompressMdsShard(const std::string& zip_path, const std::string& raw_path,
                          uint64_t raw_bytes) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> stream(ZSTD_createDStream(),
                                                                  ZSTD_freeDStream);
  if (stream == nullptr) return Status::Internal("ZSTD_createDStream failed");
  ZSTD_initDStream(stream.get());
  std::string raw;
  raw.reserve(static_cast<size_t>(std::min<uint64_t>(raw_bytes, uint64_t{1} << 32)));
  std::string out(ZSTD_DStreamOutSize(), '\0');
  uint64_t consumed = 0;
  size_t last = 1;
  Status status = ReadChunks(zip_path, [&](const char* data, size_t size) {
    ZSTD_inBuffer in = {data, size, 0};
    while (in.pos < in.size) {
      ZSTD_outBuffer o = {&out[0], out.size(), 0};
      last = ZSTD_decompressStream(stream.get(), &o, &in);
      if (ZSTD_isError(last)) {
        return Status::Corruption(zip_path + ": at byte offset " +
                                  std::to_string(consumed + in.pos) + ": not valid zstd (" +
                                  ZSTD_getErrorName(last) + ")");
      }
      if (raw.size() + o.pos > raw_bytes) {
        return Status::Corruption(zip_path + ": decompresses to more than the " +
                                  std::to_string(raw_bytes) + " bytes index.json gives");
      }
      raw.append(out.data(), o.pos);
    }
    consumed += size;
    return Status::OK();
  });
  GPUFEED_RETURN_IF_ERROR(status);
  if (last != 0 || raw.size() != raw_bytes) {
    return Status::Corruption(zip_path + ": decompresses to " + std::to_string(raw.size()) +
                              " bytes, not the " + std::to_string(raw_bytes) +
                              " bytes index.json gives (truncated at byte offset " +
                              std::to_string(consumed) + "?)");
  }
  return WriteFileAtomically(raw_path, raw);
}

#else

bool MdsZstdAvailable() { return false; }

Status DecompressMdsShard(const std::string& zip_path, const std::string&, uint64_t) {
  return Status::NotSupported(zip_path +
                              ": this gpufeed was built without libzstd (install "
                              "libzstd-dev and rebuild, or decompress the shards: zstd -d)");
}

#endif

}  // namespace gpufeed
