"""``gpufeed bench PATH``: the loader on any dataset, with throughput, the
per-stage breakdown and the bottleneck verdict.

    gpufeed bench /data/train-packed --batches 200 --batch-size 128 --threads 8 \
        [--transform train|eval|raw] [--dtype uint8] [--device cuda] [--io-backend pread] \
        [--cache-dir /nvme/cache --cache-capacity 200GiB] [--plot stages.png] [--json]

A sampler thread reads the loader's cumulative stats every ``--interval``
seconds; the difference between two samples gives each stage's share of that
interval:

- workers (the decode pool, which also waits for the read engine's bytes):
  reading, decoding, blocked (the prefetch window is full: the consumer has
  not taken the ready batches), starved (idle: nothing to do);
- consumer (the loop calling ``next()``): busy (its own work, here just
  counting) or starved (waiting in ``next()`` for a batch).

Throughput and the breakdown cover the batches after ``--warmup``; the
bottleneck, its shares and the verdict sentence are the loader's own (since
it opened: ``stats()["bottleneck"]``, ``read_share``, ...), taken as they are,
never recomputed or parsed here.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

__all__ = ["StatsSampler", "run_bench", "stage_shares", "loader_judgement", "add_arguments",
           "main_from_args"]

# Fields of DataLoader.stats() that grow over time; shares are differences.
_COUNTERS = ("batches", "samples", "bytes_read", "skipped", "read_seconds", "decode_seconds",
             "blocked_seconds", "consumer_wait_seconds", "io_requests")


def stage_shares(before: Dict[str, Any], after: Dict[str, Any], seconds: float) -> Dict[str, float]:
    """Each stage's share of `seconds` between two stats() samples.

    Worker seconds are summed over the threads, so they are divided by
    threads x seconds; the consumer is one thread. "starved" is what is left
    of the capacity (a worker with no sample to work on), clipped at 0
    because the loader adds a worker's time when its step ends, which can
    fall just after the sample."""
    seconds = max(seconds, 1e-9)
    threads = max(1, int(after.get("threads") or 1))
    capacity = seconds * threads
    read = max(0.0, after["read_seconds"] - before["read_seconds"]) / capacity
    decode = max(0.0, after["decode_seconds"] - before["decode_seconds"]) / capacity
    blocked = max(0.0, after["blocked_seconds"] - before["blocked_seconds"]) / capacity
    worked = read + decode + blocked
    if worked > 1.0:  # time reported late: scale to the interval, keep the proportions
        read, decode, blocked = read / worked, decode / worked, blocked / worked
    waited = max(0.0, after["consumer_wait_seconds"] - before["consumer_wait_seconds"]) / seconds
    waited = min(1.0, waited)
    return {
        "workers_read": read,
        "workers_decode": decode,
        "workers_blocked": blocked,
        "workers_starved": max(0.0, 1.0 - read - decode - blocked),
        "consumer_busy": 1.0 - waited,
        "consumer_starved": waited,
    }


def loader_judgement(stats: Dict[str, Any]) -> Dict[str, Any]:
    """The loader's own judgement from one stats() dict: the bottleneck's
    name and the shares it was judged on (since the loader opened)."""
    return {
        "bottleneck": stats["bottleneck"],
        "loader_shares": {"read": stats["read_share"], "decode": stats["decode_share"],
                          "consumer_wait": stats["consumer_wait_share"],
                          "copy": stats["copy_share"]},
        "verdict": stats["verdict"],
    }


def judgement_line(result: Dict[str, Any]) -> str:
    """One line from a result's bottleneck and loader shares (a report's or
    a plot title's), without reading the verdict sentence."""
    shares = result["loader_shares"]
    line = (f"{result['bottleneck']} (workers reading {shares['read']:.0%}, decoding "
            f"{shares['decode']:.0%}; consumer waited {shares['consumer_wait']:.0%}")
    if str(result["options"]["device"]) != "cpu":
        line += f"; copy stream {shares['copy']:.0%}"
    return line + ", since the loader opened)"


