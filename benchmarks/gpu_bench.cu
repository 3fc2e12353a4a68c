// gpufeed_gpu_bench: the device stage's figures (benchmarks/gpu_check.sh).
//
//   gpufeed_gpu_bench DATASET [--batch 256] [--size 224] [--threads N]
//                     [--batches 200] [--json OUT]
//   gpufeed_gpu_bench --make-demo DIR [--images 2000]
//     writes DIR/folder (JPEGs, 400-640 px wide, like make_demo_dataset.py
//     but without Python) and packs it as RecordIO into DIR/recordio.
//
// (a) raw: plain cudaMemcpyAsync of one batch from pinned memory, back to
//     back on one stream: the ceiling;
// (b) stage: the DeviceStage alone on pre-decoded pinned host batches (a
//     source that hands out ready buffers), uint8 copies, and uint8 copies
//     plus the normalize kernel to float32 NCHW; ratio to (a);
// (c) end to end: the Loader on DATASET into GPU memory, with a consumer
//     that spends a fixed time per batch on the GPU (a spin kernel, set to
//     1.5x the pipeline's own time per batch so the consumer is the slower
//     side); consumer stall = the share of the consumer stream's time not
//     spent in its kernels.
// Prints RESULT lines and a short table last.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/device_stage.h"
#include "gpufeed/loader.h"
#include "gpufeed/writer.h"
#include "jpeg_test_util.h"
#include "util/file.h"
#include "util/path.h"
#include "pipeline/batch_access.h"

using namespace gpufeed;
using Clock = std::chrono::steady_clock;

namespace {

#define CHECK_CUDA(expr)                                                                 \
  do {                                                                                   \
    cudaError_t error_ = (expr);                                                         \
    if (error_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(error_));        \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

__global__ void Spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Cycles of Spin that take `ms` on this GPU (measured with events).
long long CalibrateSpin(double ms, cudaStream_t stream) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  long long cycles = 1000000;
  float took = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    Spin<<<1, 1, 0, stream>>>(cycles);
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&took, a, b));
    cycles = static_cast<long long>(cycles * (ms / std::max(took, 1e-3f)));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return cycles;
}

// (a) back-to-back pinned H2D copies of `bytes`.
double RawBandwidth(size_t bytes, int copies) {
  void *host, *device;
  CHECK_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
  CHECK_CUDA(cudaMalloc(&device, bytes));
  std::memset(host, 1, bytes);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  CHECK_CUDA(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));  // warm-up
  CHECK_CUDA(cudaEventRecord(a, stream));
  for (int i = 0; i < copies; ++i) {
    CHECK_CUDA(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
  }
  CHECK_CUDA(cudaEventRecord(b, stream));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(stream);
  cudaFree(device);
  cudaFreeHost(host);
  return static_cast<double>(bytes) * copies / (ms / 1e3) / 1e9;
}

// Pre-decoded pinned host batches, handed out as fast as they come back.
class ReadyBatches {
 public:
  ReadyBatches(int count, int batch, int size) : batch_(batch), size_(size) {
    bytes_ = static_cast<size_t>(batch) * size * size * 3;
    for (int i = 0; i < count; ++i) {
      void* data = nullptr;
      void* labels = nullptr;
      CHECK_CUDA(cudaHostAlloc(&data, bytes_, cudaHostAllocPortable));
      CHECK_CUDA(cudaHostAlloc(&labels, batch * sizeof(int64_t), cudaHostAllocPortable));
      for (size_t j = 0; j < bytes_; ++j) static_cast<uint8_t*>(data)[j] = static_cast<uint8_t>(j * 7 + i);
      std::memset(labels, 0, batch * sizeof(int64_t));
      buffers_.push_back({data, labels});
      free_.push_back(i);
    }
  }
  ~ReadyBatches() {
    for (auto& [data, labels] : buffers_) {
      cudaFreeHost(data);
      cudaFreeHost(labels);
    }
  }
  size_t bytes() const { return bytes_; }

