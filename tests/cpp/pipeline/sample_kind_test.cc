// The sample kinds (src/pipeline/sample_kind.h) on their own: the choice by
// transform, each kind's checks, layout, schedule, state fields, device
// settings and writes, on real datasets on disk.
#include "pipeline/sample_kind.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/token_corpus.h"
#include "test_util.h"
#include "token_test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::shared_ptr<SampleKind> KindFor(const LoaderOptions& options) {
  std::shared_ptr<SampleKind> kind;
  EXPECT_TRUE(MakeSampleKind(options, &kind).ok());
  return kind;
}

std::shared_ptr<const Dataset> OpenDataset(const std::string& path) {
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(path, {}, &dataset);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return std::shared_ptr<const Dataset>(std::move(dataset));
}

class SampleKindTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = JoinPath(dir_.path(), "folder");
    ASSERT_TRUE(CreateDirectories(JoinPath(folder_, "a")).ok());
    WriteBytes(JoinPath(folder_, "a/x.jpg"), std::string("\x01\x02\x03", 3));
    corpus_ = JoinPath(dir_.path(), "tokens.bin");
    WriteLlmc(corpus_, 4000, 7);
  }

  TempDir dir_;
  std::string folder_;
  std::string corpus_;
};

TEST_F(SampleKindTest, EveryTransformHasAKindAndAnUnknownOneIsRefused) {
  for (TransformKind transform :
       {TransformKind::kImage, TransformKind::kRaw, TransformKind::kTokenWindows}) {
    LoaderOptions options;
    options.transform = transform;
    EXPECT_NE(KindFor(options), nullptr);
  }
  LoaderOptions unknown;
  unknown.transform = static_cast<TransformKind>(99);
  std::shared_ptr<SampleKind> kind;
  Status status = MakeSampleKind(unknown, &kind);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
}

TEST_F(SampleKindTest, RawVectorsArePaddedAndCarryTheRecordsLabels) {
  LoaderOptions options;
  options.transform = TransformKind::kRaw;
  EXPECT_FALSE(KindFor(options)->Validate().ok());  // no length
  options.raw.length = 5;
  options.raw.pad = 9;
  options.label_type = LoaderOptions::LabelType::kFloat32;
  std::shared_ptr<SampleKind> kind = KindFor(options);
  ASSERT_TRUE(kind->Validate().ok());
  // A copy per sample: under global shuffle the reads are the work.
  EXPECT_TRUE(kind->Schedule({}, true).random_read_ahead);
  std::shared_ptr<const Dataset> prepared;
  ASSERT_TRUE(kind->Prepare(OpenDataset(folder_), &prepared).ok());
  BatchLayout layout;
  ASSERT_TRUE(kind->Layout(*prepared, &layout).ok());
  EXPECT_EQ(layout.sample_shape, std::vector<int64_t>{5});
  EXPECT_EQ(layout.sample_bytes, 5u);
  EXPECT_TRUE(layout.label_shape.empty());
  Record record;
  ASSERT_TRUE(prepared->Read(0, &record).ok());
  std::vector<char> data(layout.sample_bytes), labels(layout.label_bytes_per_sample);
  SampleRow row{data.data(), labels.data(), nullptr};
  SampleScratch scratch;
  ASSERT_TRUE(kind->Write(0, 0, record, layout, row, &scratch).ok());
  EXPECT_EQ(std::string(data.data(), 5), std::string("\x01\x02\x03\x09\x09", 5));
  float label = -1;
  std::memcpy(&label, labels.data(), sizeof(label));
  EXPECT_EQ(label, 0.0f);  // class "a"
}

TEST_F(SampleKindTest, RecordKindsRefuseATokenCorpusAndTheTokenKindAnImageDataset) {
  LoaderOptions options;
  std::shared_ptr<const Dataset> prepared;
  Status status = KindFor(options)->Prepare(OpenDataset(corpus_), &prepared);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("token corpus"), std::string::npos) << status.ToString();
  options.transform = TransformKind::kTokenWindows;
  status = KindFor(options)->Prepare(OpenDataset(folder_), &prepared);
  EXPECT_FALSE(status.ok());
}

TEST_F(SampleKindTest, ImageKindChecksItsOutputAndMovesNormalisationToTheDevice) {
  LoaderOptions options;
  options.image.dtype = TensorDtype::kInt32;
  EXPECT_FALSE(KindFor(options)->Validate().ok());
  options.image.dtype = TensorDtype::kFloat32;
  options.image.size = 0;
  EXPECT_FALSE(KindFor(options)->Validate().ok());
  options.image.size = 16;
  // The decode paces the reads: no read-ahead beyond the prefetch window.
  EXPECT_FALSE(KindFor(options)->Schedule({}, true).random_read_ahead);
  options.label_count = 2;
  std::shared_ptr<SampleKind> kind = KindFor(options);
  ASSERT_TRUE(kind->Validate().ok());
  BatchLayout layout;
  ASSERT_TRUE(kind->Layout(*OpenDataset(folder_), &layout).ok());
  EXPECT_EQ(layout.sample_shape, (std::vector<int64_t>{3, 16, 16}));
  EXPECT_EQ(layout.sample_bytes, 3u * 16 * 16 * 4);
  EXPECT_EQ(layout.label_shape, std::vector<int64_t>{2});
  DeviceOptions device;
  device.normalize_on_device = true;
  LoaderOptions host = options;
  DeviceStageOptions stage;
  kind->ConfigureDevice(device, &host, &stage);
  EXPECT_TRUE(stage.normalize);
  EXPECT_EQ(host.image.dtype, TensorDtype::kUint8);
  EXPECT_EQ(host.image.layout, OutputLayout::kNHWC);
  EXPECT_EQ(stage.normalize_table.size(), 768u * 4);
  options.image.dtype = TensorDtype::kUint8;
  DeviceStageOptions uint8_stage;
  KindFor(options)->ConfigureDevice(device, &host, &uint8_stage);
  EXPECT_FALSE(uint8_stage.normalize);  // nothing to normalise
}

