"""``gpufeed diagnose PATH``: an I/O investigation in one command.

1. The storage: filesystem type (statfs magic), the mount and its options,
   the block device(s) under it with read_ahead_kb, scheduler and rotational
   flag, Lustre striping (``lfs getstripe``) when ``lfs`` is installed.
2. The data: file count, size histogram, share of small files, packed or
   not; sequential bandwidth, random 4 KiB read IOPS and small-file reads/s
   measured on a sample of the dataset's own files.
3. The consumer side: a DataLoader runs for a few seconds while GPU
   utilisation (NVML, else nvidia-smi) and disk throughput (/proc/diskstats)
   are sampled; the loader's verdict.

Then recommendations, each naming the measurement that triggered it.

The I/O measurements use ``os.pread`` on a thread pool (the GIL is released
during the read) after ``posix_fadvise(DONTNEED)`` on each sampled file: that
evicts this file's clean pages from the page cache unless another process
maps them, so the figures approximate cold reads without dropping the whole
machine's cache. The read engine itself (io_uring) is measured by
``benchmarks/io_compare.py``; the loader run of step 3 uses it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import random
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["diagnose", "filesystem_type", "storage_info", "survey", "recommend",
           "FILESYSTEM_MAGIC"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# statfs(2) f_type values (linux/magic.h, plus the parallel filesystems'
# own headers for Lustre, GPFS, BeeGFS, WekaFS).
FILESYSTEM_MAGIC = {
    0xEF53: "ext4",  # ext2/ext3/ext4 share it; mountinfo tells them apart
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlayfs",
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "cephfs",
    0x65735546: "fuse",
    0x2FC12FC1: "zfs",
    0x5346544E: "ntfs",
    0x4D44: "vfat",
    0xF2F52010: "f2fs",
    0x3153464A: "jfs",
    0x52654973: "reiserfs",
    0x73717368: "squashfs",
    0x858458F6: "ramfs",
    0x6A656A63: "fakeowner",
    0x01161970: "gfs2",
    0x7461636F: "ocfs2",
    0x53464846: "wslfs",
    0xA501FCF5: "vxfs",
    0x013111A8: "ibrix",
    0x5A3C69F0: "aufs",
    0x15013346: "beegfs",  # older BeeGFS (fhgfs)
    0x1161970: "gfs2",
}

# Filesystems whose reads cross a network: per-file metadata costs a round
# trip, and a node-local copy helps.
NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb2", "smb3", "lustre", "gpfs", "beegfs",
                       "cephfs", "ceph", "fuse", "fuse.sshfs", "glusterfs", "fuse.glusterfs",
                       "wekafs", "gfs2", "ocfs2", "9p", "virtiofs"}

SMALL_FILE_BYTES = 1 * MIB
_HISTOGRAM_EDGES = [16 * KIB, 64 * KIB, 256 * KIB, MIB, 16 * MIB, 256 * MIB, GIB]


def _size_label(size: int) -> str:
    if size >= GIB:
        return f"{size // GIB}G"
    if size >= MIB:
        return f"{size // MIB}M"
    return f"{size // KIB}K"


# ------------------------------------------------------------ 1. storage


def filesystem_type(path: str) -> Tuple[int, str]:
    """(statfs f_type, name) of the filesystem holding `path`."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    # struct statfs is 120 bytes on 64-bit Linux and f_type (a long) comes
    # first on every architecture; a larger buffer leaves room.
    buffer = ctypes.create_string_buffer(256)
    if libc.statfs(os.fsencode(path), buffer) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"statfs: {os.strerror(error)}", path)
    magic = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
    return magic, FILESYSTEM_MAGIC.get(magic, f"unknown (0x{magic:08X})")


