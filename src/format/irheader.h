// MXNet's image record header (IRHeader), the first 24 bytes of every
// RecordIO and gpufeed LMDB payload:
//
//   u32 flag    0: one label, in `label`; n > 0: n float32 labels follow the header
//   f32 label
//   u64 id      im2rec: the sample's index in the list file
//   u64 id2
//
// All fields little-endian, as MXNet writes them with struct.pack('IfQQ').
#ifndef GPUFEED_FORMAT_IRHEADER_H_
#define GPUFEED_FORMAT_IRHEADER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/status.h"
#include "gpufeed/writer.h"

namespace gpufeed {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "gpufeed reads little-endian formats with plain loads; port needed");

constexpr size_t kIRHeaderSize = 24;

struct ParsedPayload {
  uint32_t flag = 0;
  uint64_t id = 0;
  uint64_t id2 = 0;
  size_t data_offset = 0;  // where the sample bytes start in the payload
};

// Parses the header and labels of `payload`. On failure returns Corruption
// with a message that says what is wrong (the caller adds file and offset).
Status ParseIRPayload(std::string_view payload, std::vector<float>* labels, ParsedPayload* parsed);

// Appends header, labels and data of `sample` to *out, as MXNet's
// recordio.pack: one label -> flag 0; several -> flag = count, label 0.
void AppendIRPayload(const SampleToWrite& sample, std::string* out);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_IRHEADER_H_
