#include "device/device_buffers.h"

#include "device/device_stage.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace gpufeed {

namespace {
// Release events created per buffer up front: one consumer stream, or two,
// needs no event creation at release time.
constexpr size_t kReleaseEventsPerBuffer = 2;
}  // namespace

Status DeviceShared::Allocate(DeviceBuffer* buffer) {
  GPUFEED_RETURN_IF_ERROR(AllocateDeviceMemory(std::max<size_t>(data_bytes, 1), &buffer->data));
  GPUFEED_RETURN_IF_ERROR(
      AllocateDeviceMemory(std::max<size_t>(label_bytes, 1), &buffer->labels));
  if (!buffer->ready) {
    // Blocking sync: a consumer's Synchronize sleeps instead of spinning.
    GPUFEED_RETURN_IF_ERROR(
        CreateCudaEvent(cudaEventDisableTiming | cudaEventBlockingSync, &buffer->ready));
    for (size_t e = 0; e < kReleaseEventsPerBuffer; ++e) {
      CudaEvent event;
      GPUFEED_RETURN_IF_ERROR(CreateCudaEvent(cudaEventDisableTiming, &event));
      buffer->release.push_back(std::move(event));
    }
  }
  return Status::OK();
}

Status DeviceShared::GrowLocked() {
  const uint64_t buffer_bytes = data_bytes + label_bytes;
  if ((held + 1) * buffer_bytes > max_held_bytes) {
    return Status::InvalidArgument(
        "the consumer holds " + std::to_string(held) + " CUDA batches (" +
        std::to_string(held * buffer_bytes) +
        " bytes of GPU memory) and one more would pass max_held_bytes (" +
        std::to_string(max_held_bytes) +
        " bytes): release the batches you no longer need (or copy those you keep), or raise "
        "max_held_bytes");
  }
  size_t index = buffers.size();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].extra && !buffers[i].data) {
      index = i;
      break;
    }
  }
  if (index == buffers.size()) {
    if (buffers.size() == kMaxBuffers) {
      return Status::InvalidArgument("the consumer holds " + std::to_string(held) +
                                     " CUDA batches, the most a loader hands out at once");
    }
    buffers.emplace_back();
    buffers.back().extra = true;
  }
  DeviceScope scope(device);
  DeviceBuffer& buffer = buffers[index];
  Status allocated = Allocate(&buffer);
  if (!allocated.ok()) {
    cudaGetLastError();
    buffer.data.reset();
    buffer.labels.reset();
    return allocated.WithContext("another device buffer for the batches held");
  }
  buffer.pending_release = 0;
  live += 1;
  free.push_back(index);
  return Status::OK();
}

DeviceShared::~DeviceShared() {
  // The handles go back here, with the device current, in this order:
  // nothing may still use a buffer when it is freed.
  DeviceScope scope(device);
  if (copy_stream) cudaStreamSynchronize(copy_stream.get());
  for (DeviceBuffer& buffer : buffers) {
    for (size_t i = 0; i < buffer.pending_release; ++i) {
      cudaEventSynchronize(buffer.release[i].get());
    }
  }
  buffers.clear();
  staging.reset();
  table.reset();
  copy_stream.reset();
}