class StatsSampler:
    """Samples ``loader.stats()`` every `interval` seconds on a thread.

    The loader's Stats() takes its lock and copies a few numbers, so sampling
    a few times a second costs nothing measurable. Use as a context manager;
    ``samples`` holds (monotonic time, stats dict) pairs, the first taken on
    entry and the last on exit."""

    def __init__(self, loader, interval: float = 0.25):
        self._loader = loader
        self._interval = max(0.01, float(interval))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.samples: List[tuple] = []
        self._lock = threading.Lock()

    def _take(self) -> None:
        stats = dict(self._loader.stats())
        with self._lock:
            self.samples.append((time.monotonic(), stats))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._take()

    def __enter__(self) -> "StatsSampler":
        self._take()
        self._thread = threading.Thread(target=self._run, name="gpufeed-stats", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()

    def timeline(self) -> List[Dict[str, float]]:
        """Per interval: start/end (seconds since the first sample), samples/s
        and the stage shares."""
        with self._lock:
            samples = list(self.samples)
        if not samples:
            return []
        origin = samples[0][0]
        rows = []
        for (t0, s0), (t1, s1) in zip(samples, samples[1:]):
            seconds = t1 - t0
            if seconds <= 0:
                continue
            row = {"start": t0 - origin, "end": t1 - origin,
                   "samples_per_s": (s1["samples"] - s0["samples"]) / seconds}
            row.update(stage_shares(s0, s1, seconds))
            rows.append(row)
        return rows


def _make_transform(args):
    from .loader import ImageTransform, RawTransform
    if args.transform == "raw":
        return RawTransform(dtype="uint8", shape=(args.raw_length,))
    return ImageTransform(args.size, train=(args.transform == "train"), dtype=args.dtype,
                          layout=args.layout)


def run_bench(path: str, *, batches: int = 100, warmup: int = 5, batch_size: int = 64,
              num_threads: Optional[int] = None, transform=None, device: str = "cpu",
              io_backend: str = "auto", direct_io: bool = False, prefetch: int = 2,
              shuffle: str = "global", format: str = "auto", on_error: str = "raise",
              cache_dir: Optional[str] = None, cache_capacity=None, interval: float = 0.25,
              progress: bool = False) -> Dict[str, Any]:
    """Runs a DataLoader for `warmup` + `batches` batches (epochs wrap
    around) and returns the figures as a dict (the ``--json`` output)."""
    from .loader import DataLoader
    if batches < 1:
        raise ValueError("batches must be at least 1")
    if warmup < 0:
        raise ValueError("warmup must be >= 0")
    extra = {}
    # The node-local cache options go through only when asked for, so that a
    # bench without them runs on a loader that does not know them.
    if cache_dir is not None:
        extra["cache_dir"] = cache_dir
    if cache_capacity is not None:
        extra["cache_capacity"] = cache_capacity
    opened = time.monotonic()
    loader = DataLoader(path, batch_size=batch_size, shuffle=shuffle, transform=transform,
                        device=device, num_threads=num_threads, prefetch=prefetch,
                        io_backend=io_backend, direct_io=direct_io, on_error=on_error,
                        format=format, **extra)
    open_seconds = time.monotonic() - opened
    per_epoch = len(loader)
    if per_epoch == 0:
        loader.close()
        raise ValueError(f"{path}: no full batch of {batch_size} in an epoch; lower --batch-size")
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=warmup + batches, unit="batch", desc="bench", leave=False)
        except ImportError:
            bar = None
    epoch = 0
    delivered = 0
    mark = None  # (time, stats) when the warm-up ended
    try:
        with StatsSampler(loader, interval) as sampler:
            started = time.monotonic()
            if warmup == 0:
                mark = (started, dict(loader.stats()))
            while delivered < warmup + batches:
                loader.set_epoch(epoch)
                for images, labels in loader:
                    delivered += 1
                    if bar is not None:
                        bar.update(1)
                    if delivered == warmup:
                        mark = (time.monotonic(), dict(loader.stats()))
                    if delivered >= warmup + batches:
                        break
                epoch += 1
            del images, labels
            end = (time.monotonic(), dict(loader.stats()))
    finally:
        if bar is not None:
            bar.close()
        loader.close()
    seconds = max(1e-9, end[0] - mark[0])
    before, after = mark[1], end[1]
    samples = after["samples"] - before["samples"]
    shares = stage_shares(before, after, seconds)
    timeline = sampler.timeline()
    return {
        "path": os.fspath(path),
        "options": {"batch_size": batch_size, "num_threads": after.get("threads"),
                    "device": device, "io_backend": io_backend, "direct_io": direct_io,
                    "prefetch": prefetch, "shuffle": shuffle, "format": format,
                    "transform": repr(transform), "cache_dir": cache_dir,
                    "cache_capacity": cache_capacity},
        "batches": batches,
        "warmup_batches": warmup,
        "epochs_touched": epoch,
        "batches_per_epoch": per_epoch,
        "open_seconds": open_seconds,
        "seconds": seconds,
        "samples": samples,
        "samples_per_s": samples / seconds,
        "batches_per_s": (after["batches"] - before["batches"]) / seconds,
        "mb_per_s": (after["bytes_read"] - before["bytes_read"]) / seconds / 1e6,
        "skipped": after["skipped"],
        "stages": shares,
        "io_backend": after.get("io_backend", ""),
        "io_mean_inflight": after.get("io_mean_inflight", 0.0),
        "mean_ready_batches": after.get("mean_ready_batches", 0.0),
        **loader_judgement(after),
        "report": after.get("report", ""),
        "timeline": timeline,
    }


