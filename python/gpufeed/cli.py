"""The ``gpufeed`` command line.

    gpufeed pack SRC DST [--format F] [--shard-size 256MiB] [--workers N] [--overwrite]
                         [--baseline-jpeg] [--jpeg-restart-interval MCUS]
    gpufeed inspect PATH [--format F] [--json]
    gpufeed verify PATH [--format F] [--json]
    gpufeed index FILE.rec [--output FILE.idx]
    gpufeed index FILE.tar [FILE.tar ...]   (the WebDataset member index, beside each tar)
    gpufeed index CORPUS [--format F] [--token-dtype D]
                  (a token corpus's gpufeed.json: llm.c directory, Megatron prefix, headerless files)
    gpufeed index TSV [TSV ...] --format criteo_tsv
                  (the line index of raw Criteo TSV files, or of every file of a directory)
    gpufeed bench PATH [--batches N] [--batch-size B] [--threads N] [--plot OUT.png] [--json] ...
    gpufeed diagnose PATH [--seconds S] [--json] ...
    gpufeed cache stat DIR [--json] | clear DIR [--dataset PATH] | warm SOURCE DIR [--capacity C]
                  | put-checkpoint PATH DIR [--keep N]

Exit status: 0 success, 1 failure (or problems found by verify), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from . import _errors
from .dataset import FORMATS, TOKEN_FORMATS, open_dataset
from .pack import PACK_FORMATS, human_bytes as _human_bytes, pack, parse_size


def _cmd_pack(args) -> int:
    summary = pack(args.src, args.dst, format=args.format, shard_size=args.shard_size,
                   workers=args.workers, progress=not args.quiet, overwrite=args.overwrite,
                   allow_external_paths=args.allow_external_paths,
                   baseline_jpeg=args.baseline_jpeg,
                   jpeg_restart_interval=args.jpeg_restart_interval)
    print(summary)
    return 0


def _cmd_inspect(args) -> int:
    dataset = open_dataset(args.path, format=args.format,
                           allow_external_paths=args.allow_external_paths,
                           token_dtype=args.token_dtype, seq_len=args.seq_len)
    if dataset.tokens is not None:
        return _inspect_tokens(dataset, args)
    shards = dataset.shards
    total_bytes = sum(shard["bytes"] for shard in shards)
    info = {
        "path": dataset.path,
        "format": dataset.format,
        "records": len(dataset),
        "shards": len(shards),
        "bytes": total_bytes,
        "classes": dataset.classes,
        "shard_list": shards,
    }
    if dataset.format == "mds":
        info["columns"] = _mds_columns(dataset.path)
    tabular = dataset.tabular
    if tabular is not None:
        info["tabular"] = {key: str(value) if key in ("label", "dense", "sparse") else value
                           for key, value in tabular.items()}
    if dataset.format == "tfrecord" and shards:
        from ._tfrecord import first_record_features
        info["features"] = dict(first_record_features(shards[0]["path"]))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"path:     {info['path']}")
    print(f"format:   {info['format']}")
    print(f"records:  {info['records']}")
    print(f"shards:   {info['shards']}" + (f"  ({_human_bytes(total_bytes)})" if total_bytes else ""))
    if shards and len(shards) > 1:
        sizes = sorted(shard["bytes"] for shard in shards)
        print(f"          shard size min/median/max: {_human_bytes(sizes[0])} / "
              f"{_human_bytes(sizes[len(sizes) // 2])} / {_human_bytes(sizes[-1])}")
    if "columns" in info:
        print("columns:  " + ", ".join(f"{name} ({encoding})"
                                       for name, encoding in info["columns"]))
    if tabular is not None:
        parsed = " (parsed from text)" if tabular["text"] else ""
        print(f"rows:     label {tabular['label']}, {tabular['dense_count']} x "
              f"{tabular['dense']} dense, {tabular['sparse_count']} x {tabular['sparse']} "
              f"sparse{parsed}; {tabular['blocks']} blocks, {tabular['row_bytes']} bytes a row")
    classes = dataset.classes
    if classes:
        shown = ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
        print(f"classes:  {len(classes)} ({shown})")
    else:
        print("classes:  none recorded")
    for key, kind in info.get("features", {}).items():
        print(f"feature:  {key}: {kind}")
    if len(dataset) > 0:
        first = dataset[0]
        print(f"first:    {first!r}")
    return 0


def _mds_columns(path):
    """An MDS dataset's columns and encodings, as its index.json's first
    shard gives them (gpufeed read the same file to open it)."""
    with open(os.path.join(path, "index.json"), encoding="utf-8") as f:
        shard = json.load(f)["shards"][0]
    return list(zip(shard["column_names"], shard["column_encodings"]))


def _inspect_tokens(dataset, args) -> int:
    """Token corpora: the stream's length, documents, dtype and files."""
    tokens = dataset.tokens
    files = [dict(path=shard["path"], bytes=shard["bytes"], windows=shard["records"])
             for shard in dataset.shards]
    directory = dataset.path if os.path.isdir(dataset.path) else os.path.dirname(dataset.path)
    manifest, heads = (os.path.join(directory, name) for name in ("gpufeed.json", "gpufeed.heads"))
    info = dict(path=dataset.path, format=dataset.format, files=len(files), file_list=files,
                bytes=sum(f["bytes"] for f in files),
                manifest=manifest if os.path.isfile(manifest) else None,
                heads=heads if os.path.isfile(heads) else None, **tokens)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"path:       {info['path']}")
    print(f"format:     {info['format']}")
    print(f"tokens:     {tokens['tokens']} ({tokens['token_dtype']})")
    if info["format"] == "megatron":
        print(f"documents:  {tokens['documents']} ({tokens['sequences']} sequences)")
    else:
        print("documents:  not recorded by this format")
    print(f"windows:    {tokens['windows']} of seq_len {tokens['seq_len']} (+1 target)")
    if info["manifest"] is None:
        print("index:      none (`gpufeed index` it: no file opened until read, and the heads "
              "that let global shuffle read 4 KiB windows)")
    else:
        heads_note = (f", {info['heads']} (heads)" if info["heads"]
                      else "; no heads (run `gpufeed index` again)")
        print(f"index:      {info['manifest']}{heads_note}")
    print(f"files:      {len(files)}  ({_human_bytes(info['bytes'])})")
    for f in files[:10]:
        print(f"            {f['path']}  {_human_bytes(f['bytes'])}")
    if len(files) > 10:
        print(f"            ... {len(files) - 10} more")
    return 0


