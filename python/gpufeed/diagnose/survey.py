"""Step 2 of ``gpufeed diagnose``: the data under a path.

File count, bytes, size histogram, the share of small files, and the
format gpufeed detects (packed or not). The size units and the small-file
threshold are defined here for the other steps.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

__all__ = ["KIB", "MIB", "GIB", "SMALL_FILE_BYTES", "survey"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

SMALL_FILE_BYTES = 1 * MIB
_HISTOGRAM_EDGES = [16 * KIB, 64 * KIB, 256 * KIB, MIB, 16 * MIB, 256 * MIB, GIB]


def _size_label(size: int) -> str:
    if size >= GIB:
        return f"{size // GIB}G"
    if size >= MIB:
        return f"{size // MIB}M"
    return f"{size // KIB}K"


def survey(path: str, max_files: int = 1_000_000) -> Dict[str, Any]:
    """Files under `path` (or the file itself): count, bytes, size
    histogram, small-file share, and the format gpufeed detects."""
    sizes: List[Tuple[int, str]] = []
    truncated = False
    if os.path.isfile(path):
        sizes.append((os.path.getsize(path), path))
    else:
        stack = [path]
        while stack and not truncated:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file():
                        sizes.append((entry.stat().st_size, entry.path))
                except OSError:
                    continue
                if len(sizes) >= max_files:
                    truncated = True
                    break
    histogram = []
    lower = 0
    for upper in _HISTOGRAM_EDGES + [None]:
        count = sum(1 for size, _ in sizes if size >= lower and (upper is None or size < upper))
        label = (f"< {_size_label(upper)}" if lower == 0 else
                 f">= {_size_label(lower)}" if upper is None else
                 f"{_size_label(lower)}-{_size_label(upper)}")
        histogram.append({"range": label, "files": count})
        lower = upper or 0
    total = sum(size for size, _ in sizes)
    small = sum(1 for size, _ in sizes if size < SMALL_FILE_BYTES)
    data: Dict[str, Any] = {
        "files": len(sizes),
        "files_counted_up_to_limit": truncated,
        "bytes": total,
        "mean_file_bytes": total / len(sizes) if sizes else 0,
        "largest_file_bytes": max((size for size, _ in sizes), default=0),
        "files_over_1gb": sum(1 for size, _ in sizes if size > 1_000_000_000),
        "small_file_bytes": SMALL_FILE_BYTES,
        "small_files": small,
        "small_file_share": small / len(sizes) if sizes else 0.0,
        "histogram": histogram,
    }
    try:
        from ..dataset import open_dataset
        dataset = open_dataset(path)
        data["format"] = dataset.format
        data["records"] = len(dataset)
        data["shards"] = len(dataset.shards)
        data["packed"] = dataset.format in ("recordio", "lmdb", "caffe_lmdb")
    except Exception as error:  # any dataset error: still a file survey
        data["format"] = None
        data["format_error"] = str(error)
        data["packed"] = None
    data["_files"] = sizes  # for the measurements; dropped from the report
    return data