void DeviceShared::Release(size_t index, const std::vector<cudaStream_t>& streams,
                           bool delivered) {
  if (getpid() != owner) return;  // an inherited Batch in a forked child: left alone
  if (delivered && buffers[index].extra) {
    // Beyond the steady ring: freed, so memory returns to the steady
    // level. cudaFree synchronizes the device, so whatever the
    // consumer's streams queued on the batch has finished first.
    DeviceMemory data;
    DeviceMemory labels;
    {
      std::lock_guard<std::mutex> lock(mutex);
      data = std::move(buffers[index].data);
      labels = std::move(buffers[index].labels);
      buffers[index].pending_release = 0;
      held -= 1;
      live -= 1;
    }
    {
      DeviceScope scope(device);
      data.reset();
      labels.reset();
      cudaGetLastError();
    }
    changed.notify_all();
    return;
  }
  {
    DeviceBuffer& buffer = buffers[index];
    size_t count = 0;
    if (delivered) {
      // Without a declared stream the consumer used the legacy default
      // stream (which also orders against every blocking stream). The
      // per-thread default stream is a pseudo-handle that would mean the
      // releasing thread's own: the legacy stream orders against every
      // per-thread default stream, so it stands in for it.
      std::vector<cudaStream_t> used;
      for (cudaStream_t stream : streams) {
        if (stream == cudaStreamPerThread) stream = nullptr;
        if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
      }
      if (used.empty()) used.push_back(nullptr);
      bool needs_device = buffer.release.size() < used.size() ||
                          std::find(used.begin(), used.end(), nullptr) != used.end();
      std::optional<DeviceScope> scope;
      if (needs_device) scope.emplace(device);
      for (cudaStream_t stream : used) {
        if (buffer.release.size() <= count) {
          CudaEvent event;
          if (!CreateCudaEvent(cudaEventDisableTiming, &event).ok()) {
            // Cannot order the reuse on the GPU: order it on the host.
            // (The consumer's thread: its next error check must not see ours.)
            cudaGetLastError();
            cudaStreamSynchronize(stream);
            continue;
          }
          buffer.release.push_back(std::move(event));
        }
        if (cudaEventRecord(buffer.release[count].get(), stream) != cudaSuccess) {
          cudaGetLastError();
          cudaStreamSynchronize(stream);
          continue;
        }
        count += 1;
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    // A buffer never handed out keeps the release events it had (its
    // failed Issue may not have queued the waits for them yet).
    if (delivered) buffer.pending_release = count;
    free.push_back(index);
    if (delivered) held -= 1;
  }
  changed.notify_all();
}

CudaBatchHandle::~CudaBatchHandle() { shared_->Release(index_, streams_, delivered_); }

Status CudaBatchHandle::WaitOn(void* stream) {
  std::optional<DeviceScope> scope;
  if (stream == nullptr) scope.emplace(shared_->device);  // that device's legacy stream
  GPUFEED_RETURN_IF_ERROR(RecordStream(stream));
  return CudaError(cudaStreamWaitEvent(AsStream(stream), shared_->buffers[index_].ready.get(), 0),
                   "cudaStreamWaitEvent on the batch's ready event");
}

Status CudaBatchHandle::RecordStream(void* stream) {
  cudaStream_t s = AsStream(stream);
  // A stream being captured into a CUDA graph would pull the loader's
  // copy stream into the capture (and the release event would be a graph
  // node, not a point the stream passes): refused.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (s != nullptr && s != cudaStreamPerThread &&
      cudaStreamIsCapturing(s, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone) {
    return Status::InvalidArgument(
        "the stream is capturing a CUDA graph: wait on the batch before the capture starts "
        "(or copy the batch into the graph's own buffers)");
  }
  if (std::find(streams_.begin(), streams_.end(), s) == streams_.end()) streams_.push_back(s);
  return Status::OK();
}

Status CudaBatchHandle::Synchronize() {
  return CudaError(cudaEventSynchronize(shared_->buffers[index_].ready.get()),
                   "cudaEventSynchronize on the batch's ready event");
}

Status DeviceShared::Prepare(const DeviceStageOptions& options, size_t* element_size) {
  size_t bytes = options.max_data_bytes;
  if (options.normalize) {
    const std::vector<uint8_t>& host_table = options.normalize_table;
    size_t pixels = bytes / 3;  // the host batch is uint8 HWC
    *element_size = TensorDtypeSize(options.normalize_dtype);
    if (host_table.size() != 768 * *element_size) {
      return Status::Internal("the normalize table holds " + std::to_string(host_table.size()) +
                              " bytes, not 3 x 256 elements of " +
                              TensorDtypeName(options.normalize_dtype));
    }
    bytes = pixels * 3 * *element_size;
    GPUFEED_RETURN_IF_ERROR(AllocateDeviceMemory(options.max_data_bytes, &staging));
    GPUFEED_RETURN_IF_ERROR(AllocateDeviceMemory(host_table.size(), &table));
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemcpy(table.get(), host_table.data(), host_table.size(),
                                            cudaMemcpyHostToDevice));
  }
  data_bytes = bytes;
  label_bytes = options.max_label_bytes;
  max_held_bytes = options.max_held_bytes;
  if (max_held_bytes == 0) {
    // A quarter of the GPU memory free now.
    size_t free_bytes = 0, total_bytes = 0;
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    max_held_bytes = free_bytes / 4;
  }
  buffers.reserve(kMaxBuffers);
  buffers.resize(static_cast<size_t>(options.prefetch) + 2);
  for (size_t i = 0; i < buffers.size(); ++i) {
    GPUFEED_RETURN_IF_ERROR(Allocate(&buffers[i]));
    live += 1;
    free.push_back(i);
  }
  return Status::OK();
}

size_t DataSpan(const Batch& host, size_t buffer_bytes, bool* labels_inside) {
  size_t span = host.data().bytes();
  const char* start = static_cast<const char*>(host.data().data);
  for (const Tensor& extra : host.extras()) {
    const char* end = static_cast<const char*>(extra.data) + extra.bytes();
    span = std::max(span, static_cast<size_t>(end - start));
  }
  // The data buffer spans [start, start + buffer_bytes): labels starting
  // there are its plane (a buffer of their own cannot lie inside it).
  const char* labels = static_cast<const char*>(host.labels().data);
  *labels_inside = labels != nullptr && labels >= start && labels < start + buffer_bytes;
  if (*labels_inside) {
    span = std::max(span, static_cast<size_t>(labels - start) + host.labels().bytes());
  }
  return span;
}

std::vector<Tensor> DeviceExtras(const Batch& host, void* device_data, int device_id) {
  std::vector<Tensor> extras;
  const char* start = static_cast<const char*>(host.data().data);
  for (const Tensor& extra : host.extras()) {
    Tensor tensor = extra;
    tensor.device = DeviceKind::kCuda;
    tensor.device_id = device_id;
    tensor.data = static_cast<char*>(device_data) + (static_cast<const char*>(extra.data) - start);
    extras.push_back(std::move(tensor));
  }
  return extras;
}

}  // namespace gpufeed
