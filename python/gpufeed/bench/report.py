"""Reporting: the text report, the judgement line and the timeline plot
of a run_bench result."""

from __future__ import annotations

import os
from typing import Any, Dict

__all__ = ["judgement_line", "format_report", "plot_timeline"]

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
