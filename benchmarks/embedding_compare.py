#!/usr/bin/python3
"""Embedding tables (gpufeed.EmbeddingTable) behind a slow filesystem made
physically, against the references the issue names, in the same run
(benchmarks/run.sh, step "embedding").

The table: --rows x 64 float32 (2,000,000: 512 MB; 500,000 with --quick),
written by np.save onto an ext4 filesystem on a loop device (direct I/O
backing: the host's page cache does not serve it) whose reads this process
(and the children it starts) may make at --iops per second (500: about 2 ms
a request, a busy Lustre OST), by the kernel's cgroup throttle
(benchmarks/throttled_disk.py; --mbps adds a bandwidth limit, none by
default). The RAM tier's budget: --cache-bytes (128 MiB; 32 MiB with
--quick, the same share of the table). Ids: bounded Zipf(1.05) over the
rows (inverse CDF of 1/k^1.05, ranks mapped to rows by a fixed random
permutation), 4,096 a lookup. gpufeed reads with O_DIRECT, queue depth 64.

1. Training's access pattern, throttled: 20 lookups on a cold table (page
   cache dropped, RAM tier empty: first touch), then the same 20 replayed
   for --warm-epochs epochs. p50 cold / p50 warm (target >= 20x).
2. Fresh draws every lookup: --fresh-warmup lookups with the throttle
   lifted (they only fill the RAM tier), then --fresh-lookups throttled: the
   RAM tier's hit rate against an ideal static cache of the most frequent
   rows in the same number of rows (the top capacity_rows probabilities of
   the distribution), target >= 0.9x; p50/p99 beside it.
3. Warm lookups' rows/s against torch.index_select on the whole table as a
   tensor in RAM, the same ids, the same threads (the machine's cores, as
   Python threads, each calling lookup / index_select); torch's better of
   set_num_threads(1) and set_num_threads(threads). Target >= 0.5x.
4. Cold misses on the unthrottled disk: lookups of distinct random rows
   with no RAM tier (cache_bytes 0), O_DIRECT, against fio's io_uring 4 KiB
   O_DIRECT random read at the table's queue depth on the same file: rows/s
   over IOPS, target >= 0.9x.
   3 and 4 alternate the two sides over --repeats rounds; the ratio is the
   median of the rounds' ratios.
5. numpy's memmap + fancy indexing (np.load(mmap_mode="r")[ids]) on the
   same file and lookups as 1: p50/p99 cold and warm beside gpufeed's.
6. RSS of a fresh process over --rss-lookups lookups of fresh draws
   (unthrottled): the growth over the RSS before the table was opened,
   against cache_bytes x 1.1 + the fixed overhead of a table without a RAM
   tier (read buffers and one call's output, measured first in the same
   process), and flat (the last quarter's peak at most 1% of cache_bytes
   above the second quarter's).

Needs root (loop device, cgroup, drop_caches); without it prints why and
exits 0. fio is optional (part 4 is skipped without it).

    sudo build/release/venv/bin/python benchmarks/embedding_compare.py \
        --work /var/tmp/gpufeed-embedding [--quick] --json out.json
"""

import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

MIB = 1 << 20
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from io_compare import parse_size  # noqa: E402
from tabular_compare import cpu_name  # noqa: E402
from throttled_disk import LoopDisk, Throttle, disk_counters, drop_caches  # noqa: E402

CGROUP_NAME = "gpufeed-embedding"


def log(text):
    print(text, flush=True)


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def percentile_us(seconds, q):
    return round(float(np.percentile(np.asarray(seconds) * 1e6, q)), 1)