// Twice every ring's slots of reads beyond the prefetch window, within
// half the read budget.
TEST(GlobalShuffleReadAheadTest, TwiceTheSlotsWithinHalfTheBudget) {
  IoOptions io;
  io.queue_depth = 48;
  io.inflight_bytes = 64u << 20;
  EXPECT_EQ(GlobalShuffleReadAhead(io, 4098), 96u);  // token windows: the slots
  io.threads = 2;
  EXPECT_EQ(GlobalShuffleReadAhead(io, 4098), 192u);  // two rings
  io.backend = IoBackend::kPread;
  EXPECT_EQ(GlobalShuffleReadAhead(io, 4098), 96u);  // pread: threads are the slots
  io.backend = IoBackend::kIoUring;
  EXPECT_EQ(GlobalShuffleReadAhead(io, 1u << 20), 32u);  // 1 MiB records: half the budget
  EXPECT_EQ(GlobalShuffleReadAhead(io, 1u << 30), 1u);   // at least one
  EXPECT_EQ(GlobalShuffleReadAhead(io, 0), 192u);
}

TEST_F(SampleKindTest, TokenWindowsWriteXAndYAndGuardTheirState) {
  LoaderOptions options;
  options.transform = TransformKind::kTokenWindows;
  options.tokens.seq_len = 8;
  options.tokens.dtype = TensorDtype::kInt32;
  options.shuffle = ShuffleMode::kBlock;
  std::shared_ptr<SampleKind> kind = KindFor(options);
  ASSERT_TRUE(kind->Validate().ok());
  std::shared_ptr<const Dataset> windows;
  ASSERT_TRUE(kind->Prepare(OpenDataset(corpus_), &windows).ok());
  EXPECT_EQ(windows->size(), (4000u - 1) / 8);
  BatchLayout layout;
  ASSERT_TRUE(kind->Layout(*windows, &layout).ok());
  EXPECT_EQ(layout.label_shape, std::vector<int64_t>{8});
  WorkSchedule schedule = kind->Schedule({10, 12, 3}, true);
  EXPECT_TRUE(schedule.time_per_run);
  EXPECT_GT(schedule.run_tasks, 1u);
  // A shuffle window of the largest blocks, and the chunk by which
  // submission may lag it.
  EXPECT_EQ(schedule.read_ahead_tasks,
            12u * options.shuffle_window_shards + schedule.submit_chunk);
  EXPECT_EQ(kind->Schedule({10}, false).read_ahead_tasks, 0u);
  // Global shuffle reads one window at a time: the host stage adds the
  // read-ahead every kind gets then (GlobalShuffleReadAhead).
  LoaderOptions global = options;
  global.shuffle = ShuffleMode::kGlobal;
  EXPECT_EQ(KindFor(global)->Schedule({10, 10}, true).read_ahead_tasks, 0u);
  EXPECT_TRUE(KindFor(global)->Schedule({10, 10}, true).random_read_ahead);

  Record record;
  ASSERT_TRUE(windows->Read(3, &record).ok());
  std::vector<int32_t> x(8), y(8);
  SampleRow row{reinterpret_cast<char*>(x.data()), reinterpret_cast<char*>(y.data()), nullptr};
  SampleScratch scratch;
  ASSERT_TRUE(kind->Write(3, 0, record, layout, row, &scratch).ok());
  const uint16_t* tokens = reinterpret_cast<const uint16_t*>(record.data.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(x[i], tokens[i]);
    EXPECT_EQ(y[i], tokens[i + 1]);
  }
  record.data.resize(4);
  EXPECT_FALSE(kind->Write(3, 0, record, layout, row, &scratch).ok());  // not a window

  LoaderState state;
  kind->DescribeState(&state);
  EXPECT_EQ(state.seq_len, 8u);
  EXPECT_TRUE(kind->CheckState(state).ok());
  state.seq_len = 16;
  Status status = kind->CheckState(state);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("seq_len 16"), std::string::npos) << status.ToString();
  LoaderOptions images;
  EXPECT_FALSE(KindFor(images)->CheckState(state).ok());  // a token state on an image loader
}

}  // namespace
}  // namespace gpufeed
