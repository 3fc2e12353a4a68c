"""``gpufeed diagnose --embedding PATH``: an embedding table's shape, its
tier counters after a short probe of Zipf-distributed lookups, and a
sentence saying whether lookups are bound by the source and what to change.

The probe warms the table up first (its stats are then reset), so the
counters show the tiers as training would meet them after its first
steps, not the first touch of every row.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

__all__ = ["probe_embedding", "embedding_judgement", "embedding_lines"]

# Below this share of ids served from RAM, misses decide a lookup's latency.
_GOOD_HIT_RATE = 0.8


def probe_embedding(path: str, *, lookups: int = 50, batch: int = 4096,
                    table_options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """`lookups` lookups of `batch` Zipf(1.05) ids after as many warm-up
    lookups (gpufeed bench --embedding measures longer), with the judgement."""
    from ..bench.embedding import run_embedding_bench
    result = run_embedding_bench(os.fspath(path), ids=lookups * batch, batch=batch,
                                 warmup=lookups, table_options=table_options)
    options = table_options or {}
    result["judgement"] = embedding_judgement(
        result, cache_dir_given=bool(options.get("cache_dir")),
        preloaded=bool(options.get("preload")))
    return result


def embedding_judgement(result: Dict[str, Any], *, cache_dir_given: bool,
                        preloaded: bool) -> Dict[str, Any]:
    """``source_bound`` (most ids missed RAM and the misses read the table
    file) and the sentence: the figures it was judged on, then what to
    change (preload when the table fits the budget, a larger cache_bytes when
    the ideal static cache of a larger budget would hit more, cache_dir for a
    local copy of the file)."""
    from ..pack import human_bytes
    stats = result["stats"]
    hit_rate, rows = stats["hit_rate"], stats["rows"]
    figures = (f"hit rate {hit_rate:.0%} (an ideal static cache of the same budget: "
               f"{result['ideal_hit_rate']:.0%}), p50 {stats['p50_us']:.0f} us, p99 "
               f"{stats['p99_us']:.0f} us a lookup of {result['batch']}")
    if rows == 0:
        return {"source_bound": False, "nvme_bound": False, "sentence": "no id was looked up"}
    missed = stats["nvme_rows"] + stats["source_rows"]
    source_bound = hit_rate < _GOOD_HIT_RATE and stats["source_rows"] > stats["nvme_rows"]
    nvme_bound = hit_rate < _GOOD_HIT_RATE and not source_bound and missed > 0
    table_bytes = result["table_bytes"]
    advice: List[str] = []
    if not preloaded and stats["capacity_rows"] >= result["rows"]:
        advice.append(f"preload=True (the table, {human_bytes(table_bytes)}, fits in the "
                      "RAM budget: every lookup becomes a RAM hit)")
    elif stats["capacity_rows"] < result["rows"]:
        advice.append(f"a larger cache_bytes (it holds {stats['capacity_rows']} of "
                      f"{result['rows']} rows; the hot rows of a Zipf table take most lookups)")
    if source_bound and not cache_dir_given:
        advice.append("cache_dir on local NVMe (misses then read a node-local copy of the "
                      "table instead of the source)")
    if source_bound:
        sentence = (f"lookups are bound by the source: {figures}; {stats['source_rows']} rows "
                    f"came from the table file in {stats['source_reads']} reads. Change: "
                    + "; ".join(advice or ["the source's latency (a faster filesystem)"]) + ".")
    elif nvme_bound:
        sentence = (f"lookups are bound by the node cache (NVMe): {figures}; "
                    f"{stats['nvme_rows']} rows came from the local copy. Change: "
                    + "; ".join(advice or ["nothing in gpufeed: the misses read local NVMe"])
                    + ".")
    else:
        sentence = f"lookups are served from memory, not bound by the source: {figures}."
        if advice and hit_rate < 1.0:
            sentence += " The remaining misses go with " + advice[0] + "."
    return {"source_bound": source_bound, "nvme_bound": nvme_bound, "sentence": sentence}


def embedding_lines(result: Dict[str, Any]) -> List[str]:
    """The "== embedding table" section of the text report."""
    from ..bench.embedding import tier_line
    from ..pack import human_bytes
    if "skipped" in result:
        return ["== embedding table", f"table:        {result['skipped']}"]
    stats = result["stats"]
    return [
        "== embedding table (a probe of Zipf(1.05) lookups)",
        f"table:        {result['path']}: {result['rows']} x {result['dim']} {result['dtype']}, "
        f"{result['row_bytes']} bytes a row ({human_bytes(result['table_bytes'])})",
        f"probe:        {result['ids'] // result['batch']} lookups of {result['batch']} ids after "
        f"{result['warmup_lookups']} warm-up lookups; {result['rows_per_s']:.0f} rows/s",
        f"tiers:        {tier_line(stats)}",
        f"RAM tier:     {stats['resident_rows']} of {stats['capacity_rows']} rows resident, "
        f"{stats['admitted']} admitted, {stats['rejected']} rejected, {stats['evicted']} "
        "evicted",
        f"verdict:      {result['judgement']['sentence']}",
    ]