def _cmd_verify(args) -> int:
    from . import verify
    report = verify(args.path, format=args.format,
                    allow_external_paths=args.allow_external_paths, token_dtype=args.token_dtype)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        if report["format"] in TOKEN_FORMATS:
            print(f"checked {report['records_checked']} tokens in {report['shards_checked']} "
                  f"file(s) ({report['format']})")
        else:
            print(f"checked {report['records_checked']} records in {report['shards_checked']} "
                  f"shard(s), {report['checksums_checked']} checksum(s)")
        for problem in report["problems"]:
            print(f"PROBLEM: {problem}")
        print("OK" if not report["problems"] else f"{len(report['problems'])} problem(s) found")
    return 0 if not report["problems"] else 1


def _is_record_file(path: str, args) -> bool:
    """A .rec or WebDataset .tar (the record indexes); anything else is a
    token corpus (a directory, a Megatron prefix, an llm.c or token file)."""
    import os
    if args.format != "auto" or args.token_dtype:
        return False
    name = os.path.basename(path.rstrip("/"))
    return not os.path.isdir(path) and (name.endswith(".rec") or ".tar" in name)


# Formats whose files `gpufeed index` gives a line index (kept where readers look).
LINE_INDEX_FORMATS = ("criteo_tsv",)


def _index_lines(path: str, args) -> None:
    """Builds (or builds again) the line index of each TSV file at ``path``
    and says where it went: beside the file, else the cache directory."""
    import os
    from . import _core
    from ._native import native_dataset_options
    if args.output:
        raise SystemExit("gpufeed index: a line index is kept where readers look for it (beside "
                         "the file, else the cache directory); no --output")
    tabular = {"index_dir": os.path.abspath(args.index_dir)} if args.index_dir else None
    options = native_dataset_options(args.format, args.allow_external_paths, tabular=tabular)
    for file, lines, index_path in _core.write_line_index(os.fspath(path), options):
        print(f"indexed {lines} lines of {file} -> {index_path}")