def _unescape_mount(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1:i + 4].isdigit() and len(text[i + 1:i + 4]) == 3:
            out.append(chr(int(text[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Optional[Dict[str, Any]]:
    """The mountinfo entry whose mount point is the longest prefix of
    `path` (the last one mounted there wins, as the kernel resolves it)."""
    real = os.path.realpath(path)
    best = None
    try:
        with open(mountinfo) as source:
            lines = source.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        mount_point = _unescape_mount(fields[4])
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if not inside:
            continue
        if best is None or len(mount_point) >= len(best["mount_point"]):
            best = {
                "mount_point": mount_point,
                "device_number": fields[2],
                "root": _unescape_mount(fields[3]),
                "mount_options": fields[5].split(","),
                "fstype": fields[dash + 1],
                "source": _unescape_mount(fields[dash + 2]) if len(fields) > dash + 2 else "",
                "super_options": fields[dash + 3].split(",") if len(fields) > dash + 3 else [],
            }
    return best


def _read_sys(path: str) -> Optional[str]:
    try:
        with open(path) as source:
            return source.read().strip()
    except OSError:
        return None


def _int_or_none(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def block_devices(device_number: str, sys_root: str = "/sys") -> List[Dict[str, Any]]:
    """The disks under a MAJ:MIN: a partition resolves to its disk, a
    device-mapper or md device to the disks it is built on (recursively).
    Each with read_ahead_kb, the active scheduler and the rotational flag."""
    start = os.path.join(sys_root, "dev", "block", device_number)
    if not os.path.exists(start):
        return []
    disks: List[Dict[str, Any]] = []
    seen = set()

    def visit(node: str, via: List[str]) -> None:
        node = os.path.realpath(node)
        if node in seen:
            return
        seen.add(node)
        name = os.path.basename(node)
        if os.path.exists(os.path.join(node, "partition")):
            visit(os.path.dirname(node), via + [name])
            return
        slaves_dir = os.path.join(node, "slaves")
        slaves = sorted(os.listdir(slaves_dir)) if os.path.isdir(slaves_dir) else []
        if slaves:
            for slave in slaves:
                visit(os.path.join(slaves_dir, slave), via + [name])
            return
        queue = os.path.join(node, "queue")
        scheduler_line = _read_sys(os.path.join(queue, "scheduler")) or ""
        active = scheduler_line
        if "[" in scheduler_line:
            active = scheduler_line[scheduler_line.index("[") + 1:scheduler_line.index("]")]
        disks.append({
            "name": name,
            "via": via,
            "dev": _read_sys(os.path.join(node, "dev")),
            "read_ahead_kb": _int_or_none(_read_sys(os.path.join(queue, "read_ahead_kb"))),
            "scheduler": active or None,
            "rotational": _read_sys(os.path.join(queue, "rotational")) == "1",
            "max_sectors_kb": _int_or_none(_read_sys(os.path.join(queue, "max_sectors_kb"))),
            "model": _read_sys(os.path.join(node, "device", "model")),
        })

    visit(start, [])
    return disks


def lustre_striping(path: str, timeout: float = 10.0) -> Optional[Dict[str, Any]]:
    """`lfs getstripe` of `path` (a file or directory), or None when lfs is
    not installed."""
    lfs = shutil.which("lfs")
    if lfs is None:
        return None
    result: Dict[str, Any] = {"command": f"lfs getstripe -c -S {path}"}
    try:
        count = subprocess.run([lfs, "getstripe", "-c", path], capture_output=True, text=True,
                               timeout=timeout)
        size = subprocess.run([lfs, "getstripe", "-S", path], capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        result["error"] = str(error)
        return result
    result["stripe_count"] = _int_or_none(count.stdout.split()[0]) if count.stdout.split() else None
    result["stripe_size"] = _int_or_none(size.stdout.split()[0]) if size.stdout.split() else None
    if count.returncode != 0 or size.returncode != 0:
        result["error"] = (count.stderr or size.stderr).strip()
    return result


def storage_info(path: str, largest_file: Optional[str] = None) -> Dict[str, Any]:
    magic, name = filesystem_type(path)
    mount = mount_of(path)
    if mount and name == "ext4" and mount["fstype"] in ("ext2", "ext3"):
        name = mount["fstype"]
    info: Dict[str, Any] = {"statfs_magic": f"0x{magic:08X}", "filesystem": name, "mount": mount,
                            "network": name in NETWORK_FILESYSTEMS or bool(
                                mount and mount["fstype"].split(".")[0] in NETWORK_FILESYSTEMS)}
    number = mount["device_number"] if mount else None
    info["block_devices"] = block_devices(number) if number else []
    # The read-ahead that applies to file reads is the filesystem's backing
    # device's (bdi): for NFS/Lustre it exists without a block device.
    info["bdi_read_ahead_kb"] = (_int_or_none(_read_sys(f"/sys/class/bdi/{number}/read_ahead_kb"))
                                 if number else None)
    info["lustre"] = None
    if name == "lustre":
        target = largest_file or path
        info["lustre"] = lustre_striping(target) or {"error": "lfs not found in PATH"}
    return info


# ------------------------------------------------------------ 2. data


def survey(path: str, max_files: int = 1_000_000) -> Dict[str, Any]:
    """Files under `path` (or the file itself): count, bytes, size
    histogram, small-file share, and the format gpufeed detects."""
    sizes: List[Tuple[int, str]] = []
    truncated = False
    if os.path.isfile(path):
        sizes.append((os.path.getsize(path), path))
    else:
        stack = [path]
        while stack and not truncated:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file():
                        sizes.append((entry.stat().st_size, entry.path))
                except OSError:
                    continue
                if len(sizes) >= max_files:
                    truncated = True
                    break
    histogram = []
    lower = 0
    for upper in _HISTOGRAM_EDGES + [None]:
        count = sum(1 for size, _ in sizes if size >= lower and (upper is None or size < upper))
        label = (f"< {_size_label(upper)}" if lower == 0 else
                 f">= {_size_label(lower)}" if upper is None else
                 f"{_size_label(lower)}-{_size_label(upper)}")
        histogram.append({"range": label, "files": count})
        lower = upper or 0
    total = sum(size for size, _ in sizes)
    small = sum(1 for size, _ in sizes if size < SMALL_FILE_BYTES)
    data: Dict[str, Any] = {
        "files": len(sizes),
        "files_counted_up_to_limit": truncated,
        "bytes": total,
        "mean_file_bytes": total / len(sizes) if sizes else 0,
        "largest_file_bytes": max((size for size, _ in sizes), default=0),
        "files_over_1gb": sum(1 for size, _ in sizes if size > 1_000_000_000),
        "small_file_bytes": SMALL_FILE_BYTES,
        "small_files": small,
        "small_file_share": small / len(sizes) if sizes else 0.0,
        "histogram": histogram,
    }
    try:
        from .dataset import open_dataset
        dataset = open_dataset(path)
        data["format"] = dataset.format
        data["records"] = len(dataset)
        data["shards"] = len(dataset.shards)
        data["packed"] = dataset.format in ("recordio", "lmdb", "caffe_lmdb")
    except Exception as error:  # any dataset error: still a file survey
        data["format"] = None
        data["format_error"] = str(error)
        data["packed"] = None
    data["_files"] = sizes  # for the measurements; dropped from the report
    return data


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
            while time.monotonic() < deadline:
                with lock:
                    if counted[0] >= budget_bytes:
                        return
                chunk = os.pread(fd, MIB, offset)
                if not chunk:
                    return
                offset += len(chunk)
                with lock:
                    counted[0] += len(chunk)
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
        while time.monotonic() < deadline:
            fd, size = descriptors[local.randrange(len(descriptors))]
            # Files smaller than a block are read whole (from offset 0).
            offset = local.randrange(max(1, size // block)) * block
            begin = time.perf_counter()
            os.pread(fd, block, offset)
            latencies[index] += time.perf_counter() - begin
            counts[index] += 1

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
        while time.monotonic() < deadline:
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

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(worker, range(threads)))
    elapsed = max(1e-9, time.monotonic() - started)
    return {"method": f"open + os.pread whole file + close, {threads} threads, "
                      "posix_fadvise DONTNEED first",
            "files": done[0], "bytes": done[1], "seconds": elapsed,
            "files_per_s": done[0] / elapsed, "mb_per_s": done[1] / elapsed / 1e6}


# ------------------------------------------------------------ 3. consumer


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


class _GpuSampler:
    """GPU utilisation samples from NVML (libnvidia-ml via ctypes), else
    nvidia-smi, else none with the reason."""

    def __init__(self):
        self.source = None
        self.reason = None
        self._nvml = None
        self._handles = []
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() == 0:
                count = ctypes.c_uint(0)
                nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
                for index in range(count.value):
                    handle = ctypes.c_void_p()
                    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                        self._handles.append(handle)
                if self._handles:
                    self._nvml = nvml
                    self.source = "NVML"
        except (OSError, AttributeError):
            pass
        if self.source is None:
            self._smi = shutil.which("nvidia-smi")
            if self._smi:
                self.source = "nvidia-smi"
            else:
                self.reason = ("no GPU utilisation: neither libnvidia-ml.so.1 (NVML) nor "
                               "nvidia-smi is present on this machine")

    def sample(self) -> Optional[List[float]]:
        if self.source == "NVML":
            class Utilization(ctypes.Structure):
                _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
            values = []
            for handle in self._handles:
                rates = Utilization()
                if self._nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == 0:
                    values.append(float(rates.gpu))
            return values
        if self.source == "nvidia-smi":
            try:
                output = subprocess.run(
                    [self._smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=5).stdout
                return [float(v) for v in output.split() if v.replace(".", "").isdigit()]
            except (OSError, subprocess.TimeoutExpired, ValueError):
                return None
        return None

    def close(self):
        if self._nvml is not None:
            self._nvml.nvmlShutdown()


def run_consumer(path: str, seconds: float, disks: List[str], batch_size: int,
                 threads: Optional[int]) -> Dict[str, Any]:
    """A DataLoader for `seconds` (image transform; raw bytes when the
    records are not images) with GPU and disk samplers beside it."""
    from .bench import stage_shares
    from .loader import DataLoader, ImageTransform, RawTransform
    gpu = _GpuSampler()
    gpu_values: List[float] = []
    stop = threading.Event()

    def sample_gpu():
        while not stop.wait(0.5):
            values = gpu.sample()
            if values:
                gpu_values.append(sum(values) / len(values))

    result: Dict[str, Any] = {}
    for transform in (ImageTransform(224, train=True), RawTransform(shape=(16,))):
        try:
            loader = DataLoader(path, batch_size=batch_size, num_threads=threads,
                                transform=transform, on_error="raise")
            if len(loader) == 0:
                loader.close()
                loader = DataLoader(path, batch_size=1, num_threads=threads,
                                    transform=transform, on_error="raise")
        except Exception as error:
            return {"skipped": f"the loader could not open this dataset: {error}"}
        disk_before = _diskstats(disks)
        sampler = threading.Thread(target=sample_gpu, daemon=True) if gpu.source else None
        if sampler:
            sampler.start()
        first = dict(loader.stats())
        started = time.monotonic()
        epoch = 0
        failure = None
        try:
            while time.monotonic() - started < seconds and failure is None:
                loader.set_epoch(epoch)
                try:
                    for _ in loader:
                        if time.monotonic() - started >= seconds:
                            break
                except Exception as error:
                    failure = error
                epoch += 1
            last = dict(loader.stats())
        finally:
            stop.set()
            if sampler:
                sampler.join()
            loader.close()
        elapsed = max(1e-9, time.monotonic() - started)
        disk_after = _diskstats(disks)
        if failure is not None and isinstance(transform, ImageTransform) and last["batches"] == 0:
            # Not images (e.g. token records): measure the read side with raw bytes.
            result["image_transform_error"] = str(failure)
            stop.clear()
            gpu_values.clear()
            continue
        if failure is not None:
            result["error"] = str(failure)
        result.update({
            "transform": repr(transform),
            "seconds": elapsed,
            "threads": last["threads"],
            "samples_per_s": (last["samples"] - first["samples"]) / elapsed,
            "loader_mb_per_s": (last["bytes_read"] - first["bytes_read"]) / elapsed / 1e6,
            "stages": stage_shares(first, last, elapsed),
            "mean_ready_batches": last.get("mean_ready_batches", 0.0),
            "verdict": last.get("verdict", ""),
        })
        break
    reads = sum(disk_after[n][0] - disk_before[n][0] for n in disk_after if n in disk_before)
    sectors = sum(disk_after[n][1] - disk_before[n][1] for n in disk_after if n in disk_before)
    if disk_after:
        result["disk"] = {"devices": sorted(disk_after), "mb_per_s": sectors * 512 / elapsed / 1e6,
                          "reads_per_s": reads / elapsed, "source": "/proc/diskstats"}
    else:
        result["disk"] = {"skipped": "no block device under this filesystem (network or memory "
                                     "filesystem): the loader's own MB/s is the read rate"}
    result["gpu"] = ({"source": gpu.source, "samples": len(gpu_values),
                      "mean_utilization_percent": (sum(gpu_values) / len(gpu_values)
                                                   if gpu_values else None)}
                     if gpu.source else {"skipped": gpu.reason})
    gpu.close()
    return result


# ------------------------------------------------------------ recommendations


def _verdict_kind(verdict: str) -> Optional[str]:
    for kind in ("read-bound", "decode-bound", "consumer-bound"):
        if verdict.startswith(kind):
            return kind
    return None


def recommend(report: Dict[str, Any]) -> List[Dict[str, str]]:
    """Each recommendation: id, advice, and `because`: the measurement that
    triggered it."""
    out: List[Dict[str, str]] = []
    storage, data = report["storage"], report["data"]
    measured = report.get("measurements", {})
    consumer = report.get("consumer") or {}
    verdict = consumer.get("verdict", "")
    kind = _verdict_kind(verdict)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def add(ident: str, advice: str, because: str) -> None:
        out.append({"id": ident, "advice": advice, "because": because})

    if data.get("packed") is not True and data["files"] >= 100 and data["small_file_share"] >= 0.5:
        small_rate = measured.get("small_files", {}).get("files_per_s")
        rate_text = f"; measured {small_rate:.0f} small files/s" if small_rate else ""
        add("pack",
            f"pack the small files into shards: gpufeed pack {report['path']} DST "
            "--shard-size 256MiB (one open per shard instead of one per sample)",
            f"{data['small_file_share']:.0%} of {data['files']} files are under "
            f"{SMALL_FILE_BYTES // MIB} MiB and the dataset is not packed"
            f" (format: {data.get('format') or 'none detected'}){rate_text}")

    read_ahead = storage.get("bdi_read_ahead_kb")
    devices = storage.get("block_devices") or []
    if read_ahead is None and devices:
        read_ahead = devices[0].get("read_ahead_kb")
    if (read_ahead is not None and read_ahead < 1024 and data["mean_file_bytes"] >= MIB):
        names = ", ".join(d["name"] for d in devices) or storage["mount"]["device_number"]
        target = (f"echo 4096 > /sys/block/{devices[0]['name']}/queue/read_ahead_kb"
                  if devices else
                  f"echo 4096 > /sys/class/bdi/{storage['mount']['device_number']}/read_ahead_kb")
        add("read_ahead",
            f"raise read-ahead to 4 MiB for sequential shard reads: {target} (as root; "
            "persist it with a udev rule)",
            f"read_ahead_kb is {read_ahead} on {names} and files average "
            f"{data['mean_file_bytes'] / MIB:.1f} MiB (sequential reads)")

    lustre = storage.get("lustre") or {}
    if storage["filesystem"] == "lustre" and data.get("files_over_1gb"):
        count = lustre.get("stripe_count")
        if count is not None and 0 < count < 4:
            add("stripe",
                "stripe the shards over 4-8 OSTs: lfs setstripe -c 4 DIR, then re-pack (or "
                "lfs migrate -c 4 FILE) so one shard's reads go to several servers",
                f"{data['files_over_1gb']} file(s) exceed 1 GB with a stripe count of {count} "
                f"(lfs getstripe)")
        elif count is None:
            add("stripe",
                "check the striping of the >1 GB shards (lfs getstripe -c FILE) and use 4-8 OSTs",
                f"{data['files_over_1gb']} file(s) exceed 1 GB on Lustre; striping could not be "
                f"read ({lustre.get('error', 'no lfs')})")

    rotational = any(d.get("rotational") for d in devices)
    # A local SSD that is read-bound gains nothing from a copy on another
    # local SSD: there the verdict's own advice (pack, queue depth) applies.
    if storage.get("network") or (kind == "read-bound" and rotational):
        reasons = []
        if storage.get("network"):
            reasons.append(f"the data is on {storage['filesystem']} (a network/parallel "
                           "filesystem: every read crosses the network and shares its servers)")
        if kind == "read-bound":
            reasons.append(f"the loader's verdict is read-bound ({verdict.split(';')[0][:120]})")
        if rotational:
            reasons.append("the disk is rotational")
        add("cache",
            "cache the shards on node-local NVMe (DataLoader(cache_dir=/local/nvme/gpufeed, "
            "cache_capacity=...), gpufeed bench --cache-dir ...): later epochs read locally",
            "; ".join(reasons))

    threads = consumer.get("threads")
    if kind == "decode-bound":
        if threads and cores and threads < cores:
            add("threads",
                f"use more decode threads: num_threads={cores} (this machine's cores)",
                f"decode-bound with {threads} of {cores} cores: {verdict[:120]}")
        else:
            add("threads",
                "decode is the limit on all cores: more decode threads need more cores (or "
                "lower the output size); see the uint8 advice",
                f"decode-bound with {threads} threads on {cores} cores: {verdict[:120]}")
        if "float32" in consumer.get("transform", "float32"):
            add("uint8",
                'output uint8 and normalize on the GPU: ImageTransform(dtype="uint8") '
                "(no float work per pixel on the CPU, 4x fewer bytes per batch over PCIe)",
                f"decode-bound with float32 output: workers decoding "
                f"{consumer['stages']['workers_decode']:.0%} of their time")

    stages = consumer.get("stages")
    if stages:
        busy = stages["workers_read"] + stages["workers_decode"]
        if stages["consumer_starved"] >= 0.05 and busy < 0.7:
            add("prefetch",
                "raise prefetch to 4: the workers have spare time but the consumer still waits, "
                "so batches arrive in bursts",
                f"the consumer waited {stages['consumer_starved']:.0%} of the run while the "
                f"workers were busy only {busy:.0%}")
    if rotational and data.get("packed"):
        add("block_shuffle",
            'use shuffle="block" on spinning disks: whole shards in random order, samples '
            "shuffled inside a window of shards (sequential reads)",
            "the block device is rotational (queue/rotational = 1)" +
            (f"; random 4 KiB reads measured {measured['random']['iops']:.0f} IOPS"
             if measured.get("random", {}).get("iops") else ""))
    return out


# ------------------------------------------------------------ driver


def diagnose(path: str, *, seconds: float = 3.0, io_seconds: float = 2.0,
             sample_bytes: int = 256 * MIB, io_threads: int = 16, batch_size: int = 32,
             threads: Optional[int] = None, run_loader: bool = True) -> Dict[str, Any]:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "no such file or directory", path)
    data = survey(path)
    files = data.pop("_files")
    largest = max(files)[1] if files else None
    storage = storage_info(path, largest)
    measurements: Dict[str, Any] = {
        "sequential": measure_sequential(files, sample_bytes, io_seconds),
        "random": measure_random(files, io_threads, io_seconds),
    }
    if data["small_files"]:
        measurements["small_files"] = measure_small_files(files, io_threads, io_seconds)
    report: Dict[str, Any] = {"path": path, "storage": storage, "data": data,
                              "measurements": measurements}
    if run_loader:
        disks = [d["name"] for d in storage["block_devices"]]
        report["consumer"] = run_consumer(path, seconds, disks, batch_size, threads)
    else:
        report["consumer"] = {"skipped": "--no-loader"}
    report["recommendations"] = recommend(report)
    return report


def format_report(report: Dict[str, Any]) -> str:
    storage, data, measured = report["storage"], report["data"], report["measurements"]
    consumer = report["consumer"]
    mount = storage.get("mount") or {}
    lines = ["== storage",
             f"filesystem:   {storage['filesystem']} (statfs magic {storage['statfs_magic']})"
             + (", network/parallel" if storage.get("network") else "")]
    if mount:
        lines.append(f"mount:        {mount['source']} on {mount['mount_point']} "
                     f"({mount['fstype']}, {','.join(mount['mount_options'])}; "
                     f"{','.join(mount['super_options'])})")
    for disk in storage["block_devices"]:
        via = f" via {' -> '.join(disk['via'])}" if disk["via"] else ""
        lines.append(f"block device: {disk['name']}{via}: read_ahead_kb {disk['read_ahead_kb']}, "
                     f"scheduler {disk['scheduler']}, "
                     f"{'rotational' if disk['rotational'] else 'non-rotational'}"
                     + (f", {disk['model']}" if disk.get("model") else ""))
    if not storage["block_devices"]:
        lines.append("block device: none (network or memory filesystem)")
    if storage.get("bdi_read_ahead_kb") is not None:
        lines.append(f"read-ahead:   {storage['bdi_read_ahead_kb']} KiB (the filesystem's bdi)")
    if storage.get("lustre"):
        lines.append(f"lustre:       {json.dumps(storage['lustre'])}")
    lines.append("== data")
    lines.append(f"files:        {data['files']}"
                 + (" (counting stopped at the limit)" if data["files_counted_up_to_limit"] else "")
                 + f", {data['bytes'] / 1e6:.1f} MB, mean {data['mean_file_bytes'] / KIB:.0f} KiB")
    lines.append(f"format:       {data.get('format') or 'not a dataset gpufeed detects'}"
                 + (f", {data['records']} records in {data['shards']} shard(s)"
                    if data.get("format") else f" ({data.get('format_error', '')})")
                 + (", packed" if data.get("packed") else ", not packed"))
    lines.append(f"small files:  {data['small_file_share']:.0%} under "
                 f"{SMALL_FILE_BYTES // MIB} MiB ({data['small_files']} files)")
    lines.append("size histogram: " + ", ".join(f"{h['range']}: {h['files']}"
                                                 for h in data["histogram"] if h["files"]))
    seq, rnd = measured["sequential"], measured["random"]
    lines.append("== measured on the dataset's files (approximately cold)")
    lines.append("sequential:   " + (f"{seq['mb_per_s']:.0f} MB/s over {seq['bytes'] / 1e6:.0f} MB "
                                     f"({seq['method']})" if "mb_per_s" in seq else seq["skipped"]))
    lines.append("random 4 KiB: " + (f"{rnd['iops']:.0f} IOPS, {rnd['mean_latency_ms']:.3f} ms "
                                     f"mean ({rnd['method']})" if "iops" in rnd else rnd["skipped"]))
    small = measured.get("small_files")
    if small:
        lines.append("small files:  " + (f"{small['files_per_s']:.0f} files/s, "
                                         f"{small['mb_per_s']:.1f} MB/s ({small['method']})"
                                         if "files_per_s" in small else small["skipped"]))
    lines.append("== consumer side (a DataLoader running)")
    if "skipped" in consumer:
        lines.append(f"loader:       skipped: {consumer['skipped']}")
    else:
        stages = consumer["stages"]
        lines.append(f"loader:       {consumer['samples_per_s']:.0f} samples/s, "
                     f"{consumer['loader_mb_per_s']:.1f} MB/s read by the loader, "
                     f"{consumer['threads']} threads, {consumer['seconds']:.1f} s")
        lines.append(f"stages:       workers reading {stages['workers_read']:.0%}, decoding "
                     f"{stages['workers_decode']:.0%}, blocked {stages['workers_blocked']:.0%}, "
                     f"starved {stages['workers_starved']:.0%}; consumer waited "
                     f"{stages['consumer_starved']:.0%}")
        disk = consumer["disk"]
        lines.append("disk:         " + (f"{disk['mb_per_s']:.1f} MB/s, {disk['reads_per_s']:.0f} "
                                         f"reads/s on {', '.join(disk['devices'])} "
                                         "(/proc/diskstats; 0 means the page cache served it)"
                                         if "mb_per_s" in disk else disk["skipped"]))
        gpu = consumer["gpu"]
        if "skipped" in gpu:
            lines.append(f"GPU:          {gpu['skipped']}")
        else:
            value = gpu["mean_utilization_percent"]
            lines.append(f"GPU:          {'%.0f%%' % value if value is not None else 'no sample'} "
                         f"mean utilisation ({gpu['source']}, {gpu['samples']} samples)")
        lines.append(f"verdict:      {consumer['verdict']}")
    lines.append("== recommendations")
    if not report["recommendations"]:
        lines.append("none: nothing measured here points at a change")
    for item in report["recommendations"]:
        lines.append(f"- {item['advice']}\n    because: {item['because']}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    from .pack import parse_size
    parser.add_argument("path", help="a dataset directory or file")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long the loader runs in step 3 (default 3)")
    parser.add_argument("--io-seconds", type=float, default=2.0,
                        help="time per I/O measurement (default 2)")
    parser.add_argument("--sample-bytes", type=parse_size, default=256 * MIB,
                        help="bytes read for the sequential figure (default 256MiB)")
    parser.add_argument("--io-threads", type=int, default=16,
                        help="threads for the random-read and small-file figures (default 16)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="loader decode threads")
    parser.add_argument("--no-loader", action="store_true", help="skip step 3")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main_from_args(args) -> int:
    report = diagnose(args.path, seconds=args.seconds, io_seconds=args.io_seconds,
                      sample_bytes=args.sample_bytes, io_threads=args.io_threads,
                      batch_size=args.batch_size, threads=args.threads,
                      run_loader=not args.no_loader)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
