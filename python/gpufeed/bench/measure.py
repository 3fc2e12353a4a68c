"""Measuring: the loader run batch by batch (an emulated training step
per batch when asked), its stats sampled on a thread, stage shares and the
loader's own judgement over its recent window."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional

__all__ = ["StatsSampler", "run_bench", "stage_shares", "loader_judgement"]

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


class _Window(NamedTuple):
    """The measured window of a bench run: the stats() samples at its start
    (after the warm-up) and its end, its length in seconds (at least 1e-9),
    the loader's stats over its recent window and the (stopped) sampler of
    the whole run."""
    before: Dict[str, Any]
    after: Dict[str, Any]
    seconds: float
    recent: Dict[str, Any]
    sampler: StatsSampler


def _check_counts(batches: int, warmup: int) -> None:
    """Raises ValueError unless batches >= 1 and warmup >= 0."""
    if batches < 1:
        raise ValueError("batches must be at least 1")
    if warmup < 0:
        raise ValueError("warmup must be >= 0")


def _optional_loader_options(**options) -> Dict[str, Any]:
    """The keywords among `options` whose value is not None. The cache and
    distributed options reach the DataLoader only when asked for, so that a
    bench without them runs on a loader that does not know them."""
    return {name: value for name, value in options.items() if value is not None}


def _progress_bar(progress: bool, total: int):
    """A tqdm bar over `total` batches when `progress` is asked for and tqdm
    imports; None otherwise."""
    if not progress:
        return None
    try:
        from tqdm import tqdm
        return tqdm(total=total, unit="batch", desc="bench", leave=False)
    except ImportError:
        return None


def _take_batches(stream, count: int, step_time: Optional[float], bar) -> None:
    """Takes `count` batches from `stream`, sleeping `step_time` after each
    (when set) and advancing `bar` (when not None)."""
    for _ in range(count):
        stream.next()
        if step_time:
            time.sleep(step_time)
        if bar is not None:
            bar.update(1)


def _measure_window(loader, stream, *, warmup: int, batches: int, step_time: Optional[float],
                    interval: float, bar) -> _Window:
    """Runs `warmup` then `batches` batches with a StatsSampler beside them
    and returns the window over the `batches`. The judgement is taken over
    the loader's recent window (the end of the run), not since open:
    start-up and the warm-up are not the steady state."""
    with StatsSampler(loader, interval) as sampler:
        _take_batches(stream, warmup, step_time, bar)
        mark = (time.monotonic(), dict(loader.stats()))
        _take_batches(stream, batches, step_time, bar)
        end = (time.monotonic(), dict(loader.stats()))
        recent = dict(loader.stats("recent"))
    return _Window(before=mark[1], after=end[1], seconds=max(1e-9, end[0] - mark[0]),
                   recent=recent, sampler=sampler)


def _run_and_close(loader, stream, *, warmup: int, batches: int, batch_size: int,
                   step_time: Optional[float], interval: float, bar, au_search: bool,
                   au_target: float):
    """Measures the window, then (with `step_time` and `au_search`) the AU
    search; closes `bar` and `loader` whatever happens. Returns the window
    and the search's result (None when it did not run)."""
    from ..au import accelerator_utilization, au_search as _au_search
    try:
        window = _measure_window(loader, stream, warmup=warmup, batches=batches,
                                 step_time=step_time, interval=interval, bar=bar)
        search = None
        if step_time and au_search:
            search = _au_search(stream, loader, batches, batch_size, step_time,
                                accelerator_utilization(batches, step_time, window.seconds),
                                au_target)
    finally:
        if bar is not None:
            bar.close()
        loader.close()
    return window, search


def _figures(window: _Window) -> Dict[str, Any]:
    """Throughput over the window, in the order of the ``--json`` keys from
    "seconds" to "timeline" (the loader's judgement spliced in)."""
    before, after, seconds, recent = window.before, window.after, window.seconds, window.recent
    samples = after["samples"] - before["samples"]
    shares = stage_shares(before, after, seconds)
    timeline = window.sampler.timeline()
    return {
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


def _au_result(*, batches: int, step_time: float, step_label: str, seconds: float,
               au_target: float, search: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The result's "au" entry: the emulated step, the AU it reached and,
    when the search ran, the search's figures."""
    from ..au import accelerator_utilization
    au = {"step_time": step_time, "step": step_label,
          "au": accelerator_utilization(batches, step_time, seconds), "target": au_target}
    if search is not None:
        au.update(search)
    return au


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
    from ..au import Batches
    from ..loader import DataLoader
    _check_counts(batches, warmup)
    extra = _optional_loader_options(cache_dir=cache_dir, cache_capacity=cache_capacity,
                                     rank=rank, world_size=world_size, num_nodes=num_nodes,
                                     node_rank=node_rank)
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
    bar = _progress_bar(progress, warmup + batches)
    stream = Batches(loader)
    window, search = _run_and_close(loader, stream, warmup=warmup, batches=batches,
                                    batch_size=batch_size, step_time=step_time,
                                    interval=interval, bar=bar, au_search=au_search,
                                    au_target=au_target)
    result = {
        "path": os.fspath(path),
        "options": {"batch_size": batch_size, "num_threads": window.after.get("threads"),
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
        **_figures(window),
    }
    if step_time:
        result["au"] = _au_result(batches=batches, step_time=step_time, step_label=step_label,
                                  seconds=window.seconds, au_target=au_target, search=search)
    return result
