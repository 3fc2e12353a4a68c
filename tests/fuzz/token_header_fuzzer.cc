// Fuzz target: the Megatron .idx parser and the llm.c header parser. The
// first byte chooses the parser, the next 8 the size of the file the header
// or index is checked against; the rest is the .idx or the shard's first
// bytes. Properties: an accepted .idx's tokens fit in the .bin; an accepted
// llm.c header's tokens fill the file exactly; every error names the file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "format/token_corpus.h"
#include "fuzz_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 9) return 0;
  uint64_t file_size = 0;
  std::memcpy(&file_size, data + 1, 8);
  const char* body = reinterpret_cast<const char*>(data + 9);
  const size_t body_size = size - 9;
  Status status;
  if (data[0] & 1) {
    MegatronIndex index;
    status = ParseMegatronIndex(body, body_size, "fuzz.idx", file_size, &index);
    if (status.ok()) {
      uint64_t bytes = index.tokens * TokenDtypeSize(index.dtype);
      if (bytes > file_size || index.sequences * 12 > body_size) std::abort();
    } else if (status.message().find("fuzz.idx") == std::string::npos) {
      std::abort();
    }
  } else {
    LlmcHeader header;
    status = ParseLlmcHeader(body, body_size, "fuzz.bin", file_size, &header);
    if (status.ok()) {
      if (kLlmcHeaderBytes + header.tokens * TokenDtypeSize(header.dtype) != file_size) {
        std::abort();
      }
    } else if (status.message().find("fuzz.bin") == std::string::npos) {
      std::abort();
    }
  }
  return 0;
}
