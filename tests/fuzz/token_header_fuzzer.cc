// Fuzz target: the Megatron .idx parser, the llm.c header parser and the
// gpufeed.heads parser. The first byte chooses the parser (bit 1: heads,
// else bit 0: .idx or llm.c), the next 8 the size of the file the header or
// index is checked against; the rest is the .idx, the shard's first bytes
// or the heads file. Properties: an accepted .idx's tokens fit in the .bin;
// an accepted llm.c header's tokens fill the file exactly; accepted heads
// lie inside their file and count their token data's boundaries; every
// error names the file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "format/token_corpus.h"
#include "format/token_heads.h"
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
  if (data[0] & 2) {
    TokenHeadsLayout layout;
    status = ParseTokenHeads(body, body_size, "fuzz.heads", &layout);
    if (!status.ok()) {
      if (status.message().find("fuzz.heads") == std::string::npos) std::abort();
      return 0;
    }
    for (const TokenHeadsEntry& e : layout.entries) {
      uint64_t first = 0, count = 0;
      TokenHeadsSpan(e.data_offset, e.data_end, layout.granule, layout.token_bytes, &first,
                     &count);
      if (e.first != first || e.count != count || e.at > body_size ||
          e.count * layout.token_bytes > body_size - e.at || e.data_end > e.bytes) {
        std::abort();
      }
      // Every head the entry keeps can be read.
      for (uint64_t k = 0; k < e.count; k += 1 + e.count / 8) {
        volatile char c = body[e.at + k * layout.token_bytes + layout.token_bytes - 1];
        (void)c;
      }
    }
  } else if (data[0] & 1) {
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