class Zipf:
    """Bounded Zipf(s) ids over [0, rows): a rank by inverse CDF of 1/k^s,
    mapped to a row by a fixed random permutation (hot rows scattered over
    the file, as hashed CTR ids are)."""

    def __init__(self, rows, s=1.05, seed=0):
        weights = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** s
        self.cdf = np.cumsum(weights)
        self.cdf /= self.cdf[-1]
        self.rows = rows
        self.permutation = np.random.default_rng(seed).permutation(rows).astype(np.int64)

    def draw(self, rng, count):
        ranks = np.searchsorted(self.cdf, rng.random(count), side="right")
        return self.permutation[np.minimum(ranks, self.rows - 1)]

    def top_share(self, count):
        """The share of draws that hit the `count` most frequent rows: the
        hit rate of an ideal static cache of `count` rows."""
        return float(self.cdf[min(count, self.rows) - 1]) if count > 0 else 0.0


def make_table(path, rows, dim, seed=3):
    """rows x dim float32 (standard normal), np.save'd and fsync'ed."""
    table = np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)
    np.save(path, table)
    with open(path, "rb+") as out:
        os.fsync(out.fileno())
    del table


def open_table(path, cache_bytes, queue_depth, **extra):
    import gpufeed
    return gpufeed.EmbeddingTable(path, cache_bytes=cache_bytes, direct_io=True,
                                  queue_depth=queue_depth, **extra)


def timed_lookups(lookup, batches):
    """Seconds of each call, in order, and the last call's result."""
    seconds, out = [], None
    for ids in batches:
        start = time.perf_counter()
        out = lookup(ids)
        seconds.append(time.perf_counter() - start)
    return seconds, out


# ---- parts 1 and 5: cold and warm, gpufeed and memmap ------------------------------------------

def cold_warm(args, path, zipf, throttle, disk):
    """20 throttled lookups cold (first touch), then replayed; gpufeed and
    memmap. Returns (result, the warm gpufeed table, the lookups)."""
    rng = np.random.default_rng(11)
    batches = [zipf.draw(rng, args.batch) for _ in range(args.cold_lookups)]
    distinct = len(np.unique(np.concatenate(batches)))
    throttle.limit(bytes_per_second=args.mbps * 1e6, iops=args.iops)
    drop_caches()
    table = open_table(path, args.cache_bytes, args.queue_depth)
    before = disk_counters(disk)
    cold, _ = timed_lookups(table.lookup, batches)
    cold_stats = table.stats()
    after = disk_counters(disk)
    device_reads, device_bytes = after[1] - before[1], after[0] - before[0]
    log(f"  gpufeed cold: {len(batches)} lookups ({distinct:,} distinct rows) in "
        f"{sum(cold):.1f} s, p50 {percentile_us(cold, 50):,.0f} us; "
        f"{cold_stats['source_reads']:,} source reads ({device_reads:,} device reads, "
        f"{device_bytes / 1e6:.0f} MB)")
    table.reset_stats()
    warm = []
    for _ in range(args.warm_epochs):
        seconds, last = timed_lookups(table.lookup, batches)
        warm += seconds
    warm_stats = table.stats()
    log(f"  gpufeed warm: {args.warm_epochs} epochs, p50 {percentile_us(warm, 50):,.1f} us, "
        f"hit rate {warm_stats['hit_rate']:.4f}")

    drop_caches()
    memmap = np.load(path, mmap_mode="r")
    before = disk_counters(disk)
    memmap_cold, _ = timed_lookups(lambda ids: memmap[ids], batches)
    after = disk_counters(disk)
    memmap_reads, memmap_bytes = after[1] - before[1], after[0] - before[0]
    memmap_warm = []
    for _ in range(args.warm_epochs):
        seconds, reference = timed_lookups(lambda ids: memmap[ids], batches)
        memmap_warm += seconds
    log(f"  memmap cold: {sum(memmap_cold):.1f} s, p50 {percentile_us(memmap_cold, 50):,.0f} us "
        f"({memmap_reads:,} device reads, {memmap_bytes / 1e6:.0f} MB: page faults read ahead); "
        f"warm p50 "
        f"{percentile_us(memmap_warm, 50):,.1f} us")
    exact = bool(np.array_equal(last.numpy().view(np.uint32), reference.view(np.uint32)))
    result = dict(lookups=len(batches), warm_epochs=args.warm_epochs, distinct_rows=distinct,
                  exact=exact, cold_source_reads=cold_stats["source_reads"],
                  cold_device_reads=device_reads, cold_device_bytes=device_bytes,
                  memmap_cold_device_reads=memmap_reads, memmap_cold_device_bytes=memmap_bytes,
                  warm_hit_rate=round(warm_stats["hit_rate"], 4),
                  stats_cold_p50_us=round(cold_stats["p50_us"], 1),
                  stats_warm_p50_us=round(warm_stats["p50_us"], 1))
    for who, runs in (("gpufeed_cold", cold), ("gpufeed_warm", warm),
                      ("memmap_cold", memmap_cold), ("memmap_warm", memmap_warm)):
        result[f"{who}_p50_us"] = percentile_us(runs, 50)
        result[f"{who}_p99_us"] = percentile_us(runs, 99)
    result["ratio"] = round(result["gpufeed_cold_p50_us"] / result["gpufeed_warm_p50_us"], 1)
    return result, table, batches


