// Stage 3 of the pipeline: host batches -> GPU memory (docs/architecture.md).
//
// A copy thread takes host batches, in order, from an upstream BatchSource
// (the host stage, whose batch buffers are pinned), and for each one:
//   1. takes a free device buffer; the copy stream waits (on the GPU, the
//      host does not block) for the events the consumer's streams recorded
//      when the buffer's previous batch was released;
//   2. one cudaMemcpyAsync for the data and one for the labels on a
//      dedicated non-blocking stream; with device normalization, the data
//      crosses as uint8 HWC and a kernel on the same stream writes the
//      float16/bfloat16/float32 NCHW/NHWC output;
//   3. records the batch's ready event, and queues the batch for Next.
// The host batch goes back upstream when its copy has finished;
// at most two copies are in flight. So while the GPU consumes batch k,
// batch k+1 crosses PCIe and the decode threads fill k+2 onwards.
//
// Device buffers: prefetch + 2, allocated at Create; more while the
// consumer holds all of them (freed again when those are released, within
// max_held_bytes). A buffer is reused
// only after the consumer released its Batch AND the consumer's streams
// passed the events recorded at release (Batch::WaitOn / RecordStream).
// The buffers and the copy stream live as long as the stage or any Batch
// handed out, whichever is longer.
//
// The stage is a BatchSource itself: the Loader puts it after the host stage
// and knows neither stage's insides. A CUDA build compiles
// device_stage_cuda.cc; a build without CUDA device_stage_stub.cc, whose
// calls return NotSupported (CMakeLists.txt picks one).
#ifndef GPUFEED_DEVICE_DEVICE_STAGE_H_
#define GPUFEED_DEVICE_DEVICE_STAGE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "batch/batch_source.h"
#include "gpufeed/batch.h"
#include "gpufeed/status.h"

namespace gpufeed {

// OK when gpufeed was built with CUDA and device `device_id` is usable;
// NotSupported with the reason otherwise (no driver, no device, bad id).
Status CudaDeviceUsable(int device_id);

struct DeviceStageOptions {
  int device_id = 0;
  // Device batches ready ahead of the consumer (device buffers: prefetch + 2).
  int prefetch = 2;
  // Largest host batch, in bytes (data and labels), to size the device buffers.
  size_t max_data_bytes = 0;
  size_t max_label_bytes = 0;
  // As LoaderOptions::max_held_bytes, for device memory (0: a quarter of the
  // GPU memory free at Create).
  uint64_t max_held_bytes = 0;
  // Device normalization: host data is uint8 (B, H, W, 3); a kernel writes
  // the device batch as `normalize_dtype` (float32, float16 or bfloat16), in
  // NCHW when `normalize_nchw` (else NHWC), gathering each value from
  // `normalize_table`: 3 x 256 elements of that dtype, channel-major, the
  // table the CPU path uses (NormalizeTable in decode/output.h), so both
  // agree bit for bit.
  bool normalize = false;
  TensorDtype normalize_dtype = TensorDtype::kFloat32;
  bool normalize_nchw = true;
  std::vector<uint8_t> normalize_table;
};

// The copy stage after `upstream`, which it owns from here (also when Create
// fails). NotSupported without CUDA (see CudaDeviceUsable); InvalidArgument
// for a prefetch below 1; IOError for a failed CUDA call (named).
Status CreateDeviceStage(std::unique_ptr<BatchSource> upstream, const DeviceStageOptions& options,
                         std::unique_ptr<BatchSource>* stage);

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_DEVICE_STAGE_H_
