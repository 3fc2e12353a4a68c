"""``gpufeed diagnose PATH``: the driver (storage, data, measurements,
loader run, recommendations), the text report and the command line."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from .embedding import embedding_lines, probe_embedding
from .measure import measure_random, measure_sequential, measure_small_files, run_consumer
from .recommend import recommend
from .storage import storage_info
from .survey import KIB, MIB, SMALL_FILE_BYTES, jpeg_survey, survey

__all__ = ["diagnose", "format_report", "add_arguments", "main_from_args"]


def diagnose(path: str, *, seconds: float = 3.0, io_seconds: float = 2.0,
             sample_bytes: int = 256 * MIB, io_threads: int = 16, batch_size: int = 32,
             threads: Optional[int] = None, run_loader: bool = True,
             step_time: Optional[float] = None,
             step_time_from: Optional[str] = "a100-resnet50") -> Dict[str, Any]:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "no such file or directory", path)
    data = survey(path)
    files = data.pop("_files")
    dataset = data.pop("_dataset", None)
    largest = max(files)[1] if files else None
    storage = storage_info(path, largest)
    measurements: Dict[str, Any] = {
        "sequential": measure_sequential(files, sample_bytes, io_seconds),
        "random": measure_random(files, io_threads, io_seconds),
    }
    if data["small_files"]:
        measurements["small_files"] = measure_small_files(files, io_threads, io_seconds)
    report: Dict[str, Any] = {"path": path, "storage": storage, "data": data,
                              "measurements": measurements}
    if run_loader:
        disks = [d["name"] for d in storage["block_devices"]]
        report["consumer"] = run_consumer(path, seconds, disks, batch_size, threads)
        report["consumer"]["au"] = _au_estimate(report["consumer"], batch_size, step_time,
                                                step_time_from)
    else:
        report["consumer"] = {"skipped": "--no-loader"}
    if dataset is not None:
        # After the measurements and the loader run: its reads warm nothing they time.
        data["jpeg"] = jpeg_survey(dataset)
    report["recommendations"] = recommend(report)
    return report


def _au_estimate(consumer: Dict[str, Any], batch_size: int, step_time: Optional[float],
                 step_time_from: Optional[str]) -> Dict[str, Any]:
    """How many GPUs of the chosen step time the loader's measured rate (its
    consumer never computing) feeds at AU >= 90%; `gpufeed bench --au-search`
    measures it with an emulated step."""
    from ..au import gpus_at_target, step_time_for
    if "samples_per_s" not in consumer:
        return {"skipped": "the loader did not run"}
    if step_time is not None:
        step_time_from = None
    seconds, label = step_time_for(batch_size, step_time, step_time_from)
    if seconds is None:
        return {"skipped": "no step time"}
    rate = consumer["samples_per_s"]
    return {"step_time": seconds, "step": label, "target": 0.9,
            "gpus_at_target": gpus_at_target(rate, batch_size, seconds, 0.9),
            "au_one_gpu": min(1.0, rate * seconds / batch_size)}


def _storage_lines(storage: Dict[str, Any]) -> List[str]:
    """The "== storage" section: filesystem, mount, block devices, read-ahead, Lustre."""
    mount = storage.get("mount") or {}
    lines = ["== storage",
             f"filesystem:   {storage['filesystem']} (statfs magic {storage['statfs_magic']})"
             + (", network/parallel" if storage.get("network") else "")]
    if mount:
        lines.append(f"mount:        {mount['source']} on {mount['mount_point']} "
                     f"({mount['fstype']}, {','.join(mount['mount_options'])}; "
                     f"{','.join(mount['super_options'])})")
    for disk in storage["block_devices"]:
        via = f" via {' -> '.join(disk['via'])}" if disk["via"] else ""
        lines.append(f"block device: {disk['name']}{via}: read_ahead_kb {disk['read_ahead_kb']}, "
                     f"scheduler {disk['scheduler']}, "
                     f"{'rotational' if disk['rotational'] else 'non-rotational'}"
                     + (f", {disk['model']}" if disk.get("model") else ""))
    if not storage["block_devices"]:
        lines.append("block device: none (network or memory filesystem)")
    if storage.get("bdi_read_ahead_kb") is not None:
        lines.append(f"read-ahead:   {storage['bdi_read_ahead_kb']} KiB (the filesystem's bdi)")
    if storage.get("lustre"):
        lines.append(f"lustre:       {json.dumps(storage['lustre'])}")
    return lines


def _data_lines(data: Dict[str, Any]) -> List[str]:
    """The "== data" section: file count and size, format, small files, histogram."""
    return [
        "== data",
        f"files:        {data['files']}"
        + (" (counting stopped at the limit)" if data["files_counted_up_to_limit"] else "")
        + f", {data['bytes'] / 1e6:.1f} MB, mean {data['mean_file_bytes'] / KIB:.0f} KiB",
        f"format:       {data.get('format') or 'not a dataset gpufeed detects'}"
        + (f", {data['records']} records in {data['shards']} shard(s)"
           if data.get("format") else f" ({data.get('format_error', '')})")
        + (", packed" if data.get("packed") else ", not packed"),
        f"small files:  {data['small_file_share']:.0%} under "
        f"{SMALL_FILE_BYTES // MIB} MiB ({data['small_files']} files)",
        "size histogram: " + ", ".join(f"{h['range']}: {h['files']}"
                                        for h in data["histogram"] if h["files"]),
    ] + _jpeg_lines(data.get("jpeg"))


def _jpeg_lines(jpeg: Optional[Dict[str, Any]]) -> List[str]:
    """The data section's JPEG line, when records were sampled."""
    if not jpeg or "sampled" not in jpeg or not jpeg["jpegs"]:
        return []
    return [f"JPEGs:        {jpeg['jpegs']} of {jpeg['sampled']} sampled records, "
            f"{jpeg['progressive']} progressive, {jpeg['at_least_1mp']} of at least 1 MP "
            f"({jpeg['at_least_1mp_baseline_without_restarts']} baseline without restart "
            f"markers), median {jpeg['median_megapixels']:.2f} MP"]