# ---- part 3: warm rows/s vs torch.index_select -------------------------------------------------

def rows_per_second(call, batches, threads, seconds):
    """Rows/s of `call` over the batches from `threads` Python threads at
    once, each running until `seconds` have passed (after one warm-up pass)."""
    for ids in batches:
        call(ids)
    counts = [0] * threads
    start = time.perf_counter()
    deadline = start + seconds

    def worker(index):
        position = index
        while time.perf_counter() < deadline:
            counts[index] += len(call(batches[position % len(batches)]))
            position += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


def bandwidth(args, path, table, batches, throttle):
    """gpufeed's warm rows/s against index_select's, alternating (--repeats
    rounds, the order reversed every other round); the ratio is the median
    of the rounds' ratios (each round's runs are seconds apart: a machine
    whose speed drifts moves both). torch's setting: the better median of
    set_num_threads(1) and set_num_threads(threads)."""
    import torch
    throttle.limit(0)  # loading the in-RAM reference is not what is measured
    tensor = torch.from_numpy(np.load(path))
    id_tensors = [torch.from_numpy(ids) for ids in batches]
    saved = torch.get_num_threads()
    settings = sorted({1, args.threads})
    runs = {who: [] for who in ["gpufeed"] + settings}
    for repeat in range(args.repeats):
        for who in (list(runs) if repeat % 2 == 0 else list(runs)[::-1]):
            if who == "gpufeed":
                runs[who].append(rows_per_second(table.lookup, batches, args.threads,
                                                 args.seconds))
                continue
            torch.set_num_threads(who)
            runs[who].append(rows_per_second(lambda ids: torch.index_select(tensor, 0, ids),
                                             id_tensors, args.threads, args.seconds))
    torch.set_num_threads(saved)
    best = max(settings, key=lambda who: np.median(runs[who]))
    ratios = [ours / theirs for ours, theirs in zip(runs["gpufeed"], runs[best])]
    result = dict(threads=args.threads, repeats=args.repeats,
                  gpufeed_rows_per_s=round(float(np.median(runs["gpufeed"]))),
                  gpufeed_runs=[round(v) for v in runs["gpufeed"]],
                  index_select_rows_per_s=round(float(np.median(runs[best]))),
                  index_select_runs=[round(v) for v in runs[best]],
                  index_select_torch_threads=best,
                  index_select_by_torch_threads={str(k): round(float(np.median(runs[k])))
                                                 for k in settings},
                  hit_rate=round(table.stats()["hit_rate"], 4),
                  ratio=round(float(np.median(ratios)), 3))
    log(f"  warm, {args.threads} threads: gpufeed "
        f"{result['gpufeed_rows_per_s'] / 1e6:.2f} M rows/s, index_select "
        f"{result['index_select_rows_per_s'] / 1e6:.2f} M rows/s (torch threads {best}): "
        f"{result['ratio']:.3f}x (median of {args.repeats} alternating rounds)")
    return result


