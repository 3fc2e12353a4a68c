"""Token corpora: gpufeed.DataLoader(transform=TokenWindows) against fio on
the same file, in the same run (benchmarks/run.sh, step "tokens").

The corpus is a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx, uint16
tokens, documents of random lengths) written once by numpy, alone in its
directory, and indexed there (`gpufeed index`: gpufeed.json and the heads
file gpufeed.heads) as a user of global shuffle would. Each repeat drops
the page cache (when root), reads the .bin with fio (sequential 1 MiB reads,
queue depth 32, O_DIRECT, io_uring), drops it again and runs one epoch of
the loader with shuffle="block", direct_io=True, seq_len 2048: token bytes
delivered per second (windows x seq_len x 2 bytes over the epoch's wall
time); with --bench, the C++ Loader (gpufeed_token_bench) likewise. The
order alternates between repeats; medians are reported with the ratios
(target >= 0.9x). Then --memory-epochs warm epochs of the C++ Loader give
the RSS after the first and the last (memory must stay flat), a cold global
shuffle (windows/s against fio's 4 KiB random reads at queue depth 64, with
the heads and with them moved aside), and a warm
global-shuffle run against the reference people use today (numpy memmap +
torch DataLoader with as many workers, nanoGPT's get_batch; target >= 3x).

    python3 benchmarks/token_compare.py --prefix DATA/tokens-1GiB/tokens --size 1GiB --json out.json
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

MIB = 1 << 20
# The cold global-shuffle runs last at least this long (whole epochs): about
# fio's 5 s run, on a corpus of any size.
GLOBAL_MIN_SECONDS = 2.0
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from io_compare import can_drop_caches, drop_caches, parse_size, warm  # noqa: E402


def make_megatron(prefix, size, seed=0):
    """PREFIX.bin of `size` bytes of uint16 tokens and its .idx, as
    Megatron-Core's _IndexWriter writes them; written once."""
    if os.path.exists(prefix + ".idx") and os.path.getsize(prefix + ".bin") == size:
        return
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    print(f"writing a {size / 2**30:.1f} GiB Megatron corpus at {prefix}.bin", flush=True)
    rng = np.random.default_rng(seed)
    tokens = size // 2
    lengths = []
    with open(prefix + ".bin.tmp", "wb") as out:
        written = 0
        while written < tokens:
            chunk = rng.integers(0, 50257, size=min(16 * MIB, tokens - written), dtype=np.uint16)
            out.write(chunk.tobytes())
            written += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    left = tokens
    while left > 0:
        n = int(min(left, rng.integers(200, 4000)))
        lengths.append(n)
        left -= n
    lengths = np.array(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * 2
    documents = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes())
        index.write(np.uint64(len(lengths)).tobytes() + np.uint64(len(documents)).tobytes())
        index.write(lengths.tobytes() + pointers.tobytes() + documents.tobytes())
    os.rename(prefix + ".bin.tmp", prefix + ".bin")


def ensure_indexed(prefix):
    """`gpufeed index` of the corpus's directory (gpufeed.json and the heads
    file, gpufeed.heads) unless both are newer than the .bin and .idx."""
    import gpufeed
    directory = os.path.dirname(os.path.abspath(prefix))
    written = [os.path.join(directory, name) for name in ("gpufeed.json", "gpufeed.heads")]
    newest = max(os.path.getmtime(prefix + ".bin"), os.path.getmtime(prefix + ".idx"))
    if all(os.path.exists(p) and os.path.getmtime(p) >= newest for p in written):
        return
    print(f"indexing {directory} (gpufeed index)", flush=True)
    gpufeed.write_token_manifest(directory)


class _HeadsAside:
    """The corpus without its heads for the duration: windows read whole."""

    def __init__(self, prefix):
        directory = os.path.dirname(os.path.abspath(prefix))
        self.path = os.path.join(directory, "gpufeed.heads")

    def __enter__(self):
        os.rename(self.path, self.path + ".aside")

    def __exit__(self, *exc):
        os.rename(self.path + ".aside", self.path)


