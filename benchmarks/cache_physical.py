#!/usr/bin/python3
"""The node cache's first epoch over a physically slowed source: the same
gpufeed_cache_bench epoch 1 as step 4 of benchmarks/run.sh, but with the
datasets on an ext4 loop device whose reads the kernel throttles (a cgroup,
benchmarks/throttled_disk.py) instead of the in-process simulation, and the
cache on this machine's own disk. Epoch 1 with the cache and without it
alternate for --rounds rounds, the page cache dropped before each; the ratio
is the median of the rounds' ratios (each taken within its round). Root
only (loop device, cgroup, drop_caches); otherwise it says why and skips.

    /usr/bin/python3 benchmarks/cache_physical.py --bench build/release/benchmarks/gpufeed_cache_bench \
        --data benchmarks/data --work benchmarks/data/cache-physical [--mbps 150] [--iops 2000] \
        [--rounds 3] [--json OUT]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throttled_disk import LoopDisk, Throttle, drop_caches  # noqa: E402

FORMATS = ("recordio", "lmdb", "caffe_lmdb")
CGROUP_NAME = "gpufeed-cache-physical"


def epoch_one(bench, dataset, cache_dir, cached, threads):
    """records/s and source bytes / dataset of one epoch 1 in a new process."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    drop_caches()
    command = [bench, dataset, "--cache-dir", cache_dir, "--latency-ms", "0", "--mbps", "0",
               "--threads", str(threads), "--epoch", "1", "--cold"]
    if not cached:
        command.append("--no-cache")
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if "epoch 1:" in l)
    rate = float(re.search(r"([\d.]+) records/s", line).group(1))
    source = float(re.search(r"\(([\d.]+)x the dataset", line).group(1))
    return rate, source


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--data", required=True, help="holds demo-FORMAT-IMAGES datasets")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--work", required=True)
    parser.add_argument("--mbps", type=float, default=150, help="read bandwidth of the source")
    parser.add_argument("--iops", type=int, default=2000, help="read requests/s of the source")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("cache over a throttled disk: skipped (needs root: a loop device, a cgroup read "
              "throttle, drop_caches)")
        return 0
    # A SIGTERM unwinds like an exception: the finally blocks undo the mount and the cgroup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    datasets = {fmt: os.path.join(args.data, f"demo-{fmt}-{args.images}") for fmt in FORMATS}
    datasets = {fmt: path for fmt, path in datasets.items() if os.path.isdir(path)}
    size = sum(os.path.getsize(os.path.join(root, name)) for path in datasets.values()
               for root, _, names in os.walk(path) for name in names)
    os.makedirs(args.work, exist_ok=True)
    cache_dir = os.path.join(args.work, "cache")  # on this machine's disk, not throttled
    result = dict(mbps=args.mbps, iops=args.iops, threads=args.threads, rounds=args.rounds,
                  formats={})
    with LoopDisk(os.path.join(args.work, "disk.img"), os.path.join(args.work, "mnt"),
                  size * 13 // 10 // 2**20 + 200) as disk:
        for fmt, path in datasets.items():
            shutil.copytree(path, os.path.join(disk.mount, fmt))
        os.sync()
        throttle = Throttle(disk.major_minor, CGROUP_NAME)
        try:
            result["controller"] = "cgroup v1 blkio" if throttle.v1 else "cgroup v2 io.max"
            throttle.limit(bytes_per_second=args.mbps * 1e6, iops=args.iops)
            for fmt in datasets:
                rounds = []
                for _ in range(args.rounds):
                    cached = epoch_one(args.bench, os.path.join(disk.mount, fmt), cache_dir, True,
                                       args.threads)
                    uncached = epoch_one(args.bench, os.path.join(disk.mount, fmt), cache_dir,
                                         False, args.threads)
                    rounds.append(dict(cache=cached[0], none=uncached[0], source=cached[1],
                                       ratio=cached[0] / uncached[0]))
                ratio = statistics.median(r["ratio"] for r in rounds)
                result["formats"][fmt] = dict(rounds=rounds, ratio=ratio,
                                              source=max(r["source"] for r in rounds))
                print(f"{fmt:<11} epoch 1 with the cache: {ratio:.2f}x the uncached rate (rounds: "
                      + ", ".join(f"{r['cache']:,.0f}/{r['none']:,.0f} records/s"
                                  for r in rounds)
                      + f"), source {result['formats'][fmt]['source']:.2f}x the dataset "
                        f"(targets >= 0.9x, <= 1.05x)", flush=True)
        finally:
            throttle.close()
            shutil.rmtree(cache_dir, ignore_errors=True)
    print(f"source: ext4 on a loop device, reads throttled to {args.mbps:.0f} MB/s and "
          f"{args.iops} IOPS ({result['controller']}); cache on this machine's disk; "
          f"{args.threads} reader threads, block shuffle; medians of {args.rounds} rounds")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
