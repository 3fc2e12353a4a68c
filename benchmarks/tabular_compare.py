"""Tabular (CTR) datasets: the loader against the references the issue names,
measured in the same run (benchmarks/run.sh, step "tabular").

1. Binary rows at disk bandwidth. MLPerf DLRM's 160-byte records (one
   file, `tofile` of a structured array) and TorchRec's .npy triplets (one
   day, dense float32 (N,13), sparse int32 (N,26), labels int32 (N,1),
   written by numpy's own .npy writer) of --size each. Every run starts from
   a cold page cache (the files' pages dropped with posix_fadvise DONTNEED,
   and reads with O_DIRECT); shuffle="block". Bytes of records delivered per
   second (rows x 160 bytes over the epoch's wall time) of gpufeed.DataLoader
   and of the C++ Loader (gpufeed_tabular_bench), at batch 65,536 and 8,192,
   against fio's sequential 1 MiB qd32 O_DIRECT read of the same files
   (file after file); the order alternates between repeats and the
   loaders' order rotates (each takes the place after fio in turn), medians are
   reported with the ratios (target >= 0.9x). fio with 8 MiB requests, 4
   in flight (about the loader's block reads) is printed beside it: some
   virtual disks serve large requests much faster.
2. Raw Criteo TSV on one thread: a generated file of --tsv-size with
   Criteo-like values (hex categoricals, heavy-tailed counts, about 8% of
   the fields empty). gpufeed.DataLoader(format="criteo_tsv",
   num_threads=1) with dense_log1p and hash_sizes against
   pandas.read_csv(sep="\\t", header=None) followed by the same
   conversions in numpy (hex parse of the 26 categoricals, modulo, fillna
   0, log1p), warm page cache both; rows/s (target >= 5x) and MB/s of text
   per core (bytes over the process's CPU seconds). Checksums of both
   outputs must agree.
3. Time to the first batch on a .npy day of --size and of --small-size
   (cold) against np.load of the three arrays (TorchRec's in-memory
   approach, cold), and the RSS of a fresh process after each of
   --memory-epochs epochs of gpufeed.DataLoader over the large day, against
   the RSS np.load leaves.

    python3 benchmarks/tabular_compare.py --data DATA/tabular --size 1GiB --tsv-size 300MB \
        --bench build/release/benchmarks/gpufeed_tabular_bench --json out.json
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

MIB = 1 << 20
RECORD_BYTES = 160  # int32 label + 13 x 4-byte dense + 26 x int32 sparse, in both layouts
HASH_SIZE = 10_000_000
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from io_compare import parse_size  # noqa: E402


def cpu_name():
    """lscpu's model name (/proc/cpuinfo's when lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    with open("/proc/cpuinfo") as source:
        return next((l.split(":", 1)[1].strip() for l in source if l.startswith("model name")), "")


def drop_file_cache(paths):
    """The files' pages out of the page cache (clean pages: written files are fsync'ed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_share(paths):
    """Share of the files' pages in the page cache (fincore), None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE",
                          *paths], capture_output=True, text=True).stdout.split()
    if len(out) != 2 * len(paths):
        return None
    resident = sum(int(v) for v in out[0::2])
    return resident / max(1, sum(int(v) for v in out[1::2]))


def warm(paths):
    for path in paths:
        with open(path, "rb") as source:
            while source.read(64 * MIB):
                pass


def rss_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- data, written once by numpy ----------------------------------------------------------

def _random_rows(rng, n):
    labels = (rng.random(n) < 0.25).astype(np.int32)
    dense = rng.geometric(0.05, size=(n, 13)).astype(np.int32) - 1
    sparse = rng.integers(0, 2**31 - 1, size=(n, 26), dtype=np.int32)
    return labels, dense, sparse


