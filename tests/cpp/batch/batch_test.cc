// The batch component alone: Tensor sizes, the host allocator's memory, a
// Batch's buffer and device-handle lifetime (BatchAccess fills it as the
// stages do), and WaitForBatch's timeout contract.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "batch/batch_access.h"
#include "batch/batch_source.h"
#include "batch/device_handle.h"
#include "batch/host_allocator.h"
#include "gpufeed/batch.h"

namespace gpufeed {
namespace {

// Whether [data, data + bytes) is mapped in this process (msync fails with
// ENOMEM on an unmapped range).
bool Mapped(void* data, size_t bytes) {
  return ::msync(data, bytes, MS_ASYNC) == 0 || errno != ENOMEM;
}

TEST(TensorTest, BytesAreTheElementCountTimesTheDtypeSize) {
  Tensor tensor;
  tensor.shape = {4, 3, 8, 8};
  tensor.dtype = TensorDtype::kUint8;
  EXPECT_EQ(tensor.bytes(), 4u * 3 * 8 * 8);
  tensor.dtype = TensorDtype::kFloat32;
  EXPECT_EQ(tensor.bytes(), 4u * 3 * 8 * 8 * 4);
  tensor.dtype = TensorDtype::kFloat16;
  EXPECT_EQ(tensor.bytes(), 4u * 3 * 8 * 8 * 2);
  tensor.dtype = TensorDtype::kBfloat16;
  EXPECT_EQ(tensor.bytes(), 4u * 3 * 8 * 8 * 2);
  tensor.shape = {5};
  tensor.dtype = TensorDtype::kInt64;
  EXPECT_EQ(tensor.bytes(), 40u);
  tensor.dtype = TensorDtype::kInt32;
  EXPECT_EQ(tensor.bytes(), 20u);
  tensor.shape = {7, 0, 3};  // an empty dimension: no bytes
  EXPECT_EQ(tensor.bytes(), 0u);
}

TEST(HostAllocatorTest, GivesPageAlignedWritableMemoryAndTakesItBackAtOnce) {
  std::shared_ptr<BatchAllocator> allocator = MakeHostAllocator();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t bytes : {size_t{1}, page - 1, page, 3 * page + 5, size_t{8} << 20}) {
    auto* data = static_cast<uint8_t*>(allocator->Allocate(bytes));
    ASSERT_NE(data, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % page, 0u) << bytes;
    // Zeroed (fresh pages) and writable to the last byte.
    EXPECT_EQ(data[0], 0);
    EXPECT_EQ(data[bytes - 1], 0);
    std::memset(data, 0xAB, bytes);
    EXPECT_EQ(data[bytes - 1], 0xAB);
    EXPECT_TRUE(Mapped(data, bytes));
    allocator->Free(data, bytes);
    // Freed means unmapped, not kept in a heap for later.
    EXPECT_FALSE(Mapped(data, bytes)) << bytes;
  }
}

TEST(HostAllocatorTest, ZeroBytesIsAValidBufferToFree) {
  std::shared_ptr<BatchAllocator> allocator = MakeHostAllocator();
  void* data = allocator->Allocate(0);
  ASSERT_NE(data, nullptr);
  allocator->Free(data, 0);
  EXPECT_FALSE(Mapped(data, 1));
}

TEST(HostAllocatorTest, AllocateAndFreeFromManyThreads) {
  std::shared_ptr<BatchAllocator> allocator = MakeHostAllocator();
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        size_t bytes = 4096 * static_cast<size_t>(1 + (round + t) % 5);
        auto* data = static_cast<uint8_t*>(allocator->Allocate(bytes));
        if (data == nullptr) {
          ++wrong[t];
          continue;
        }
        std::memset(data, t, bytes);
        if (data[bytes - 1] != t) ++wrong[t];
        allocator->Free(data, bytes);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(wrong[t], 0) << t;
}

// A device handle that records what was forwarded to it and when it died.
class FakeDeviceHandle final : public DeviceBatchHandle {
 public:
  explicit FakeDeviceHandle(std::vector<std::string>* log) : log_(log) {}
  ~FakeDeviceHandle() override { log_->push_back("device released"); }
  void* ready_event() const override { return const_cast<int*>(&event_); }
  Status WaitOn(void* stream) override {
    log_->push_back("wait " + std::to_string(reinterpret_cast<uintptr_t>(stream)));
    return Status::OK();
  }
  Status RecordStream(void* stream) override {
    log_->push_back("record " + std::to_string(reinterpret_cast<uintptr_t>(stream)));
    return Status::OK();
  }
  Status Synchronize() override {
    log_->push_back("synchronize");
    return Status::IOError("synchronize failed");
  }