  HostBatchSource Source(uint64_t batches) {
    HostBatchSource source;
    source.next_for = [this, batches](Batch* batch, int timeout_ms, bool* ready) {
      std::unique_lock<std::mutex> lock(mutex_);
      *ready = true;
      if (handed_ == batches) {
        LoaderBatchAccess::Fill(batch, Tensor(), Tensor(), {}, 0, handed_, true, nullptr);
        handed_ = 0;
        return Status::OK();
      }
      if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms < 0 ? 1000000 : timeout_ms),
                             [&] { return !free_.empty(); })) {
        *ready = false;
        return Status::OK();
      }
      int index = free_.front();
      free_.pop_front();
      Tensor data;
      data.data = buffers_[index].first;
      data.shape = {batch_, size_, size_, 3};
      data.dtype = TensorDtype::kUint8;
      Tensor labels;
      labels.data = buffers_[index].second;
      labels.shape = {batch_};
      labels.dtype = TensorDtype::kInt64;
      std::shared_ptr<void> hold(nullptr, [this, index](void*) {
        {
          std::lock_guard<std::mutex> guard(mutex_);
          free_.push_back(index);
        }
        changed_.notify_all();
      });
      std::vector<uint64_t> ids(batch_);
      LoaderBatchAccess::Fill(batch, data, labels, ids, 0, handed_++, false, hold);
      return Status::OK();
    };
    source.state = [] { return LoaderState(); };
    return source;
  }

 private:
  int batch_, size_;
  size_t bytes_ = 0;
  std::vector<std::pair<void*, void*>> buffers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<int> free_;
  uint64_t handed_ = 0;
};

