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
bottleneck, its shares and the verdict sentence are the loader's own over its
recent window (``stats("recent")``: the last ``--window`` seconds of the run),
taken as they are, never recomputed or parsed here.

``--step-time T`` (or ``--step-time-from a100-resnet50``) emulates a training
step of T seconds per batch and reports the accelerator utilization;
``--au-search`` also measures how many such GPUs the loader feeds at AU >= 90%
(au.py).
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
    """The loader's own judgement from one stats() dict (take it with
    span="recent"): the bottleneck's name, the shares it was judged on and
    the expected gain of its advice."""
    return {
        "bottleneck": stats["bottleneck"],
        "span": stats.get("span", "open"),
        "window_seconds": stats["elapsed_seconds"],
        "loader_shares": {"read": stats["read_share"], "decode": stats["decode_share"],
                          "decode_cpu": stats.get("decode_cpu_share", 0.0),
                          "cpu_wait": stats.get("cpu_wait_share", 0.0),
                          "blocked": stats.get("blocked_share", 0.0),
                          "other": stats.get("other_share", 0.0),
                          "consumer_wait": stats["consumer_wait_share"],
                          "copy": stats["copy_share"]},
        "machine": {"cores": stats.get("cores", 0),
                    "process_cpu_cores": stats.get("process_cpu_cores", 0.0),
                    "external_cpu_cores": stats.get("external_cpu_cores", 0.0),
                    "steal_share": stats.get("steal_share", 0.0),
                    "disk": stats.get("disk", ""), "disk_util": stats.get("disk_util", -1.0)},
        "expected_gain": stats.get("expected_gain", 0.0),
        "verdict": stats["verdict"],
    }


