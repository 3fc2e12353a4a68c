// What names and describes a cache entry: policy names, keys, the meta
// file's JSON and a bundle copy's trailer (cache_entry.h).
#include "storage/cache_entry.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "storage/cache_layout.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

using cache_internal::ErrnoStatus;
using cache_internal::MtimeNs;

namespace {

std::string Hex16(uint64_t value) { return Xxh64Hex(value); }

// The part of a file name kept in a key, for humans reading `ls`.
std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
    out += plain ? c : '_';
    if (out.size() >= 64) break;
  }
  return out;
}

// xxh64 (16 hex digits) of a bundle's member names, in order: part of its
// key and recorded in its meta.
std::string BundleNamesHash(const CacheSource& source) {
  Xxh64 digest;
  for (const std::string& member : source.members) digest.Update(member.c_str(), member.size() + 1);
  return Xxh64Hex(digest.Digest());
}

constexpr char kBundleMagic[8] = {'G', 'F', 'B', 'U', 'N', 'D', 'L', '1'};

void AppendLittleEndian(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

const char* CachePolicyName(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kTrain:
      return "train";
    case CachePolicy::kPinned:
      return "pinned";
    case CachePolicy::kCheckpoint:
      return "checkpoint";
  }
  return "unknown";
}

Status ParseCachePolicy(const std::string& name, CachePolicy* policy) {
  for (CachePolicy candidate :
       {CachePolicy::kTrain, CachePolicy::kPinned, CachePolicy::kCheckpoint}) {
    if (name == CachePolicyName(candidate)) {
      *policy = candidate;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown cache policy \"" + name +
                                 "\" (expected train, pinned or checkpoint)");
}

Status StatCacheSource(const std::string& path, CacheSource* source) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  source->path = path;
  source->size = static_cast<uint64_t>(st.st_size);
  source->mtime_ns = MtimeNs(st);
  return Status::OK();
}

std::string CacheKeyFor(const CacheSource& source) {
  std::string identity = source.path;
  if (source.bundle()) {
    // The members' names, not their sizes or mtimes: those are not stat'ed.
    identity += std::string("\0bundle\0", 8);
    identity += BundleNamesHash(source);
    return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" +
           SafeName(Basename(source.path));
  }
  identity += '\0';
  identity += std::to_string(source.size);
  if (source.identified_by_checksum) {
    // No mtime: it is never stat'ed by the processes that look the copy up.
    identity += std::string("\0xxh64\0", 7);
    identity += source.xxh64;
    return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" +
           SafeName(Basename(source.path));
  }
  identity += '\0';
  identity += std::to_string(source.mtime_ns);
  if (!source.xxh64.empty()) {
    identity += '\0';
    identity += source.xxh64;
  }
  return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" + SafeName(Basename(source.path));
}

std::string EntryMetaJson(const CacheSource& source, const std::string& xxh64,
                          uint64_t bundle_bytes, int64_t bundle_mtime_ns) {
  nlohmann::json json;
  json["source"] = source.path;
  json["size"] = source.bundle() ? bundle_bytes : source.size;
  json["mtime_ns"] = source.bundle() ? bundle_mtime_ns : source.mtime_ns;
  json["xxh64"] = xxh64;
  json["dataset"] = source.dataset;
  json["policy"] = CachePolicyName(source.policy);
  if (!source.group.empty()) json["group"] = source.group;
  if (source.bundle()) {
    // Not the member names: every scan of the index reads every meta (the
    // members' sizes and mtimes are in the copy's trailer).
    json["bundle"] = {{"members", source.members.size()}, {"names_xxh64", BundleNamesHash(source)}};
  }
  return json.dump() + "\n";
}

Status ParseEntryMeta(const std::string& text, const std::string& shown, CacheSource* source) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("source") || !json["source"].is_string() ||
      !json.contains("size") || !json["size"].is_number_unsigned() || !json.contains("mtime_ns") ||
      !json["mtime_ns"].is_number_integer()) {
    return Status::Corruption(shown + ": malformed cache entry metadata");
  }
  source->path = json["source"].get<std::string>();
  source->size = json["size"].get<uint64_t>();
  source->mtime_ns = json["mtime_ns"].get<int64_t>();
  source->xxh64 = json.value("xxh64", std::string());
  source->dataset = json.value("dataset", std::string());
  source->group = json.value("group", std::string());
  if (!ParseCachePolicy(json.value("policy", std::string("train")), &source->policy).ok()) {
    source->policy = CachePolicy::kTrain;
  }
  return Status::OK();
}

std::string EncodeBundleTrailer(const std::vector<uint64_t>& offsets,
                                const std::vector<int64_t>& mtimes_ns) {
  std::string out;
  out.reserve(8 * (offsets.size() + mtimes_ns.size() + 2));
  for (uint64_t offset : offsets) AppendLittleEndian(offset, &out);
  for (int64_t mtime : mtimes_ns) AppendLittleEndian(static_cast<uint64_t>(mtime), &out);
  AppendLittleEndian(mtimes_ns.size(), &out);
  out.append(kBundleMagic, sizeof(kBundleMagic));
  return out;
}

Status ReadBundleTrailer(int fd, uint64_t file_size, size_t count, const std::string& shown,
                         std::vector<uint64_t>* offsets) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption(shown + ": not a bundle copy of " + std::to_string(count) +
                              " members (" + why + ")");
  };
  uint64_t trailer = 8 * (2 * static_cast<uint64_t>(count) + 1) + 16;
  if (file_size < trailer) return bad("shorter than its trailer");
  std::string bytes(static_cast<size_t>(trailer), '\0');
  size_t got = 0;
  GPUFEED_RETURN_IF_ERROR(
      PreadFull(fd, bytes.data(), bytes.size(), file_size - trailer, shown, &got));
  if (got != bytes.size()) return bad("short read");
  auto word = [&](size_t index) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) {
      value = (value << 8) | static_cast<unsigned char>(bytes[8 * index + static_cast<size_t>(i)]);
    }
    return value;
  };
  if (bytes.compare(bytes.size() - 8, 8, "GFBUNDL1") != 0) return bad("no magic");
  if (word(2 * count + 1) != count) return bad("member count differs");
  offsets->resize(count + 1);
  for (size_t i = 0; i <= count; ++i) {
    (*offsets)[i] = word(i);
    if (i == 0 ? (*offsets)[0] != 0 : (*offsets)[i] < (*offsets)[i - 1]) {
      return bad("offsets out of order");
    }
  }
  if ((*offsets)[count] != file_size - trailer) return bad("offsets do not end at the trailer");
  return Status::OK();
}

}  // namespace gpufeed
