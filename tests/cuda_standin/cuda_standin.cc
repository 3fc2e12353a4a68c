// The CUDA stand-in: the runtime calls of cuda_runtime_api.h (beside this
// file) served by host threads, so that the device stage's ordering,
// reuse, state/restore and shutdown logic runs in every CI build without a
// GPU. Tests only: nothing shipped links it. See the header for what it
// keeps of CUDA's semantics.
//
// One mutex guards all of the stand-in's state; one condition variable
// wakes every waiter when any stream completes an operation. Operations
// run outside the lock. The state is never destroyed (stream workers are
// detached and may outlive main).
#include "cuda_runtime_api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_standin_control.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxDevices = 8;
constexpr size_t kDeviceMemory = size_t{80} << 30;

struct Context {
  int device = 0;
};

}  // namespace

struct CUstream_st {
  uint64_t id = 0;
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;
  bool stop = false;
  uint64_t enqueued = 0;   // operations queued so far
  uint64_t completed = 0;  // operations finished so far (in order)
  struct Dependency {
    std::shared_ptr<CUstream_st> stream;
    uint64_t sequence;
  };
  struct Operation {
    std::vector<Dependency> after;
    std::function<void()> run;
  };
  std::deque<Operation> queue;
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  std::shared_ptr<CUstream_st> stream;  // of the last record; none: never recorded
  uint64_t sequence = 0;
  uint64_t generation = 0;
  bool stamped = false;  // `time` belongs to the last record
  Clock::time_point time;
};

namespace {

using Stream = CUstream_st;
using Event = CUevent_st;

struct Allocation {
  size_t bytes = 0;
  int device = 0;
};

struct State {
  std::mutex mutex;
  std::condition_variable changed;
  int devices = 2;
  int max_delay_us = 300;
  uint64_t seed = 1;
  uint64_t next_stream_id = 1;
  unsigned long long operations = 0;
  std::atomic<unsigned long long> host_to_device_bytes{0};
  std::shared_ptr<Stream> legacy[kMaxDevices];
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;
  std::unordered_map<Event*, std::shared_ptr<Event>> events;
  std::map<uintptr_t, Allocation> device_memory;
  std::map<uintptr_t, size_t> pinned_memory;
  Context contexts[kMaxDevices];
  bool context_created[kMaxDevices] = {};
  bool drop_foreign_waits = false;
  std::thread::id waits_owner;
  bool fail_next_elapsed_time = false;
};

State& Global() {
  static State* state = [] {
    auto* s = new State();
    if (const char* devices = std::getenv("GPUFEED_CUDA_STANDIN_DEVICES")) {
      s->devices = std::max(0, std::min(kMaxDevices, std::atoi(devices)));
    }
    if (const char* delay = std::getenv("GPUFEED_CUDA_STANDIN_MAX_DELAY_US")) {
      s->max_delay_us = std::max(0, std::atoi(delay));
    }
    if (const char* seed = std::getenv("GPUFEED_CUDA_STANDIN_SEED")) {
      s->seed = std::strtoull(seed, nullptr, 10);
    }
    for (int d = 0; d < kMaxDevices; ++d) s->contexts[d].device = d;
    return s;
  }();
  return *state;
}

thread_local Context* current_context = nullptr;
thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Fail(cudaError_t error) {
  if (error != cudaSuccess && error != cudaErrorNotReady) last_error = error;
  return error;
}

// The device of the calling thread's context, creating the primary context
// of its current device when it has none (as the runtime does). REQUIRES: mutex.
int EnsureContextLocked(State& s) {
  if (current_context == nullptr) {
    current_context = &s.contexts[current_device];
    s.context_created[current_device] = true;
  }
  return current_context->device;
}

void Work(std::shared_ptr<Stream> stream) {
  State& s = Global();
  std::mt19937_64 random(s.seed * 1000003u + stream->id);
  std::unique_lock<std::mutex> lock(s.mutex);
  while (true) {
    s.changed.wait(lock, [&] { return !stream->queue.empty() || stream->stop; });
    if (stream->queue.empty()) break;
    s.changed.wait(lock, [&] {
      for (const Stream::Dependency& dependency : stream->queue.front().after) {
        if (dependency.stream->completed < dependency.sequence) return false;
      }
      return true;
    });
    Stream::Operation operation = std::move(stream->queue.front());
    stream->queue.pop_front();
    int max_delay = s.max_delay_us;
    lock.unlock();
    if (max_delay > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(random() % (max_delay + 1)));
    }
    if (operation.run) operation.run();
    operation = Stream::Operation();  // captured state goes outside the lock
    lock.lock();
    stream->completed += 1;
    s.operations += 1;
    s.changed.notify_all();
  }
}

