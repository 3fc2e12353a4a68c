"""WebDataset tar shards vs RecordIO shards of the same images, same run.

    python benchmarks/webdataset_compare.py --loader-bench BUILD/benchmarks/gpufeed_loader_bench \
        --read-bench BUILD/benchmarks/gpufeed_read_bench \
        --recordio DATA/demo-recordio-2000 --tar DATA/demo-webdataset-2000 [--rounds 3] [--json F]

Two figures per format, cold and warm:
  read    records/s reading every sample (gpufeed_read_bench: Dataset::Read on N threads)
  loader  images/s through the C++ Loader (read engine, decode, RandomResizedCrop 224, float32)
Cold: the dataset's files (shards and indexes) are evicted from the page cache
first with posix_fadvise(DONTNEED), which touches no other file of the
machine; warm: the files were just read. The formats alternate within each
round, which goes first alternating from round to round, so both see the
same machine; the table gives medians over the rounds and the ratio tar /
recordio against the 0.9 target (within 10 %) as the median of the rounds'
ratios: a cold read of the demo set lasts a few tens of milliseconds, and
the disk's speed moves by 2x between rounds, more than between the two
runs of one round.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys


def evict(path):
    """Drops the page-cache pages of every file under `path`."""
    os.sync()
    for directory, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def result_field(output, name):
    line = [row for row in output.splitlines() if row.startswith("RESULT")][-1]
    return float(re.search(rf"\b{name}=([0-9.]+)", line).group(1))


def run(command):
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def measure(args, path, kind, cache):
    if cache == "cold":
        evict(path)
    if kind == "read":
        out = run([args.read_bench, path, "--threads", str(args.threads), "--passes", "1"])
        return result_field(out, "median_records_per_s")
    out = run([args.loader_bench, path, "--threads", str(args.threads), "--epochs", "1"])
    return result_field(out, "images_per_s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader-bench", required=True)
    parser.add_argument("--read-bench", required=True)
    parser.add_argument("--recordio", required=True)
    parser.add_argument("--tar", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    formats = {"recordio": args.recordio, "webdataset": args.tar}
    # The tar's member index exists before timing (pack wrote it; a foreign
    # tar gets it on its first open, once): open both once, untimed.
    for path in formats.values():
        run([args.read_bench, path, "--threads", "1", "--passes", "1"])
    figures = {}
    for round_index in range(args.rounds):
        for kind in ("read", "loader"):
            for cache in ("cold", "warm"):
                names = list(formats) if round_index % 2 == 0 else list(reversed(formats))
                for name in names:
                    value = measure(args, formats[name], kind, cache)
                    figures.setdefault((kind, cache, name), []).append(value)
                    print(f"round {round_index + 1}: {kind:<6} {cache:<4} {name:<10} {value:10.1f}/s",
                          flush=True)
    rows = []
    print()
    print(f"{'figure':<8} {'cache':<5} {'recordio/s':>11} {'tar/s':>11} {'tar/recordio':>13}")
    for kind in ("read", "loader"):
        for cache in ("cold", "warm"):
            recordio = statistics.median(figures[(kind, cache, "recordio")])
            tar = statistics.median(figures[(kind, cache, "webdataset")])
            ratio = statistics.median(
                t / r for t, r in zip(figures[(kind, cache, "webdataset")],
                                      figures[(kind, cache, "recordio")]))
            rows.append(dict(figure=kind, cache=cache, recordio_per_s=round(recordio, 1),
                             tar_per_s=round(tar, 1), ratio=round(ratio, 3),
                             meets_target=ratio >= 0.9))
            print(f"{kind:<8} {cache:<5} {recordio:>11.1f} {tar:>11.1f} {ratio:>12.2f}x "
                  f"({'meets' if ratio >= 0.9 else 'BELOW'} the 0.9x target)")
    print(f"(medians over {args.rounds} round(s), {args.threads} threads; the ratio is the median "
          "of the rounds' ratios; read = records/s of Dataset::Read, loader = images/s of the C++ "
          "Loader at 224 px)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                       "rounds": args.rounds, "threads": args.threads, "rows": rows}, out, indent=2)


if __name__ == "__main__":
    main()