def plot_timeline(result: Dict[str, Any], out_path: str) -> None:
    """Stacked shares of the workers and of the consumer per interval, and
    samples/s, in one PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["timeline"]
    if not rows:
        raise ValueError("no interval was sampled; run more batches or lower --interval")
    t = [(row["start"] + row["end"]) / 2 for row in rows]
    figure, (workers, consumer, rate) = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True)
    workers.stackplot(t, [r["workers_read"] for r in rows], [r["workers_decode"] for r in rows],
                      [r["workers_blocked"] for r in rows], [r["workers_starved"] for r in rows],
                      labels=["reading (busy)", "decoding (busy)", "blocked (window full)",
                              "starved (idle)"],
                      colors=["#4c72b0", "#55a868", "#c44e52", "#cccccc"])
    workers.set_ylim(0, 1)
    workers.set_ylabel("share")
    workers.set_title(f"workers ({result['options']['num_threads']} threads)")
    workers.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    consumer.stackplot(t, [r["consumer_busy"] for r in rows], [r["consumer_starved"] for r in rows],
                       labels=["busy", "starved (waiting in next())"],
                       colors=["#55a868", "#c44e52"])
    consumer.set_ylim(0, 1)
    consumer.set_ylabel("share")
    consumer.set_title("consumer")
    consumer.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    rate.plot(t, [r["samples_per_s"] for r in rows], color="#333333")
    rate.set_ylabel("samples/s")
    rate.set_xlabel("seconds since the loader started")
    figure.suptitle(f"gpufeed bench {os.path.basename(result['path'].rstrip('/'))}: "
                    f"{result['samples_per_s']:.0f} samples/s\n"
                    f"bottleneck: {judgement_line(result)}", fontsize=9)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    figure.savefig(out_path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def format_report(result: Dict[str, Any]) -> str:
    stages = result["stages"]
    options = result["options"]
    lines = [
        f"dataset:    {result['path']}",
        f"options:    batch {options['batch_size']}, {options['num_threads']} threads, "
        f"device {options['device']}, io {result['io_backend'] or options['io_backend']}, "
        f"prefetch {options['prefetch']}, shuffle {options['shuffle']}",
        f"measured:   {result['batches']} batches after {result['warmup_batches']} warm-up, "
        f"{result['seconds']:.2f} s",
        f"throughput: {result['samples_per_s']:.0f} samples/s, {result['batches_per_s']:.1f} "
        f"batches/s, {result['mb_per_s']:.1f} MB/s read",
        "stages (share of the measured time):",
        f"  workers   reading {stages['workers_read']:6.1%}  decoding {stages['workers_decode']:6.1%}"
        f"  blocked {stages['workers_blocked']:6.1%}  starved {stages['workers_starved']:6.1%}",
        f"  consumer  busy {stages['consumer_busy']:6.1%}  starved {stages['consumer_starved']:6.1%}"
        f"  (ready batches at next(): {result['mean_ready_batches']:.2f})",
    ]
    if result["skipped"]:
        lines.append(f"skipped:    {result['skipped']} bad samples (on_error=skip)")
    lines.append(f"bottleneck: {judgement_line(result)}")
    lines.append(f"verdict:    {result['verdict']}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    from .pack import parse_size
    parser.add_argument("path", help="a dataset gpufeed can open (packed shards, LMDB, ImageFolder)")
    parser.add_argument("--batches", type=int, default=100, help="measured batches (default 100)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="batches before the measurement starts (default 5)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="decode threads (default: cores)")
    parser.add_argument("--transform", choices=("train", "eval", "raw"), default="train",
                        help="train: RandomResizedCrop + flip; eval: resize + center crop; "
                             "raw: the first --raw-length bytes of each record")
    parser.add_argument("--size", type=int, default=224, help="output image size")
    parser.add_argument("--dtype", choices=("float32", "uint8", "float16", "bfloat16"),
                        default="float32")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    parser.add_argument("--raw-length", type=int, default=16)
    parser.add_argument("--device", default="cpu", help='"cpu" or "cuda[:N]"')
    parser.add_argument("--io-backend", choices=("auto", "io_uring", "pread"), default="auto")
    parser.add_argument("--direct-io", action="store_true", help="O_DIRECT reads")
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--shuffle", choices=("global", "block", "none"), default="global")
    parser.add_argument("--format", default="auto")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise")
    parser.add_argument("--cache-dir", default=None, help="node-local cache directory")
    parser.add_argument("--cache-capacity", type=parse_size, default=None,
                        help="node-local cache budget, e.g. 200GiB")
    parser.add_argument("--interval", type=float, default=0.25,
                        help="seconds between stats samples for the timeline (default 0.25)")
    parser.add_argument("--plot", default=None, metavar="OUT.png",
                        help="draw each stage's busy/starved/blocked share over time")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def main_from_args(args) -> int:
    import sys
    result = run_bench(args.path, batches=args.batches, warmup=args.warmup,
                       batch_size=args.batch_size, num_threads=args.threads,
                       transform=_make_transform(args), device=args.device,
                       io_backend=args.io_backend, direct_io=args.direct_io,
                       prefetch=args.prefetch, shuffle=args.shuffle, format=args.format,
                       on_error=args.on_error, cache_dir=args.cache_dir,
                       cache_capacity=args.cache_capacity, interval=args.interval,
                       progress=not (args.quiet or args.json) and sys.stderr.isatty())
    if args.plot:
        plot_timeline(result, args.plot)
        result["plot"] = os.path.abspath(args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
        if args.plot:
            print(f"plot:       {result['plot']}")
    return 0