// (b) batches/s of the device stage alone; GB/s of uint8 input.
double StageBandwidth(int batch, int size, int batches, bool normalize, double* batches_per_s) {
  ReadyBatches ready(4, batch, size);
  DeviceStageOptions options;
  options.prefetch = 2;
  options.max_data_bytes = ready.bytes();
  options.max_label_bytes = batch * sizeof(int64_t);
  options.normalize = normalize;
  options.image.size = size;
  options.image.dtype = OutputDtype::kFloat32;
  options.image.layout = OutputLayout::kNCHW;
  std::unique_ptr<DeviceStage> stage;
  Check(DeviceStage::Create(ready.Source(static_cast<uint64_t>(batches)), options, &stage),
        "DeviceStage::Create");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Batch b;
  bool got = false;
  // Warm-up: the first few batches.
  for (int i = 0; i < 3; ++i) Check(stage->NextFor(&b, -1, &got), "Next");
  b.reset();
  Check(stage->Reconfigure([] { return Status::OK(); }), "Reconfigure");
  auto start = Clock::now();
  int done = 0;
  while (true) {
    Check(stage->NextFor(&b, -1, &got), "Next");
    if (b.end_of_epoch()) break;
    Check(b.WaitOn(stream), "WaitOn");
    done += 1;
    b.reset();
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  double seconds = Seconds(Clock::now() - start);
  stage.reset();
  cudaStreamDestroy(stream);
  *batches_per_s = done / seconds;
  return static_cast<double>(ready.bytes()) * done / seconds / 1e9;
}

struct EndToEnd {
  double pipeline_images_per_s = 0;
  double consumer_ms = 0;
  double images_per_s = 0;
  double stall_percent = 0;
  double next_wait_percent = 0;
  std::string verdict;
};

EndToEnd RunEndToEnd(const std::string& path, int batch, int size, int threads, int batches) {
  std::unique_ptr<Dataset> opened;
  Check(Dataset::Open(path, {}, &opened), "Dataset::Open");
  std::shared_ptr<const Dataset> dataset = std::move(opened);
  LoaderOptions options;
  options.batch_size = batch;
  options.num_threads = threads;
  options.image.size = size;
  options.image.dtype = OutputDtype::kFloat32;  // uint8 over PCIe, normalized on the GPU
  options.device.kind = DeviceKind::kCuda;
  options.prefetch = 3;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  EndToEnd result;
  // The pipeline's own pace: a consumer that does nothing.
  {
    std::unique_ptr<Loader> loader;
    Check(Loader::Open(dataset, options, &loader), "Loader::Open");
    Batch b;
    int done = 0;
    Clock::time_point start;
    while (done < batches / 2 + 3) {
      Check(loader->Next(&b), "Next");
      if (b.end_of_epoch()) continue;
      Check(b.WaitOn(stream), "WaitOn");
      if (++done == 3) start = Clock::now();  // after the pipeline filled
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    result.pipeline_images_per_s = (done - 3) * batch / Seconds(Clock::now() - start);
  }
  double per_batch_ms = 1e3 * batch / result.pipeline_images_per_s;
  result.consumer_ms = 1.5 * per_batch_ms;
  long long cycles = CalibrateSpin(result.consumer_ms, stream);
  std::unique_ptr<Loader> loader;
  Check(Loader::Open(dataset, options, &loader), "Loader::Open");
  Batch b;
  // Let the pipeline fill, as a training job's first step would.
  for (int i = 0; i < 3; ++i) {
    Check(loader->Next(&b), "Next");
    if (b.end_of_epoch()) --i;
  }
  b.reset();
  cudaEvent_t first, last;
  CHECK_CUDA(cudaEventCreate(&first));
  CHECK_CUDA(cudaEventCreate(&last));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaEventRecord(first, stream));
  auto start = Clock::now();
  double next_wait = 0;
  int done = 0;
  while (done < batches) {
    auto asked = Clock::now();
    Check(loader->Next(&b), "Next");
    next_wait += Seconds(Clock::now() - asked);
    if (b.end_of_epoch()) continue;
    Check(b.WaitOn(stream), "WaitOn");
    Spin<<<1, 1, 0, stream>>>(cycles);
    b.reset();  // released at once; reuse waits for the stream
    done += 1;
  }
  CHECK_CUDA(cudaEventRecord(last, stream));
  CHECK_CUDA(cudaEventSynchronize(last));
  float stream_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&stream_ms, first, last));
  double wall = Seconds(Clock::now() - start);
  // The same spins back to back without the loader: the stream's time with
  // no stall (independent of how well the calibration hit its target).
  CHECK_CUDA(cudaEventRecord(first, stream));
  for (int i = 0; i < done; ++i) Spin<<<1, 1, 0, stream>>>(cycles);
  CHECK_CUDA(cudaEventRecord(last, stream));
  CHECK_CUDA(cudaEventSynchronize(last));
  float reference_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&reference_ms, first, last));
  result.consumer_ms = reference_ms / done;
  result.stall_percent = std::max(0.0, 100.0 * (1.0 - reference_ms / stream_ms));
  result.next_wait_percent = 100.0 * next_wait / wall;
  result.images_per_s = done * batch / wall;
  result.verdict = loader->Stats().verdict;
  cudaEventDestroy(first);
  cudaEventDestroy(last);
  cudaStreamDestroy(stream);
  return result;
}