def make_records(path, size, seed=0):
    """One file of MLPerf DLRM records (RecordSchema's default), `tofile`."""
    rows = -(-size // RECORD_BYTES)
    if os.path.exists(path) and os.path.getsize(path) == rows * RECORD_BYTES:
        return [path]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    print(f"writing {rows:,} records ({rows * RECORD_BYTES / 2**30:.2f} GiB) to {path}", flush=True)
    dtype = np.dtype([("label", "<i4"), ("dense", "<i4", (13,)), ("sparse", "<i4", (26,))])
    rng = np.random.default_rng(seed)
    with open(path + ".tmp", "wb") as out:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            chunk = np.empty(n, dtype)
            chunk["label"], chunk["dense"], chunk["sparse"] = _random_rows(rng, n)
            chunk.tofile(out)
        out.flush()
        os.fsync(out.fileno())
    os.rename(path + ".tmp", path)
    return [path]


def make_npy_day(directory, size, seed=1):
    """TorchRec's day_0_{dense,sparse,labels}.npy, through numpy's .npy writer."""
    rows = -(-size // RECORD_BYTES)
    names = [os.path.join(directory, f"day_0_{part}.npy") for part in ("dense", "sparse", "labels")]
    if all(os.path.exists(n) for n in names):
        if np.load(names[2], mmap_mode="r").shape[0] == rows:
            return names
    os.makedirs(directory, exist_ok=True)
    print(f"writing a .npy day of {rows:,} rows ({rows * RECORD_BYTES / 2**30:.2f} GiB) in "
          f"{directory}", flush=True)
    arrays = [np.lib.format.open_memmap(n + ".tmp", mode="w+", dtype=d, shape=s)
              for n, d, s in zip(names, (np.float32, np.int32, np.int32),
                                 ((rows, 13), (rows, 26), (rows, 1)))]
    rng = np.random.default_rng(seed)
    for start in range(0, rows, 1 << 20):
        n = min(1 << 20, rows - start)
        labels, dense, sparse = _random_rows(rng, n)
        arrays[0][start:start + n] = np.log1p(dense.astype(np.float32))
        arrays[1][start:start + n] = sparse
        arrays[2][start:start + n, 0] = labels
    for array, name in zip(arrays, names):
        array.flush()
        del array
        with open(name + ".tmp", "rb+") as out:
            os.fsync(out.fileno())
        os.rename(name + ".tmp", name)
    return names


# Criteo-like missing shares per column (Kaggle's, scaled to ~8% of all fields).
_INT_MISSING = np.array([.45, 0, .21, .22, .03, .22, .04, 0, .04, .45, .04, .77, .22]) * 0.6
_CAT_MISSING = np.array([0, 0, .03, .03, 0, .12, 0, 0, 0, .03, 0, .03, 0, 0, 0, .03, 0, 0, .44,
                         .44, .03, .76, 0, 0, .44, .03]) * 0.6


def make_tsv(path, size, seed=2):
    """Raw Criteo TSV lines (label, 13 integers, 26 8-digit hex ids) up to `size` bytes."""
    if os.path.exists(path) and abs(os.path.getsize(path) - size) < 4 * MIB:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    print(f"writing {size / 1e6:.0f} MB of Criteo-like TSV to {path}", flush=True)
    rng = np.random.default_rng(seed)
    # Per column a vocabulary drawn with a skew, as Criteo's categoricals are.
    vocab = [[f"{v:08x}" for v in rng.integers(0, 2**32, size=int(s), dtype=np.uint64)]
             for s in rng.integers(100, 20000, size=26)]
    written = 0
    with open(path + ".tmp", "w") as out:
        while written < size:
            n = 50_000
            columns = [list(map(str, (rng.random(n) < 0.25).astype(np.int8).tolist()))]
            for j in range(13):
                values = (rng.pareto(1.2, n) * 3).astype(np.int64) - (j == 1)
                strings = list(map(str, values.tolist()))
                for i in np.flatnonzero(rng.random(n) < _INT_MISSING[j]).tolist():
                    strings[i] = ""
                columns.append(strings)
            for j in range(26):
                words = vocab[j]
                picks = np.minimum(rng.zipf(1.3, n) - 1, len(words) - 1).tolist()
                strings = [words[k] for k in picks]
                for i in np.flatnonzero(rng.random(n) < _CAT_MISSING[j]).tolist():
                    strings[i] = ""
                columns.append(strings)
            text = "\n".join(map("\t".join, zip(*columns))) + "\n"
            out.write(text)
            written += len(text)
        out.flush()
        os.fsync(out.fileno())
    os.rename(path + ".tmp", path)
    return path


# ---- part 1: binary rows vs fio -------------------------------------------------------------

def run_fio(paths, block=MIB, queue_depth=32):
    """fio's sequential O_DIRECT read of the files one after the other (1 MiB
    requests, 32 in flight: the issue's reference): total bytes over the
    summed time. A file smaller than `block` is read in 1 MiB requests."""
    seconds = 0.0
    for path in paths:
        size = min(block, max(MIB, os.path.getsize(path) // MIB * MIB))
        command = ["fio", "--name=tabular", f"--filename={path}", "--rw=read", f"--bs={size}",
                   "--direct=1", "--ioengine=io_uring", f"--iodepth={queue_depth}", "--numjobs=1",
                   f"--size={os.path.getsize(path)}", "--invalidate=1", "--output-format=json"]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
        seconds += job["io_bytes"] / job["bw_bytes"]
    return sum(os.path.getsize(p) for p in paths) / seconds


def loader_options(fmt):
    import gpufeed
    if fmt == "records":
        return dict(format="records", record_schema=gpufeed.RecordSchema())
    return dict(format=fmt)


def run_python(path, fmt, batch, threads, block_bytes=None, window=4, **transform):
    """One epoch of gpufeed.DataLoader: (rows, seconds, cpu seconds, stats, sums)."""
    import gpufeed
    extra = loader_options(fmt)
    if block_bytes:
        extra["format_options"] = gpufeed.TabularOptions(
            record_schema=extra.pop("record_schema", None), block_bytes=block_bytes)
    loader = gpufeed.DataLoader(path, batch_size=batch, shuffle="block", seed=1,
                                shuffle_window_shards=window,
                                direct_io=fmt != "criteo_tsv", num_threads=threads or None,
                                transform=gpufeed.Tabular(**transform), **extra)
    rows, sums = 0, np.zeros(3)
    cpu, start = cpu_seconds(), time.perf_counter()
    for dense, sparse, labels in loader:
        rows += int(labels.shape[0])
        if fmt == "criteo_tsv":  # checked against the pandas reference
            sums += (float(labels.sum()), float(dense.double().sum()), float(sparse.sum()))
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    stats = loader.stats()
    loader.close()
    return rows, seconds, cpu, stats, sums


def run_bench(bench, path, fmt, batch, threads, epochs=1, direct=True, block_bytes=None,
              window=4):
    """gpufeed_tabular_bench (the C++ Loader): its RESULT line's fields."""
    command = [bench, path, "--format", fmt, "--batch", str(batch), "--shuffle", "block",
               "--direct", "1" if direct else "0", "--epochs", str(epochs),
               "--window", str(window)]
    if threads:
        command += ["--threads", str(threads)]
    if block_bytes:
        command += ["--block-bytes", str(block_bytes)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT"))
    head, verdict = line.split(' verdict="', 1)
    fields = {k: float(v) for k, v in (f.split("=", 1) for f in head.split()[1:])}
    fields["verdict"] = verdict.rstrip('"')
    return fields


def binary_step(args, sets):
    """Medians of rows x 160 bytes per second vs fio, per format and batch size."""
    batches = [int(b) for b in args.batch_sizes.split(",")]
    rows_out = []
    for fmt, path, files in sets:
        runs = {"fio": [], "fio8m": []}
        # One pass of fio first, not counted: on the dev VM the first pass
        # over a format's files after other work ran at 60-85% of the
        # later passes (fio's own included: 930 MB/s against 1,105-1,445),
        # so the runs of the first repeat (the DataLoader at the first batch
        # size among them, always) measured the disk's state, not the reader.
        drop_file_cache(files)
        warm_up = run_fio(files)
        print(f"  {fmt} warm-up (not counted): fio {warm_up / 1e6:.0f} MB/s", flush=True)
        for repeat in range(args.repeats):
            # Each repeat rotates the loaders' order, so that no one of them
            # runs right after fio in most repeats: on the dev VM's virtual
            # disk the run after fio's was often the slowest of a repeat,
            # and with a fixed order the DataLoader at the first batch size
            # took that place in two of three repeats (its median then was
            # such a run).
            loaders = [f"{who}:{b}" for b in batches for who in ("python", "cpp")
                       if who == "python" or args.bench]
            shift = repeat % len(loaders)
            order = ["fio", "fio8m"] + loaders[shift:] + loaders[:shift]
            if repeat % 2:
                order.reverse()
            for who in order:
                drop_file_cache(files)
                if who == "fio":
                    runs["fio"].append(run_fio(files))
                    continue
                if who == "fio8m":  # requests of the loader's block size: not the target's
                    runs["fio8m"].append(run_fio(files, 8 * MIB, 4))
                    continue
                kind, batch = who.split(":")
                if kind == "python":
                    rows, seconds, _, stats, _ = run_python(path, fmt, int(batch), args.threads,
                                                            args.block_bytes, args.window)
                    runs.setdefault(who, []).append(rows * RECORD_BYTES / seconds)
                    runs[who + ":stats"] = stats
                else:
                    result = run_bench(args.bench, path, fmt, int(batch), args.threads,
                                       block_bytes=args.block_bytes, window=args.window)
                    runs.setdefault(who, []).append(result["rows_per_s"] * RECORD_BYTES)
                    runs[who + ":stats"] = result
            print(f"  {fmt} repeat {repeat + 1}: " + ", ".join(
                f"{who} {v[-1] / 1e6:.0f}" for who, v in runs.items()
                if not who.endswith(":stats")) + " MB/s", flush=True)
        fio = statistics.median(runs["fio"])
        for batch in batches:
            row = dict(format=fmt, batch=batch, bytes=sum(os.path.getsize(f) for f in files),
                       fio_mb_per_s=round(fio / 1e6, 1),
                       fio_runs_mb_per_s=[round(v / 1e6, 1) for v in runs["fio"]],
                       fio_8m_qd4_mb_per_s=round(statistics.median(runs["fio8m"]) / 1e6, 1))
            for kind in ("python", "cpp"):
                values = runs.get(f"{kind}:{batch}")
                if not values:
                    continue
                row[f"{kind}_mb_per_s"] = round(statistics.median(values) / 1e6, 1)
                row[f"{kind}_runs_mb_per_s"] = [round(v / 1e6, 1) for v in values]
                row[f"{kind}_ratio"] = round(statistics.median(values) / fio, 3)
                stats = runs[f"{kind}:{batch}:stats"]
                row[f"{kind}_shares"] = {k: round(float(stats[k]), 3) for k in
                                         ("read_share", "decode_share", "blocked_share",
                                          "other_share")}
                row[f"{kind}_verdict"] = stats["bottleneck" if kind == "python" else "verdict"]
            rows_out.append(row)
    return rows_out


# ---- part 2: TSV vs pandas ------------------------------------------------------------------

_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def hex_parse(strings):
    """int64 of each hex string (empty -> 0), vectorized: bytes -> nibbles -> Horner."""
    digits = _HEX[strings.astype("S16").view(np.uint8).reshape(len(strings), 16)]
    value = np.zeros(len(strings), np.int64)
    for k in range(16):
        valid = digits[:, k] != 255
        value = np.where(valid, value * 16 + digits[:, k], value)
    return value


def pandas_reference(path):
    """pandas.read_csv, then numpy: (rows, seconds, cpu seconds, read_csv seconds, sums)."""
    import pandas as pd
    cpu, start = cpu_seconds(), time.perf_counter()
    frame = pd.read_csv(path, sep="\t", header=None, dtype={c: str for c in range(14, 40)})
    read_seconds = time.perf_counter() - start
    labels = frame[0].to_numpy(np.float32)
    dense = frame.iloc[:, 1:14].fillna(0).to_numpy(np.float32)
    dense = np.log1p(np.maximum(dense, 0))
    sparse = np.empty((len(frame), 26), np.int64)
    for j in range(26):
        sparse[:, j] = hex_parse(frame[14 + j].fillna("").to_numpy()) % HASH_SIZE
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    sums = np.array([labels.sum(dtype=np.float64), dense.sum(dtype=np.float64),
                     float(sparse.sum())])
    return len(frame), seconds, cpu, read_seconds, sums


def tsv_step(args, path):
    import gpufeed
    size = os.path.getsize(path)
    for stale in (path + ".gpufeed-lines",):  # the line index beside the file: built anew
        if os.path.exists(stale):
            os.remove(stale)
    start = time.perf_counter()
    gpufeed.open_dataset(path, format="criteo_tsv")  # builds the line index: one pass
    index_seconds = time.perf_counter() - start
    warm([path])
    runs = {"gpufeed": [], "pandas": []}
    for repeat in range(args.repeats):
        for who in (("gpufeed", "pandas") if repeat % 2 == 0 else ("pandas", "gpufeed")):
            if who == "gpufeed":
                rows, seconds, cpu, stats, sums = run_python(
                    path, "criteo_tsv", args.tsv_batch, 1, dense_log1p=True, hash_sizes=HASH_SIZE)
                runs[who].append((rows, seconds, cpu, sums, stats["bottleneck"]))
            else:
                rows, seconds, cpu, read_seconds, sums = pandas_reference(path)
                runs[who].append((rows, seconds, cpu, sums, read_seconds))
        print(f"  tsv repeat {repeat + 1}: " + ", ".join(
            f"{who} {v[-1][0] / v[-1][1]:,.0f} rows/s ({v[-1][2] / v[-1][1]:.2f} cores)"
            for who, v in runs.items()), flush=True)
    result = dict(bytes=size, rows=runs["pandas"][0][0], index_seconds=round(index_seconds, 3),
                  batch=args.tsv_batch, hash_size=HASH_SIZE)
    for who, values in runs.items():
        rows_per_s = statistics.median(r / s for r, s, *_ in values)
        rows_per_cpu = statistics.median(r / c for r, _, c, *_ in values)
        result[f"{who}_rows_per_s"] = round(rows_per_s)
        result[f"{who}_rows_per_cpu_s"] = round(rows_per_cpu)
        result[f"{who}_mb_per_s"] = round(rows_per_s * size / result["rows"] / 1e6, 1)
        result[f"{who}_mb_per_core_s"] = round(rows_per_cpu * size / result["rows"] / 1e6, 1)
        result[f"{who}_cores"] = round(statistics.median(c / s for _, s, c, *_ in values), 2)
    result["pandas_read_csv_share"] = round(statistics.median(
        v[4] / v[1] for v in runs["pandas"]), 3)
    result["gpufeed_verdict"] = runs["gpufeed"][-1][4]
    result["ratio"] = round(result["gpufeed_rows_per_s"] / result["pandas_rows_per_s"], 2)
    result["ratio_per_core"] = round(result["gpufeed_rows_per_cpu_s"] /
                                     result["pandas_rows_per_cpu_s"], 2)
    ours, theirs = runs["gpufeed"][-1][3], runs["pandas"][-1][3]
    result["checksums_match"] = bool(runs["gpufeed"][-1][0] == result["rows"] and
                                     np.allclose(ours, theirs, rtol=1e-5))
    if args.bench:
        cpp = run_bench(args.bench, path, "criteo_tsv", args.tsv_batch, 1, direct=False)
        result["cpp_rows_per_s"] = round(cpp["rows_per_s"])
    return result


# ---- part 3: time to the first batch, RSS over epochs ---------------------------------------

def first_batch_seconds(path, files):
    """Cold: (seconds to the first batch, of which constructing the DataLoader)."""
    import gpufeed
    drop_file_cache(files)
    start = time.perf_counter()
    loader = gpufeed.DataLoader(path, batch_size=65536, shuffle="block", seed=1, direct_io=True,
                                transform=gpufeed.Tabular(), format="criteo_npy")
    opened = time.perf_counter() - start
    iterator = iter(loader)
    next(iterator)
    seconds = time.perf_counter() - start
    del iterator
    loader.close()
    return seconds, opened


def np_load_seconds(files):
    drop_file_cache(files)
    start = time.perf_counter()
    arrays = [np.load(f) for f in files]
    seconds = time.perf_counter() - start
    del arrays
    return seconds


def child_rss(path, epochs, batch):
    """In a fresh process: RSS with torch and gpufeed imported, after each
    epoch of gpufeed.DataLoader, then after np.load of the same arrays."""
    import torch  # noqa: F401  (the DataLoader's batches are torch tensors: counted in the base)
    import gpufeed
    report = {"rss_start_mb": round(rss_mb(), 1), "rss_epochs_mb": []}
    loader = gpufeed.DataLoader(path, batch_size=batch, shuffle="block", seed=1, direct_io=True,
                                transform=gpufeed.Tabular(), format="criteo_npy")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for _ in loader:
            pass
        report["rss_epochs_mb"].append(round(rss_mb(), 1))
    loader.close()
    del loader
    files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".npy"))
    arrays = [np.load(f) for f in files]
    report["rss_np_load_mb"] = round(rss_mb(), 1)
    del arrays
    print(json.dumps(report))


def startup_step(args, days):
    """Cold time to the first batch vs np.load per day; RSS per epoch per day."""
    import torch  # noqa: F401  (imported by the first DataLoader otherwise: not the loader's time)
    import gpufeed
    # The process's first DataLoader loads what every later one shares: not a day's cost.
    gpufeed.DataLoader(days[-1][0], batch_size=65536, shuffle="block", format="criteo_npy",
                       transform=gpufeed.Tabular()).close()
    result = {"days": []}
    for path, files in days:
        ours = [first_batch_seconds(path, files) for _ in range(args.repeats)]
        theirs = [np_load_seconds(files) for _ in range(args.repeats)]
        day = dict(bytes=sum(os.path.getsize(f) for f in files),
                   gpufeed_first_batch_s=round(statistics.median(s for s, _ in ours), 4),
                   gpufeed_open_s=round(statistics.median(o for _, o in ours), 4),
                   np_load_s=round(statistics.median(theirs), 4))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-rss", path,
                              "--memory-epochs", str(args.memory_epochs)],
                             capture_output=True, text=True, check=True).stdout
        day.update(json.loads(out.strip().splitlines()[-1]))
        day["rows"] = day["bytes"] // RECORD_BYTES
        result["days"].append(day)
    large, small = result["days"][0], result["days"][-1]
    if large["rows"] > small["rows"]:
        # What grows with the day: per row, between the two days.
        extra_rows = large["rows"] - small["rows"]
        result["open_ns_per_row"] = round(
            (large["gpufeed_open_s"] - small["gpufeed_open_s"]) / extra_rows * 1e9, 1)
        result["rss_bytes_per_row"] = round(
            (large["rss_epochs_mb"][-1] - small["rss_epochs_mb"][-1]) * MIB / extra_rows, 1)
    return result


# ---- main -----------------------------------------------------------------------------------

def print_summary(result):
    print(f"tabular, {result['cpu']}, {result['cores']} cores; medians of {result['repeats']}; "
          f"threads {result['threads'] or 'all'}, block_bytes "
          f"{result['block_bytes'] or 'default'}, window {result['window']}")
    for row in result.get("binary", []):
        print(f"  {row['format']:<10} {row['bytes'] / 2**30:.2f} GiB, cold, O_DIRECT, block "
              f"shuffle, batch {row['batch']:>6}: fio seq 1 MiB qd32 {row['fio_mb_per_s']:.0f} MB/s "
              f"(8 MiB qd4: {row['fio_8m_qd4_mb_per_s']:.0f} MB/s)")
        for kind, label in (("python", "gpufeed.DataLoader"), ("cpp", "C++ Loader")):
            if f"{kind}_ratio" in row:
                ratio = row[f"{kind}_ratio"]
                shares = row[f"{kind}_shares"]
                print(f"    {label:<19} {row[f'{kind}_mb_per_s']:6.0f} MB/s of records: "
                      f"{ratio:.2f}x fio (target >= 0.9x: {'met' if ratio >= 0.9 else 'NOT met'}); "
                      f"workers: read {shares['read_share']:.2f}, decode "
                      f"{shares['decode_share']:.2f}, blocked {shares['blocked_share']:.2f}; "
                      f"verdict {row[f'{kind}_verdict']}")
    tsv = result.get("tsv")
    if tsv:
        print(f"  criteo_tsv {tsv['bytes'] / 1e6:.0f} MB, {tsv['rows']:,} rows, warm, one thread "
              f"each (line index: one pass in {tsv['index_seconds']:.2f} s); checksums "
              f"{'match' if tsv['checksums_match'] else 'DIFFER'}")
        for who, label in (("gpufeed", "gpufeed.DataLoader"), ("pandas", "pandas + numpy")):
            print(f"    {label:<19} {tsv[f'{who}_rows_per_s']:>10,} rows/s, "
                  f"{tsv[f'{who}_mb_per_s']:6.1f} MB/s of text; per CPU second "
                  f"{tsv[f'{who}_rows_per_cpu_s']:,} rows, {tsv[f'{who}_mb_per_core_s']:.1f} MB/s "
                  f"per core ({tsv[f'{who}_cores']:.2f} cores busy)")
        print(f"    ratio {tsv['ratio']:.2f}x (target >= 5x: "
              f"{'met' if tsv['ratio'] >= 5 else 'NOT met'}), per core {tsv['ratio_per_core']:.2f}x;"
              f" read_csv is {tsv['pandas_read_csv_share']:.0%} of pandas' time"
              + (f"; C++ Loader 1 thread {tsv['cpp_rows_per_s']:,} rows/s"
                 if "cpp_rows_per_s" in tsv else ""))
    startup = result.get("startup")
    if startup:
        for day in startup["days"]:
            print(f"  .npy day {day['bytes'] / 2**30:.2f} GiB, cold: first batch "
                  f"{day['gpufeed_first_batch_s']:.3f} s (gpufeed.DataLoader, batch 65536; "
                  f"constructing it {day['gpufeed_open_s']:.3f} s) vs "
                  f"np.load of the three arrays {day['np_load_s']:.2f} s")
            print(f"    RSS: {day['rss_start_mb']:.0f} MB with torch and gpufeed imported; "
                  f"gpufeed.DataLoader " + ", ".join(f"{v:.0f}" for v in day["rss_epochs_mb"])
                  + f" MB after epochs 1..{len(day['rss_epochs_mb'])}; np.load of the day: "
                  f"{day['rss_np_load_mb']:.0f} MB")
        if "rss_bytes_per_row" in startup:
            print(f"    between the days, per row: constructing the DataLoader "
                  f"{startup['open_ns_per_row']:.0f} ns, RSS {startup['rss_bytes_per_row']:.0f} "
                  "bytes (what grows with the day)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="where the files are written (kept)")
    parser.add_argument("--size", default="1GiB", help="records file and large .npy day")
    parser.add_argument("--small-size", default="256MiB", help="the small .npy day (part 3)")
    parser.add_argument("--tsv-size", default="300MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", default="65536,8192")
    parser.add_argument("--tsv-batch", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=0, help="0: the cores")
    parser.add_argument("--bench", default=None, help="gpufeed_tabular_bench (C++ loader)")
    parser.add_argument("--memory-epochs", type=int, default=3)
    parser.add_argument("--block-bytes", type=int, default=None,
                        help="part 1: TabularOptions.block_bytes (default: the loader's)")
    parser.add_argument("--window", type=int, default=4,
                        help="part 1: shuffle_window_shards (blocks shuffled together)")
    parser.add_argument("--parts", default="binary,tsv,startup")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child-rss", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        child_rss(args.child_rss, args.memory_epochs, 65536)
        return 0
    if not args.data:
        parser.error("--data is required")
    parts = args.parts.split(",")
    size = parse_size(args.size)
    result = dict(cpu=cpu_name(), cores=len(os.sched_getaffinity(0)), repeats=args.repeats,
                  cache="cold (posix_fadvise DONTNEED, O_DIRECT)", threads=args.threads,
                  block_bytes=args.block_bytes, window=args.window)
    print(f"CPU: {result['cpu']} ({result['cores']} cores)", flush=True)
    records = make_records(os.path.join(args.data, f"records-{args.size}", "part-0.bin"), size)
    npy_dir = os.path.join(args.data, f"npy-{args.size}")
    npy = make_npy_day(npy_dir, size)
    if "binary" in parts:
        if shutil.which("fio") is None:
            print("fio is not installed (apt-get install fio): skipping the binary comparison")
        else:
            drop_file_cache(records)
            share = resident_share(records)
            if share is not None and share > 0.01:
                print(f"note: {share:.0%} of the records file stays in the page cache after "
                      "posix_fadvise(DONTNEED); runs are partly warm")
            result["binary"] = binary_step(args, [("records", records[0], records),
                                                  ("criteo_npy", npy_dir, npy)])
    if "tsv" in parts:
        try:
            import pandas  # noqa: F401
            import gpufeed
            if "criteo_tsv" not in gpufeed.FORMATS:
                raise ImportError("this gpufeed has no criteo_tsv format")
        except ImportError as error:
            print(f"TSV comparison skipped: {error} (pandas: apt-get install python3-pandas)")
        else:
            tsv = make_tsv(os.path.join(args.data, f"criteo-{args.tsv_size}.tsv"),
                           parse_size(args.tsv_size.lower().replace("mb", "000000")))
            result["tsv"] = tsv_step(args, tsv)
    if "startup" in parts:
        small_dir = os.path.join(args.data, f"npy-{args.small_size}")
        small = make_npy_day(small_dir, parse_size(args.small_size), seed=3)
        result["startup"] = startup_step(args, [(npy_dir, npy), (small_dir, small)])
    print()
    print_summary(result)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