def _measured_lines(measured: Dict[str, Any]) -> List[str]:
    """The "== measured" section: sequential, random 4 KiB and small-file
    reads (each its figures or why it was skipped)."""
    seq, rnd = measured["sequential"], measured["random"]
    lines = ["== measured on the dataset's files (approximately cold)",
             "sequential:   " + (f"{seq['mb_per_s']:.0f} MB/s over {seq['bytes'] / 1e6:.0f} MB "
                                 f"({seq['method']})" if "mb_per_s" in seq else seq["skipped"]),
             "random 4 KiB: " + (f"{rnd['iops']:.0f} IOPS, {rnd['mean_latency_ms']:.3f} ms "
                                 f"mean ({rnd['method']})" if "iops" in rnd else rnd["skipped"])]
    small = measured.get("small_files")
    if small:
        lines.append("small files:  " + (f"{small['files_per_s']:.0f} files/s, "
                                         f"{small['mb_per_s']:.1f} MB/s ({small['method']})"
                                         if "files_per_s" in small else small["skipped"]))
    return lines


def _disk_line(disk: Dict[str, Any]) -> str:
    """The disk throughput during the loader run, or why there is none."""
    return "disk:         " + (f"{disk['mb_per_s']:.1f} MB/s, {disk['reads_per_s']:.0f} "
                               f"reads/s on {', '.join(disk['devices'])} "
                               "(/proc/diskstats; 0 means the page cache served it)"
                               if "mb_per_s" in disk else disk["skipped"])


def _gpu_line(gpu: Dict[str, Any]) -> str:
    """The GPU utilisation sampled during the loader run, or why there is none."""
    if "skipped" in gpu:
        return f"GPU:          {gpu['skipped']}"
    value = gpu["mean_utilization_percent"]
    return (f"GPU:          {'%.0f%%' % value if value is not None else 'no sample'} "
            f"mean utilisation ({gpu['source']}, {gpu['samples']} samples)")


def _loader_lines(consumer: Dict[str, Any]) -> List[str]:
    """A loader run's rate, stages, disk and GPU figures, judgement and AU
    estimate. REQUIRES: the run was not skipped."""
    from ..bench import judgement_line
    stages = consumer["stages"]
    lines = [f"loader:       {consumer['samples_per_s']:.0f} samples/s, "
             f"{consumer['loader_mb_per_s']:.1f} MB/s read by the loader, "
             f"{consumer['threads']} threads, {consumer['seconds']:.1f} s",
             f"stages:       workers reading {stages['workers_read']:.0%}, decoding "
             f"{stages['workers_decode']:.0%}, blocked {stages['workers_blocked']:.0%}, "
             f"starved {stages['workers_starved']:.0%}; consumer waited "
             f"{stages['consumer_starved']:.0%}",
             _disk_line(consumer["disk"]),
             _gpu_line(consumer["gpu"]),
             f"bottleneck:   {judgement_line(consumer)}",
             f"verdict:      {consumer['verdict']}"]
    au = consumer.get("au") or {}
    if "gpus_at_target" in au:
        lines.append(f"AU:           {au['au_one_gpu']:.0%} for one GPU at {au['step']}; this "
                     f"storage + loader feed about {au['gpus_at_target']} such GPUs at AU >= "
                     f"90% (estimated from {consumer['samples_per_s']:.0f} samples/s; measure "
                     "with gpufeed bench --step-time ... --au-search)")
    return lines