# ---- part 2: fresh draws, hit rate vs an ideal static cache ------------------------------------

def fresh_draws(args, path, zipf, throttle):
    rng = np.random.default_rng(12)
    table = open_table(path, args.cache_bytes, args.queue_depth)
    throttle.limit(0)
    start = time.perf_counter()
    for _ in range(args.fresh_warmup):
        table.lookup(zipf.draw(rng, args.batch))
    warmup_seconds = time.perf_counter() - start
    throttle.limit(bytes_per_second=args.mbps * 1e6, iops=args.iops)
    table.reset_stats()
    batches = (zipf.draw(rng, args.batch) for _ in range(args.fresh_lookups))
    seconds, _ = timed_lookups(table.lookup, batches)
    stats = table.stats()
    capacity = stats["capacity_rows"]
    ideal = zipf.top_share(capacity)
    result = dict(warmup_lookups=args.fresh_warmup, warmup_seconds=round(warmup_seconds, 1),
                  lookups=args.fresh_lookups, capacity_rows=capacity,
                  resident_rows=stats["resident_rows"], hit_rate=round(stats["hit_rate"], 4),
                  ideal_hit_rate=round(ideal, 4), ratio=round(stats["hit_rate"] / ideal, 3),
                  p50_us=percentile_us(seconds, 50), p99_us=percentile_us(seconds, 99),
                  stats_p50_us=round(stats["p50_us"], 1), stats_p99_us=round(stats["p99_us"], 1),
                  source_reads_per_lookup=round(stats["source_reads"] / args.fresh_lookups, 1),
                  admitted=stats["admitted"], rejected=stats["rejected"],
                  evicted=stats["evicted"])
    log(f"  fresh draws: hit rate {result['hit_rate']:.4f} vs ideal {ideal:.4f} "
        f"({capacity:,} rows): {result['ratio']:.3f}x; p50 {result['p50_us']:,.0f} us, p99 "
        f"{result['p99_us']:,.0f} us; {result['source_reads_per_lookup']:.0f} reads a lookup")
    del table
    gc.collect()
    return result


# ---- part 4: cold misses vs fio ----------------------------------------------------------------

