// Options structs. Each field has a documented default and a sentence on its
// trade-off; the structs are plain values, copied freely.
#ifndef GPUFEED_OPTIONS_H_
#define GPUFEED_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>

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
const char* IoBackendName(IoBackend backend);

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  // Reads in flight per io_uring ring. Parallel filesystems and NVMe serve
  // tens to hundreds of requests at once; more only costs buffer memory.
  int queue_depth = 64;
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
  // Testing hook: when nonzero, the io_uring probe fails with this errno,
  // as it would in a container that forbids io_uring.
  int fail_io_uring_probe_for_testing = 0;
  // Testing hook (fault injection): called with the request's tag before a
  // range read completes; a nonzero errno replaces the read's result, as if
  // the kernel had returned it (EAGAIN, EINTR, EIO, ...). Faults that real
  // files cannot produce on demand are tested through it.
  std::function<int(uint64_t tag)> inject_read_error_for_testing;
};

}  // namespace gpufeed

#endif  // GPUFEED_OPTIONS_H_
