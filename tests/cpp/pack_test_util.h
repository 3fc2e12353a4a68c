// A packed dataset of real JPEGs for the tests that load images: the
// JPEG folder and the RecordIO pack made from it. Failures are fatal gtest
// failures in the helper: call them inside ASSERT_NO_FATAL_FAILURE.
#ifndef GPUFEED_TESTS_PACK_TEST_UTIL_H_
#define GPUFEED_TESTS_PACK_TEST_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "jpeg_test_util.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

// An ImageFolder of `count` JPEGs under `folder`: image i is
// class<i % classes>/img<iii>.jpg, RGB, quality 90, pixels seeded with i,
// `size(i)` = {width, height} pixels.
inline void WriteJpegFolder(const std::string& folder, int count, int classes,
                            const std::function<std::pair<int, int>(int)>& size) {
  for (int i = 0; i < count; ++i) {
    std::string cls = JoinPath(folder, "class" + std::to_string(i % classes));
    ASSERT_TRUE(CreateDirectories(cls).ok());
    char name[32];
    std::snprintf(name, sizeof(name), "img%03d.jpg", i);
    std::pair<int, int> wh = size(i);
    WriteBytes(JoinPath(cls, name),
               EncodeJpeg(wh.first, wh.second, JCS_RGB, 90, static_cast<uint32_t>(i)));
  }
}

// Packs `source` (an ImageFolder or a list file) into RecordIO shards of
// about `shard_size` bytes at `packed`; the summary into *summary and the
// opened dataset into *dataset where they are not null.
inline void PackAndOpen(const std::string& source, const std::string& packed,
                        uint64_t shard_size, std::shared_ptr<Dataset>* dataset,
                        PackSummary* summary = nullptr) {
  PackOptions pack;
  pack.shard_size = shard_size;
  PackSummary local;
  ASSERT_TRUE(Pack(source, packed, pack, summary ? summary : &local).ok());
  if (dataset == nullptr) return;
  std::unique_ptr<Dataset> opened;
  ASSERT_TRUE(Dataset::Open(packed, {}, &opened).ok());
  *dataset = std::move(opened);
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_PACK_TEST_UTIL_H_
