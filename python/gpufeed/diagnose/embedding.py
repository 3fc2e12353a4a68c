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

__all__ = ["probe_embedding", "bound_tier", "embedding_judgement", "embedding_lines"]

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


def bound_tier(stats: Dict[str, Any]) -> Optional[str]:
    """"source", "nvme" or None: the tier below RAM that served more missed
    rows, when lookups wait for it: on average every call reads a row from
    it (a call takes as long as its slowest read), or fewer than 80% of the
    ids hit RAM."""
    tier = "source" if stats["source_rows"] >= stats["nvme_rows"] else "nvme"
    rows = stats[f"{tier}_rows"]
    if rows == 0:
        return None
    if rows >= max(1, stats["lookups"]) or stats["hit_rate"] < _GOOD_HIT_RATE:
        return tier
    return None


def _advice(result: Dict[str, Any], tier: Optional[str], cache_dir_given: bool,
            preloaded: bool) -> List[str]:
    """What to change: preload when the budget holds the table, else a larger
    cache_bytes; cache_dir when the misses read the source."""
    from ..pack import human_bytes
    stats = result["stats"]
    advice: List[str] = []
    if not preloaded and stats["capacity_rows"] >= result["rows"]:
        advice.append(f"preload=True (the table, {human_bytes(result['table_bytes'])}, fits in "
                      "the RAM budget: every lookup becomes a RAM hit)")
    elif stats["capacity_rows"] < result["rows"]:
        advice.append(f"a larger cache_bytes (it holds {stats['capacity_rows']} of "
                      f"{result['rows']} rows; the hot rows of a Zipf table take most lookups)")
    if tier == "source" and not cache_dir_given:
        advice.append("cache_dir on local NVMe (misses then read a node-local copy of the "
                      "table instead of the source)")
    return advice


def embedding_judgement(result: Dict[str, Any], *, cache_dir_given: bool,
                        preloaded: bool) -> Dict[str, Any]:
    """``source_bound``/``nvme_bound`` (bound_tier) and the sentence: the
    figures it was judged on, then what to change."""
    stats = result["stats"]
    if stats["rows"] == 0:
        return {"source_bound": False, "nvme_bound": False, "sentence": "no id was looked up"}
    tier = bound_tier(stats)
    figures = (f"hit rate {stats['hit_rate']:.0%} (an ideal static cache of the same budget: "
               f"{result['ideal_hit_rate']:.0%}), p50 {stats['p50_us']:.0f} us, p99 "
               f"{stats['p99_us']:.0f} us a lookup of {result['batch']} ids")
    advice = _advice(result, tier, cache_dir_given, preloaded)
    lookups = max(1, stats["lookups"])
    if tier is not None:
        name = {"source": "the source", "nvme": "the node cache (NVMe)"}[tier]
        where = {"source": "the table file", "nvme": "the node-local copy"}[tier]
        rows, reads = stats[f"{tier}_rows"], stats[f"{tier}_reads"]
        fallback = {"source": "a faster source", "nvme": "nothing more in gpufeed"}[tier]
        sentence = (f"lookups are bound by {name}: {rows / lookups:.0f} rows a lookup came "
                    f"from {where} ({rows} rows in {reads} reads); {figures}. Change: "
                    + "; ".join(advice or [fallback]) + ".")
        if (stats["resident_rows"] < stats["capacity_rows"] and stats["evicted"] == 0
                and stats["rejected"] == 0):
            # Nothing was turned away yet: the misses were first touches of
            # rows, which a longer run keeps in RAM (or preload reads at once).
            sentence += (f" The RAM tier was still filling during the probe ("
                         f"{stats['resident_rows']} of {stats['capacity_rows']} rows resident, "
                         "none evicted): in training, where the same rows come back, most of "
                         "these misses become hits.")
    else:
        sentence = f"lookups are served from memory, not bound by the source: {figures}."
        if stats["nvme_rows"] + stats["source_rows"] > 0 and advice:
            sentence += f" The calls that still miss (the p99) go with {advice[0]}."
    return {"source_bound": tier == "source", "nvme_bound": tier == "nvme", "sentence": sentence}


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
