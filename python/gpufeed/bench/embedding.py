"""``gpufeed bench --embedding PATH``: lookups of Zipf-distributed ids on an
embedding table, with the table's own figures (rows/s, hit rate, latency
percentiles, tier counters).

CTR ids are Zipf-like: a few rows take most lookups and the long tail keeps
missing. :class:`ZipfIds` draws such ids over [0, rows): ranks k = 1..rows
with probability proportional to 1/k^s (the inverse of a precomputed
cumulative array, so the distribution is exact and bounded), each rank
mapped to a row by a fixed random permutation so that the hot rows lie
scattered over the file, as hashed ids do. The same distribution gives the
hit rate of an ideal static cache holding the most frequent rows in the
same budget (:meth:`ZipfIds.top_share`), the yardstick of the RAM tier's.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

__all__ = ["ZipfIds", "run_embedding_bench", "format_embedding_report", "tier_line"]

#: The skew of the ids, as in Criteo-like click logs.
DEFAULT_EXPONENT = 1.05


class ZipfIds:
    """Bounded Zipf(`exponent`) ids over [0, rows) from numpy's generator
    seeded with `seed`: the same seed gives the same ids. Memory: 16 bytes
    a row (the cumulative array and the permutation)."""

    def __init__(self, rows: int, exponent: float = DEFAULT_EXPONENT, seed: int = 0) -> None:
        import numpy
        if rows <= 0:
            raise ValueError(f"a Zipf draw needs at least one row, not {rows}")
        self.rows = int(rows)
        self.exponent = float(exponent)
        weights = numpy.arange(1, self.rows + 1, dtype=numpy.float64) ** -self.exponent
        self._cumulative = numpy.cumsum(weights)
        self._cumulative /= self._cumulative[-1]
        self._generator = numpy.random.default_rng(seed)
        self._row_of_rank = self._generator.permutation(self.rows).astype(numpy.int64)

    def draw(self, count: int):
        """`count` ids (numpy int64)."""
        import numpy
        ranks = numpy.searchsorted(self._cumulative, self._generator.random(count), side="right")
        return self._row_of_rank[numpy.minimum(ranks, self.rows - 1)]

    def top_share(self, rows: int) -> float:
        """The share of draws that fall on the `rows` most frequent rows: the
        hit rate of an ideal static cache holding them."""
        if rows <= 0:
            return 0.0
        return float(self._cumulative[min(rows, self.rows) - 1])


def run_embedding_bench(path: str, *, ids: int = 409600, batch: int = 4096, warmup: int = 5,
                        exponent: float = DEFAULT_EXPONENT, seed: int = 0,
                        table_options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Opens the table at `path` (`table_options`: EmbeddingTable's
    keywords), looks up `warmup` batches of `batch` Zipf ids, resets the
    table's stats, then looks up `ids` more in batches of `batch`. Returns
    the table's stats over the measured lookups, the rates of the measured
    calls (as Python sees them: the output tensor's allocation included)
    and the ideal static cache's hit rate at the table's capacity."""
    from ..embedding import EmbeddingTable
    if ids <= 0 or batch <= 0 or warmup < 0:
        raise ValueError("--embedding-ids and --embedding-batch must be positive, "
                         "--embedding-warmup >= 0")
    started = time.perf_counter()
    table = EmbeddingTable(path, **(table_options or {}))
    open_seconds = time.perf_counter() - started
    draws = ZipfIds(table.rows, exponent, seed)
    for _ in range(warmup):
        table.lookup(draws.draw(batch))
    table.reset_stats()
    seconds, remaining = 0.0, ids
    while remaining > 0:
        chunk = draws.draw(min(batch, remaining))
        started = time.perf_counter()
        table.lookup(chunk)
        seconds += time.perf_counter() - started
        remaining -= len(chunk)
    stats = table.stats()
    lookups = (ids + batch - 1) // batch
    return {
        "path": table.path, "rows": table.rows, "dim": table.dim,
        "dtype": str(table.dtype).rpartition(".")[2], "row_bytes": table.row_bytes,
        "table_bytes": table.rows * table.row_bytes,
        "options": dict(table_options or {}),
        "open_seconds": open_seconds, "zipf_exponent": exponent, "batch": batch,
        "warmup_lookups": warmup, "ids": ids, "seconds": seconds,
        "lookups_per_s": lookups / seconds if seconds > 0 else 0.0,
        "rows_per_s": ids / seconds if seconds > 0 else 0.0,
        "ideal_hit_rate": draws.top_share(stats["capacity_rows"]),
        "stats": stats,
    }


def tier_line(stats: Dict[str, Any]) -> str:
    """Where the looked-up rows came from, and what the reads cost."""
    return (f"RAM {stats['ram_hits']} ids, NVMe copy {stats['nvme_rows']} rows in "
            f"{stats['nvme_reads']} reads ({stats['nvme_bytes'] / 1e6:.1f} MB), source "
            f"{stats['source_rows']} rows in {stats['source_reads']} reads "
            f"({stats['source_bytes'] / 1e6:.1f} MB)")


def format_embedding_report(result: Dict[str, Any]) -> str:
    """The text report of a run_embedding_bench result."""
    from ..pack import human_bytes
    stats = result["stats"]
    return "\n".join([
        f"table:      {result['path']}: {result['rows']} x {result['dim']} {result['dtype']} "
        f"({human_bytes(result['table_bytes'])}), opened in {result['open_seconds']:.2f} s",
        f"ids:        {result['ids']} Zipf({result['zipf_exponent']:g}) ids in lookups of "
        f"{result['batch']}, after {result['warmup_lookups']} warm-up lookups",
        f"throughput: {result['lookups_per_s']:.0f} lookups/s, {result['rows_per_s']:.0f} rows/s "
        f"({result['seconds']:.2f} s)",
        f"latency:    p50 {stats['p50_us']:.0f} us, p99 {stats['p99_us']:.0f} us, mean "
        f"{stats['mean_us']:.0f} us a lookup",
        f"hit rate:   {stats['hit_rate']:.1%} RAM (an ideal static cache of the same "
        f"{stats['capacity_rows']} rows: {result['ideal_hit_rate']:.1%})",
        f"tiers:      {tier_line(stats)}",
        f"RAM tier:   {stats['resident_rows']} rows resident "
        f"({human_bytes(stats['resident_bytes'])}), {stats['admitted']} admitted, "
        f"{stats['rejected']} rejected, {stats['evicted']} evicted",
    ])
