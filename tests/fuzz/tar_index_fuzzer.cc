// Fuzz target: the tar member index. The input is read as a tar (ScanTar,
// through a reader with a small window so that window moves are exercised)
// and as a saved index file (DecodeTarIndex). Properties: every member an
// accepted tar yields lies inside it, after its header, on the 512-byte
// grid, in increasing order, each sample non-empty and its members
// consecutive; the index encodes and decodes to the same members; errors
// name the file.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "format/tar_index.h"
#include "fuzz_util.h"

using namespace gpufeed;

namespace {

void CheckIndex(const TarIndex& index, uint64_t size) {
  uint32_t next_member = 0;
  for (const TarSample& sample : index.samples) {
    if (sample.member_count == 0 || sample.first_member != next_member) std::abort();
    next_member += sample.member_count;
  }
  if (next_member != index.members.size()) std::abort();
  for (const TarMember& member : index.members) {
    if (member.extension >= index.extensions.size()) std::abort();
    if (member.offset > size || member.size > size - member.offset) std::abort();
    if (member.header_offset > member.offset) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  const char* bytes = reinterpret_cast<const char*>(data);
  TarIndex index;
  Status status = ScanTar(
      "fuzz.tar", size,
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        if (offset > size) std::abort();  // the scanner never reads past the end
        *done = std::min<size_t>(length, size - offset);
        std::memcpy(destination, bytes + offset, *done);
        return Status::OK();
      },
      &index, /*window=*/1024);
  if (status.ok()) {
    CheckIndex(index, size);
    uint64_t previous_end = 0;
    for (const TarMember& member : index.members) {
      if (member.offset % kTarBlockSize != 0 || member.header_offset < previous_end) std::abort();
      if (member.offset < member.header_offset + kTarBlockSize) std::abort();
      previous_end = member.offset + member.size;
    }
    std::string encoded;
    EncodeTarIndex(index, &encoded);
    TarIndex decoded;
    if (!DecodeTarIndex(encoded, "fuzz.idx", &decoded).ok()) std::abort();
    if (decoded.members.size() != index.members.size() ||
        decoded.samples.size() != index.samples.size()) {
      std::abort();
    }
    for (size_t i = 0; i < index.members.size(); ++i) {
      if (decoded.members[i].offset != index.members[i].offset ||
          decoded.members[i].size != index.members[i].size) {
        std::abort();
      }
    }
  } else if (status.message().find("fuzz.tar") == std::string::npos) {
    std::abort();  // errors must name the tar
  }

  TarIndex from_file;
  status = DecodeTarIndex(std::string_view(bytes, size), "fuzz.idx", &from_file);
  if (status.ok()) {
    CheckIndex(from_file, from_file.tar_size);
  } else if (status.message().find("fuzz.idx") == std::string::npos) {
    std::abort();
  }
  return 0;
}
