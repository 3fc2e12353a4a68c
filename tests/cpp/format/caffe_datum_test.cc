// caffe.Datum wire decoding: hand-encoded messages, strict errors.
#include "format/caffe_datum.h"

#include <gtest/gtest.h>

#include <string>

#include "protobuf_test_util.h"

namespace gpufeed {
namespace {


TEST(CaffeDatumTest, RawDatum) {
  std::string pixels(2 * 3 * 4, '\x07');
  std::string message = IntField(1, 2) + IntField(2, 3) + IntField(3, 4) +
                        BytesField(4, pixels) + IntField(5, 17);
  CaffeDatum datum;
  ASSERT_TRUE(DecodeCaffeDatum(message, &datum).ok());
  EXPECT_EQ(datum.channels, 2);
  EXPECT_EQ(datum.height, 3);
  EXPECT_EQ(datum.width, 4);
  EXPECT_EQ(datum.data, pixels);
  EXPECT_EQ(datum.label, 17);
  EXPECT_FALSE(datum.encoded);
}

TEST(CaffeDatumTest, EncodedDatumNegativeLabelAndUnknownFields) {
  std::string message = BytesField(4, "JPEGBYTES") + IntField(5, -3) + IntField(7, 1) +
                        IntField(99, 5) + BytesField(100, "skip me") + Tag(101, 5) + "abcd";
  CaffeDatum datum;
  ASSERT_TRUE(DecodeCaffeDatum(message, &datum).ok());
  EXPECT_TRUE(datum.encoded);
  EXPECT_EQ(datum.label, -3);
  EXPECT_EQ(datum.data, "JPEGBYTES");
}

void ExpectBad(const std::string& message, const std::string& needle) {
  CaffeDatum datum;
  Status status = DecodeCaffeDatum(message, &datum);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("byte offset"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

TEST(CaffeDatumTest, StrictErrors) {
  ExpectBad(Tag(1, 2) + Varint(1) + "x", "wire type 2, expected 0");           // bad wire type
  ExpectBad(IntField(5, 3) + Tag(4, 2) + "\x80\x80", "truncated varint");      // truncated varint
  ExpectBad(IntField(5, 3) + Tag(4, 2) + Varint(1000) + "abc", "runs past");  // length past end
  ExpectBad(std::string("\x00", 1), "invalid field number");
  ExpectBad(Tag(7, 3), "wire type 3, expected 0");
  ExpectBad(Tag(50, 3), "groups");
  ExpectBad(IntField(1, 3) + IntField(2, 10000) + IntField(3, 10000) + BytesField(4, "0123456789"),
            "needs 300000000 bytes");
  ExpectBad(Tag(5, 0) + std::string(11, '\xff'), "varint");
}

}  // namespace
}  // namespace gpufeed
