#!/usr/bin/python3
"""The transform's cost per image against a plain full decode, on each dataset.

    transform_compare.py --bench build/release/benchmarks/gpufeed_transform_bench \\
        --dataset photos=benchmarks/data/photo-recordio-2000 \\
        --dataset demo=benchmarks/data/demo-recordio-2000 [--rounds 5] [--json out.json]

Runs gpufeed_transform_bench (one thread; the full decode and the
transforms interleaved in rounds; medians of thread CPU time) on each
dataset, prints µs per image with the breakdown (decode, resample, write)
and the rate relative to the plain libjpeg-turbo full decode of the same
files, next to the targets of the decode-speed issue: train transform uint8
at least 1.1x the full-decode rate, float32 at least 1.0x.
"""

import argparse
import json
import os
import re
import subprocess
import sys

TARGETS = {"train_uint8": 1.1, "train_float32": 1.0}


def run(bench, dataset, rounds):
    output = subprocess.run([bench, dataset, "--rounds", str(rounds)], capture_output=True,
                            text=True, check=True).stdout
    cases = {}
    for line in output.splitlines():
        if line.startswith("RESULT"):
            values = dict(re.findall(r"(\w+)=(\S+)", line))
            cases[values["case"]] = values
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--dataset", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sets = []
    for spec in args.dataset:
        name, _, path = spec.partition("=")
        cases = run(args.bench, path, args.rounds)
        rows = []
        for case, values in cases.items():
            rows.append({"case": case, "us_per_image": float(values["us_per_image"]),
                         "decode_us": float(values["decode_us"]),
                         "resample_us": float(values["resample_us"]),
                         "write_us": float(values["write_us"]),
                         "vs_full_decode": float(values["vs_full_decode"])})
        first = next(iter(cases.values()))
        sets.append({"dataset": name, "path": path, "images": int(first["images"]),
                     "rounds": int(first["rounds"]), "path_used": first["path"], "rows": rows})
    print(f"{'set':<7} {'case':<14} {'us/image':>9} {'decode':>7} {'resample':>9} {'write':>6} "
          f"{'vs full decode':>15}")
    for entry in sets:
        for row in entry["rows"]:
            print(f"{entry['dataset']:<7} {row['case']:<14} {row['us_per_image']:>9.1f} "
                  f"{row['decode_us']:>7.1f} {row['resample_us']:>9.1f} {row['write_us']:>6.1f} "
                  f"{row['vs_full_decode']:>14.2f}x")
    print(f"(one thread, resample path {sets[0]['path_used']}, medians over {sets[0]['rounds']} "
          f"rounds of thread CPU time; 'decode' includes the header and crop parameters)")
    print("targets:")
    for entry in sets:
        by_case = {row["case"]: row for row in entry["rows"]}
        for case, target in TARGETS.items():
            ratio = by_case[case]["vs_full_decode"]
            print(f"  {entry['dataset']}: {case} >= {target}x the full-decode rate: {ratio:.2f}x "
                  f"-> {'met' if ratio >= target else 'MISSED'}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"sets": sets, "targets": TARGETS}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
