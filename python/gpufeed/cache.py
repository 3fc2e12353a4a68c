"""The node-local cache: whole-shard copies of a slow source on local NVMe.

Datasets use it through ``open_dataset(..., cache_dir=, cache_capacity=)``
and ``DataLoader(..., cache_dir=, cache_capacity=)``; this module has the
rest: inspecting, clearing and warming a cache directory, and keeping the
newest checkpoints of a run on local disk (docs/python.md, "Node-local cache").

    >>> import gpufeed.cache
    >>> gpufeed.cache.warm("/lustre/imagenet/train", "/nvme/cache", capacity="800GiB")
    >>> local = gpufeed.cache.put_checkpoint("/lustre/run7/step_1000.pt", "/nvme/cache", keep=3)
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import _core
from ._native import native_cache_options, struct_dict
from .pack import human_bytes as _human, parse_size

__all__ = ["POLICIES", "cache_options", "stat", "clear", "warm", "put_checkpoint",
           "latest_checkpoint"]

#: Names accepted by ``cache_policy=``.
POLICIES = ("train", "pinned")


def cache_options(cache_dir, cache_capacity=None, cache_policy: str = "train",
                  cache_prefetch: int = 2, cache_wait: bool = True,
                  cache_group: Optional[str] = None) -> Dict[str, Any]:
    """Checks the cache keyword arguments and returns them for the C++ side.

    ``cache_capacity``: bytes (int) or a size such as ``"800GiB"``; None: 90%
    of what the cache's filesystem can hold for it. ``cache_policy``: "train"
    (LRU) or "pinned" (validation sets: never evicted; larger than the
    capacity is an error). ``cache_prefetch``: shards fetched ahead of the
    reader. ``cache_wait`` (default True): a read of a file being
    copied waits for the part it needs, so the source is read once per node;
    False reads the source meanwhile (never waits, up to 2x the source bytes
    in the first epoch). ``cache_group``: share the directory with a group
    (created 02770) instead of this user only (0700).
    """
    if cache_dir is None:
        if cache_capacity is not None:
            raise ValueError("cache_capacity needs a cache_dir")
        return {}
    if cache_policy not in POLICIES:
        raise ValueError(f"cache_policy must be one of {', '.join(POLICIES)}, not {cache_policy!r}"
                         " (checkpoints: gpufeed.cache.put_checkpoint)")
    if int(cache_prefetch) < 0:
        raise ValueError("cache_prefetch must be >= 0")
    return dict(cache_dir=os.fspath(cache_dir),
                cache_capacity=None if cache_capacity is None else parse_size(cache_capacity),
                cache_policy=cache_policy, cache_prefetch=int(cache_prefetch),
                cache_wait=bool(cache_wait), cache_group=cache_group or "")


def stat(cache_dir) -> Dict[str, Any]:
    """What a cache directory holds: ``entries``, ``bytes``, fills in
    progress, leased entries, and per dataset ``entries``, ``bytes``,
    ``hits``, ``misses`` (records read from a copy / from the source),
    ``fills``, ``fill_bytes``, ``evictions``."""
    return struct_dict(_core.cache_stat(os.fspath(cache_dir)))


def clear(cache_dir, dataset=None) -> Tuple[int, int]:
    """Removes the entries of ``dataset`` (its source path; None: all).
    Returns (removed, kept because a process is reading them)."""
    return tuple(_core.cache_clear(os.fspath(cache_dir),
                                   "" if dataset is None else os.fspath(dataset)))


def warm(source, cache_dir, capacity=None, policy: str = "train",
         progress: Optional[Callable[[int, int], None]] = None,
         cache_group: Optional[str] = None, format: str = "auto",
         record_schema=None, format_options=None) -> Dict[str, int]:
    """Copies every shard of the dataset at ``source`` into the cache now
    (waiting for copies other processes are making): RecordIO files, LMDB
    data.mdb files, an ImageFolder's bundles of 256 files, the files of a
    tabular dataset. ``format`` names a format that is never detected
    ("records", with ``record_schema`` or ``format_options``, or
    "criteo_tsv"). ``progress(done, total)`` gets bytes (for an ImageFolder
    ``total`` is an estimate). Returns shards, filled, already_cached,
    skipped, bytes_copied."""
    options = cache_options(cache_dir, capacity, policy, cache_group=cache_group)
    dataset = None
    if format != "auto" or record_schema is not None or format_options is not None:
        from ._native import native_dataset_options
        from .tabular import tabular_options
        tabular = tabular_options(format, format_options, record_schema)
        dataset = native_dataset_options(
            format, False, tabular=tabular._native() if tabular is not None else None)
    return struct_dict(_core.cache_warm(os.fspath(source), native_cache_options(options),
                                        progress, dataset))


def put_checkpoint(path, cache_dir, keep: int = 3, cache_group: Optional[str] = None) -> str:
    """Copies the checkpoint file ``path`` into the cache (verified, atomic)
    and keeps only the newest ``keep`` cached checkpoints of its directory (by
    the files' mtime). Returns the path of the local copy."""
    if int(keep) < 1:
        raise ValueError("keep must be at least 1")
    return _core.cache_put_checkpoint(os.fspath(path), os.fspath(cache_dir), int(keep),
                                      cache_group or "")


def latest_checkpoint(directory, cache_dir) -> Optional[Tuple[str, str]]:
    """(local copy, source path) of the newest cached checkpoint of
    ``directory`` whose source is unchanged (or gone), or None: a restart
    loads it from local disk."""
    if not os.path.isdir(os.fspath(cache_dir)):
        return None
    found = _core.cache_latest_checkpoint(os.fspath(directory), os.fspath(cache_dir))
    return None if found is None else tuple(found)


# -- the ``gpufeed cache`` command ---------------------------------------------

def add_arguments(parser) -> None:
    """``gpufeed cache stat|clear|warm|put-checkpoint``."""
    sub = parser.add_subparsers(dest="cache_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("stat", help="entries, bytes, hits and misses per dataset")
    p.add_argument("dir", help="the cache directory")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("clear", help="remove entries (all, or one dataset's)")
    p.add_argument("dir")
    p.add_argument("--dataset", default=None, help="the source path of a dataset (default: all)")
    p = sub.add_parser("warm", help="copy a dataset's shards into the cache now")
    p.add_argument("source", help="the dataset")
    p.add_argument("dir")
    p.add_argument("--format", default="auto",
                   help='a format that is never detected: "records" (the default 160-byte '
                        'schema) or "criteo_tsv"')
    p.add_argument("--capacity", default=None, help="byte budget, e.g. 800GiB (default: 90%% "
                                                    "of the filesystem)")
    p.add_argument("--policy", choices=POLICIES, default="train")
    p.add_argument("--group", default=None, help="share the directory with this group")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p = sub.add_parser("put-checkpoint", help="cache a checkpoint file, keeping the newest N")
    p.add_argument("path")
    p.add_argument("dir")
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--group", default=None)


def main_from_args(args) -> int:
    import json
    import sys
    if args.cache_command == "stat":
        report = stat(args.dir)
        if args.json:
            print(json.dumps(report, indent=2))
            return 0
        print(f"{report['cache_dir']}: {report['entries']} entries, {_human(report['bytes'])}"
              f", {report['leased_entries']} in use, {report['fills_in_progress']} fills in "
              f"progress ({_human(report['fill_bytes_in_progress'])})")
        for dataset in report["datasets"]:
            reads = dataset["hits"] + dataset["misses"]
            rate = f"{100.0 * dataset['hits'] / reads:.1f}% hits" if reads else "no reads"
            print(f"  {dataset['dataset']} [{dataset['policy']}]: {dataset['entries']} entries, "
                  f"{_human(dataset['bytes'])}; {dataset['hits']} hits, {dataset['misses']} "
                  f"misses ({rate}); {dataset['fills']} fills ({_human(dataset['fill_bytes'])}), "
                  f"{dataset['evictions']} evictions")
        return 0
    if args.cache_command == "clear":
        removed, in_use = clear(args.dir, args.dataset)
        print(f"removed {removed} entries" + (f"; {in_use} kept: in use by a reader" if in_use
                                               else ""))
        return 0
    if args.cache_command == "warm":
        bar = None
        progress = None
        if not args.quiet:
            try:
                from tqdm import tqdm
                bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024,
                           desc="cache warm", file=sys.stderr)

                def progress(done, total):
                    bar.total = total
                    bar.n = done
                    bar.refresh()
            except ImportError:
                def progress(done, total):
                    print(f"\rcache warm: {_human(done)} / {_human(total)}", end="",
                          file=sys.stderr)
        try:
            summary = warm(args.source, args.dir, args.capacity, args.policy, progress,
                           args.group, format=args.format)
        finally:
            if bar is not None:
                bar.close()
        print(f"{summary['shards']} shards: {summary['filled']} copied "
              f"({_human(summary['bytes_copied'])}), {summary['already_cached']} already cached"
              + (f", {summary['skipped']} did not fit" if summary["skipped"] else ""))
        return 0
    if args.cache_command == "put-checkpoint":
        print(put_checkpoint(args.path, args.dir, args.keep, args.group))
        return 0
    raise ValueError(f"unknown cache action {args.cache_command!r}")
