"""Step 2 and 3 of ``gpufeed diagnose``: measured reads and a loader run.

Sequential bandwidth, random 4 KiB read IOPS and small-file reads/s on a
sample of the dataset's own files; then a DataLoader runs for a few seconds
while GPU utilisation (gpu.py) and disk throughput (/proc/diskstats) are
sampled, and its stats give the stage shares and the loader's bottleneck.

The I/O measurements use ``os.pread`` on a thread pool (the GIL is released
during the read) after ``posix_fadvise(DONTNEED)`` on each sampled file: that
evicts this file's clean pages from the page cache unless another process
maps them, so the figures approximate cold reads without dropping the whole
machine's cache. The read engine itself (io_uring) is measured by
``benchmarks/io_compare.py``; the loader run uses it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .gpu import GpuSampler
from .survey import KIB, MIB, SMALL_FILE_BYTES

__all__ = ["measure_sequential", "measure_random", "measure_small_files", "run_consumer"]


def _evict(fd: int) -> None:
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def measure_sequential(files: List[Tuple[int, str]], budget_bytes: int,
                       seconds: float) -> Dict[str, Any]:
    """1 MiB reads front to back through the largest files, one thread per
    file (up to 4), until `budget_bytes` or `seconds`."""
    chosen, planned = [], 0
    for size, name in sorted(files, reverse=True):
        if planned >= budget_bytes or size == 0:
            break
        chosen.append(name)
        planned += size
    if not chosen:
        return {"skipped": "no non-empty files"}
    deadline = time.monotonic() + seconds
    counted = [0]
    lock = threading.Lock()

    def read_file(name: str) -> None:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            return
        try:
            _evict(fd)
            offset = 0
            # At least one read per file, whenever the thread starts: a
            # thread scheduled late on a busy machine still measures.
            while True:
                with lock:
                    if counted[0] >= budget_bytes:
                        return
                chunk = os.pread(fd, MIB, offset)
                if not chunk:
                    return
                offset += len(chunk)
                with lock:
                    counted[0] += len(chunk)
                if time.monotonic() >= deadline:
                    return
        finally:
            os.close(fd)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(4, len(chosen))) as pool:
        list(pool.map(read_file, chosen))
    elapsed = max(1e-9, time.monotonic() - started)
    return {"method": "os.pread 1 MiB, up to 4 files in parallel, posix_fadvise DONTNEED first",
            "files": len(chosen), "bytes": counted[0], "seconds": elapsed,
            "mb_per_s": counted[0] / elapsed / 1e6}


def measure_random(files: List[Tuple[int, str]], threads: int, seconds: float,
                   block: int = 4 * KIB, seed: int = 0) -> Dict[str, Any]:
    """Random aligned `block`-byte preads over the sampled files from
    `threads` threads for `seconds`."""
    usable = [(size, name) for size, name in files if size > 0]
    if not usable:
        return {"skipped": "no non-empty file"}
    rng = random.Random(seed)
    sample = rng.sample(usable, min(len(usable), 256))
    descriptors = []
    for size, name in sample:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            continue
        _evict(fd)
        descriptors.append((fd, size))
    if not descriptors:
        return {"skipped": "no sampled file could be opened"}
    deadline = time.monotonic() + seconds
    counts = [0] * threads
    latencies = [0.0] * threads

    def worker(index: int) -> None:
        local = random.Random(seed * 1000 + index)
        while True:  # at least one read per thread (see measure_sequential)
            fd, size = descriptors[local.randrange(len(descriptors))]
            # Files smaller than a block are read whole (from offset 0).
            offset = local.randrange(max(1, size // block)) * block
            begin = time.perf_counter()
            os.pread(fd, block, offset)
            latencies[index] += time.perf_counter() - begin
            counts[index] += 1
            if time.monotonic() >= deadline:
                return

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(worker, range(threads)))
    finally:
        for fd, _ in descriptors:
            os.close(fd)
    elapsed = max(1e-9, time.monotonic() - started)
    reads = sum(counts)
    return {"method": f"os.pread {block // KIB} KiB at random aligned offsets, {threads} threads, "
                      "posix_fadvise DONTNEED first",
            "files": len(descriptors), "reads": reads, "seconds": elapsed,
            "iops": reads / elapsed,
            "mean_latency_ms": 1000 * sum(latencies) / reads if reads else None}


def measure_small_files(files: List[Tuple[int, str]], threads: int, seconds: float,
                        seed: int = 0) -> Dict[str, Any]:
    """open + read whole + close of sampled small files, `threads` threads:
    what an ImageFolder loader pays per sample."""
    small = [(size, name) for size, name in files if size < SMALL_FILE_BYTES]
    if not small:
        return {"skipped": "no small files"}
    rng = random.Random(seed)
    rng.shuffle(small)
    # Evict before the clock starts: the point is the per-file cost.
    for _, name in small[:4096]:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            continue
        _evict(fd)
        os.close(fd)
    queue = iter(small[:4096])
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    done = [0, 0]  # files, bytes

    def worker(_: int) -> None:
        while True:  # at least one file per thread (see measure_sequential)
            with lock:
                item = next(queue, None)
            if item is None:
                return
            try:
                fd = os.open(item[1], os.O_RDONLY)
            except OSError:
                continue
            try:
                got = len(os.pread(fd, max(item[0], 1), 0))
            finally:
                os.close(fd)
            with lock:
                done[0] += 1
                done[1] += got
            if time.monotonic() >= deadline:
                return

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(worker, range(threads)))
    elapsed = max(1e-9, time.monotonic() - started)
    return {"method": f"open + os.pread whole file + close, {threads} threads, "
                      "posix_fadvise DONTNEED first",
            "files": done[0], "bytes": done[1], "seconds": elapsed,
            "files_per_s": done[0] / elapsed, "mb_per_s": done[1] / elapsed / 1e6}


def _diskstats(names: List[str]) -> Dict[str, Tuple[int, int]]:
    """name -> (reads completed, sectors read) from /proc/diskstats."""
    out = {}
    try:
        with open("/proc/diskstats") as source:
            for line in source:
                fields = line.split()
                if len(fields) >= 6 and fields[2] in names:
                    out[fields[2]] = (int(fields[3]), int(fields[5]))
    except OSError:
        pass
    return out


class _Run(NamedTuple):
    """One timed loader run: stats() at its start and end, stats("recent")
    at its end, its length in seconds (at least 1e-9), /proc/diskstats
    before and after it, and the error that ended it early (None when it
    ran its time)."""
    first: Dict[str, Any]
    last: Dict[str, Any]
    recent: Dict[str, Any]
    elapsed: float
    disk_before: Dict[str, Tuple[int, int]]
    disk_after: Dict[str, Tuple[int, int]]
    failure: Optional[Exception]


def _open_loader(path: str, batch_size: int, threads: Optional[int], transform):
    """A DataLoader over `path` with `transform`; with batch_size 1 when
    `batch_size` gives no full batch. Raises whatever the loader raises."""
    from ..loader import DataLoader
    loader = DataLoader(path, batch_size=batch_size, num_threads=threads,
                        transform=transform, on_error="raise")
    if len(loader) == 0:
        loader.close()
        loader = DataLoader(path, batch_size=1, num_threads=threads,
                            transform=transform, on_error="raise")
    return loader


def _start_gpu_sampling(gpu: GpuSampler, values: List[float],
                        stop: threading.Event) -> Optional[threading.Thread]:
    """A daemon thread appending the mean GPU utilisation to `values` every
    0.5 s until `stop` is set; None (nothing started) without a GPU source."""
    if not gpu.source:
        return None

    def sample_gpu():
        while not stop.wait(0.5):
            sampled = gpu.sample()
            if sampled:
                values.append(sum(sampled) / len(sampled))

    sampler = threading.Thread(target=sample_gpu, daemon=True)
    sampler.start()
    return sampler


def _iterate_for(loader, seconds: float, started: float) -> Optional[Exception]:
    """Iterates `loader` epoch after epoch until `seconds` have passed since
    `started`; returns the exception that stopped an epoch (None if none)."""
    epoch = 0
    failure = None
    while time.monotonic() - started < seconds and failure is None:
        loader.set_epoch(epoch)
        try:
            for _ in loader:
                if time.monotonic() - started >= seconds:
                    break
        except Exception as error:
            failure = error
        epoch += 1
    return failure


def _timed_run(loader, seconds: float, disks: List[str], gpu: GpuSampler,
               gpu_values: List[float]) -> _Run:
    """Runs `loader` for `seconds` with GPU sampling into `gpu_values`;
    stops the sampling and closes `loader` whatever happens."""
    stop = threading.Event()
    disk_before = _diskstats(disks)
    sampler = _start_gpu_sampling(gpu, gpu_values, stop)
    first = dict(loader.stats())
    started = time.monotonic()
    try:
        failure = _iterate_for(loader, seconds, started)
        last = dict(loader.stats())
        recent = dict(loader.stats("recent"))
    finally:
        stop.set()
        if sampler:
            sampler.join()
        loader.close()
    elapsed = max(1e-9, time.monotonic() - started)
    return _Run(first=first, last=last, recent=recent, elapsed=elapsed,
                disk_before=disk_before, disk_after=_diskstats(disks), failure=failure)


def _loader_figures(transform, run: _Run) -> Dict[str, Any]:
    """The loader's rate, stage shares and judgement over `run`."""
    from ..bench import loader_judgement, stage_shares
    first, last = run.first, run.last
    return {
        "transform": repr(transform),
        "seconds": run.elapsed,
        "threads": last["threads"],
        "samples_per_s": (last["samples"] - first["samples"]) / run.elapsed,
        "loader_mb_per_s": (last["bytes_read"] - first["bytes_read"]) / run.elapsed / 1e6,
        "stages": stage_shares(first, last, run.elapsed),
        "mean_ready_batches": last.get("mean_ready_batches", 0.0),
        **loader_judgement(run.recent),
    }


