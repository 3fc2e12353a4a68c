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

``--embedding TABLE`` (alone, or beside a dataset PATH) looks up
Zipf-distributed ids in an embedding table and reports lookups/s, rows/s,
the RAM hit rate beside an ideal static cache's, p50/p99 latency and the
tier counters (embedding.py).
"""

from .cli import add_arguments, main_from_args
from .embedding import ZipfIds, format_embedding_report, run_embedding_bench
from .measure import StatsSampler, loader_judgement, run_bench, stage_shares
from .report import format_report, judgement_line, plot_timeline

__all__ = ["StatsSampler", "run_bench", "stage_shares", "loader_judgement", "judgement_line",
           "format_report", "plot_timeline", "add_arguments", "main_from_args", "ZipfIds",
           "run_embedding_bench", "format_embedding_report"]