std::shared_ptr<Stream> NewStreamLocked(State& s, int device, unsigned flags, bool legacy) {
  auto stream = std::make_shared<Stream>();
  stream->id = s.next_stream_id++;
  stream->device = device;
  stream->flags = flags;
  stream->legacy = legacy;
  std::thread(Work, stream).detach();
  return stream;
}

// A stream handle as the runtime reads it. REQUIRES: mutex.
cudaError_t ResolveLocked(State& s, cudaStream_t handle, std::shared_ptr<Stream>* stream) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    int device = EnsureContextLocked(s);
    if (!s.legacy[device]) s.legacy[device] = NewStreamLocked(s, device, 0, true);
    *stream = s.legacy[device];
    return cudaSuccess;
  }
  auto found = s.streams.find(handle);
  if (found == s.streams.end()) return cudaErrorInvalidResourceHandle;
  *stream = found->second;
  return cudaSuccess;
}

// Queues `run` on `stream` after `extra` and the legacy-stream ordering;
// returns the operation's sequence number. REQUIRES: mutex.
uint64_t EnqueueLocked(State& s, const std::shared_ptr<Stream>& stream, std::function<void()> run,
                       std::vector<Stream::Dependency> extra = {}) {
  Stream::Operation operation;
  operation.after = std::move(extra);
  if (stream->legacy) {
    for (auto& [handle, other] : s.streams) {
      if (other->device == stream->device && !(other->flags & cudaStreamNonBlocking) &&
          other->enqueued > 0) {
        operation.after.push_back({other, other->enqueued});
      }
    }
  } else if (!(stream->flags & cudaStreamNonBlocking)) {
    const std::shared_ptr<Stream>& legacy = s.legacy[stream->device];
    if (legacy && legacy->enqueued > 0) operation.after.push_back({legacy, legacy->enqueued});
  }
  operation.run = std::move(run);
  stream->queue.push_back(std::move(operation));
  stream->enqueued += 1;
  s.changed.notify_all();
  return stream->enqueued;
}

void WaitCompletedLocked(State& s, std::unique_lock<std::mutex>& lock,
                         const std::shared_ptr<Stream>& stream, uint64_t sequence) {
  s.changed.wait(lock, [&] { return stream->completed >= sequence; });
}

void SynchronizeAllLocked(State& s, std::unique_lock<std::mutex>& lock, int device) {
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> pending;
  for (auto& [handle, stream] : s.streams) {
    if (device < 0 || stream->device == device) pending.emplace_back(stream, stream->enqueued);
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    if (s.legacy[d] && (device < 0 || d == device)) pending.emplace_back(s.legacy[d], s.legacy[d]->enqueued);
  }
  for (auto& [stream, sequence] : pending) WaitCompletedLocked(s, lock, stream, sequence);
}

// The live device allocation holding [pointer, pointer + bytes), or null.
const Allocation* FindDeviceLocked(State& s, const void* pointer, size_t bytes) {
  auto at = reinterpret_cast<uintptr_t>(pointer);
  auto found = s.device_memory.upper_bound(at);
  if (found == s.device_memory.begin()) return nullptr;
  --found;
  if (at < found->first || at + bytes > found->first + found->second.bytes) return nullptr;
  return &found->second;
}

bool InDeviceMemoryLocked(State& s, const void* pointer) {
  return FindDeviceLocked(s, pointer, 1) != nullptr;
}

