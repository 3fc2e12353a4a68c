// Protocol-buffer wire encoding for tests and fuzz seeds: enough to write
// caffe.Datum messages (varints, tags, integer and length-delimited fields)
// byte by byte, including malformed ones.
#ifndef GPUFEED_TESTS_PROTOBUF_TEST_UTIL_H_
#define GPUFEED_TESTS_PROTOBUF_TEST_UTIL_H_

#include <cstdint>
#include <string>

namespace gpufeed {

inline std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}
inline std::string Tag(int field, int wire) { return Varint((field << 3) | wire); }
inline std::string IntField(int field, int64_t value) {
  return Tag(field, 0) + Varint(static_cast<uint64_t>(value));
}
inline std::string BytesField(int field, const std::string& bytes) {
  return Tag(field, 2) + Varint(bytes.size()) + bytes;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_PROTOBUF_TEST_UTIL_H_
