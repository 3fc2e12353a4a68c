// Options structs. Each field has a documented default and a sentence on its
// trade-off; the structs are plain values, copied freely.
#ifndef GPUFEED_OPTIONS_H_
#define GPUFEED_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gpufeed/export.h"

namespace gpufeed {

enum class IoBackend : int {
  // Probe io_uring; fall back to the pread pool (logged once with the reason)
  // where it is unavailable: old kernels (ENOSYS), seccomp (EPERM),
  // kernel.io_uring_disabled, a memlock limit too small for a ring (ENOMEM).
  kAuto = 0,
  // io_uring or NotSupported with the reason: no silent fallback.
  kIoUring = 1,
  // A pool of threads issuing pread: works everywhere.
  kPread = 2,
};

// "auto", "io_uring", "pread".
GPUFEED_EXPORT const char* IoBackendName(IoBackend backend);

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  // Reads in flight per io_uring ring. Parallel filesystems and NVMe serve
  // tens to hundreds of requests at once; more only costs buffer memory.
  // 128: a loader refills a completed slot a little later than fio does
  // (the completion passes a thread or two first), so it needs more slots
  // than fio's depth to keep as many reads at the device (docs/tuning.md).
  int queue_depth = 128;
  // io_uring: rings (one thread each). One ring saturates an NVMe drive for
  // requests of 64 KiB and up; more help with small random reads on many
  // devices. pread: worker threads, each with one read outstanding (so the
  // default is queue_depth threads, capped at 64).
  int threads = 0;  // 0: io_uring 1, pread min(queue_depth, 64)
  // Bytes of read buffers in flight. Bounds memory: a request waits for
  // buffers to come back rather than allocating. A single request larger
  // than the budget still runs, alone.
  size_t inflight_bytes = 64u << 20;
  // O_DIRECT: bypass the page cache (no double buffering, no eviction of
  // other data; the only way to see real device speed). Offsets and lengths
  // are widened to the filesystem's alignment internally. Falls back to
  // buffered reads (logged once) where the filesystem refuses O_DIRECT.
  bool direct_io = false;
  // Register the buffer arena and the files with each ring (fewer
  // per-request page pins and file lookups). Registration needs
  // RLIMIT_MEMLOCK >= inflight_bytes or CAP_IPC_LOCK; without it buffers are
  // used unregistered (logged once).
  bool register_buffers = true;
  bool register_files = true;
  // Transient read failures (EIO, ETIMEDOUT, EAGAIN, ESTALE, EINTR: what a
  // network filesystem's client returns during a server failover or a
  // brief outage) are retried up to `retries` times, after
  // retry_backoff_ms, then twice that, and so on; still failing, the read
  // fails with the last error. Other errors (ENOTCONN from a dead client,
  // ENOENT, EACCES) fail at once. 0: no retries.
  int retries = 3;
  int retry_backoff_ms = 50;
  // A read not completed within timeout_seconds of its submission fails
  // (IOError, errno ETIMEDOUT, naming the file and offset; never retried)
  // and is abandoned: io_uring cancels it, a pread thread stuck in the
  // kernel is left behind and replaced; its buffer is never reused. So a
  // hung mount costs a loader an error per read, never a hang, and
  // destroying the engine returns. 0: no limit.
  double timeout_seconds = 60;
};

enum class ShuffleMode : int {
  kNone = 0,    // storage order
  kGlobal = 1,  // one permutation of all samples: the best statistics, random reads
  kBlock = 2,   // shuffle shards, then samples within windows of shards: mostly sequential reads
  kNode = 3,    // shards partitioned over the nodes once, global shuffle within each node's
                // shards per epoch: a node cache holds 1/num_nodes of the data (docs/scaling.md)
};

