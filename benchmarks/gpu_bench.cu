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
// (d) check: one epoch of DATASET through two Loaders, one on the CPU and
//     one into GPU memory (normalize on the GPU), for every output dtype
//     (uint8: the copy alone; float32, float16, bfloat16: the normalize
//     kernel); every device byte is copied back and compared with the CPU's
//     (the short last batch by its real size): max abs error per dtype and
//     the bytes checked.
// Every CUDA call and every kernel launch (cudaGetLastError) is checked; a
// failure prints the call and exits 1. Batches are counted by their real
// samples and bytes (a short last batch is not a full one).
// Prints RESULT lines (benchmarks/gpu_check.sh reads them) and a short
// table last.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

#include "batch/batch_access.h"
#include "batch/batch_source.h"
#include "decode/transform.h"
#include "device/device_stage.h"
#include "gpufeed/loader.h"
#include "gpufeed/writer.h"
#include "dtype_test_util.h"
#include "jpeg_test_util.h"
#include "util/file.h"
#include "util/path.h"

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

// After every <<<...>>>: a launch error (bad configuration, no kernel image
// for this GPU) is reported here, not by some later call.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

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
    CHECK_LAUNCH();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&took, a, b));
    cycles = std::max(1LL, static_cast<long long>(cycles * (ms / std::max(took, 1e-3f))));
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
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
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaFree(device));
  CHECK_CUDA(cudaFreeHost(host));
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
      CHECK_CUDA(cudaFreeHost(data));
      CHECK_CUDA(cudaFreeHost(labels));
    }
  }
  size_t bytes() const { return bytes_; }
  size_t sample_bytes() const { return static_cast<size_t>(size_) * size_ * 3; }

  // `batches` per epoch, as a BatchSource for the device stage; the
  // ReadyBatches outlive it.
  class Source final : public BatchSource {
   public:
    Source(ReadyBatches* ready, uint64_t batches) : ready_(ready), batches_(batches) {}
    Status NextFor(Batch* batch, int timeout_ms, bool* got) override {
      return ready_->NextFor(batches_, batch, timeout_ms, got);
    }
    Status Seek(const BatchCursor&) override { return Status::OK(); }
    BatchCursor Position() const override { return BatchCursor(); }
    void AddStats(StageStats*) const override {}

   private:
    ReadyBatches* ready_;
    uint64_t batches_;
  };
  std::unique_ptr<BatchSource> MakeSource(uint64_t batches) {
    return std::make_unique<Source>(this, batches);
  }

  Status NextFor(uint64_t batches, Batch* batch, int timeout_ms, bool* ready) {
    std::unique_lock<std::mutex> lock(mutex_);
    *ready = true;
    if (handed_ == batches) {
      BatchAccess::FillEndOfEpoch(batch, 0, handed_);
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
    BatchAccess::Fill(batch, data, labels, ids, 0, handed_++, false, hold);
    return Status::OK();
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
  options.normalize_dtype = TensorDtype::kFloat32;
  options.normalize_nchw = true;
  if (normalize) {
    ImageTransformOptions image;
    image.size = size;
    options.normalize_table.resize(768 * TensorDtypeSize(OutputDtype::kFloat32));
    NormalizeTable(image, OutputDtype::kFloat32, options.normalize_table.data());
  }
  std::unique_ptr<BatchSource> stage;
  Check(CreateDeviceStage(ready.MakeSource(static_cast<uint64_t>(batches)), options, &stage),
        "CreateDeviceStage");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Batch b;
  bool got = false;
  // Warm-up: the first few batches.
  for (int i = 0; i < 3; ++i) Check(stage->NextFor(&b, -1, &got), "Next");
  b.reset();
  Check(stage->Seek(BatchCursor()), "Seek");
  auto start = Clock::now();
  int done = 0;
  double input_bytes = 0;  // uint8 bytes in, by each batch's real sample count
  while (true) {
    Check(stage->NextFor(&b, -1, &got), "Next");
    if (b.end_of_epoch()) break;
    Check(b.WaitOn(stream), "WaitOn");
    done += 1;
    input_bytes += static_cast<double>(b.size()) * ready.sample_bytes();
    b.reset();
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  double seconds = Seconds(Clock::now() - start);
  stage.reset();
  CHECK_CUDA(cudaStreamDestroy(stream));
  if (done == 0) {
    std::fprintf(stderr, "device stage: no batch came out\n");
    std::exit(1);
  }
  *batches_per_s = done / seconds;
  return input_bytes / seconds / 1e9;
}

struct EndToEnd {
  double pipeline_images_per_s = 0;
  double consumer_ms = 0;
  double images_per_s = 0;
  double stall_percent = 0;
  double next_wait_percent = 0;
  int64_t samples = 0;  // measured run, by each batch's real size
  double bytes = 0;
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
    int64_t samples = 0;
    Clock::time_point start;
    while (done < batches / 2 + 3) {
      Check(loader->Next(&b), "Next");
      if (b.end_of_epoch()) continue;
      Check(b.WaitOn(stream), "WaitOn");
      if (done >= 3) samples += b.size();  // after the pipeline filled
      if (++done == 3) start = Clock::now();
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    result.pipeline_images_per_s = samples / Seconds(Clock::now() - start);
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
    CHECK_LAUNCH();
    result.samples += b.size();
    result.bytes += static_cast<double>(b.data().bytes());
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
  for (int i = 0; i < done; ++i) {
    Spin<<<1, 1, 0, stream>>>(cycles);
    CHECK_LAUNCH();
  }
  CHECK_CUDA(cudaEventRecord(last, stream));
  CHECK_CUDA(cudaEventSynchronize(last));
  float reference_ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&reference_ms, first, last));
  result.consumer_ms = reference_ms / done;
  result.stall_percent = std::max(0.0, 100.0 * (1.0 - reference_ms / stream_ms));
  result.next_wait_percent = 100.0 * next_wait / wall;
  result.images_per_s = result.samples / wall;
  result.verdict = loader->Stats().verdict;
  CHECK_CUDA(cudaEventDestroy(first));
  CHECK_CUDA(cudaEventDestroy(last));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return result;
}


struct DtypeCheck {
  std::string dtype;
  double max_error = 0;    // max |GPU - CPU| over every element
  uint64_t bytes = 0;      // device bytes copied back and compared (data and labels)
  uint64_t mismatched = 0; // bytes that differ from the CPU's
  int batches = 0;
  int64_t samples = 0;
  std::string problem;     // a structural mismatch (shape, ids, epoch end), empty if none
};

// (d) one epoch through a CPU Loader and a CUDA Loader with the same seed;
// every device byte compared with the CPU's.
DtypeCheck CheckDtype(const std::shared_ptr<const Dataset>& dataset, OutputDtype dtype,
                      const char* name, bool train, int batch, int size, int threads) {
  DtypeCheck check;
  check.dtype = name;
  LoaderOptions options;
  options.batch_size = batch;
  options.num_threads = threads;
  options.seed = 17;
  options.image.size = size;
  options.image.dtype = dtype;
  options.image.layout = OutputLayout::kNCHW;
  options.image.train = train;
  std::unique_ptr<Loader> host, device;
  Check(Loader::Open(dataset, options, &host), "Loader::Open (cpu)");
  options.device.kind = DeviceKind::kCuda;
  options.device.normalize_on_device = true;
  Check(Loader::Open(dataset, options, &device), "Loader::Open (cuda)");
  std::string data, labels;
  while (true) {
    Batch want, got;
    Check(host->Next(&want), "Next (cpu)");
    Check(device->Next(&got), "Next (cuda)");
    if (want.end_of_epoch() != got.end_of_epoch()) {
      check.problem = "epoch ends differ";
      break;
    }
    if (got.end_of_epoch()) break;
    if (got.sample_ids() != want.sample_ids() || got.data().shape != want.data().shape ||
        got.data().dtype != want.data().dtype || got.labels().bytes() != want.labels().bytes() ||
        got.device() != DeviceKind::kCuda) {
      check.problem = "batch " + std::to_string(got.index()) + ": ids, shape, dtype or device differ";
      break;
    }
    Check(got.Synchronize(), "Synchronize");
    data.resize(got.data().bytes());
    labels.resize(got.labels().bytes());
    CHECK_CUDA(cudaMemcpy(data.data(), got.data().data, data.size(), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(labels.data(), got.labels().data, labels.size(), cudaMemcpyDeviceToHost));
    const auto* have = reinterpret_cast<const uint8_t*>(data.data());
    const auto* expected = static_cast<const uint8_t*>(want.data().data);
    size_t elements = data.size() / TensorDtypeSize(got.data().dtype);
    for (size_t i = 0; i < elements; ++i) {
      double error = std::fabs(ElementAsFloat(have, i, got.data().dtype) -
                               ElementAsFloat(expected, i, got.data().dtype));
      if (!(error <= check.max_error)) check.max_error = std::isnan(error) ? INFINITY : error;
    }
    for (size_t i = 0; i < data.size(); ++i) check.mismatched += have[i] != expected[i];
    const auto* expected_labels = static_cast<const uint8_t*>(want.labels().data);
    for (size_t i = 0; i < labels.size(); ++i) {
      check.mismatched += static_cast<uint8_t>(labels[i]) != expected_labels[i];
    }
    check.bytes += data.size() + labels.size();
    check.batches += 1;
    check.samples += got.size();
  }
  if (check.problem.empty() && check.batches == 0) check.problem = "no batch";
  if (check.problem.empty() && check.samples != static_cast<int64_t>(dataset->size())) {
    check.problem = "epoch of " + std::to_string(check.samples) + " samples, dataset has " +
                    std::to_string(dataset->size());
  }
  return check;
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
  std::fflush(stdout);
  EndToEnd e2e = RunEndToEnd(path, batch, size, threads, batches);
  std::printf("RESULT mode=end_to_end pipeline_images_per_s=%.0f consumer_ms=%.2f images_per_s=%.0f "
              "stall_percent=%.2f next_wait_percent=%.2f samples=%lld bytes=%.0f verdict=\"%s\"\n",
              e2e.pipeline_images_per_s, e2e.consumer_ms, e2e.images_per_s, e2e.stall_percent,
              e2e.next_wait_percent, static_cast<long long>(e2e.samples), e2e.bytes,
              e2e.verdict.c_str());
  std::fflush(stdout);
  std::vector<DtypeCheck> checks;
  {
    std::unique_ptr<Dataset> opened;
    Check(Dataset::Open(path, {}, &opened), "Dataset::Open");
    std::shared_ptr<const Dataset> dataset = std::move(opened);
    const OutputDtype dtypes[] = {OutputDtype::kUint8, OutputDtype::kFloat32, OutputDtype::kFloat16,
                                  OutputDtype::kBfloat16};
    const char* names[] = {"uint8", "float32", "float16", "bfloat16"};
    for (int d = 0; d < 4; ++d) {
      // Both transforms: random crops and flips (train) for two dtypes.
      checks.push_back(CheckDtype(dataset, dtypes[d], names[d], d % 2 == 0, batch, size, threads));
      const DtypeCheck& c = checks.back();
      std::printf("RESULT mode=check dtype=%s max_abs_error=%.9g bytes=%llu mismatched_bytes=%llu "
                  "batches=%d samples=%lld problem=\"%s\"\n",
                  c.dtype.c_str(), c.max_error, static_cast<unsigned long long>(c.bytes),
                  static_cast<unsigned long long>(c.mismatched), c.batches,
                  static_cast<long long>(c.samples), c.problem.c_str());
      std::fflush(stdout);
    }
  }
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
  for (const DtypeCheck& c : checks) {
    std::printf("| (d) %s on the GPU vs the CPU: max abs error | %.3g (%llu bytes, %llu differ%s%s) "
                "| 0 |\n", c.dtype.c_str(), c.max_error, static_cast<unsigned long long>(c.bytes),
                static_cast<unsigned long long>(c.mismatched), c.problem.empty() ? "" : "; ",
                c.problem.c_str());
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"gpu\": \"" << properties.name << "\", \"batch\": " << batch << ", \"size\": " << size
        << ", \"threads\": " << threads << ", \"raw_uint8_gbps\": " << raw_u8
        << ", \"raw_float32_gbps\": " << raw_f32 << ", \"stage_uint8_gbps\": " << stage_u8
        << ", \"stage_ratio\": " << stage_u8 / raw_u8 << ", \"stage_normalize_gbps\": " << stage_norm
        << ", \"pipeline_images_per_s\": " << e2e.pipeline_images_per_s
        << ", \"consumer_ms\": " << e2e.consumer_ms << ", \"images_per_s\": " << e2e.images_per_s
        << ", \"stall_percent\": " << e2e.stall_percent
        << ", \"next_wait_percent\": " << e2e.next_wait_percent
        << ", \"end_to_end_samples\": " << e2e.samples << ", \"end_to_end_bytes\": " << e2e.bytes
        << ", \"check\": {";
    for (size_t i = 0; i < checks.size(); ++i) {
      const DtypeCheck& c = checks[i];
      out << (i ? ", " : "") << "\"" << c.dtype << "\": {\"max_abs_error\": "
          << (std::isfinite(c.max_error) ? c.max_error : -1) << ", \"bytes\": " << c.bytes
          << ", \"mismatched_bytes\": " << c.mismatched << ", \"batches\": " << c.batches
          << ", \"samples\": " << c.samples << ", \"problem\": \"" << c.problem << "\"}";
    }
    out << "}}\n";
  }
  return 0;
}
