#!/usr/bin/python3
"""Step 4 of benchmarks/run.sh: gathers the per-process JSON files of
gpufeed_cache_bench --epoch N --json (named FORMAT-{cache,none}-EPOCH.json,
or FORMAT-{cache,none}-1-rROUND.json for rounds of epoch 1 run alternately
with and without the cache, and physical.json of cache_physical.py) into one
cache.json and prints the table: per
format and epoch, each epoch in a new process, records/s and source bytes /
dataset bytes with the cache and without it. With rounds, the table shows
the median round and the epoch-1 ratio is the median of the rounds' ratios
(each taken within its round).

    /usr/bin/python3 benchmarks/cache_table.py RUNS_DIR OUT.json

cache.json keeps the shape benchmarks/report.py reads: "runs", each with a
"config" and "epochs" (epoch, records_per_s, source_mb, ...), and a "chart".
"""

import json
import os
import statistics
import sys

FORMATS = ("recordio", "lmdb", "caffe_lmdb")


def main(argv):
    runs_dir, out = argv[1], argv[2]
    loaded = {}
    rounds = {}  # (fmt, cache) -> epoch-1 runs, by round
    header = None

    def load(path):
        with open(path) as file:
            return json.load(file)

    for fmt in FORMATS:
        for cache in ("cache", "none"):
            for epoch in (1, 2):
                path = os.path.join(runs_dir, f"{fmt}-{cache}-{epoch}.json")
                if os.path.exists(path):
                    loaded[fmt, cache, epoch] = load(path)
            round_number = 1
            while os.path.exists(os.path.join(runs_dir, f"{fmt}-{cache}-1-r{round_number}.json")):
                rounds.setdefault((fmt, cache), []).append(
                    load(os.path.join(runs_dir, f"{fmt}-{cache}-1-r{round_number}.json")))
                round_number += 1
            runs_of = rounds.get((fmt, cache))
            if runs_of:
                # The median round (by records/s) stands for epoch 1.
                ordered = sorted(runs_of, key=lambda run: run["epoch"]["records_per_s"])
                loaded[fmt, cache, 1] = ordered[(len(ordered) - 1) // 2]
    for run in loaded.values():
        header = header or run
    if not loaded:
        print("no cache benchmark results", file=sys.stderr)
        return 1

    runs = []
    chart_labels, chart_values = [], []
    for fmt in FORMATS:
        for cache in ("cache", "none"):
            epochs = []
            for epoch in (1, 2):
                run = loaded.get((fmt, cache, epoch))
                if not run:
                    continue
                entry = dict(run["epoch"], process="new", open_seconds=run["open_seconds"],
                             close_seconds=run["close_seconds"])
                epochs.append(entry)
                chart_labels.append(f"{fmt}\n{'cache' if cache == 'cache' else 'none'} "
                                    f"e{epoch}")
                chart_values.append(entry["records_per_s"])
            if epochs:
                first = loaded.get((fmt, cache, 1)) or loaded.get((fmt, cache, 2))
                runs.append({"config": f"{fmt}, {first['config']}, new process per epoch",
                             "format": fmt, "cache": cache == "cache",
                             "dataset_bytes": first["dataset_bytes"], "epochs": epochs})
    # Issue 33's targets for epoch 1: the cached rate >= 0.9x the uncached one,
    # and the source read once (<= 1.05x the dataset, open to close).
    target_lines = []
    for fmt in FORMATS:
        cached, uncached = loaded.get((fmt, "cache", 1)), loaded.get((fmt, "none", 1))
        if cached and uncached:
            pairs = list(zip(rounds.get((fmt, "cache"), [cached]),
                             rounds.get((fmt, "none"), [uncached])))
            ratios = [c["epoch"]["records_per_s"] / n["epoch"]["records_per_s"] for c, n in pairs]
            rate = statistics.median(ratios)
            source = max(c["epoch"]["source_ratio"] for c, _ in pairs)
            spread = (f" (median of {len(ratios)} rounds: "
                      + ", ".join(f"{ratio:.2f}x" for ratio in ratios) + ")"
                      if len(ratios) > 1 else "")
            target_lines.append(
                f"{fmt:<11} epoch 1 with the cache: {rate:.2f}x the uncached rate{spread} "
                f"(target >= 0.9x), source {source:.2f}x the dataset at most (target <= 1.05x)")
            for run in runs:
                if run["format"] == fmt and run["cache"]:
                    run["epoch1_ratio"] = rate
                    run["epoch1_ratios"] = ratios
    physical = None  # benchmarks/cache_physical.py: epoch 1 over a throttled loop device
    if os.path.exists(os.path.join(runs_dir, "physical.json")):
        physical = load(os.path.join(runs_dir, "physical.json"))
    result = {"latency_ms": header["latency_ms"], "source_mbps": header["source_mbps"],
              "threads": header["threads"], "process_per_epoch": True, "runs": runs,
              "physical": physical,
              "chart": {"title": "node cache, simulated busy source, new process per epoch",
                        "unit": "records/s", "labels": chart_labels, "values": chart_values}}
    with open(out, "w") as file:
        json.dump(result, file, indent=2)

    print()
    print(f"{'format':<11} {'epoch':>5} {'process':>8} {'records/s':>10} {'source/dataset':>15}"
          f"   {'no cache: records/s':>19} {'source/dataset':>15}")

    def cells(run):
        if not run:
            return "-", "-"
        epoch = run["epoch"]
        return f"{epoch['records_per_s']:,.0f}", f"{epoch['source_ratio']:.2f}x"

    for fmt in FORMATS:
        for epoch in (1, 2):
            if (fmt, "cache", epoch) not in loaded and (fmt, "none", epoch) not in loaded:
                continue
            cached, uncached = cells(loaded.get((fmt, "cache", epoch))), \
                cells(loaded.get((fmt, "none", epoch)))
            print(f"{fmt:<11} {epoch:>5} {'new':>8} {cached[0]:>10} {cached[1]:>15}"
                  f"   {uncached[0]:>19} {uncached[1]:>15}")
    for line in target_lines:
        print(line)
    sizes = {fmt: loaded[key]["dataset_bytes"] for key in loaded for fmt in [key[0]]}
    print("dataset bytes (on disk, what the cache copies): " +
          ", ".join(f"{fmt} {size / 1e6:.1f} MB" for fmt, size in sizes.items()))
    print("source bytes count open to close of each process (cache fills included); "
          f"JSON in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
