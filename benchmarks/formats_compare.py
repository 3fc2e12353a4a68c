"""MDS and TFRecord copies of the demo images vs their RecordIO pack, cold, same run.

    python benchmarks/formats_compare.py --loader-bench BUILD/benchmarks/gpufeed_loader_bench \
        --read-bench BUILD/benchmarks/gpufeed_read_bench --folder DATA/demo-imagefolder-2000 \
        --recordio DATA/demo-recordio-2000 --out DATA [--rounds 3] [--json F]

The copies are written by benchmarks/foreign_writers.py (independent of
gpufeed) into OUT/demo-mds-N and OUT/demo-tfrecord-N, 64 MiB shards as the
RecordIO pack's. A format this build does not read (not in gpufeed.FORMATS)
is skipped with the reason printed. Two cold figures per format, images/s of
an epoch at RandomResizedCrop 224, float32:
  loader      the C++ Loader (gpufeed_loader_bench, --epochs 1)
  dataloader  gpufeed.DataLoader in a fresh Python process
Cold: the dataset's files are evicted from the page cache first with
posix_fadvise(DONTNEED), which touches no other file. Each dataset is opened
once untimed first (a TFRecord's offset index is built and saved then). The
formats alternate within each round; the table gives medians over the rounds
and each format / recordio against the 0.9 target.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

import gpufeed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webdataset_compare import evict, result_field, run  # noqa: E402

CANDIDATES = ("mds", "tfrecord")
DATALOADER = """
import sys, time, gpufeed
path, threads = sys.argv[1], int(sys.argv[2])
loader = gpufeed.DataLoader(path, batch_size=64, shuffle=True, seed=0, num_threads=threads,
                            transform=gpufeed.ImageTransform(224, train=True))
started, images = time.perf_counter(), 0
for data, labels in loader:
    images += len(labels)
print(f"RESULT images={images} images_per_s={images / (time.perf_counter() - started):.1f}")
"""


def measure(args, path, kind):
    evict(path)
    if kind == "loader":
        out = run([args.loader_bench, path, "--threads", str(args.threads), "--epochs", "1"])
    else:
        out = run([sys.executable, "-c", DATALOADER, path, str(args.threads)])
    return result_field(out, "images_per_s")


def datasets(args):
    """{format: path} of the formats this build reads, and {format: why skipped}."""
    found, skipped = {"recordio": args.recordio}, {}
    writer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "foreign_writers.py")
    images = len(gpufeed.open_dataset(args.recordio))
    for name in CANDIDATES:
        if name not in gpufeed.FORMATS:
            skipped[name] = f'this build of gpufeed has no "{name}" format'
            continue
        path = os.path.join(args.out, f"demo-{name}-{images}")
        print(run([sys.executable, writer, name, args.folder, path]).strip(), flush=True)
        found[name] = path
    return found, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader-bench", required=True)
    parser.add_argument("--read-bench", required=True)
    parser.add_argument("--folder", required=True, help="the ImageFolder the pack was made from")
    parser.add_argument("--recordio", required=True)
    parser.add_argument("--out", required=True, help="where the MDS and TFRecord copies go")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    formats, skipped = datasets(args)
    for name, reason in skipped.items():
        print(f"{name}: skipped: {reason} (gpufeed.FORMATS: {', '.join(gpufeed.FORMATS)})",
              flush=True)
    for path in formats.values():
        run([args.read_bench, path, "--threads", "1", "--passes", "1"])
    figures = {}
    for round_index in range(args.rounds):
        for kind in ("loader", "dataloader"):
            for name, path in formats.items():
                value = measure(args, path, kind)
                figures.setdefault((kind, name), []).append(value)
                print(f"round {round_index + 1}: {kind:<10} cold {name:<9} {value:10.1f} images/s",
                      flush=True)
    rows = []
    print()
    print(f"{'figure':<10} {'format':<9} {'images/s':>9} {'recordio/s':>11} {'ratio':>7}")
    for kind in ("loader", "dataloader"):
        recordio = statistics.median(figures[(kind, "recordio")])
        for name in formats:
            if name == "recordio":
                continue
            value = statistics.median(figures[(kind, name)])
            ratio = value / recordio
            rows.append(dict(figure=kind, cache="cold", format=name, per_s=round(value, 1),
                             recordio_per_s=round(recordio, 1), ratio=round(ratio, 3),
                             meets_target=ratio >= 0.9))
            print(f"{kind:<10} {name:<9} {value:>9.1f} {recordio:>11.1f} {ratio:>6.2f}x "
                  f"({'meets' if ratio >= 0.9 else 'BELOW'} the 0.9x target)")
    print(f"(cold, medians over {args.rounds} round(s), {args.threads} threads; images/s of one "
          "epoch at 224 px: loader = the C++ Loader, dataloader = gpufeed.DataLoader)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                       "rounds": args.rounds, "threads": args.threads, "rows": rows,
                       "skipped": skipped}, out, indent=2)


if __name__ == "__main__":
    main()