def _disk_figures(run: _Run) -> Dict[str, Any]:
    """Reads/s and MB/s of the disks under the dataset during `run`, or why
    there are none."""
    before, after = run.disk_before, run.disk_after
    reads = sum(after[n][0] - before[n][0] for n in after if n in before)
    sectors = sum(after[n][1] - before[n][1] for n in after if n in before)
    if not after:
        return {"skipped": "no block device under this filesystem (network or memory "
                           "filesystem): the loader's own MB/s is the read rate"}
    return {"devices": sorted(after), "mb_per_s": sectors * 512 / run.elapsed / 1e6,
            "reads_per_s": reads / run.elapsed, "source": "/proc/diskstats"}


def _gpu_figures(gpu: GpuSampler, values: List[float]) -> Dict[str, Any]:
    """The mean of the sampled GPU utilisation (None without a sample), or
    why there is no GPU source."""
    if not gpu.source:
        return {"skipped": gpu.reason}
    return {"source": gpu.source, "samples": len(values),
            "mean_utilization_percent": sum(values) / len(values) if values else None}


def run_consumer(path: str, seconds: float, disks: List[str], batch_size: int,
                 threads: Optional[int]) -> Dict[str, Any]:
    """A DataLoader for `seconds` (image transform; raw bytes when the
    records are not images) with GPU and disk samplers beside it."""
    from ..loader import ImageTransform, RawTransform
    gpu = GpuSampler()
    gpu_values: List[float] = []
    result: Dict[str, Any] = {}
    for transform in (ImageTransform(224, train=True), RawTransform(shape=(16,))):
        try:
            loader = _open_loader(path, batch_size, threads, transform)
        except Exception as error:
            return {"skipped": f"the loader could not open this dataset: {error}"}
        run = _timed_run(loader, seconds, disks, gpu, gpu_values)
        if (run.failure is not None and isinstance(transform, ImageTransform)
                and run.last["batches"] == 0):
            # Not images (e.g. token records): measure the read side with raw bytes.
            result["image_transform_error"] = str(run.failure)
            gpu_values.clear()
            continue
        if run.failure is not None:
            result["error"] = str(run.failure)
        result.update(_loader_figures(transform, run))
        break
    result["disk"] = _disk_figures(run)
    result["gpu"] = _gpu_figures(gpu, gpu_values)
    gpu.close()
    return result