int MakeDemo(const std::string& dir, int images) {
  std::string folder = JoinPath(dir, "folder");
  for (int i = 0; i < images; ++i) {
    std::string cls = JoinPath(folder, "class" + std::to_string(i % 10));
    Check(CreateDirectories(cls), "mkdir");
    int width = 400 + (i * 37) % 241, height = 300 + (i * 53) % 181;
    std::string jpeg = EncodeJpeg(width, height, JCS_RGB, 90, static_cast<uint32_t>(i));
    char name[32];
    std::snprintf(name, sizeof(name), "img%05d.jpg", i);
    std::ofstream(JoinPath(cls, name), std::ios::binary).write(jpeg.data(), jpeg.size());
  }
  PackOptions pack;
  pack.overwrite = true;
  PackSummary summary;
  Check(Pack(folder, JoinPath(dir, "recordio"), pack, &summary), "Pack");
  std::printf("demo: %d images packed into %s\n", images, JoinPath(dir, "recordio").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--make-demo") {
    int images = 2000;
    if (argc >= 5 && std::string(argv[3]) == "--images") images = std::atoi(argv[4]);
    return MakeDemo(argv[2], images);
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [--batch B] [--size S] [--threads N] [--batches N] "
                 "[--json OUT]\n", argv[0]);
    return 2;
  }
  std::string path = argv[1], json;
  int batch = 256, size = 224, batches = 200;
  int threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (flag == "--batch") batch = std::atoi(value().c_str());
    else if (flag == "--size") size = std::atoi(value().c_str());
    else if (flag == "--threads") threads = std::atoi(value().c_str());
    else if (flag == "--batches") batches = std::atoi(value().c_str());
    else if (flag == "--json") json = value();
  }
  Check(CudaDeviceUsable(0), "CUDA");
  cudaDeviceProp properties;
  CHECK_CUDA(cudaGetDeviceProperties(&properties, 0));
  size_t uint8_bytes = static_cast<size_t>(batch) * size * size * 3;
  double raw_u8 = RawBandwidth(uint8_bytes, 50);
  double raw_f32 = RawBandwidth(uint8_bytes * 4, 20);
  std::printf("RESULT mode=raw batch_mb=%.1f uint8_gbps=%.2f float32_gbps=%.2f\n", uint8_bytes / 1e6,
              raw_u8, raw_f32);
  double stage_bps = 0, stage_norm_bps = 0;
  double stage_u8 = StageBandwidth(batch, size, 200, false, &stage_bps);
  double stage_norm = StageBandwidth(batch, size, 200, true, &stage_norm_bps);
  std::printf("RESULT mode=stage uint8_gbps=%.2f ratio=%.3f normalize_gbps=%.2f normalize_ratio=%.3f\n",
              stage_u8, stage_u8 / raw_u8, stage_norm, stage_norm / raw_u8);
  EndToEnd e2e = RunEndToEnd(path, batch, size, threads, batches);
  std::printf("RESULT mode=end_to_end pipeline_images_per_s=%.0f consumer_ms=%.2f images_per_s=%.0f "
              "stall_percent=%.2f next_wait_percent=%.2f verdict=\"%s\"\n",
              e2e.pipeline_images_per_s, e2e.consumer_ms, e2e.images_per_s, e2e.stall_percent,
              e2e.next_wait_percent, e2e.verdict.c_str());
  std::printf("\n%s, batch %d x %dx%dx3 (uint8 %.1f MB)\n", properties.name, batch, size, size,
              uint8_bytes / 1e6);
  std::printf("| figure | value | target |\n|---|---|---|\n");
  std::printf("| (a) raw pinned H2D, uint8 batch | %.2f GB/s | ceiling |\n", raw_u8);
  std::printf("| (a) raw pinned H2D, float32 batch | %.2f GB/s | |\n", raw_f32);
  std::printf("| (b) device stage, uint8 | %.2f GB/s (%.1f%% of a) | >= 90%% |\n", stage_u8,
              100 * stage_u8 / raw_u8);
  std::printf("| (b) device stage, uint8 + GPU normalize to float32 | %.2f GB/s in (%.1f%% of a) | |\n",
              stage_norm, 100 * stage_norm / raw_u8);
  std::printf("| (c) pipeline alone, %d threads | %.0f images/s | |\n", threads,
              e2e.pipeline_images_per_s);
  std::printf("| (c) consumer at %.2f ms/batch: stall | %.2f%% | < 2%% |\n", e2e.consumer_ms,
              e2e.stall_percent);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"gpu\": \"" << properties.name << "\", \"batch\": " << batch << ", \"size\": " << size
        << ", \"threads\": " << threads << ", \"raw_uint8_gbps\": " << raw_u8
        << ", \"raw_float32_gbps\": " << raw_f32 << ", \"stage_uint8_gbps\": " << stage_u8
        << ", \"stage_ratio\": " << stage_u8 / raw_u8 << ", \"stage_normalize_gbps\": " << stage_norm
        << ", \"pipeline_images_per_s\": " << e2e.pipeline_images_per_s
        << ", \"consumer_ms\": " << e2e.consumer_ms << ", \"images_per_s\": " << e2e.images_per_s
        << ", \"stall_percent\": " << e2e.stall_percent
        << ", \"next_wait_percent\": " << e2e.next_wait_percent << "}\n";
  }
  return 0;
}