def run_fio(path):
    command = ["fio", "--name=tokens", f"--filename={path}", "--rw=read", "--bs=1M",
               "--direct=1", "--ioengine=io_uring", "--iodepth=32", "--numjobs=1",
               f"--size={os.path.getsize(path)}", "--invalidate=1", "--output-format=json"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    job = json.loads(output[output.index("{"):])["jobs"][0]["read"]
    return job["bw_bytes"]


def run_fio_random(path, seconds=5, queue_depth=64, block=4096, align=None):
    """fio's random O_DIRECT reads of `block` bytes at offsets that are
    multiples of `align` (default: block), `queue_depth` in flight (64: the
    target's reference): IOPS."""
    command = ["fio", "--name=windows", f"--filename={path}", "--rw=randread", f"--bs={block}",
               f"--blockalign={align or block}",
               "--direct=1", "--ioengine=io_uring", f"--iodepth={queue_depth}", "--numjobs=1",
               f"--size={os.path.getsize(path)}", f"--runtime={seconds}", "--time_based",
               "--invalidate=1", "--output-format=json"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output[output.index("{"):])["jobs"][0]["read"]["iops"]


def run_global(prefix, seq_len, batch_size, threads, batches, min_seconds=GLOBAL_MIN_SECONDS,
               seen=None):
    """Cold, global shuffle, O_DIRECT: windows/s over `batches` batches (each
    window one random read), or with batches < 0 over whole epochs until
    `min_seconds` have passed (a small corpus's epoch is a fraction of fio's
    run; later epochs start inside the timed span, as they do in training).
    `seen` (a dict), if given, gets the engine's queue depth."""
    import gpufeed
    loader = gpufeed.DataLoader(prefix, batch_size=batch_size, shuffle=True, seed=1,
                                direct_io=True, num_threads=threads,
                                transform=gpufeed.TokenWindows(seq_len=seq_len))
    iterator = iter(loader)
    next(iterator)  # the epoch's order and the first reads: start-up, not the pattern
    start, count, done, epoch = time.perf_counter(), 0, 0, 0
    while True:
        for x, _y in iterator:
            count += int(x.shape[0])
            done += 1
            if 0 < batches <= done:
                break
        if 0 < batches <= done or (batches < 0 and time.perf_counter() - start >= min_seconds):
            break
        epoch += 1
        loader.set_epoch(epoch)
        iterator = iter(loader)
    rate = count / (time.perf_counter() - start)
    if seen is not None:
        seen["queue_depth"] = int(loader.stats()["io_queue_depth"])
    del iterator
    loader.close()
    return rate


def run_loader(prefix, seq_len, batch_size, dtype, threads):
    import gpufeed
    loader = gpufeed.DataLoader(prefix, batch_size=batch_size, shuffle="block", seed=1,
                                direct_io=True, num_threads=threads,
                                transform=gpufeed.TokenWindows(seq_len=seq_len, dtype=dtype))
    windows = 0
    start = time.perf_counter()
    for x, _ in loader:
        windows += int(x.shape[0])
    seconds = time.perf_counter() - start
    stats = loader.stats()
    loader.close()
    return windows * seq_len * 2 / seconds, stats


def run_bench(bench, prefix, seq_len, batch_size, dtype, threads, epochs=1, direct=True,
              shuffle="block"):
    """gpufeed_token_bench (the C++ Loader, no Python in the loop): per-epoch
    token bytes/s and the RSS after each epoch."""
    command = [bench, prefix, "--seq-len", str(seq_len), "--batch", str(batch_size),
               "--dtype", dtype, "--direct", "1" if direct else "0", "--epochs", str(epochs),
               "--shuffle", shuffle]
    if threads:
        command += ["--threads", str(threads)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    values = dict(field.split("=", 1) for field in line.split()[1:])
    rates = [float(l.split()[2]) * 1e6 for l in output.splitlines() if l.startswith("epoch ")]
    return rates, float(values["rss_first_mb"]), float(values["rss_last_mb"])


class _MemmapWindows:
    """The reference people use today (nanoGPT's get_batch in a torch
    Dataset): a numpy memmap of the .bin, each window sliced and converted
    with astype(int64); torch's DataLoader batches and shuffles them."""

    def __init__(self, path, seq_len):
        self.path, self.seq_len = path, seq_len
        self.windows = (os.path.getsize(path) // 2 - 1) // seq_len
        self.data = None

    def __len__(self):
        return self.windows

    def __getitem__(self, i):
        import torch
        if self.data is None:  # opened in the worker, as nanoGPT does
            self.data = np.memmap(self.path, dtype=np.uint16, mode="r")
        start = i * self.seq_len
        window = torch.from_numpy(self.data[start:start + self.seq_len + 1].astype(np.int64))
        return window[:-1], window[1:]


def run_warm(prefix, seq_len, batch_size, workers, batches):
    """Warm page cache, global shuffle: tokens/s of gpufeed.DataLoader and of
    the memmap + torch DataLoader reference, `batches` batches each."""
    import gpufeed
    import torch
    rates = {}
    warm(prefix + ".bin")  # into the page cache: the warm case
    # nanoGPT's get_batch itself, in the training process (no workers).
    data = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    start, count = time.perf_counter(), 0
    for _ in range(batches):
        ix = torch.randint((len(data) - 1) // seq_len, (batch_size,)) * seq_len
        x = torch.stack([torch.from_numpy(data[i:i + seq_len].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + seq_len].astype(np.int64))
                         for i in ix])
        count += int(x.shape[0])
    rates["get_batch"] = count * seq_len * 2 / (time.perf_counter() - start)
    del data
    for who in ("reference", "gpufeed"):
        if who == "gpufeed":
            loader = gpufeed.DataLoader(prefix, batch_size=batch_size, shuffle=True, seed=1,
                                        num_threads=workers,
                                        transform=gpufeed.TokenWindows(seq_len=seq_len))
        else:
            loader = torch.utils.data.DataLoader(
                _MemmapWindows(prefix + ".bin", seq_len), batch_size=batch_size, shuffle=True,
                num_workers=workers, persistent_workers=True, prefetch_factor=4)
        iterator = iter(loader)
        for _ in range(min(20, batches // 10)):  # workers started, queues full
            next(iterator)
        start, count = time.perf_counter(), 0
        for _ in range(batches):
            x, _y = next(iterator)
            count += int(x.shape[0])
        rates[who] = count * seq_len * 2 / (time.perf_counter() - start)
        del iterator, loader
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--size", default="1GiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dtype", default="int64")
    parser.add_argument("--threads", type=int, default=0, help="0: the cores")
    parser.add_argument("--bench", default=None, help="gpufeed_token_bench (C++ loader)")
    parser.add_argument("--memory-epochs", type=int, default=10,
                        help="warm epochs of the C++ loader for the RSS check")
    parser.add_argument("--global-batches", type=int, default=-1,
                        help="batches of the cold global-shuffle run against fio's random "
                             "4 KiB reads (-1: whole epochs until 2 s have passed, about as "
                             "long as fio's 5 s run; 0: skip)")
    parser.add_argument("--warm-batches", type=int, default=2000,
                        help="batches of the warm global-shuffle comparison with a numpy "
                             "memmap + torch DataLoader reference (0: skip)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    make_megatron(args.prefix, parse_size(args.size))
    ensure_indexed(args.prefix)
    if shutil.which("fio") is None:
        print("fio is not installed (apt-get install fio): skipping the token comparison")
        return 0
    cold = can_drop_caches()
    if not cold:
        print("note: cannot drop the page cache (not root): runs are warm, the fio run uses O_DIRECT")
    runs = {"fio": [], "python": [], "cpp": []}
    last_stats = None
    for repeat in range(args.repeats):
        order = ["fio", "python", "cpp"] if args.bench else ["fio", "python"]
        if repeat % 2:
            order.reverse()
        for who in order:
            if cold:
                drop_caches()
            if who == "fio":
                runs["fio"].append(run_fio(args.prefix + ".bin"))
            elif who == "python":
                rate, last_stats = run_loader(args.prefix, args.seq_len, args.batch_size,
                                              args.dtype, args.threads)
                runs["python"].append(rate)
            else:
                rates, _, _ = run_bench(args.bench, args.prefix, args.seq_len, args.batch_size,
                                        args.dtype, args.threads)
                runs["cpp"].append(rates[0])
        print(f"repeat {repeat + 1}: " + ", ".join(f"{who} {values[-1] / 1e6:.0f} MB/s"
                                                   for who, values in runs.items() if values),
              flush=True)
    size = os.path.getsize(args.prefix + ".bin")
    medians = {who: statistics.median(v) for who, v in runs.items() if v}
    fio_median = medians["fio"]
    print(f"tokens, {size / 2**30:.2f} GiB Megatron corpus, {'cold' if cold else 'warm'} page "
          f"cache, shuffle=block, O_DIRECT, seq_len {args.seq_len}, {args.dtype}, batch "
          f"{args.batch_size}, medians of {args.repeats}; fio seq 1 MiB qd32 O_DIRECT "
          f"{fio_median / 1e6:.0f} MB/s")
    result = dict(corpus_bytes=size, cache="cold" if cold else "warm", seq_len=args.seq_len,
                  dtype=args.dtype, batch_size=args.batch_size, cores=os.cpu_count(),
                  fio_mb_per_s=[round(v / 1e6, 1) for v in runs["fio"]],
                  fio_median_mb_per_s=round(fio_median / 1e6, 1), target=0.9)
    for who, label in (("python", "gpufeed.DataLoader"), ("cpp", "C++ Loader")):
        if who not in medians:
            continue
        ratio = medians[who] / fio_median
        print(f"  {label:<19} {medians[who] / 1e6:6.0f} MB/s of tokens: {ratio:.2f}x fio "
              f"(target >= 0.9x: {'met' if ratio >= 0.9 else 'NOT met'})")
        result[f"{who}_token_mb_per_s"] = [round(v / 1e6, 1) for v in runs[who]]
        result[f"{who}_median_mb_per_s"] = round(medians[who] / 1e6, 1)
        result[f"{who}_ratio"] = round(ratio, 3)
    if last_stats is not None:
        print(f"  last DataLoader run: {last_stats['io_requests']} reads, "
              f"{last_stats['io_mean_inflight']:.1f} in flight on average, "
              f"bottleneck {last_stats['bottleneck']}")
    if args.bench and args.memory_epochs > 0:
        rates, first, last = run_bench(args.bench, args.prefix, args.seq_len, args.batch_size,
                                       args.dtype, args.threads, epochs=args.memory_epochs,
                                       direct=False)
        print(f"  memory: C++ Loader RSS {first:.0f} MB after epoch 1, {last:.0f} MB after "
              f"epoch {args.memory_epochs} (warm, buffered; median "
              f"{statistics.median(rates) / 1e6:.0f} MB/s)")
        result.update(memory_epochs=args.memory_epochs, rss_first_mb=first, rss_last_mb=last,
                      warm_cpp_median_mb_per_s=round(statistics.median(rates) / 1e6, 1))
    windows_per_epoch = (os.path.getsize(args.prefix + ".bin") // 2 - 1) // args.seq_len
    # The C++ loader's run: as many whole epochs as about GLOBAL_MIN_SECONDS
    # take at 100,000 windows/s.
    cpp_epochs = max(1, math.ceil(GLOBAL_MIN_SECONDS * 100_000 / max(1, windows_per_epoch)))
    if args.global_batches != 0:
        # Alternating in each repeat: fio's 4 KiB random reads, the indexed
        # corpus (its heads: a window whose last token starts a 512-byte
        # boundary reads seq_len tokens, 4,096 bytes at seq_len 2048), and
        # the same corpus with its heads moved aside (every window read whole);
        # with --bench also the C++ loader's whole epoch with the heads.
        # Also fio at the loader's own queue depth (IoOptions' default, 128:
        # the loader refills a slot later than fio does, so it keeps more
        # slots); on a device that is saturated by 64 the two agree.
        fio_iops, fio_deep, windows, whole, cpp = [], [], [], [], []
        seen = {"queue_depth": 128}
        for repeat in range(args.repeats):
            steps = ["fio", "heads", "whole", "fio_deep"] + (["cpp"] if args.bench else [])
            for step in steps if repeat % 2 == 0 else reversed(steps):
                if cold:
                    drop_caches()
                if step == "fio":
                    fio_iops.append(run_fio_random(args.prefix + ".bin"))
                elif step == "fio_deep":
                    fio_deep.append(run_fio_random(args.prefix + ".bin",
                                                   queue_depth=seen["queue_depth"]))
                elif step == "heads":
                    windows.append(run_global(args.prefix, args.seq_len, args.batch_size,
                                              args.threads, args.global_batches, seen=seen))
                elif step == "cpp":
                    rates, _, _ = run_bench(args.bench, args.prefix, args.seq_len,
                                            args.batch_size, args.dtype, args.threads,
                                            epochs=cpp_epochs, shuffle="global")
                    # Token bytes/s per epoch -> windows/s over all of them.
                    cpp.append(len(rates) / sum(args.seq_len * 2 / r for r in rates))
                else:
                    with _HeadsAside(args.prefix):
                        whole.append(run_global(args.prefix, args.seq_len, args.batch_size,
                                                args.threads, args.global_batches))
        ratio = statistics.median(windows) / statistics.median(fio_iops)
        print(f"  global shuffle, {'cold' if cold else 'warm'}, O_DIRECT: "
              f"{statistics.median(windows):,.0f} windows/s vs fio 4 KiB randread qd64 "
              f"{statistics.median(fio_iops):,.0f} IOPS: {ratio:.2f}x (target >= 0.9x: "
              f"{'met' if ratio >= 0.9 else 'NOT met'}); without the heads "
              f"{statistics.median(whole):,.0f} windows/s "
              f"({statistics.median(whole) / statistics.median(fio_iops):.2f}x)")
        deep_ratio = statistics.median(windows) / statistics.median(fio_deep)
        print(f"  the same against fio at the loader's queue depth ({seen['queue_depth']}): "
              f"{statistics.median(fio_deep):,.0f} IOPS: {deep_ratio:.2f}x")
        result.update(global_windows_per_s=round(statistics.median(windows)),
                      global_fio_iops=round(statistics.median(fio_iops)),
                      global_queue_depth=seen["queue_depth"],
                      global_fio_deep_iops=round(statistics.median(fio_deep)),
                      global_fio_deep_iops_runs=[round(v) for v in fio_deep],
                      global_deep_ratio=round(deep_ratio, 3),
                      global_ratio=round(ratio, 3),
                      global_windows_per_s_runs=[round(v) for v in windows],
                      global_whole_windows_per_s=round(statistics.median(whole)),
                      global_whole_windows_per_s_runs=[round(v) for v in whole],
                      global_fio_iops_runs=[round(v) for v in fio_iops])
        if cpp:
            cpp_ratio = statistics.median(cpp) / statistics.median(fio_iops)
            print(f"  the same, C++ Loader (whole epoch, with the heads): "
                  f"{statistics.median(cpp):,.0f} windows/s: {cpp_ratio:.2f}x fio (target >= "
                  f"0.9x: {'met' if cpp_ratio >= 0.9 else 'NOT met'})")
            result.update(global_cpp_windows_per_s=round(statistics.median(cpp)),
                          global_cpp_windows_per_s_runs=[round(v) for v in cpp],
                          global_cpp_ratio=round(cpp_ratio, 3))
        # What a window read without the heads is: seq_len + 1 tokens, widened
        # to the 512-byte alignment of O_DIRECT (a seq_len-2048 window of 4,098
        # bytes at a 4 KiB-aligned start reads 4,608). When windows start
        # aligned, fio reads that size at the windows' stride too.
        stride, window = args.seq_len * 2, (args.seq_len + 1) * 2
        if stride % 512 == 0:
            block = (window + 511) // 512 * 512
            align = math.gcd(stride, 4096)
            same = []
            for repeat in range(args.repeats):
                if cold:
                    drop_caches()
                same.append(run_fio_random(args.prefix + ".bin", block=block, align=align))
            same_ratio = statistics.median(whole) / statistics.median(same)
            print(f"  windows read whole vs fio reading {block:,} bytes at {align:,}-byte-aligned "
                  f"offsets, qd64: {statistics.median(same):,.0f} IOPS: {same_ratio:.2f}x "
                  f"(the engine at the read size such a window needs)")
            result.update(global_read_bytes=block, global_fio_same_iops=round(statistics.median(same)),
                          global_same_ratio=round(same_ratio, 3))
    if args.warm_batches > 0:
        workers = args.threads or os.cpu_count()
        warm = run_warm(args.prefix, args.seq_len, args.batch_size, workers, args.warm_batches)
        ratio = warm["gpufeed"] / warm["reference"]
        print(f"  warm, global shuffle, {workers} workers: gpufeed.DataLoader "
              f"{warm['gpufeed'] / 1e6:.0f} MB/s of tokens vs numpy memmap + torch DataLoader "
              f"{warm['reference'] / 1e6:.0f} MB/s: {ratio:.2f}x (target >= 3x: "
              f"{'met' if ratio >= 3 else 'NOT met'}); nanoGPT's get_batch in the training "
              f"process {warm['get_batch'] / 1e6:.0f} MB/s "
              f"({warm['gpufeed'] / warm['get_batch']:.2f}x)")
        result.update(warm_gpufeed_mb_per_s=round(warm["gpufeed"] / 1e6, 1),
                      warm_get_batch_mb_per_s=round(warm["get_batch"] / 1e6, 1),
                      warm_reference_mb_per_s=round(warm["reference"] / 1e6, 1),
                      warm_ratio=round(ratio, 3), warm_workers=workers)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
