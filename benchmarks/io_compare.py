#!/usr/bin/python3
"""The read engine against fio, on the same files, in the same run.

    io_compare.py --bench build/release/benchmarks/gpufeed_io_bench \
        --raw benchmarks/data/raw-1g.bin --shard benchmarks/data/demo-recordio-2000/part-00000.rec \
        [--raw-size 1GiB] [--seconds 1.5] [--repeats 3] [--quick] [--json out.json]

Each case runs gpufeed_io_bench and fio with matching parameters (fio's
io_uring engine against our io_uring backend, fio psync with numjobs = N
against our pread pool of N threads), alternating the order between repeats;
the figures are medians over the repeats (the target cases, among them 4 KiB
random reads at every queue depth 1-64, get at least 6; 4 with --quick: an
even number, so that each tool runs second in half the pairs).
Every file is read once before the
cases, not counted (a first pass over a file after other work ran slow on
the dev VM, whoever made it). Cold cases drop the page cache
before every run when this runs as root (O_DIRECT cases bypass it anyway).
The table prints MB/s, IOPS (medians) and the ratio ours/fio: the median of
the repeats' ratios, each pair of runs seconds apart (the JSON keeps every
pair's), and the targets of the read-engine issue next to it.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

KIB = 1024
MIB = 1024 * KIB


def parse_size(text):
    units = {"k": KIB, "kib": KIB, "m": MIB, "mib": MIB, "g": 1024 * MIB, "gib": 1024 * MIB}
    text = str(text).strip().lower()
    for suffix, factor in sorted(units.items(), key=lambda item: -len(item[0])):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def human(size):
    return f"{size // MIB}M" if size >= MIB else f"{size // KIB}K"


def make_raw_file(path, size):
    """Random bytes (no filesystem can compress or dedupe them), written once."""
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    print(f"writing {size / 1e9:.1f} GB of random data to {path}", flush=True)
    chunk = os.urandom(16 * MIB)
    with open(path + ".tmp", "wb") as out:
        written = 0
        while written < size:
            piece = chunk[: min(len(chunk), size - written)]
            # Vary the chunk so that no two blocks are equal.
            out.write(written.to_bytes(8, "little") + piece[8:])
            written += len(piece)
        out.flush()
        os.fsync(out.fileno())
    os.rename(path + ".tmp", path)


def can_drop_caches():
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as control:
        control.write("3\n")


def warm(path):
    with open(path, "rb") as source:
        while source.read(64 * MIB):
            pass


def run_ours(bench, case, seconds):
    command = [bench, "--file", case["file"], "--backend", case["backend"],
               "--direct", "1" if case["direct"] else "0", "--pattern", case["pattern"],
               "--bs", str(case["bs"]), "--qd", str(case["qd"]), "--seconds", str(seconds)]
    if case["backend"] == "pread":
        command += ["--threads", str(case["qd"])]
    elif case["handler"]:
        command += ["--handler", "1"]
    elif case["backlog"]:
        command += ["--backlog", str(case["backlog"])]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    values = dict(field.split("=", 1) for field in line.split()[1:])
    return float(values["mb_per_s"]), float(values["iops"]), float(values["mean_inflight"])


def run_fio(case, seconds):
    psync = case["backend"] == "pread"
    command = ["fio", "--name=gpufeed", f"--filename={case['file']}",
               f"--rw={'randread' if case['pattern'] == 'rand' else 'read'}",
               f"--bs={case['bs']}", f"--direct={1 if case['direct'] else 0}",
               f"--runtime={seconds}", "--time_based", "--group_reporting",
               "--output-format=json", f"--size={os.path.getsize(case['file'])}",
               "--invalidate=0"]
    if psync:
        command += ["--ioengine=psync", f"--numjobs={case['qd']}", "--iodepth=1"]
    else:
        command += ["--ioengine=io_uring", f"--iodepth={case['qd']}", "--numjobs=1"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    job = json.loads(output[output.index("{"):])["jobs"][0]["read"]
    return job["bw_bytes"] / 1e6, job["iops"]


def build_cases(raw, shard, quick):
    # io_uring rows: the engine holds `qd` reads in the kernel (fio's
    # iodepth). The requester is a completion handler (requester="handler")
    # that submits each replacement from the engine's own thread, as the
    # loader's read-ahead does; "backlog": a requester thread that keeps `qd`
    # more queued, so the engine starts a queued read at once and the
    # requester refills the queue when it is woken; "refill": a requester
    # thread that resubmits each read when it completes.
    def case(name, backend, direct, pattern, bs, qd, cache, file=raw, target=None,
             requester="handler"):
        io_uring = backend == "io_uring"
        return dict(name=name, backend=backend, direct=direct, pattern=pattern, bs=bs, qd=qd,
                    cache=cache, file=file, target=target,
                    handler=io_uring and requester == "handler",
                    backlog=qd if io_uring and requester == "backlog" else 0)

    cases = [
        # The targets.
        case("seq 1M qd32 O_DIRECT", "io_uring", True, "seq", MIB, 32, "cold",
             target=("bw", 0.90)),
        case("rand 128K qd32 O_DIRECT", "io_uring", True, "rand", 128 * KIB, 32, "cold",
             target=("bw", 0.90)),
        case("rand 4K qd64 O_DIRECT", "io_uring", True, "rand", 4 * KIB, 64, "cold",
             target=("iops", 1.00)),
        case("pread x8 rand 128K O_DIRECT", "pread", True, "rand", 128 * KIB, 8, "cold",
             target=("bw", 0.80)),
    ]
    # 4 KiB at every queue depth up to 64 (target 1.0x), and the two
    # requester threads at depth 64.
    for qd in (1, 4, 8, 16, 32):
        cases.append(case(f"rand 4K qd{qd} O_DIRECT", "io_uring", True, "rand", 4 * KIB, qd,
                          "cold", target=("iops", 1.00)))
    cases.append(case("rand 4K qd64 O_DIRECT, backlog", "io_uring", True, "rand", 4 * KIB, 64,
                      "cold", requester="backlog"))
    cases.append(case("rand 4K qd64 O_DIRECT, refill", "io_uring", True, "rand", 4 * KIB, 64,
                      "cold", requester="refill"))
    if not quick:
        for qd in (128,):
            cases.append(case(f"rand 4K qd{qd} O_DIRECT", "io_uring", True, "rand", 4 * KIB, qd,
                              "cold"))
        for bs in (4 * KIB, 64 * KIB):
            cases.append(case(f"seq {human(bs)} qd32 O_DIRECT", "io_uring", True, "seq", bs, 32,
                              "cold"))
        cases += [
            case("seq 1M qd32 buffered", "io_uring", False, "seq", MIB, 32, "cold"),
            case("seq 1M qd32 buffered", "io_uring", False, "seq", MIB, 32, "warm"),
            case("rand 128K qd32 buffered", "io_uring", False, "rand", 128 * KIB, 32, "warm"),
            # From the page cache: no device, the software's own cost per read.
            case("rand 4K qd1 buffered", "io_uring", False, "rand", 4 * KIB, 1, "warm"),
            case("rand 4K qd16 buffered", "io_uring", False, "rand", 4 * KIB, 16, "warm"),
            case("rand 4K qd16 buffered, backlog", "io_uring", False, "rand", 4 * KIB, 16, "warm",
                 requester="backlog"),
            case("pread x8 rand 128K buffered", "pread", False, "rand", 128 * KIB, 8, "warm"),
        ]
    if shard:
        cases += [
            case("shard seq 1M qd32 O_DIRECT", "io_uring", True, "seq", MIB, 32, "cold", shard),
            case("shard rand 128K qd32 O_DIRECT", "io_uring", True, "rand", 128 * KIB, 32, "cold",
                 shard),
        ]
    return cases


def target_repeats(args):
    """Runs per tool for a target case: more than the others (4 in --quick,
    6 otherwise), as one pair on a shared disk can differ by 15% either way
    and a verdict hangs on their median. An even number: the order alternates
    (ours, fio / fio, ours), so each tool runs second in half the pairs
    (where the disk warms through the step, as the dev VM's does, the one
    that runs second reads into the warmer cache)."""
    return max(args.repeats, 4 if args.quick else 6)


def repeats_for(args, case):
    return target_repeats(args) if case["target"] else args.repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--raw", required=True)
    parser.add_argument("--raw-size", default="1GiB")
    parser.add_argument("--shard", default=None)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--cold", action="store_true",
                        help="drop the page cache before every run, warm cases included")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        print("fio is not installed (apt-get install fio): skipping the comparison")
        return 0
    if args.quick:
        args.repeats, args.seconds = 1, 1.0
    make_raw_file(args.raw, parse_size(args.raw_size))
    cold_possible = can_drop_caches()
    if not cold_possible:
        print("note: not root (or /proc/sys read-only): 'cold' buffered cases run warm")
    cases = build_cases(args.raw, args.shard, args.quick)
    # One pass over every file first, not counted: on the dev VM the first
    # pass over a file after other work runs slow whoever makes it (the
    # tabular step measured fio's own first pass at 60-85% of its later
    # ones), and the first case's first run is ours.
    for path in sorted({c["file"] for c in cases}):
        if cold_possible:
            drop_caches()
        warm(path)
    try:
        from tqdm import tqdm
        progress = tqdm(total=sum(repeats_for(args, c) for c in cases) * 2, desc="io vs fio",
                        unit="run", file=sys.stderr)
    except ImportError:
        progress = None

    rows = []
    for case in cases:
        if args.cold:
            case["cache"] = "cold"
        ours, theirs = [], []
        repeats = repeats_for(args, case)
        for repeat in range(repeats):
            order = ("ours", "fio") if repeat % 2 == 0 else ("fio", "ours")
            for tool in order:
                if case["cache"] == "cold" and cold_possible:
                    drop_caches()
                elif case["cache"] == "warm":
                    warm(case["file"])
                if tool == "ours":
                    ours.append(run_ours(args.bench, case, args.seconds))
                else:
                    theirs.append(run_fio(case, args.seconds))
                if progress:
                    progress.update()
        row = dict(case)
        row["repeats"] = repeats
        row["ours_mb_per_s"] = statistics.median(r[0] for r in ours)
        row["ours_iops"] = statistics.median(r[1] for r in ours)
        row["ours_mean_inflight"] = statistics.median(r[2] for r in ours)
        row["fio_mb_per_s"] = statistics.median(r[0] for r in theirs)
        row["fio_iops"] = statistics.median(r[1] for r in theirs)
        # The ratio is the median of the repeats' ratios, each of two runs
        # seconds apart: the disk's rate drifts by 2x within minutes on the
        # dev VMs, and a ratio of the two tools' medians can pair a fast
        # moment of one with a slow moment of the other.
        at = 1 if (row["target"] and row["target"][0] == "iops") else 0
        pairs = [o[at] / f[at] if f[at] else float("nan") for o, f in zip(ours, theirs)]
        row["pair_ratios"] = pairs
        row["ratio"] = statistics.median(pairs)
        row["file"] = os.path.basename(row["file"])
        rows.append(row)
    if progress:
        progress.close()

    print()
    print(f"{'case':<31} {'file':<16} {'cache':<5} {'ours MB/s':>10} {'fio MB/s':>9} "
          f"{'ours IOPS':>10} {'fio IOPS':>9} {'ratio':>6}  target")
    for row in rows:
        target = ""
        if row["target"]:
            metric, wanted = row["target"]
            verdict = "met" if row["ratio"] >= wanted else "MISSED"
            target = f">= {wanted:.0%} of fio {'IOPS' if metric == 'iops' else 'MB/s'}: {verdict}"
        print(f"{row['name']:<31} {row['file'][:16]:<16} {row['cache']:<5} "
              f"{row['ours_mb_per_s']:>10.1f} {row['fio_mb_per_s']:>9.1f} "
              f"{row['ours_iops']:>10.0f} {row['fio_iops']:>9.0f} {row['ratio']:>6.2f}  {target}")
    print(f"(medians of {args.repeats} run(s) of {args.seconds:g} s each, target cases "
          f"{target_repeats(args)}, alternating which tool goes first; the ratio is the median of "
          f"the pairs' ratios; "
          f"io_uring cases vs fio --ioengine=io_uring, pread xN vs fio psync --numjobs=N; "
          f"io_uring requester: a completion handler unless the case names another)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"cold_possible": cold_possible, "repeats": args.repeats,
                       "seconds": args.seconds, "cases": rows,
                       "when": time.strftime("%Y-%m-%d %H:%M:%S")}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
