"""Step 2 of ``gpufeed diagnose``: the data under a path.

File count, bytes, size histogram, the share of small files, and the
format gpufeed detects (packed or not). The size units and the small-file
threshold are defined here for the other steps.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["KIB", "MIB", "GIB", "SMALL_FILE_BYTES", "survey", "jpeg_header", "jpeg_survey"]

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
        # For the JPEG survey at the end: an ImageFolder is not listed twice.
        data["_dataset"] = dataset
    except Exception as error:  # any dataset error: still a file survey
        data["format"] = None
        data["format_error"] = str(error)
        data["packed"] = None
    data["_files"] = sizes  # for the measurements; dropped from the report
    return data


_SOF_BASELINE = (0xC0, 0xC1)
_SOF_PROGRESSIVE = 0xC2


def jpeg_header(data: bytes) -> Optional[Dict[str, Any]]:
    """A JPEG's frame as its markers declare it, up to its first scan:
    width, height, progressive, restart_interval (0 without DRI); None for
    data that is not a JPEG gpufeed's decoders read (or whose header is
    cut short)."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    at, frame, restart = 2, None, 0
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        segment = data[at + 4:at + 2 + length]
        if marker == 0xDA:  # start of scan: the header is over
            return dict(frame, restart_interval=restart) if frame else None
        if marker in _SOF_BASELINE + (_SOF_PROGRESSIVE,) and len(segment) >= 5:
            frame = {"height": int.from_bytes(segment[1:3], "big"),
                     "width": int.from_bytes(segment[3:5], "big"),
                     "progressive": marker == _SOF_PROGRESSIVE}
        elif 0xC3 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return None  # lossless, hierarchical or arithmetic-coded
        elif marker == 0xDD and len(segment) >= 2:
            restart = int.from_bytes(segment[0:2], "big")
        at += 2 + length
    return None


def jpeg_survey(dataset: Any, samples: int = 64) -> Dict[str, Any]:
    """The JPEGs among up to `samples` records spread over `dataset` (an
    open gpufeed dataset): how many are progressive, how many have at least
    1 megapixel, and how many of those are baseline without restart markers
    (what pack's baseline_jpeg and jpeg_restart_interval change);
    {"skipped": why} when its records cannot be read."""
    try:
        count = len(dataset)
        step = max(1, count // samples) if count else 1
        headers = [jpeg_header(dataset[index].data) for index in range(0, count, step)][:samples]
    except Exception as error:  # any dataset error: no JPEG survey
        return {"skipped": str(error)}
    from .. import _core  # pack's threshold for restart markers
    jpegs = [h for h in headers if h is not None]
    large = [h for h in jpegs if h["width"] * h["height"] >= _core.MIN_RESTART_PIXELS]
    megapixels = sorted(h["width"] * h["height"] / 1e6 for h in jpegs)
    return {
        "sampled": len(headers),
        "jpegs": len(jpegs),
        "progressive": sum(1 for h in jpegs if h["progressive"]),
        "at_least_1mp": len(large),
        "at_least_1mp_baseline_without_restarts": sum(
            1 for h in large if not h["progressive"] and h["restart_interval"] == 0),
        "median_megapixels": megapixels[len(megapixels) // 2] if megapixels else 0.0,
    }