def run_fio(path, block, queue_depth, seconds):
    command = ["fio", "--name=embedding", f"--filename={path}", "--rw=randread", f"--bs={block}",
               "--direct=1", "--ioengine=io_uring", f"--iodepth={queue_depth}", "--numjobs=1",
               "--time_based", f"--runtime={seconds}", "--randrepeat=0", "--norandommap",
               "--output-format=json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["iops"]


def cold_misses(args, path, rows, throttle):
    """Lookups of distinct random rows, no RAM tier, O_DIRECT, unthrottled,
    against fio 4 KiB randread at the same queue depth; alternating, medians."""
    throttle.limit(0)
    table = open_table(path, 0, args.queue_depth)
    rng = np.random.default_rng(13)
    batches = [rng.choice(rows, args.batch, replace=False) for _ in range(64)]
    ours, fio, reads_per_row = [], [], []
    for repeat in range(args.repeats):
        for who in (("gpufeed", "fio") if repeat % 2 == 0 else ("fio", "gpufeed")):
            if who == "fio":
                fio.append(run_fio(path, 4096, args.queue_depth, args.seconds))
                continue
            table.reset_stats()
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                done += len(table.lookup(batches[done // args.batch % len(batches)]))
            ours.append(done / (time.perf_counter() - start))
            stats = table.stats()
            reads_per_row.append(stats["source_reads"] / max(1, stats["rows"]))
    # Each round's two runs are seconds apart: the median of the rounds'
    # ratios follows a shared disk whose speed drifts over the minutes.
    ratios = [rate / iops for rate, iops in zip(ours, fio)]
    result = dict(queue_depth=args.queue_depth, read_bytes=4096, batch=args.batch,
                  gpufeed_rows_per_s=round(float(np.median(ours))),
                  gpufeed_runs=[round(v) for v in ours],
                  reads_per_row=round(float(np.median(reads_per_row)), 3),
                  fio_iops=round(float(np.median(fio))), fio_runs=[round(v) for v in fio])
    result["ratio"] = round(float(np.median(ratios)), 3)
    log(f"  cold misses, unthrottled: gpufeed {result['gpufeed_rows_per_s']:,} rows/s "
        f"({result['reads_per_row']:.2f} reads a row) vs fio 4 KiB qd{args.queue_depth} "
        f"{result['fio_iops']:,} IOPS: {result['ratio']:.3f}x (median of {args.repeats} "
        "alternating rounds' ratios)")
    return result


# ---- part 6: RSS over a long run, in a fresh process -------------------------------------------

def child_rss(args):
    """Prints JSON: the fixed overhead of a table without a RAM tier, then
    RSS after every lookup of a table with one, relative to before it opened."""
    import torch  # noqa: F401  (the lookups' tensors: counted in the base, not the table)
    import gpufeed  # noqa: F401
    zipf = Zipf(args.rows, seed=0)
    rng = np.random.default_rng(14)
    base = rss_bytes()
    table = open_table(args.child_rss, 0, args.queue_depth)
    peak = base
    for _ in range(50):
        table.lookup(zipf.draw(rng, args.batch))
        peak = max(peak, rss_bytes())
    overhead = peak - base
    del table
    gc.collect()
    base = rss_bytes()
    table = open_table(args.child_rss, args.cache_bytes, args.queue_depth)
    samples, resident = [], []
    for _ in range(args.rss_lookups):
        table.lookup(zipf.draw(rng, args.batch))
        samples.append(rss_bytes() - base)
        resident.append(table.stats()["resident_bytes"])
    print(json.dumps(dict(overhead=overhead, base=base, samples=samples, resident=resident,
                          capacity_rows=table.stats()["capacity_rows"])))


def memory(args, path, throttle):
    throttle.limit(0)
    command = [sys.executable, os.path.abspath(__file__), "--child-rss", path,
               "--rows", str(args.rows), "--batch", str(args.batch),
               "--cache-bytes", str(args.cache_bytes), "--queue-depth", str(args.queue_depth),
               "--rss-lookups", str(args.rss_lookups)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    samples, quarter = child["samples"], max(1, len(child["samples"]) // 4)
    second, last = max(samples[quarter:2 * quarter]), max(samples[-quarter:])
    bound = args.cache_bytes * 1.1 + child["overhead"]
    result = dict(lookups=len(samples), rss_before_mb=round(child["base"] / MIB, 1),
                  overhead_mb=round(child["overhead"] / MIB, 1),
                  max_growth_mb=round(max(samples) / MIB, 1), bound_mb=round(bound / MIB, 1),
                  second_quarter_peak_mb=round(second / MIB, 1),
                  last_quarter_peak_mb=round(last / MIB, 1),
                  resident_mb_second_quarter=round(child["resident"][2 * quarter - 1] / MIB, 1),
                  resident_mb_end=round(child["resident"][-1] / MIB, 1),
                  cache_mb=round(args.cache_bytes / MIB, 1))
    result["within"] = max(samples) <= bound
    # Flat: no more than 1% of the budget between the quarters' peaks.
    result["flat"] = last - second <= 0.01 * args.cache_bytes
    log(f"  RSS over {len(samples)} lookups: +{result['max_growth_mb']:.0f} MB at most (bound "
        f"{result['bound_mb']:.0f} MB = {result['cache_mb']:.0f} MiB x 1.1 + "
        f"{result['overhead_mb']:.0f} MB without a RAM tier); peaks: second quarter "
        f"{result['second_quarter_peak_mb']:.0f} MB, last {result['last_quarter_peak_mb']:.0f} MB")
    return result


# ---- main --------------------------------------------------------------------------------------

def run_parts(args, result, path, disk, throttle):
    zipf = Zipf(args.rows, seed=0)
    log("[1, 5] cold (first touch) and warm (replayed), gpufeed and memmap, throttled")
    result["cold_warm"], table, batches = cold_warm(args, path, zipf, throttle, disk)
    log("[3] warm lookups vs torch.index_select on the table in RAM")
    result["bandwidth"] = bandwidth(args, path, table, batches, throttle)
    del table
    gc.collect()
    log("[2] fresh draws every lookup: the RAM tier's hit rate vs an ideal static cache")
    result["fresh"] = fresh_draws(args, path, zipf, throttle)
    if shutil.which("fio") is None:
        log("[4] skipped: fio is not installed (apt-get install fio)")
    else:
        log("[4] cold misses on the unthrottled disk vs fio")
        result["cold_misses"] = cold_misses(args, path, args.rows, throttle)
    log("[6] RSS over a long run of fresh draws (a fresh process, unthrottled)")
    result["memory"] = memory(args, path, throttle)


def print_summary(result):
    def met(value, target):
        return "met" if value >= target else "NOT met"

    log("")
    limit = f"{result['iops']} read IOPS" + (f" and {result['mbps']:g} MB/s" if result["mbps"]
                                              else "")
    log(f"embedding: {result['rows']:,} x {result['dim']} float32 "
        f"({result['table_bytes'] / 1e6:.0f} MB), cache_bytes {result['cache_bytes'] / MIB:.0f} "
        f"MiB, Zipf({result['zipf_s']}) x {result['batch']}, {limit} throttle "
        f"({result['controller']}, readahead {result['read_ahead_kb']} KiB); "
        f"{result['cpu']}, {result['cores']} cores")
    c = result["cold_warm"]
    log(f"  cold/warm ({c['lookups']} lookups, {c['warm_epochs']} warm epochs; rows exact: "
        f"{c['exact']}): gpufeed p50 cold {c['gpufeed_cold_p50_us']:,.0f} us, warm "
        f"{c['gpufeed_warm_p50_us']:,.1f} us: {c['ratio']:,.0f}x (target >= 20x: "
        f"{met(c['ratio'], 20)})")
    log(f"  p99 cold / warm: gpufeed {c['gpufeed_cold_p99_us']:,.0f} / "
        f"{c['gpufeed_warm_p99_us']:,.1f} us, memmap {c['memmap_cold_p99_us']:,.0f} / "
        f"{c['memmap_warm_p99_us']:,.1f} us")
    f = result["fresh"]
    log(f"  fresh draws ({f['lookups']} lookups after {f['warmup_lookups']} unthrottled): hit rate "
        f"{f['hit_rate']:.4f}, ideal {f['ideal_hit_rate']:.4f} ({f['capacity_rows']:,} rows): "
        f"{f['ratio']:.3f}x (target >= 0.9x: {met(f['ratio'], 0.9)}); p50 {f['p50_us']:,.0f} us, "
        f"p99 {f['p99_us']:,.0f} us")
    b = result["bandwidth"]
    log(f"  warm rows/s, {b['threads']} threads: gpufeed {b['gpufeed_rows_per_s']:,}, index_select "
        f"{b['index_select_rows_per_s']:,}: {b['ratio']:.3f}x (target >= 0.5x: "
        f"{met(b['ratio'], 0.5)})")
    m = result.get("cold_misses")
    if m:
        log(f"  cold misses, unthrottled, qd{m['queue_depth']}: {m['gpufeed_rows_per_s']:,} rows/s "
            f"vs fio 4 KiB randread {m['fio_iops']:,} IOPS: {m['ratio']:.3f}x (target >= 0.9x: "
            f"{met(m['ratio'], 0.9)})")
    r = result["memory"]
    log(f"  RSS: +{r['max_growth_mb']:.0f} MB at most over {r['lookups']} lookups, bound "
        f"{r['bound_mb']:.0f} MB ({'within' if r['within'] else 'OVER'}); overhead without a RAM "
        f"tier {r['overhead_mb']:.0f} MB; second/last quarter peaks "
        f"{r['second_quarter_peak_mb']:.0f}/{r['last_quarter_peak_mb']:.0f} MB "
        f"({'flat' if r['flat'] else 'GROWING'})")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/var/tmp/gpufeed-embedding")
    parser.add_argument("--quick", action="store_true",
                        help="500,000 rows (128 MB), 32 MiB of cache, fewer lookups")
    parser.add_argument("--rows", type=int, default=None, help="default 2,000,000 (quick 500,000)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--cache-bytes", default=None, help="default 128MiB (quick 32MiB)")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--iops", type=int, default=500)
    parser.add_argument("--mbps", type=float, default=0,
                        help="also limit the throttled reads' MB/s (default 0: IOPS only; "
                             "large requests, e.g. memmap's readahead, then cost one IOPS each)")
    parser.add_argument("--queue-depth", type=int, default=64)
    parser.add_argument("--cold-lookups", type=int, default=20)
    parser.add_argument("--warm-epochs", type=int, default=5)
    parser.add_argument("--fresh-warmup", type=int, default=None, help="default 1000 (quick 400)")
    parser.add_argument("--fresh-lookups", type=int, default=None, help="default 300 (quick 100)")
    parser.add_argument("--rss-lookups", type=int, default=None, help="default 2000 (quick 800)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=3.0, help="per rows/s measurement")
    parser.add_argument("--repeats", type=int, default=5,
                        help="parts 3 and 4: rounds of each side, alternating")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child-rss", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    quick = args.quick
    args.rows = args.rows or (500_000 if quick else 2_000_000)
    args.cache_bytes = parse_size(args.cache_bytes or ("32MiB" if quick else "128MiB"))
    args.fresh_warmup = args.fresh_warmup if args.fresh_warmup is not None else (
        400 if quick else 1000)
    args.fresh_lookups = args.fresh_lookups or (100 if quick else 300)
    args.rss_lookups = args.rss_lookups or (800 if quick else 2000)
    return args


def main():
    args = parse_args()
    if args.child_rss:
        child_rss(args)
        return 0
    if os.geteuid() != 0:
        log("embedding: skipped (needs root: a loop device, a cgroup read throttle, drop_caches)")
        return 0
    # A SIGTERM unwinds like an exception: the finally blocks undo the mount and the cgroup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    table_bytes = args.rows * args.dim * 4
    result = dict(cpu=cpu_name(), cores=len(os.sched_getaffinity(0)), quick=args.quick,
                  rows=args.rows, dim=args.dim, dtype="float32", table_bytes=table_bytes,
                  cache_bytes=args.cache_bytes, batch=args.batch, zipf_s=1.05, iops=args.iops,
                  mbps=args.mbps,
                  queue_depth=args.queue_depth, direct_io=True)
    log(f"CPU: {result['cpu']} ({result['cores']} cores)")
    os.makedirs(args.work, exist_ok=True)
    size_mb = table_bytes * 13 // 10 // MIB + 300
    with LoopDisk(os.path.join(args.work, "disk.img"), os.path.join(args.work, "mnt"),
                  size_mb) as disk:
        path = os.path.join(disk.mount, "table.npy")
        log(f"writing {args.rows:,} x {args.dim} float32 ({table_bytes / 1e6:.0f} MB) with np.save "
            f"to {path} ({disk.device}, {size_mb} MB ext4, direct I/O backing)")
        make_table(path, args.rows, args.dim)
        throttle = Throttle(disk.major_minor, CGROUP_NAME)
        try:
            result["controller"] = "cgroup v1 blkio" if throttle.v1 else "cgroup v2 io.max"
            # The device's readahead: how much one request of memmap's page faults can bring.
            with open(f"/sys/block/{disk.name}/queue/read_ahead_kb") as source:
                result["read_ahead_kb"] = int(source.read())
            run_parts(args, result, path, disk.name, throttle)
        finally:
            throttle.close()
    print_summary(result)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