 private:
  std::vector<std::string>* log_;
  int event_ = 0;
};

// A hold whose release is logged: the stand-in for a batch buffer.
std::shared_ptr<void> LoggedHold(std::vector<std::string>* log) {
  return std::shared_ptr<void>(new int(0), [log](void* p) {
    log->push_back("buffer released");
    delete static_cast<int*>(p);
  });
}

Tensor HostTensor(void* data, std::vector<int64_t> shape, TensorDtype dtype) {
  Tensor tensor;
  tensor.data = data;
  tensor.shape = std::move(shape);
  tensor.dtype = dtype;
  return tensor;
}

// A host batch of `data` as (rows, bytes / rows) uint8, ids 0..rows-1, no
// labels, its buffer release logged.
void FillHostBatch(Batch* batch, std::vector<uint8_t>* data, int64_t rows, uint64_t epoch,
                   std::vector<std::string>* log) {
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < rows; ++i) ids.push_back(static_cast<uint64_t>(i));
  BatchAccess::Fill(batch,
                    HostTensor(data->data(), {rows, static_cast<int64_t>(data->size()) / rows},
                               TensorDtype::kUint8),
                    Tensor(), std::move(ids), epoch, 0, false, LoggedHold(log));
}

TEST(BatchTest, AnEmptyBatchIsAHostBatchWhoseDeviceCallsDoNothing) {
  Batch batch;
  EXPECT_EQ(batch.size(), 0);
  EXPECT_FALSE(batch.end_of_epoch());
  EXPECT_EQ(batch.device(), DeviceKind::kCpu);
  EXPECT_EQ(batch.data().data, nullptr);
  EXPECT_TRUE(batch.label_lengths().shape.empty());
  EXPECT_EQ(batch.ready_event(), nullptr);
  EXPECT_TRUE(batch.WaitOn(nullptr).ok());
  EXPECT_TRUE(batch.RecordStream(reinterpret_cast<void*>(7)).ok());
  EXPECT_TRUE(batch.Synchronize().ok());
}

TEST(BatchTest, FillSetsWhatTheConsumerReadsAndResetReturnsTheBuffer) {
  std::vector<std::string> log;
  std::vector<uint8_t> data(6 * 12), labels(6 * 8), lengths(6 * 4);
  Batch batch;
  BatchAccess::Fill(&batch, HostTensor(data.data(), {6, 12}, TensorDtype::kUint8),
                    HostTensor(labels.data(), {6}, TensorDtype::kInt64), {5, 1, 4, 0, 3, 2},
                    /*epoch=*/2, /*index=*/9, /*end=*/false, LoggedHold(&log));
  BatchAccess::SetLabelLengths(&batch, HostTensor(lengths.data(), {6}, TensorDtype::kInt32));
  EXPECT_EQ(batch.size(), 6);
  EXPECT_EQ(batch.data().data, data.data());
  EXPECT_EQ(batch.data().bytes(), data.size());
  EXPECT_EQ(batch.labels().bytes(), labels.size());
  EXPECT_EQ(batch.label_lengths().bytes(), lengths.size());
  EXPECT_EQ(batch.sample_ids(), (std::vector<uint64_t>{5, 1, 4, 0, 3, 2}));
  EXPECT_EQ(batch.epoch(), 2u);
  EXPECT_EQ(batch.index(), 9u);
  EXPECT_FALSE(batch.end_of_epoch());
  EXPECT_TRUE(log.empty());
  batch.reset();
  EXPECT_EQ(log, (std::vector<std::string>{"buffer released"}));
  EXPECT_EQ(batch.size(), 0);
  EXPECT_EQ(batch.data().data, nullptr);
  EXPECT_EQ(batch.labels().data, nullptr);
  EXPECT_EQ(batch.label_lengths().data, nullptr);
  EXPECT_TRUE(batch.sample_ids().empty());
  batch.reset();  // twice: nothing more to release
  EXPECT_EQ(log.size(), 1u);
}

