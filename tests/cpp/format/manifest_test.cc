#include "format/manifest.h"

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(ManifestTest, SerializeParseRoundTrip) {
  Manifest manifest;
  manifest.format = DatasetFormat::kRecordIO;
  manifest.records = 3;
  manifest.integer_labels = true;
  manifest.classes = {"a", "b"};
  manifest.shards.push_back({"part-00000.rec", "part-00000.idx", 3, 100, "0123456789abcdef"});
  Manifest parsed;
  Status status = ParseManifest(SerializeManifest(manifest), "m.json", &parsed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(parsed.records, 3u);
  EXPECT_TRUE(parsed.integer_labels);
  EXPECT_EQ(parsed.classes, manifest.classes);
  ASSERT_EQ(parsed.shards.size(), 1u);
  EXPECT_EQ(parsed.shards[0].xxh64, "0123456789abcdef");
}

void ExpectBad(const std::string& text, const std::string& needle) {
  Manifest manifest;
  Status status = ParseManifest(text, "/d/gpufeed.json", &manifest);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("/d/gpufeed.json"), std::string::npos);
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

TEST(ManifestTest, RejectsMalformed) {
  ExpectBad("{not json", "not valid JSON");
  // Found by tests/fuzz/manifest_fuzzer: a number overflowing a double threw
  // nlohmann's out_of_range through Dataset::Open.
  ExpectBad("    99999e99999e  mffgncl", "number overflow");
  ExpectBad(R"({"format":"recordio","format_version":1,"records":1e99999,"shards":[]})",
            "number overflow");
  ExpectBad(R"({"format":"tfrecord","format_version":1,"records":0,"shards":[]})", "unknown format");
  // Registered formats that a gpufeed.json cannot describe (they open none).
  ExpectBad(R"({"format":"imagefolder","format_version":1,"records":0,"shards":[]})",
            "unknown format");
  ExpectBad(R"({"format":"caffe_lmdb","format_version":1,"records":0,"shards":[]})",
            "unknown format");
  ExpectBad(R"({"format":"auto","format_version":1,"records":0,"shards":[]})", "unknown format");
  ExpectBad(R"({"format":"recordio","format_version":9,"records":0,"shards":[]})", "format_version 9");
  ExpectBad(R"({"format":"recordio","format_version":1,"records":5,
               "shards":[{"file":"a.rec","records":4}]})", "hold 4 records");
  ExpectBad(R"({"format":"recordio","format_version":1,"records":1,
               "shards":[{"file":"","records":1}]})", "empty");
  // Names leading outside the dataset parse; Dataset::Open refuses them
  // unless allow_external_paths (security_test.cc).
  Manifest manifest;
  EXPECT_TRUE(ParseManifest(R"({"format":"recordio","format_version":1,"records":1,
               "shards":[{"file":"/etc/passwd","records":1}]})", "/d/gpufeed.json", &manifest).ok());
  ExpectBad(R"({"format":"recordio","format_version":1,"records":1,
               "shards":[{"file":"a.rec","records":1,"xxh64":"xyz"}]})", "xxh64");
  ExpectBad(R"({"format":"recordio","format_version":1,"records":1,
               "shards":[{"records":1}]})", "file");
}

}  // namespace
}  // namespace gpufeed
