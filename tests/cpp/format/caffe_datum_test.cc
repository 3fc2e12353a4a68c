// caffe.Datum wire decoding: hand-encoded messages, strict errors.
#include "format/caffe_datum.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpufeed/dataset.h"
#include "lmdb_test_util.h"
#include "protobuf_test_util.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

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

// A Caffe LMDB of raw Datums: Read keeps the Datum's BGR CHW planes, and
// ReadForDecode gives the image transform interleaved RGB HWC (gray
// replicated), byte for byte.
TEST(CaffeLmdbTest, ReadForDecodeConvertsRawPixelsToRgbHwc) {
  TempDir dir;
  std::string env = JoinPath(dir.path(), "caffe");
  ASSERT_TRUE(CreateDirectories(env).ok());
  // 3 x 2 x 2: planes B, G, R; then a 1 x 1 x 3 gray image; then 2 channels.
  std::string color = std::string("\x01\x02\x03\x04") + "\x11\x12\x13\x14" + "\x21\x22\x23\x24";
  std::string gray = "\x05\x06\x07";
  std::vector<std::pair<std::string, std::string>> values = {
      {"0_color", IntField(1, 3) + IntField(2, 2) + IntField(3, 2) + BytesField(4, color) +
                      IntField(5, 1)},
      {"1_gray", IntField(1, 1) + IntField(2, 1) + IntField(3, 3) + BytesField(4, gray) +
                     IntField(5, 2)},
      {"2_two", IntField(1, 2) + IntField(2, 1) + IntField(3, 1) + BytesField(4, "\x08\x09") +
                    IntField(5, 3)}};
  LmdbWriteTxn lmdb;
  ASSERT_EQ(lmdb.Begin(env), 0);
  for (auto& [key, value] : values) ASSERT_EQ(lmdb.Put(key, value), 0);
  ASSERT_EQ(lmdb.Commit(), 0);
  DatasetOptions options;
  options.format = DatasetFormat::kCaffeLmdb;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(env, options, &dataset).ok());

  Record record;
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  EXPECT_EQ(record.data, color);
  EXPECT_EQ(record.shape, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(record.layout, Record::PixelLayout::kChw);
  ASSERT_TRUE(dataset->ReadForDecode(0, &record).ok());
  EXPECT_EQ(record.data, std::string("\x21\x11\x01\x22\x12\x02\x23\x13\x03\x24\x14\x04", 12));
  EXPECT_EQ(record.shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(record.layout, Record::PixelLayout::kHwcRgb);
  EXPECT_EQ(record.labels, std::vector<float>{1});

  ASSERT_TRUE(dataset->ReadForDecode(1, &record).ok());
  EXPECT_EQ(record.data, std::string("\x05\x05\x05\x06\x06\x06\x07\x07\x07", 9));
  EXPECT_EQ(record.shape, (std::vector<int64_t>{1, 3, 3}));
  // Read after ReadForDecode into the same record: the stored layout again.
  ASSERT_TRUE(dataset->Read(1, &record).ok());
  EXPECT_EQ(record.data, gray);
  EXPECT_EQ(record.layout, Record::PixelLayout::kChw);

  Status status = dataset->ReadForDecode(2, &record);
  EXPECT_EQ(status.code(), Status::Code::kNotSupported) << status.ToString();
  EXPECT_NE(status.message().find("sample 2"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace gpufeed