def _consumer_lines(consumer: Dict[str, Any]) -> List[str]:
    """The "== consumer side" section: the loader run, or why it was skipped."""
    if "skipped" in consumer:
        return ["== consumer side (a DataLoader running)",
                f"loader:       skipped: {consumer['skipped']}"]
    return ["== consumer side (a DataLoader running)"] + _loader_lines(consumer)


def _recommendation_lines(recommendations: List[Dict[str, str]]) -> List[str]:
    """The "== recommendations" section: each advice with its reason."""
    lines = ["== recommendations"]
    if not recommendations:
        lines.append("none: nothing measured here points at a change")
    for item in recommendations:
        lines.append(f"- {item['advice']}\n    because: {item['because']}")
    return lines


def format_report(report: Dict[str, Any]) -> str:
    """The text report of a diagnose() result, one section per step."""
    storage, data, measured = report["storage"], report["data"], report["measurements"]
    consumer = report["consumer"]
    lines = (_storage_lines(storage) + _data_lines(data) + _measured_lines(measured)
             + _consumer_lines(consumer) + _recommendation_lines(report["recommendations"]))
    if "embedding" in report:
        lines += embedding_lines(report["embedding"])
    return "\n".join(lines)


def add_arguments(parser) -> None:
    from ..pack import parse_size
    parser.add_argument("path", nargs="?", default=None,
                        help="a dataset directory or file (optional with --embedding)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long the loader runs in step 3 (default 3)")
    parser.add_argument("--io-seconds", type=float, default=2.0,
                        help="time per I/O measurement (default 2)")
    parser.add_argument("--sample-bytes", type=parse_size, default=256 * MIB,
                        help="bytes read for the sequential figure (default 256MiB)")
    parser.add_argument("--io-threads", type=int, default=16,
                        help="threads for the random-read and small-file figures (default 16)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="loader decode threads")
    parser.add_argument("--no-loader", action="store_true", help="skip step 3")
    parser.add_argument("--step-time", type=float, default=None, metavar="SECONDS",
                        help="the training step per batch the AU summary assumes")
    parser.add_argument("--step-time-from", default="a100-resnet50",
                        help="a GPU/model profile for the AU summary (default a100-resnet50; "
                             "see gpufeed bench --help)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    group = parser.add_argument_group("embedding table (--embedding PATH)")
    group.add_argument("--embedding", default=None, metavar="PATH",
                       help="also (or, without a dataset PATH, only) probe the embedding table "
                            "PATH: its shape, tier counters and whether lookups are bound by "
                            "the source")
    group.add_argument("--embedding-lookups", type=int, default=50,
                       help="probe lookups of 4096 Zipf ids, after as many warm-up ones "
                            "(default 50)")
    group.add_argument("--cache-bytes", default="8GiB",
                       help="the table's RAM tier budget (default 8GiB; 0: none)")
    group.add_argument("--cache-dir", default=None, help="the table's node cache directory")
    group.add_argument("--preload", action="store_true",
                       help="read the whole table into RAM at open")
    group.add_argument("--embedding-dim", type=int, default=None, help="a raw table's dim")
    group.add_argument("--embedding-dtype", default=None,
                       choices=("float32", "float16", "bfloat16", "int8", "uint8"),
                       help="a raw table's dtype (bfloat16 for a .npy of uint16)")


def _embedding_report(args) -> Dict[str, Any]:
    options = dict(cache_bytes=args.cache_bytes, cache_dir=args.cache_dir, preload=args.preload,
                   dim=args.embedding_dim, dtype=args.embedding_dtype)
    if args.embedding_lookups <= 0:
        raise ValueError("--embedding-lookups must be positive")
    return probe_embedding(args.embedding, lookups=args.embedding_lookups,
                           table_options=options)


def main_from_args(args) -> int:
    if args.path is None and args.embedding is None:
        raise SystemExit("gpufeed diagnose: give a dataset PATH, --embedding PATH, or both")
    if args.path is None:
        report: Dict[str, Any] = {"embedding": _embedding_report(args)}
        print(json.dumps(report, indent=2) if args.json
              else "\n".join(embedding_lines(report["embedding"])))
        return 0
    report = diagnose(args.path, seconds=args.seconds, io_seconds=args.io_seconds,
                      sample_bytes=args.sample_bytes, io_threads=args.io_threads,
                      batch_size=args.batch_size, threads=args.threads,
                      run_loader=not args.no_loader, step_time=args.step_time,
                      step_time_from=args.step_time_from)
    if args.embedding:
        report["embedding"] = _embedding_report(args)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