def judgement_line(result: Dict[str, Any]) -> str:
    """One line from a result's bottleneck and loader shares (a report's or
    a plot title's), without reading the verdict sentence."""
    shares = result["loader_shares"]
    line = (f"{result['bottleneck']} (workers reading {shares['read']:.0%}, decoding "
            f"{shares['decode']:.0%} [on a CPU {shares['decode_cpu']:.0%}], blocked "
            f"{shares['blocked']:.0%}; consumer waited {shares['consumer_wait']:.0%}")
    if str(result.get("options", {}).get("device", "cpu")) != "cpu":
        line += f"; copy stream {shares['copy']:.0%}"
    span = {"recent": "the last", "epoch": "the epoch's", "open": "since open:"}.get(
        result.get("span", "open"), "")
    return line + f"; {span} {result.get('window_seconds', 0):.1f} s)"


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
              progress: bool = False, step_time: Optional[float] = None, step_label: str = "",
              au_search: bool = False, au_target: float = 0.9,
              window_seconds: float = 10.0, rank: Optional[int] = None,
              world_size: Optional[int] = None, num_nodes: Optional[int] = None,
              node_rank: Optional[int] = None) -> Dict[str, Any]:
    """Runs a DataLoader for `warmup` + `batches` batches (epochs wrap
    around) and returns the figures as a dict (the ``--json`` output).
    With `step_time`, the consumer sleeps that long per batch (an emulated
    training step) and the result has the accelerator utilization (au.py).
    `rank`, `world_size`, `num_nodes` and `node_rank` make the loader one
    rank of a larger job (``shuffle="node"``: its node's shards only); the
    result's ``storage`` has what it did to the source (opens, stats, bytes)."""
    from .au import Batches, accelerator_utilization, au_search as _au_search
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
    for name, value in (("rank", rank), ("world_size", world_size), ("num_nodes", num_nodes),
                        ("node_rank", node_rank)):
        if value is not None:
            extra[name] = value
    opened = time.monotonic()
    loader = DataLoader(path, batch_size=batch_size, shuffle=shuffle, transform=transform,
                        device=device, num_threads=num_threads, prefetch=prefetch,
                        io_backend=io_backend, direct_io=direct_io, on_error=on_error,
                        format=format, stats_window_seconds=window_seconds, **extra)
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
    stream = Batches(loader)
    search = None
    try:
        with StatsSampler(loader, interval) as sampler:
            for _ in range(warmup):
                stream.next()
                if step_time:
                    time.sleep(step_time)
                if bar is not None:
                    bar.update(1)
            mark = (time.monotonic(), dict(loader.stats()))
            for _ in range(batches):
                stream.next()
                if step_time:
                    time.sleep(step_time)
                if bar is not None:
                    bar.update(1)
            end = (time.monotonic(), dict(loader.stats()))
            # The judgement over the recent window (the end of the run), not
            # since open: start-up and the warm-up are not the steady state.
            recent = dict(loader.stats("recent"))
        if step_time and au_search:
            seconds = max(1e-9, end[0] - mark[0])
            search = _au_search(stream, loader, batches, batch_size, step_time,
                                accelerator_utilization(batches, step_time, seconds), au_target)
    finally:
        if bar is not None:
            bar.close()
        loader.close()
    seconds = max(1e-9, end[0] - mark[0])
    before, after = mark[1], end[1]
    samples = after["samples"] - before["samples"]
    shares = stage_shares(before, after, seconds)
    timeline = sampler.timeline()
    result = {
        "path": os.fspath(path),
        "options": {"batch_size": batch_size, "num_threads": after.get("threads"),
                    "device": device, "io_backend": io_backend, "direct_io": direct_io,
                    "prefetch": prefetch, "shuffle": shuffle, "format": format,
                    "transform": repr(transform), "cache_dir": cache_dir,
                    "cache_capacity": cache_capacity, "step_time": step_time,
                    "rank": rank, "world_size": world_size, "num_nodes": num_nodes,
                    "node_rank": node_rank},
        "batches": batches,
        "warmup_batches": warmup,
        "epochs_touched": stream.epochs,
        "batches_per_epoch": per_epoch,
        "open_seconds": open_seconds,
        "seconds": seconds,
        "samples": samples,
        "samples_per_s": samples / seconds,
        "batches_per_s": (after["batches"] - before["batches"]) / seconds,
        "mb_per_s": (after["bytes_read"] - before["bytes_read"]) / seconds / 1e6,
        "skipped": after["skipped"],
        # Since the loader opened (the dataset's opening included).
        "storage": {name: int(after.get(name, 0))
                    for name in ("source_opens", "source_stats", "source_bytes", "cache_reads")},
        "stages": shares,
        "io_backend": after.get("io_backend", ""),
        "io_mean_inflight": recent.get("io_mean_inflight", 0.0),
        "mean_ready_batches": after.get("mean_ready_batches", 0.0),
        **loader_judgement(recent),
        "report": recent.get("report", ""),
        "timeline": timeline,
    }
    if step_time:
        result["au"] = {"step_time": step_time, "step": step_label,
                        "au": accelerator_utilization(batches, step_time, seconds),
                        "target": au_target}
        if search is not None:
            result["au"].update(search)
    return result


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
    storage = result.get("storage")
    if storage:
        lines.append(f"source:     {storage['source_opens']} opens, {storage['source_stats']} stats, "
                     f"{storage['source_bytes']} bytes since open; {storage['cache_reads']} "
                     "node-cache reads")
    lines.append(f"bottleneck: {judgement_line(result)}")
    lines.append(f"verdict:    {result['verdict']}")
    au = result.get("au")
    if au:
        lines.append(f"AU:         {au['au']:.1%} accelerator utilization with an emulated step of "
                     f"{au['step']}")
        if "gpus_at_target" in au:
            tried = ", ".join(f"{n} GPU{'s' if n != '1' else ''} {v:.0%}"
                              for n, v in au["measured"].items())
            lines.append(f"            this node's storage + loader feed {au['gpus_at_target']} "
                         f"such GPU(s) at AU >= {au['target']:.0%} (measured: {tried}; estimated "
                         f"from the loader's capacity, {au['loader_capacity_samples_per_s']:.0f} "
                         f"samples/s: {au['estimated_gpus']})")
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
    parser.add_argument("--shuffle", choices=("global", "block", "node", "none"),
                        default="global",
                        help='"node": this node\'s shards only (with --num-nodes/--node-rank)')
    parser.add_argument("--rank", type=int, default=None,
                        help="this process's rank in the job (default: RANK or 0)")
    parser.add_argument("--world-size", type=int, default=None,
                        help="ranks in the job (default: WORLD_SIZE or 1)")
    parser.add_argument("--num-nodes", type=int, default=None,
                        help="nodes of the job for --shuffle node (default: from the "
                             "torchrun environment, else 1)")
    parser.add_argument("--node-rank", type=int, default=None,
                        help="this node's index for --shuffle node (default: GROUP_RANK, "
                             "NODE_RANK, else from the rank)")
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
    parser.add_argument("--step-time", type=float, default=None, metavar="SECONDS",
                        help="emulate a training step of SECONDS per batch and report the "
                             "accelerator utilization (AU)")
    parser.add_argument("--step-time-from", default=None, metavar="NAME|[NAME@]FILE.csv",
                        help="the step time from a GPU/model profile (a100-resnet50, "
                             "h100-resnet50, v100-resnet50, t4-resnet50) or a CSV of "
                             "name,samples_per_second")
    parser.add_argument("--au-search", action="store_true",
                        help="also measure how many such GPUs the loader feeds at --au-target")
    parser.add_argument("--au-target", type=float, default=0.9)
    parser.add_argument("--window", type=float, default=10.0,
                        help="seconds of the recent window the verdict is judged on (default 10)")


def main_from_args(args) -> int:
    import sys
    from .au import step_time_for
    step_time, step_label = step_time_for(args.batch_size, args.step_time, args.step_time_from)
    if args.au_search and step_time is None:
        raise SystemExit("--au-search needs --step-time or --step-time-from")
    result = run_bench(args.path, batches=args.batches, warmup=args.warmup,
                       batch_size=args.batch_size, num_threads=args.threads,
                       transform=_make_transform(args), device=args.device,
                       io_backend=args.io_backend, direct_io=args.direct_io,
                       prefetch=args.prefetch, shuffle=args.shuffle, format=args.format,
                       on_error=args.on_error, cache_dir=args.cache_dir,
                       cache_capacity=args.cache_capacity, interval=args.interval,
                       progress=not (args.quiet or args.json) and sys.stderr.isatty(),
                       step_time=step_time, step_label=step_label, au_search=args.au_search,
                       au_target=args.au_target, window_seconds=args.window,
                       rank=args.rank, world_size=args.world_size, num_nodes=args.num_nodes,
                       node_rank=args.node_rank)
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