cudaError_t CheckCopyLocked(State& s, void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (destination == nullptr || source == nullptr) return cudaErrorInvalidValue;
  bool destination_device = FindDeviceLocked(s, destination, bytes) != nullptr;
  bool source_device = FindDeviceLocked(s, source, bytes) != nullptr;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return destination_device && !InDeviceMemoryLocked(s, source) ? cudaSuccess
                                                                   : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost:
      return source_device && !InDeviceMemoryLocked(s, destination) ? cudaSuccess
                                                                   : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
      return destination_device && source_device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost:
      return !InDeviceMemoryLocked(s, destination) && !InDeviceMemoryLocked(s, source)
                 ? cudaSuccess
                 : cudaErrorInvalidValue;
    case cudaMemcpyDefault:
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

void* AllocateAligned(size_t bytes) {
  void* data = nullptr;
  if (posix_memalign(&data, 256, std::max<size_t>(bytes, 1)) != 0) return nullptr;
  std::memset(data, 0xCD, std::max<size_t>(bytes, 1));
  return data;
}

// The driver calls served through cudaGetDriverEntryPointByVersion.
int StandinCtxGetCurrent(void** context) {
  if (context == nullptr) return 1;  // CUDA_ERROR_INVALID_VALUE
  *context = current_context;
  return 0;
}
int StandinCtxSetCurrent(void* context) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  current_context = static_cast<Context*>(context);
  if (current_context != nullptr) {
    current_device = current_context->device;
    s.context_created[current_device] = true;
  }
  return 0;
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (CUDA stand-in)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

cudaError_t cudaGetLastError(void) {
  cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaGetDeviceCount(int* count) {
  State& s = Global();
  if (count == nullptr) return Fail(cudaErrorInvalidValue);
  *count = 0;
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  *count = s.devices;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Fail(cudaErrorInvalidValue);
  if (Global().devices == 0) return Fail(cudaErrorNoDevice);
  *device = current_context ? current_context->device : current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  if (device < 0 || device >= s.devices) return Fail(cudaErrorInvalidDevice);
  current_device = device;
  current_context = &s.contexts[device];
  s.context_created[device] = true;  // CUDA 12+: cudaSetDevice initializes the context
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  SynchronizeAllLocked(s, lock, EnsureContextLocked(s));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (free_bytes == nullptr || total_bytes == nullptr) return Fail(cudaErrorInvalidValue);
  int device = EnsureContextLocked(s);
  size_t used = 0;
  for (auto& [begin, allocation] : s.device_memory) {
    if (allocation.device == device) used += allocation.bytes;
  }
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - std::min(used, kDeviceMemory);
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned int, unsigned long long,
                                             enum cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr) return Fail(cudaErrorInvalidValue);
  *function = nullptr;
  if (std::strcmp(symbol, "cuCtxGetCurrent") == 0) {
    *function = reinterpret_cast<void*>(&StandinCtxGetCurrent);
  } else if (std::strcmp(symbol, "cuCtxSetCurrent") == 0) {
    *function = reinterpret_cast<void*>(&StandinCtxSetCurrent);
  }
  if (status != nullptr) {
    *status = *function ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  State& s = Global();
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  int device = EnsureContextLocked(s);
  void* data = AllocateAligned(bytes);
  if (data == nullptr) return Fail(cudaErrorMemoryAllocation);
  s.device_memory[reinterpret_cast<uintptr_t>(data)] = {std::max<size_t>(bytes, 1), device};
  *pointer = data;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  auto found = s.device_memory.find(reinterpret_cast<uintptr_t>(pointer));
  if (found == s.device_memory.end()) return Fail(cudaErrorInvalidValue);
  SynchronizeAllLocked(s, lock, -1);  // cudaFree synchronizes the device
  s.device_memory.erase(reinterpret_cast<uintptr_t>(pointer));
  lock.unlock();
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int) {
  State& s = Global();
  if (pointer == nullptr) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  EnsureContextLocked(s);
  void* data = AllocateAligned(bytes);
  if (data == nullptr) return Fail(cudaErrorMemoryAllocation);
  s.pinned_memory[reinterpret_cast<uintptr_t>(data)] = bytes;
  *pointer = data;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  return cudaHostAlloc(pointer, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  auto found = s.pinned_memory.find(reinterpret_cast<uintptr_t>(pointer));
  if (found == s.pinned_memory.end()) return Fail(cudaErrorInvalidValue);
  SynchronizeAllLocked(s, lock, -1);
  s.pinned_memory.erase(found);
  lock.unlock();
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error == cudaSuccess) error = CheckCopyLocked(s, destination, source, bytes, kind);
  if (error != cudaSuccess) return Fail(error);
  if (bytes == 0) return cudaSuccess;
  EnqueueLocked(s, stream, [destination, source, bytes, kind] {
    std::memcpy(destination, source, bytes);
    if (kind == cudaMemcpyHostToDevice) Global().host_to_device_bytes += bytes;
  });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes,
                       enum cudaMemcpyKind kind) {
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, nullptr, &stream);
  if (error == cudaSuccess) error = CheckCopyLocked(s, destination, source, bytes, kind);
  if (error != cudaSuccess) return Fail(error);
  if (bytes == 0) return cudaSuccess;
  uint64_t sequence = EnqueueLocked(
      s, stream, [destination, source, bytes] { std::memcpy(destination, source, bytes); });
  WaitCompletedLocked(s, lock, stream, sequence);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* handle, unsigned int flags) {
  State& s = Global();
  if (handle == nullptr) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  int device = EnsureContextLocked(s);
  std::shared_ptr<Stream> stream = NewStreamLocked(s, device, flags, false);
  s.streams[stream.get()] = stream;
  *handle = stream.get();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* handle) {
  return cudaStreamCreateWithFlags(handle, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.streams.find(handle);
  if (found == s.streams.end()) return Fail(cudaErrorInvalidResourceHandle);
  // As CUDA: returns at once; the queued work still completes.
  found->second->stop = true;
  s.streams.erase(found);
  s.changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  WaitCompletedLocked(s, lock, stream, stream->enqueued);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  return stream->completed >= stream->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event_handle, unsigned int) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  auto found = s.events.find(event_handle);
  if (found == s.events.end()) return Fail(cudaErrorInvalidResourceHandle);
  if (s.drop_foreign_waits && std::this_thread::get_id() != s.waits_owner) return cudaSuccess;
  const Event& event = *found->second;
  std::vector<Stream::Dependency> after;
  if (event.stream) after.push_back({event.stream, event.sequence});
  EnqueueLocked(s, stream, nullptr, std::move(after));
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle, enum cudaStreamCaptureStatus* status) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  if (status == nullptr) return Fail(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t function, void* data) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  if (function == nullptr) return Fail(cudaErrorInvalidValue);
  EnqueueLocked(s, stream, [function, data] { function(data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* handle, unsigned int flags) {
  State& s = Global();
  if (handle == nullptr) return Fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.devices == 0) return Fail(cudaErrorNoDevice);
  auto event = std::make_shared<Event>();
  event->device = EnsureContextLocked(s);
  event->flags = flags;
  s.events[event.get()] = event;
  *handle = event.get();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* handle) {
  return cudaEventCreateWithFlags(handle, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.events.erase(handle) == 0) return Fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream_handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.events.find(handle);
  if (found == s.events.end()) return Fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Stream> stream;
  cudaError_t error = ResolveLocked(s, stream_handle, &stream);
  if (error != cudaSuccess) return Fail(error);
  std::shared_ptr<Event> event = found->second;
  // As CUDA: the event and the stream must belong to the same device.
  if (event->device != stream->device) return Fail(cudaErrorInvalidResourceHandle);
  uint64_t generation = ++event->generation;
  event->stamped = false;
  event->stream = stream;
  event->sequence = EnqueueLocked(s, stream, [event, generation] {
    State& state = Global();
    std::lock_guard<std::mutex> guard(state.mutex);
    if (event->generation == generation) {
      event->time = Clock::now();
      event->stamped = true;
    }
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto found = s.events.find(handle);
  if (found == s.events.end()) return Fail(cudaErrorInvalidResourceHandle);
  const Event& event = *found->second;
  if (!event.stream) return cudaSuccess;
  return event.stream->completed >= event.sequence ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  State& s = Global();
  std::unique_lock<std::mutex> lock(s.mutex);
  auto found = s.events.find(handle);
  if (found == s.events.end()) return Fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Event> event = found->second;
  if (event->stream) WaitCompletedLocked(s, lock, event->stream, event->sequence);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (milliseconds == nullptr) return Fail(cudaErrorInvalidValue);
  if (s.fail_next_elapsed_time) {
    s.fail_next_elapsed_time = false;
    return Fail(cudaErrorInvalidResourceHandle);
  }
  auto first = s.events.find(start);
  auto second = s.events.find(end);
  if (first == s.events.end() || second == s.events.end()) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  const Event& a = *first->second;
  const Event& b = *second->second;
  if ((a.flags & cudaEventDisableTiming) || (b.flags & cudaEventDisableTiming)) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  if (!a.stream || !b.stream) return Fail(cudaErrorInvalidResourceHandle);
  if (!a.stamped || !b.stamped) return Fail(cudaErrorNotReady);
  *milliseconds = std::chrono::duration<float, std::milli>(b.time - a.time).count();
  return cudaSuccess;
}

// ------------------------------------------------------------ test controls

int gpufeed_standin_context_created(int device) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  return device >= 0 && device < kMaxDevices && s.context_created[device] ? 1 : 0;
}

void gpufeed_standin_reset_contexts(void) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (bool& created : s.context_created) created = false;
}

void gpufeed_standin_drop_waits_from_other_threads(int enabled) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.drop_foreign_waits = enabled != 0;
  s.waits_owner = std::this_thread::get_id();
}

void gpufeed_standin_fail_next_elapsed_time(void) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.fail_next_elapsed_time = true;
}

void gpufeed_standin_set_max_delay_us(int microseconds) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.max_delay_us = std::max(0, microseconds);
}

unsigned long long gpufeed_standin_operations(void) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.operations;
}

unsigned long long gpufeed_standin_host_to_device_bytes(void) {
  return Global().host_to_device_bytes.load();
}

int gpufeed_standin_is_device_pointer(const void* pointer) {
  State& s = Global();
  std::lock_guard<std::mutex> lock(s.mutex);
  return InDeviceMemoryLocked(s, pointer) ? 1 : 0;
}

}  // extern "C"