// The element type of every tensor gpufeed makes: batches, labels, and
// the image transform's output (which takes uint8, float32, float16 or
// bfloat16; OutputDtype is the same enum under the name the options use).
// kInt8 holds int8 embedding rows (gpufeed/embedding.h); no transform makes it.
enum class TensorDtype : int { kUint8, kInt32, kInt64, kFloat16, kBfloat16, kFloat32, kInt8 };
using OutputDtype = TensorDtype;
// Bytes of one element, and "uint8", "int32", "int64", "float16",
// "bfloat16", "float32" or "int8".
GPUFEED_EXPORT size_t TensorDtypeSize(TensorDtype dtype);
GPUFEED_EXPORT const char* TensorDtypeName(TensorDtype dtype);
enum class OutputLayout : int { kNCHW = 0, kNHWC = 1 };

// The image transform of the decode pool (torchvision semantics).
struct ImageTransformOptions {
  // Output is size x size x 3.
  int size = 224;
  // true: RandomResizedCrop(size, scale, ratio) + horizontal flip (p = 0.5);
  // false: Resize(shorter side = round(size / crop_fraction)) + CenterCrop(size).
  bool train = true;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  bool flip = true;
  double crop_fraction = 0.875;
  // Float outputs: (x / 255 - mean) / std, as ToTensor + Normalize.
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  // uint8 is 4x fewer bytes per batch (normalize on the GPU later); float32
  // is what torchvision's pipeline hands a model.
  OutputDtype dtype = OutputDtype::kFloat32;
  OutputLayout layout = OutputLayout::kNCHW;
  // Images whose header declares more pixels are refused (PIL's default).
  uint64_t max_pixels = 178956970;
  // true: PIL / torchvision's bytes at every image size (full-resolution
  // decode of the crop). false: crops at least twice the output are decoded
  // at 1/2, 1/4 or 1/8 in the DCT domain first (baseline and progressive
  // JPEGs by gpufeed's own entropy decoders, others by libjpeg-turbo; of a
  // progressive JPEG's AC coefficients the last bit is not read), faster
  // on large photographs and close to, not equal to, PIL (docs/tuning.md).
  bool exact = true;
};

// Record bytes -> a fixed-length vector (e.g. int32 tokens), padded with
// `pad` or truncated.
struct RawTransformOptions {
  enum class Element : int { kUint8 = 0, kInt32 = 1, kInt64 = 2, kFloat32 = 3 };
  Element element = Element::kUint8;
  int64_t length = 0;
  int64_t pad = 0;
};

// Token corpora (Megatron, llm.c, headerless): each sample is a window of
// seq_len + 1 tokens; x = its first seq_len tokens (the batch's data, shape
// (B, seq_len)), y = its last seq_len (the batch's labels, same shape).
struct TokenWindowOptions {
  uint32_t seq_len = 1024;
  // kInt64 (what torch's embedding and cross-entropy take) or kInt32 (half
  // the bytes per batch; widen on the GPU).
  TensorDtype dtype = TensorDtype::kInt64;
  // shuffle kBlock / kNone: windows are read in blocks of about this many
  // bytes (one large read each, shared by the block's windows); kBlock
  // shuffles the blocks, then windows within shuffle_window_shards blocks.
  // Larger: fewer, longer reads (disk bandwidth); smaller: better mixing.
  uint32_t block_bytes = 4u << 20;
};

// Tabular (CTR) rows (criteo_npy, criteo_tsv, records datasets): each
// sample becomes dense features (the batch's data, float32 (B, dense
// count)), sparse ids (Batch::extras()[0], (B, sparse count) of
// sparse_dtype) and the label (the batch's labels, float32 (B,)).
struct TabularTransformOptions {
  // Dense values as float32; missing (an empty TSV field) -> 0. true:
  // log(max(x, 0) + 1), as DLRM's preprocessing.
  bool dense_log1p = false;
  // Empty: ids as stored (TSV: the hex value; missing -> 0). One value h:
  // every column modulo h; one per sparse column: column i modulo
  // hash_sizes[i]. Modulo is floor modulo (never negative, as numpy's %).
  std::vector<uint64_t> hash_sizes;
  // kInt64 or kInt32 (ids narrowed as numpy's astype does).
  TensorDtype sparse_dtype = TensorDtype::kInt64;
};

}  // namespace gpufeed

#endif  // GPUFEED_OPTIONS_H_
