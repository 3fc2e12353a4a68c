"""Accelerator utilization (AU), the way MLPerf Storage measures storage for
training: the consumer emulates a training step of T seconds per batch
(a sleep: the GPU computes, the CPU is free), and AU is the share of wall
time it computed rather than waited for the loader.

    AU = batches x T / wall time

With N GPUs on a node each wanting one batch per T seconds, the loader must
deliver N batches per T; one consumer stepping every T / N seconds asks for
exactly that, so ``gpufeed bench --step-time T --au-search`` measures AU at
growing N and reports the largest N at AU >= 90% (``--au-target``).

Step times come from ``--step-time`` (seconds per batch) or from
``--step-time-from`` NAME|FILE.csv: a per-GPU training rate in samples/s,
divided into the batch size. The built-in rates are rough public figures for
ResNet-50 training with mixed precision (NVIDIA's DeepLearningExamples and
MLPerf Training results, rounded down); measure your own model's step time
and pass it with ``--step-time`` for a real answer.
"""

from __future__ import annotations

import csv
import math
import os
import time
from typing import Any, Dict, Optional, Tuple

__all__ = ["STEP_PROFILES", "step_time_for", "accelerator_utilization", "gpus_at_target",
           "Batches", "au_search"]

# name -> (samples/s one GPU trains at, what it is)
STEP_PROFILES: Dict[str, Tuple[float, str]] = {
    "v100-resnet50": (1300.0, "ResNet-50, V100, AMP (about 1,300 img/s)"),
    "a100-resnet50": (2600.0, "ResNet-50, A100, AMP (about 2,600 img/s)"),
    "h100-resnet50": (5000.0, "ResNet-50, H100, AMP (about 5,000 img/s)"),
    "t4-resnet50": (400.0, "ResNet-50, T4, AMP (about 400 img/s)"),
}


def _profiles_from_csv(path: str) -> Dict[str, Tuple[float, str]]:
    """Rows of name,samples_per_second[,description]; '#' starts a comment."""
    out: Dict[str, Tuple[float, str]] = {}
    with open(path, newline="") as source:
        for line_number, row in enumerate(csv.reader(source), 1):
            if not row or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{line_number}: want name,samples_per_second[,description]")
            try:
                rate = float(row[1])
            except ValueError:
                if line_number == 1:
                    continue  # a header
                raise ValueError(f"{path}:{line_number}: {row[1]!r} is not a number") from None
            if rate <= 0:
                raise ValueError(f"{path}:{line_number}: samples_per_second must be positive")
            out[row[0].strip()] = (rate, row[2].strip() if len(row) > 2 else row[0].strip())
    return out


def step_time_for(batch_size: int, step_time: Optional[float] = None,
                  step_time_from: Optional[str] = None) -> Tuple[Optional[float], str]:
    """(seconds per batch, what it is) from --step-time or --step-time-from
    (a built-in profile name, or NAME@FILE.csv / FILE.csv with one row);
    (None, "") when neither is given."""
    if step_time is not None and step_time_from is not None:
        raise ValueError("give --step-time or --step-time-from, not both")
    if step_time is not None:
        if step_time <= 0:
            raise ValueError("--step-time must be positive")
        return float(step_time), f"{step_time * 1e3:.1f} ms per batch of {batch_size}"
    if step_time_from is None:
        return None, ""
    name, _, path = step_time_from.partition("@")
    if not path and os.path.exists(name):
        name, path = "", name
    profiles = _profiles_from_csv(path) if path else STEP_PROFILES
    if not name and len(profiles) == 1:
        name = next(iter(profiles))
    if name not in profiles:
        raise ValueError(f"unknown step-time profile {name!r}; known: {', '.join(sorted(profiles))}")
    rate, what = profiles[name]
    seconds = batch_size / rate
    return seconds, f"{name}: {what} -> {seconds * 1e3:.1f} ms per batch of {batch_size}"


def accelerator_utilization(batches: int, step_time: float, wall_seconds: float) -> float:
    """The share of `wall_seconds` the emulated accelerator computed."""
    return min(1.0, batches * step_time / max(wall_seconds, 1e-9))


def gpus_at_target(loader_samples_per_s: float, batch_size: int, step_time: float,
                   target: float = 0.9) -> int:
    """GPUs a loader delivering `loader_samples_per_s` could feed at AU >=
    target, each training one batch per `step_time`: N GPUs get the rate
    split N ways, so AU = rate / (N x batch / T) while that is below 1."""
    per_gpu = batch_size / step_time
    return max(0, int(math.floor(loader_samples_per_s / (target * per_gpu) + 1e-9)))


class Batches:
    """Batches without end, epoch after epoch; counts the epochs touched."""

    def __init__(self, loader):
        self._loader = loader
        self.epochs = 0
        self._iterator = None

    def next(self):
        while True:
            if self._iterator is None:
                self._loader.set_epoch(self.epochs)
                self._iterator = iter(self._loader)
                self.epochs += 1
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None


def au_search(batches: Batches, loader, count: int, batch_size: int, step_time: float,
               first_au: float, target: float) -> Dict[str, Any]:
    """Measures AU with one consumer stepping every step_time / N seconds (the
    demand of N GPUs) for N from the loader's estimated capacity, and returns
    the largest N measured at AU >= target."""
    recent = dict(loader.stats("recent"))
    seconds = max(1e-9, recent["elapsed_seconds"])
    busy = max(0.05, 1.0 - recent["blocked_share"])
    capacity = recent["samples"] / seconds / busy  # samples/s with the workers never blocked
    estimate = gpus_at_target(capacity, batch_size, step_time, target)
    measured: Dict[int, float] = {1: first_au}

    def au_at(gpus: int) -> float:
        if gpus not in measured:
            step = step_time / gpus
            started = time.monotonic()
            for _ in range(count):
                batches.next()
                time.sleep(step)
            measured[gpus] = accelerator_utilization(count, step, time.monotonic() - started)
        return measured[gpus]

    best = 0
    if first_au >= target:
        best = 1
        n = max(2, estimate)
        for _ in range(4):  # at most four more phases
            if au_at(n) >= target:
                best = max(best, n)
                if n + 1 in measured or au_at(n + 1) < target:
                    break
                best = n + 1
                n = n + 2
            else:
                n = max(best + 1, (best + n) // 2)
                if n in measured:
                    break
    return {"estimated_gpus": estimate, "loader_capacity_samples_per_s": capacity,
            "gpus_at_target": best,
            "measured": {str(k): v for k, v in sorted(measured.items())}}
