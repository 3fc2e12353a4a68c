#!/usr/bin/python3
"""The verdict test bench: is the loader's bottleneck verdict right when the
bottleneck is created physically and proven first?

Needs root: the data lives on an ext4 filesystem on a loop device (backed
with direct I/O, so the host's page cache does not serve it), and reads of
that device are throttled by the kernel with the cgroup v1 blkio controller
(``blkio.throttle.read_bps_device``) or cgroup v2 ``io.max``. Without root or
either controller it prints why and exits 0 (skipped).

Scenarios (threads = this machine's CPUs, train transform, uint8, batch 32):

* For packed RecordIO shards and for an ImageFolder, each with io_uring +
  O_DIRECT and with the default backend (buffered):
  a reference run on the unthrottled device measures the decode rate; then
  the device is throttled to 3x (light), 1.3x (just above) and 0.5x
  (moderate) of the bytes/s that rate needs, each run on a cold page cache.
  Truth, proven by the device and the counterfactual: storage ("read") when
  the device delivered at least 85% of its throttled limit and the run was
  slower than 0.9x the reference (the better of two unthrottled runs); the
  CPUs ("decode") when the device had headroom (under 85% of its limit) and
  the run kept at least 0.8x the reference; "unproven" otherwise.
* Large JPEGs (4x upscaled, about 2400x1600) on a warm page cache: truth
  "decode", proven by no device reads while the consumer never pauses.
* A consumer sleeping per batch, asking for 40% of the reference rate on a
  warm cache: truth "consumer", proven by the rate following the sleep.

The verdict is the loader's own over its recent window
(``stats("recent")``); "decode" and "cpu-contention" both name the CPUs.
Prints a table (scenario, truth with its proof, verdict, right/wrong) and
"verdict: K of N right"; --json writes it for benchmarks/report.py.

    sudo /usr/bin/python3 benchmarks/verdict_check.py [--source IMAGEFOLDER]
        [--work /var/tmp/gpufeed-verdict] [--seconds 8] [--json verdict.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

NAME = "gpufeed-verdict"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throttled_disk import LoopDisk, Throttle, disk_counters, drop_caches  # noqa: E402


def log(text):
    print(text, flush=True)


def warm(paths):
    for path in paths:
        with open(path, "rb") as source:
            while source.read(1 << 20):
                pass


def build_data(args, mount, source_files):
    """ImageFolder replicas to --megabytes per format, their RecordIO pack,
    and a folder of large JPEGs, on the loop filesystem."""
    from PIL import Image
    import gpufeed
    folder = os.path.join(mount, "folder")
    total, replica = 0, 0
    target = args.megabytes * 1e6
    while total < target:
        for index, (path, label) in enumerate(source_files):
            directory = os.path.join(folder, f"class{label:03d}")
            os.makedirs(directory, exist_ok=True)
            shutil.copyfile(path, os.path.join(directory, f"r{replica:02d}_{index:06d}.jpg"))
            total += os.path.getsize(path)
            if total >= target:
                break
        replica += 1
    packed = os.path.join(mount, "packed")
    gpufeed.pack(folder, packed, shard_size="64MiB", progress=False)
    large = os.path.join(mount, "large")
    for index, (path, label) in enumerate(source_files[:args.large_images]):
        directory = os.path.join(large, f"class{label:03d}")
        os.makedirs(directory, exist_ok=True)
        with Image.open(path) as image:
            image.convert("RGB").resize((image.width * 4, image.height * 4), Image.BICUBIC).save(
                os.path.join(directory, f"{index:05d}.jpg"), quality=92)
    return folder, packed, large


def measure(path, fmt, backend, direct, seconds, threads, batch_size, step=None):
    """Runs a loader for `seconds` (at most one epoch, so a cold run stays
    cold) and returns its rate after the first second and its recent stats."""
    import gpufeed
    options = dict(format=fmt, batch_size=batch_size, shuffle=True, num_threads=threads,
                   transform=gpufeed.ImageTransform(224, train=True, dtype="uint8"),
                   io_backend=backend, direct_io=direct)
    try:
        loader = gpufeed.DataLoader(path, stats_window_seconds=seconds - 1.0, **options)
    except TypeError:  # a gpufeed before the recent window (the "before" table)
        loader = gpufeed.DataLoader(path, **options)
    started = time.monotonic()
    mark = None
    batches = 0
    for _ in loader:
        batches += 1
        if step:
            time.sleep(step)
        now = time.monotonic()
        if mark is None and now - started >= 1.0:
            mark = (now, batches)
        if now - started >= seconds:
            break
    end = time.monotonic()
    try:
        stats = dict(loader.stats("recent"))
    except TypeError:
        stats = dict(loader.stats())
    loader.close()
    if mark is None or end - mark[0] <= 0:
        mark = (started, 0)
    rate = (batches - mark[1]) * batch_size / (end - mark[0])
    return rate, stats


def describe(stats):
    return (f"read {stats['read_share']:.0%} decode {stats['decode_share']:.0%} "
            f"(cpu {stats.get('decode_cpu_share', 0):.0%}) blocked "
            f"{stats.get('blocked_share', 0):.0%} wait {stats['consumer_wait_share']:.0%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="an ImageFolder of JPEGs (default: 600 demo images made "
                                         "by make_demo_dataset.py in --work)")
    parser.add_argument("--work", default="/var/tmp/gpufeed-verdict")
    parser.add_argument("--megabytes", type=float, default=450,
                        help="bytes of images per format on the loop filesystem (default 450)")
    parser.add_argument("--large-images", type=int, default=120)
    parser.add_argument("--seconds", type=float, default=8.0, help="per run (default 8)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--only", default="", help="run the scenarios whose name has this text")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()

    if os.geteuid() != 0:
        log("verdict: skipped (needs root: a loop device and a cgroup read throttle)")
        return 0
    os.makedirs(args.work, exist_ok=True)
    if not args.source:
        args.source = os.path.join(args.work, "demo")
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "make_demo_dataset.py"),
                        args.source, "--images", "600", "--classes", "10", "--quiet"], check=True)
    classes = sorted(d for d in os.listdir(args.source)
                     if os.path.isdir(os.path.join(args.source, d)))
    source_files = sorted((path, label) for label, name in enumerate(classes)
                          for path in glob.glob(os.path.join(args.source, name, "*.jp*g")))
    if not source_files:
        raise SystemExit(f"{args.source}: no JPEGs in class folders")

    size_mb = int(args.megabytes * 2.4) + 600
    loop_disk = LoopDisk(os.path.join(args.work, "disk.img"), os.path.join(args.work, "mnt"),
                         size_mb).open()
    mount = loop_disk.mount
    throttle = None
    rows = []
    try:
        log(f"verdict bench: {loop_disk.device} ({size_mb} MB ext4, direct I/O backing) on "
            f"{mount}; "
            f"{args.threads} threads, {args.seconds:.0f} s runs")
        folder, packed, large = build_data(args, mount, source_files)
        disk = loop_disk.name
        throttle = Throttle(loop_disk.major_minor, NAME)
        common = dict(seconds=args.seconds, threads=args.threads, batch_size=args.batch_size)

        def record(name, truth, proof, stats):
            verdict = stats["bottleneck"]
            right = verdict == truth or (truth == "decode" and verdict == "cpu-contention")
            rows.append({"scenario": name, "truth": truth, "proof": proof, "verdict": verdict,
                         "right": right, "shares": describe(stats),
                         "sentence": stats["verdict"]})
            log(f"{name:<38} truth {truth:<8} verdict {verdict:<15} "
                f"{'right' if right else 'WRONG'}   ({proof}; {describe(stats)})")

        datasets = [("packed", packed, "recordio"), ("folder", folder, "imagefolder")]
        backends = [("io_uring+O_DIRECT", "io_uring", True), ("default", "auto", False)]
        for label, path, fmt in datasets:
            files = [f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                     if os.path.isfile(f)]
            data_bytes = sum(os.path.getsize(f) for f in files)
            samples = sum(1 for f in files if f.endswith(".jpg")) if fmt == "imagefolder" else \
                sum(1 for f in glob.glob(os.path.join(folder, "*", "*.jpg")))
            per_sample = data_bytes / max(1, samples)
            for backend_label, backend, direct in backends:
                if args.only and args.only not in f"{label} {backend_label}":
                    continue
                # The decode rate: the better of two unthrottled cold runs
                # (one may be slowed by the machine's other work).
                reference = 0
                for _ in range(2):
                    throttle.limit(0)
                    drop_caches()
                    rate, stats = measure(path, fmt, backend, direct, **common)
                    reference = max(reference, rate)
                need = reference * per_sample
                log(f"{label} {backend_label}: reference {reference:.0f} img/s unthrottled, "
                    f"needs {need / 1e6:.1f} MB/s; {describe(stats)}")
                for level, factor in (("light", 3.0), ("just above", 1.3), ("moderate", 0.5)):
                    limit = need * factor
                    throttle.limit(bytes_per_second=limit)
                    drop_caches()
                    before = disk_counters(disk)
                    started = time.monotonic()
                    rate, stats = measure(path, fmt, backend, direct, **common)
                    seconds = time.monotonic() - started
                    after = disk_counters(disk)
                    delivered = (after[0] - before[0]) / seconds
                    ratio = rate / reference
                    # Storage-bound: the device delivered its throttled limit
                    # and the loader ran slower than unthrottled. CPU-bound:
                    # the device had headroom (under 85% of its limit) and
                    # the loader kept most of its unthrottled rate.
                    saturated = delivered >= 0.85 * limit
                    if saturated and ratio < 0.9:
                        truth = "read"
                    elif not saturated and ratio >= 0.8:
                        truth = "decode"
                    else:
                        truth = "unproven"
                    proof = (f"{ratio:.2f}x the reference, device {delivered / 1e6:.1f} of "
                             f"{limit / 1e6:.1f} MB/s")
                    record(f"{label} {backend_label} {level} ({factor}x)", truth, proof, stats)
                throttle.limit(0)

        if not args.only or "large" in args.only:
            large_files = glob.glob(os.path.join(large, "*", "*.jpg"))
            warm(large_files)
            before = disk_counters(disk)
            started = time.monotonic()
            rate, stats = measure(large, "imagefolder", "auto", False, **common)
            seconds = time.monotonic() - started
            read_mb = (disk_counters(disk)[0] - before[0]) / seconds / 1e6
            cpu = stats.get("process_cpu_cores", 0.0)
            # Nothing read from the device and a consumer that never pauses:
            # what is left to limit the loader is the CPUs (its own, or
            # taken by others: both are "the CPUs").
            truth = "decode" if read_mb < 1 else "unproven"
            record("large JPEGs, warm cache", truth,
                   f"device {read_mb:.2f} MB/s, process {cpu:.2f} of {stats.get('cores', 0)} "
                   f"CPUs, others {stats.get('external_cpu_cores', 0):.2f}", stats)

        if not args.only or "consumer" in args.only:
            warm(glob.glob(os.path.join(packed, "*")))
            reference, _ = measure(packed, "recordio", "auto", False, **common)
            step = args.batch_size / (0.4 * reference)
            rate, stats = measure(packed, "recordio", "auto", False, step=step, **common)
            paced = args.batch_size / step
            truth = "consumer" if abs(rate - paced) <= 0.15 * paced and rate <= 0.5 * reference \
                else "unproven"
            record("consumer sleeping per batch", truth,
                   f"{rate:.0f} img/s, the sleep allows {paced:.0f}, unpaced {reference:.0f}",
                   stats)
    finally:
        if throttle is not None:
            throttle.close()
        loop_disk.close()

    right = sum(1 for row in rows if row["right"])
    log("")
    log(f"{'scenario':<38} {'truth':<8} {'verdict':<15} result   proof")
    for row in rows:
        log(f"{row['scenario']:<38} {row['truth']:<8} {row['verdict']:<15} "
            f"{'right' if row['right'] else 'WRONG':<8} {row['proof']}")
    unproven = sum(1 for row in rows if row["truth"] == "unproven")
    log(f"verdict: {right} of {len(rows)} right"
        + (f" ({unproven} scenario(s) unproven: the machine was too noisy to establish the "
           "truth; rerun on a quiet machine)" if unproven else ""))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"right": right, "scenarios": len(rows), "unproven": unproven,
                       "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
