"""Packing an ImageFolder or a list file into shards: :func:`pack`."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional, Union

from . import _core

__all__ = ["pack", "PackSummary", "parse_size", "PACK_FORMATS"]

#: The formats :func:`pack` writes: the C++ registry's formats that have a
#: writer (src/format/registry.cc), in its order.
PACK_FORMATS = tuple(_core.pack_format_names())

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
          "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
          "tib": 2**40}


def human_bytes(count: int) -> str:
    """1536 -> "1.5 KiB"."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{count} B"


def parse_size(size: Union[int, str]) -> int:
    """``256MiB`` -> 268435456; plain integers are bytes."""
    if isinstance(size, int):
        value = size
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(size))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot parse size {size!r} (examples: 1048576, 256MiB, 1GB)")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    return value


@dataclasses.dataclass(frozen=True)
class PackSummary:
    """What :func:`pack` wrote."""
    records: int
    shards: int
    bytes: int
    seconds: float
    destination: str
    format: str
    #: JPEGs rewritten: progressive ones as baseline (``baseline_jpeg=True``),
    #: or any with restart markers (``jpeg_restart_interval``).
    rewritten: int = 0
    #: The restart interval the rewritten JPEGs got, in MCUs (0: none).
    restart_interval: int = 0

    def __str__(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else float("inf")
        rewritten = ""
        if self.rewritten and self.restart_interval:
            rewritten = (f", {self.rewritten} JPEG(s) rewritten as baseline with a restart "
                         f"marker every {self.restart_interval} MCUs")
        elif self.rewritten:
            rewritten = f", {self.rewritten} progressive JPEG(s) rewritten as baseline"
        return (f"packed {self.records} records into {self.shards} {self.format} shard(s) "
                f"({self.bytes / 1e6:.1f} MB) in {self.seconds:.2f} s ({rate:.0f} records/s)"
                f"{rewritten} -> {self.destination}")


def pack(src: Union[str, os.PathLike], dst: Union[str, os.PathLike], format: str = "recordio",
         shard_size: Union[int, str] = 256 * 2**20, workers: Optional[int] = None,
         progress: bool = True, overwrite: bool = False,
         allow_external_paths: bool = False, baseline_jpeg: bool = False,
         jpeg_restart_interval: int = 0) -> PackSummary:
    """Packs ``src`` into shards under ``dst`` and writes ``dst/gpufeed.json``.

    Args:
        src: an ImageFolder (``root/<class>/<file>``; labels are class indices)
            or a list file of ``path<TAB>label[,label...]`` lines (paths
            relative to the list file; MXNet ``.lst`` lines are accepted too).
        dst: output directory; must be empty or missing unless ``overwrite``.
        format: one of :data:`PACK_FORMATS`: "recordio" (``part-NNNNN.rec``
            + ``.idx``, MXNet/DALI compatible), "lmdb" (``part-NNNNN/``
            environments) or "webdataset" (``part-NNNNN.tar`` of ``KEY.jpg`` +
            ``KEY.cls``, one integer label per sample, each with its member
            index beside it).
        shard_size: bytes per shard (int or a string such as "256MiB").
        workers: threads reading the sources (default: one per core).
        progress: show a progress bar (tqdm when installed) on stderr.
        overwrite: replace shards and manifest of a non-empty ``dst``.
        allow_external_paths: accept list-file paths that are absolute, have
            ``..`` segments or are symlinks leading outside the list file's
            directory. By default they are refused with PermissionError, so
            that a list file from elsewhere cannot pack arbitrary files.
        baseline_jpeg: rewrite progressive JPEGs as baseline ones, losslessly
            (the same coefficients, EXIF, ICC and other markers kept, as
            ``jpegtran -copy all``; Huffman tables fitted to the image from 1
            megapixel on, libjpeg's standard tables below, which decoders
            build once for every file):
            they decode to the same pixels, about 3x faster. Other files,
            and JPEGs libjpeg warns about, are packed as they are.
        jpeg_restart_interval: when > 0, every JPEG of at least 1
            megapixel (baseline ones too) is rewritten as above with a
            restart marker every this many MCUs (16: every 256 pixels of a
            4:2:0 image's width), the same pixels; the decoders then pass
            over the intervals a crop does not touch without decoding them:
            on 2-12 megapixel photographs the train transform decodes about
            1.15x faster exactly and 1.45x with ``exact=False``
            (docs/tuning.md, "Restart markers at pack time"). Smaller JPEGs get no
            markers (they would save nothing). 0 (the default): no markers
            added. Implies ``baseline_jpeg``.

    Returns:
        A :class:`PackSummary`. Output order is deterministic: ImageFolder
        order (classes, then files, sorted) or list-file order.
    """
    if format not in PACK_FORMATS:
        quoted = [f'"{name}"' for name in PACK_FORMATS]
        expected = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
        raise ValueError(f"format must be {expected}, not {format!r}")
    if workers is not None and workers < 1:
        raise ValueError("workers must be at least 1")
    bar = None
    callback = None
    if progress:
        bar = _make_progress_bar(os.fspath(src))
        callback = bar.update_to
    try:
        options = _core.PackOptions()
        options.format = format
        options.shard_size = parse_size(shard_size)
        options.workers = workers or 0
        options.overwrite = bool(overwrite)
        options.allow_external_paths = bool(allow_external_paths)
        options.set_jpeg_rewrite(bool(baseline_jpeg), int(jpeg_restart_interval))
        result = _core.pack(os.fspath(src), os.fspath(dst), options, callback)
    finally:
        if bar is not None:
            bar.close()
    return PackSummary(records=result.records, shards=result.shards, bytes=result.bytes,
                       seconds=result.seconds, destination=os.path.abspath(os.fspath(dst)),
                       format=format, rewritten=result.rewritten,
                       restart_interval=int(jpeg_restart_interval))


class _TextProgress:
    """A minimal progress line for machines without tqdm."""

    def __init__(self, label: str):
        self._label = label
        self._last_percent = -1

    def update_to(self, done: int, total: int) -> None:
        percent = done * 100 // max(total, 1)
        if percent // 10 != self._last_percent // 10 or done == total:
            self._last_percent = percent
            import sys
            print(f"{self._label}: {done}/{total} ({percent}%)", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def _make_progress_bar(source: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return _TextProgress(f"packing {source}")

    class _Bar(tqdm):
        def update_to(self, done: int, total: int) -> None:
            self.total = total
            self.update(done - self.n)

    return _Bar(desc="packing", unit="rec", unit_scale=True, leave=True)
