// A strict decoder of caffe.Datum (caffe.proto), straight from the protobuf
// wire format, so that reading Caffe LMDBs needs no libprotobuf:
//
//   message Datum {
//     optional int32 channels = 1;   optional int32 height = 2;   optional int32 width = 3;
//     optional bytes data = 4;       optional int32 label = 5;
//     repeated float float_data = 6; optional bool encoded = 7 [default = false];
//   }
//
// Strict: a wrong wire type for a known field, a truncated or over-long
// varint, a length past the buffer, or a group is an error naming the byte
// offset inside the message. Unknown fields are skipped, as protobuf does.
#ifndef GPUFEED_FORMAT_CAFFE_DATUM_H_
#define GPUFEED_FORMAT_CAFFE_DATUM_H_

#include <cstdint>
#include <string_view>

#include "gpufeed/status.h"

namespace gpufeed {

struct CaffeDatum {
  int32_t channels = 0;
  int32_t height = 0;
  int32_t width = 0;
  std::string_view data;  // points into the decoded buffer
  int32_t label = 0;
  bool has_label = false;
  uint64_t float_data_count = 0;
  bool encoded = false;
};

// Decodes `message` into *datum. Corruption with the offset of the problem
// (the caller adds the file and key). Also checks that a raw datum's shape
// matches its data length.
Status DecodeCaffeDatum(std::string_view message, CaffeDatum* datum);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_CAFFE_DATUM_H_