TEST(BatchTest, FillingAgainReleasesThePreviousBuffer) {
  std::vector<std::string> log;
  std::vector<uint8_t> data(4);
  Batch batch;
  FillHostBatch(&batch, &data, 2, /*epoch=*/0, &log);
  BatchAccess::FillEndOfEpoch(&batch, /*epoch=*/0, /*index=*/1);
  EXPECT_EQ(log, (std::vector<std::string>{"buffer released"}));
  EXPECT_TRUE(batch.end_of_epoch());
  EXPECT_EQ(batch.size(), 0);
  EXPECT_EQ(batch.epoch(), 0u);
  EXPECT_EQ(batch.index(), 1u);
}

TEST(BatchTest, AMovedBatchCarriesItsBufferAndReleasesItOnce) {
  std::vector<std::string> log;
  std::vector<uint8_t> data(8);
  Batch first;
  FillHostBatch(&first, &data, 2, /*epoch=*/1, &log);
  {
    Batch second(std::move(first));
    EXPECT_EQ(second.size(), 2);
    EXPECT_EQ(second.data().data, data.data());
    EXPECT_EQ(second.sample_ids(), (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(second.epoch(), 1u);
    Batch third;
    third = std::move(second);
    EXPECT_EQ(third.size(), 2);
    EXPECT_TRUE(log.empty());
  }
  EXPECT_EQ(log, (std::vector<std::string>{"buffer released"}));
  first.reset();
  EXPECT_EQ(log.size(), 1u);
}

TEST(BatchTest, DeviceCallsGoToTheHandleWhichIsReleasedBeforeTheBuffer) {
  std::vector<std::string> log;
  std::vector<uint8_t> data(4);
  auto handle = std::make_shared<FakeDeviceHandle>(&log);
  void* event = handle->ready_event();
  Batch batch;
  BatchAccess::Fill(&batch, HostTensor(data.data(), {1, 4}, TensorDtype::kUint8), Tensor(),
                    {0}, 0, 0, false, LoggedHold(&log), std::move(handle));
  EXPECT_EQ(batch.ready_event(), event);
  EXPECT_TRUE(batch.WaitOn(reinterpret_cast<void*>(3)).ok());
  EXPECT_TRUE(batch.RecordStream(reinterpret_cast<void*>(4)).ok());
  Status status = batch.Synchronize();
  EXPECT_TRUE(status.IsIOError()) << status.ToString();  // the handle's answer, unchanged
  batch.reset();
  // The device handle first: its release records the consumer streams' events.
  EXPECT_EQ(log, (std::vector<std::string>{"wait 3", "record 4", "synchronize",
                                           "device released", "buffer released"}));
  EXPECT_EQ(batch.ready_event(), nullptr);
  EXPECT_TRUE(batch.Synchronize().ok());
}

TEST(WaitForBatchTest, ReturnsAtOnceWhenReadyAndFalseAfterTheTimeout) {
  std::mutex mutex;
  std::condition_variable changed;
  std::unique_lock<std::mutex> lock(mutex);
  double waited = 0;
  EXPECT_TRUE(WaitForBatch(changed, lock, 0, [] { return true; }, &waited));
  EXPECT_TRUE(WaitForBatch(changed, lock, -1, [] { return true; }, &waited));
  EXPECT_LT(waited, 1.0);
  waited = 0;
  auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitForBatch(changed, lock, 50, [] { return false; }, &waited));
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(waited, 0.045);
  EXPECT_LE(waited, elapsed + 1e-6);
  // The time waited adds up over calls.
  double before = waited;
  EXPECT_FALSE(WaitForBatch(changed, lock, 20, [] { return false; }, &waited));
  EXPECT_GT(waited, before);
  EXPECT_TRUE(lock.owns_lock());
}

TEST(WaitForBatchTest, WakesWhenAnotherThreadMakesItReady) {
  std::mutex mutex;
  std::condition_variable changed;
  bool ready = false;
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      std::lock_guard<std::mutex> guard(mutex);
      ready = true;
    }
    changed.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  double waited = 0;
  EXPECT_TRUE(WaitForBatch(changed, lock, -1, [&] { return ready; }, &waited));
  EXPECT_TRUE(ready);
  EXPECT_GT(waited, 0.0);
  lock.unlock();
  producer.join();
}

}  // namespace
}  // namespace gpufeed