def _cmd_index(args) -> int:
    from . import write_index, write_token_manifest
    if len(args.files) > 1 and args.output:
        raise SystemExit("gpufeed index: --output takes a single input file")
    for path in args.files:
        if args.format in LINE_INDEX_FORMATS:
            _index_lines(path, args)
            continue
        if not _is_record_file(path, args):
            if args.output:
                raise SystemExit("gpufeed index: a token corpus's gpufeed.json is written in its "
                                 "directory (no --output)")
            manifest_path, tokens = write_token_manifest(
                path, format=args.format, token_dtype=args.token_dtype,
                allow_external_paths=args.allow_external_paths)
            heads = os.path.join(os.path.dirname(manifest_path), "gpufeed.heads")
            print(f"described {tokens} tokens of {path} -> {manifest_path} (and {heads})")
            continue
        count = write_index(path, args.output)
        if path.endswith(".rec"):
            target = args.output or path[:-4] + ".idx"
            print(f"indexed {count} records of {path} -> {target}")
        else:
            target = args.output or path + ".gpufeed-index"
            print(f"indexed {count} samples of {path} -> {target}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufeed",
                                     description="gpufeed: keeps GPUs fed during training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("pack", help="pack an ImageFolder or a list file into shards")
    p.add_argument("src", help="ImageFolder directory or list file (path<TAB>label[,label...])")
    p.add_argument("dst", help="output directory")
    p.add_argument("--format", choices=PACK_FORMATS, default="recordio")
    p.add_argument("--shard-size", type=parse_size, default=256 * 2**20,
                   help="bytes per shard, e.g. 256MiB (default)")
    p.add_argument("--workers", type=int, default=None, help="reader threads (default: cores)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing pack in DST")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--allow-external-paths", action="store_true",
                   help="accept list-file paths outside the list file's directory")
    p.add_argument("--baseline-jpeg", action="store_true",
                   help="rewrite progressive JPEGs as baseline, losslessly (same pixels, "
                        "about 3x faster to decode)")
    p.add_argument("--jpeg-restart-interval", type=int, default=0, metavar="MCUS",
                   help="rewrite every JPEG of at least 1 megapixel as baseline with a restart "
                        "marker every MCUS MCUs (16 suits photographs), losslessly: crops decode "
                        "faster (default 0: no markers added)")
    p.set_defaults(run=_cmd_pack)

    p = sub.add_parser("inspect", help="format, records, shards, classes and sizes of a dataset")
    p.add_argument("path")
    p.add_argument("--format", choices=FORMATS, default="auto")
    p.add_argument("--json", action="store_true")
    p.add_argument("--allow-external-paths", action="store_true",
                   help="follow shard paths that lead outside the dataset directory")
    p.add_argument("--token-dtype", default=None,
                   help="token corpora: the dtype of headerless files (with --format tokens)")
    p.add_argument("--seq-len", type=int, default=1024, help="token corpora: window length")
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser("verify", help="check every record's framing and the shard checksums")
    p.add_argument("path")
    p.add_argument("--format", choices=FORMATS, default="auto")
    p.add_argument("--json", action="store_true")
    p.add_argument("--allow-external-paths", action="store_true",
                   help="follow shard paths that lead outside the dataset directory")
    p.add_argument("--token-dtype", default=None,
                   help="token corpora: the dtype of headerless files (with --format tokens)")
    p.set_defaults(run=_cmd_verify)

    p = sub.add_parser("index", help="write the .idx of a .rec file, the member index of a "
                                     "WebDataset .tar, a token corpus's gpufeed.json, or the "
                                     "line index of Criteo TSV files")
    p.add_argument("files", nargs="+", metavar="PATH",
                   help=".rec or .tar files, or token corpora (a directory of llm.c shards or "
                        "Megatron pairs, a Megatron prefix, with --format tokens headerless "
                        "files), or with --format criteo_tsv TSV files or directories of them")
    p.add_argument("--output", default=None,
                   help="index path (default: beside, FILE.idx or FILE.tar.gpufeed-index)")
    p.add_argument("--format", choices=("auto",) + TOKEN_FORMATS + LINE_INDEX_FORMATS,
                   default="auto",
                   help="token corpora: the format (default: detected); criteo_tsv: line "
                        "indexes (FILE.gpufeed-lines, built again when already there)")
    p.add_argument("--token-dtype", default=None,
                   help="token corpora: the dtype of headerless files (with --format tokens)")
    p.add_argument("--index-dir", default=None,
                   help="criteo_tsv: where an index goes when the file's directory is not "
                        "writable (default: the cache directory, ~/.cache/gpufeed/line-index)")
    p.add_argument("--allow-external-paths", action="store_true",
                   help="token corpora: follow names that lead outside the corpus directory")
    p.set_defaults(run=_cmd_index)

    from . import bench, diagnose
    p = sub.add_parser("bench", help="run the loader on a dataset: throughput, per-stage "
                                     "breakdown, bottleneck verdict")
    bench.add_arguments(p)
    p.set_defaults(run=bench.main_from_args)

    p = sub.add_parser("diagnose", help="investigate the storage, the data and the loader, "
                                        "with recommendations")
    diagnose.add_arguments(p)
    p.set_defaults(run=diagnose.main_from_args)

    from . import cache
    p = sub.add_parser("cache", help="the node-local cache: stat, clear, warm, put-checkpoint")
    cache.add_arguments(p)
    p.set_defaults(run=cache.main_from_args)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("gpufeed: interrupted", file=sys.stderr)
        return 130
    except (_errors.Error, OSError, ValueError) as error:
        print(f"gpufeed {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
