#!/usr/bin/python3
"""End-to-end images/s of the C++ Loader against a decode-only ceiling.

    loader_compare.py --bench build/release/benchmarks/gpufeed_loader_bench \
        --dataset benchmarks/data/demo-recordio-2000 [--epochs 3] [--json out.json]

Runs, in one go on the same records (warm page cache): libjpeg-turbo
full-size decode on one thread (the ceiling, times the thread count), then
the Loader with RandomResizedCrop 224 + flip for 1 and 2 decode threads,
uint8 NHWC and float32 NCHW normalized output. Prints images/s, the ratios,
peak RSS and RSS per epoch, and the targets of the pipeline issue next to
the measured values.
"""

import argparse
import json
import os
import re
import subprocess
import sys


def run(command):
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    result = next(line for line in output.splitlines() if line.startswith("RESULT"))
    values = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', result))
    epochs = [float(m) for m in re.findall(r"RSS ([0-9.]+) MiB", output)]
    return {k: v.strip('"') for k, v in values.items()}, epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    try:
        from tqdm import tqdm
        bar = tqdm(total=5, desc="loader runs", unit="run", leave=False) \
            if sys.stderr.isatty() else None
    except ImportError:
        bar = None
    ceiling, _ = run([args.bench, args.dataset, "--decode-only"])
    ceiling_one = float(ceiling["images_per_s"])
    if bar is not None:
        bar.update()
    rows = []
    for dtype in ("uint8", "float32"):
        for threads in (1, 2):
            if bar is not None:
                bar.update()
            values, rss = run([args.bench, args.dataset, "--threads", str(threads), "--dtype", dtype,
                               "--epochs", str(args.epochs), "--batch", str(args.batch),
                               "--prefetch", str(args.prefetch)])
            rows.append(dict(dtype=dtype, threads=threads,
                             images_per_s=float(values["images_per_s"]),
                             peak_rss_mb=float(values["peak_rss_mb"]),
                             batch_mb=float(values["batch_mb"]), rss_per_epoch_mb=rss,
                             verdict=values["verdict"],
                             ceiling=ceiling_one * threads))
    if bar is not None:
        bar.close()
    print(f"decode-only ceiling (gpufeed's full-size decode, as the loader decodes: libjpeg-turbo, "
          f"gpufeed's entropy decoder for baseline JPEGs; 1 thread): {ceiling_one:.0f} images/s")
    print(f"{'output':<16} {'threads':>7} {'images/s':>9} {'of ceiling':>10} {'peak RSS MiB':>12} "
          f"{'RSS per epoch (MiB)':<26}")
    for row in rows:
        epochs = " ".join(f"{r:.0f}" for r in row["rss_per_epoch_mb"])
        output = "uint8 NHWC" if row["dtype"] == "uint8" else "float32 NCHW norm"
        print(f"{output:<16} {row['threads']:>7} {row['images_per_s']:>9.0f} "
              f"{row['images_per_s'] / row['ceiling']:>10.0%} {row['peak_rss_mb']:>12.1f} {epochs:<26}")
    by = {(r["dtype"], r["threads"]): r for r in rows}
    print("\ntargets:")
    for threads in (1, 2):
        ratio = by[("uint8", threads)]["images_per_s"] / by[("uint8", threads)]["ceiling"]
        print(f"  uint8 output >= 90% of the decode-only ceiling ({threads} thread(s)): "
              f"{ratio:.0%} -> {'met' if ratio >= 0.9 else 'MISSED'}")
    for dtype in ("uint8", "float32"):
        scaling = by[(dtype, 2)]["images_per_s"] / by[(dtype, 1)]["images_per_s"]
        print(f"  1 -> 2 threads >= 1.8x ({dtype}): {scaling:.2f}x -> "
              f"{'met' if scaling >= 1.8 else 'MISSED'}")
    for row in rows:
        budget = 200 + args.prefetch * row["batch_mb"]
        epochs = row["rss_per_epoch_mb"]
        flat = max(epochs) - min(epochs) <= max(5.0, 0.05 * max(epochs)) if epochs else True
        print(f"  peak RSS <= 200 MiB + prefetch x batch ({budget:.0f} MiB), flat across epochs "
              f"({row['dtype']}, {row['threads']} thread(s)): {row['peak_rss_mb']:.0f} MiB, "
              f"{'flat' if flat else 'GROWING'} -> "
              f"{'met' if row['peak_rss_mb'] <= budget and flat else 'MISSED'}")
    print(f"\nverdict the loader printed (float32, 2 threads): {by[('float32', 2)]['verdict']}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"ceiling_one_thread": ceiling_one, "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
