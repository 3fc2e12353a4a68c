"""``gpufeed bench``'s command line: its arguments, and a run from them."""

from __future__ import annotations

import json
import os

from .measure import run_bench
from .report import format_report, plot_timeline

__all__ = ["add_arguments", "main_from_args"]

def _make_transform(args):
    from ..loader import ImageTransform, RawTransform
    if args.transform == "raw":
        return RawTransform(dtype="uint8", shape=(args.raw_length,))
    return ImageTransform(args.size, train=(args.transform == "train"), dtype=args.dtype,
                          layout=args.layout)


def add_arguments(parser) -> None:
    from ..pack import parse_size
    parser.add_argument("path", nargs="?", default=None,
                        help="a dataset gpufeed can open (packed shards, LMDB, ImageFolder); "
                             "optional with --embedding")
    parser.add_argument("--batches", type=int, default=100, help="measured batches (default 100)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="batches before the measurement starts (default 5)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="decode threads (default: cores)")
    parser.add_argument("--transform", choices=("train", "eval", "raw"), default="train",
                        help="train: RandomResizedCrop + flip; eval: resize + center crop; "
                             "raw: the first --raw-length bytes of each record")
    parser.add_argument("--size", type=int, default=224, help="output image size")
    parser.add_argument("--dtype", choices=("float32", "uint8", "float16", "bfloat16"),
                        default="float32")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    parser.add_argument("--raw-length", type=int, default=16)
    parser.add_argument("--device", default="cpu", help='"cpu" or "cuda[:N]"')
    parser.add_argument("--io-backend", choices=("auto", "io_uring", "pread"), default="auto")
    parser.add_argument("--direct-io", action="store_true", help="O_DIRECT reads")
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--shuffle", choices=("global", "block", "node", "none"),
                        default="global",
                        help='"node": this node\'s shards only (with --num-nodes/--node-rank)')
    parser.add_argument("--rank", type=int, default=None,
                        help="this process's rank in the job (default: RANK or 0)")
    parser.add_argument("--world-size", type=int, default=None,
                        help="ranks in the job (default: WORLD_SIZE or 1)")
    parser.add_argument("--num-nodes", type=int, default=None,
                        help="nodes of the job for --shuffle node (default: from the "
                             "torchrun environment, else 1)")
    parser.add_argument("--node-rank", type=int, default=None,
                        help="this node's index for --shuffle node (default: GROUP_RANK, "
                             "NODE_RANK, else from the rank)")
    parser.add_argument("--format", default="auto")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise")
    parser.add_argument("--cache-dir", default=None, help="node-local cache directory")
    parser.add_argument("--cache-capacity", type=parse_size, default=None,
                        help="node-local cache budget, e.g. 200GiB")
    parser.add_argument("--interval", type=float, default=0.25,
                        help="seconds between stats samples for the timeline (default 0.25)")
    parser.add_argument("--plot", default=None, metavar="OUT.png",
                        help="draw each stage's busy/starved/blocked share over time")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--step-time", type=float, default=None, metavar="SECONDS",
                        help="emulate a training step of SECONDS per batch and report the "
                             "accelerator utilization (AU)")
    parser.add_argument("--step-time-from", default=None, metavar="NAME|[NAME@]FILE.csv",
                        help="the step time from a GPU/model profile (a100-resnet50, "
                             "h100-resnet50, v100-resnet50, t4-resnet50) or a CSV of "
                             "name,samples_per_second")
    parser.add_argument("--au-search", action="store_true",
                        help="also measure how many such GPUs the loader feeds at --au-target")
    parser.add_argument("--au-target", type=float, default=0.9)
    parser.add_argument("--window", type=float, default=10.0,
                        help="seconds of the recent window the verdict is judged on (default 10)")
    _add_embedding_arguments(parser)


def _add_embedding_arguments(parser) -> None:
    """--embedding PATH and its options (the table's node cache is --cache-dir
    with --cache-capacity, its reads --io-backend and --direct-io)."""
    group = parser.add_argument_group("embedding table (--embedding PATH)")
    group.add_argument("--embedding", default=None, metavar="PATH",
                       help="also (or, without a dataset PATH, only) look up Zipf-distributed "
                            "ids in the embedding table PATH (.npy, or raw with "
                            "--embedding-dim/--embedding-dtype)")
    group.add_argument("--embedding-ids", type=int, default=409600,
                       help="ids looked up after the warm-up (default 409600)")
    group.add_argument("--embedding-batch", type=int, default=4096,
                       help="ids a lookup (default 4096)")
    group.add_argument("--embedding-warmup", type=int, default=5,
                       help="lookups before the stats are reset (default 5)")
    group.add_argument("--zipf", type=float, default=1.05,
                       help="the exponent of the ids' Zipf distribution (default 1.05)")
    group.add_argument("--seed", type=int, default=0, help="the ids' seed (default 0)")
    group.add_argument("--cache-bytes", default="8GiB",
                       help="the table's RAM tier budget, e.g. 128MiB (default 8GiB; 0: none)")
    group.add_argument("--preload", action="store_true",
                       help="read the whole table into RAM at open (it must fit --cache-bytes)")
    group.add_argument("--embedding-dim", type=int, default=None, help="a raw table's dim")
    group.add_argument("--embedding-dtype", default=None,
                       choices=("float32", "float16", "bfloat16", "int8", "uint8"),
                       help="a raw table's dtype (bfloat16 for a .npy of uint16)")


def _embedding_result(args):
    from .embedding import run_embedding_bench
    options = dict(cache_bytes=args.cache_bytes, cache_dir=args.cache_dir,
                   cache_capacity=args.cache_capacity, preload=args.preload,
                   io_backend=args.io_backend, direct_io=args.direct_io,
                   dim=args.embedding_dim, dtype=args.embedding_dtype)
    return run_embedding_bench(args.embedding, ids=args.embedding_ids,
                               batch=args.embedding_batch, warmup=args.embedding_warmup,
                               exponent=args.zipf, seed=args.seed, table_options=options)


def main_from_args(args) -> int:
    if args.path is None and args.embedding is None:
        raise SystemExit("gpufeed bench: give a dataset PATH, --embedding PATH, or both")
    embedding = _embedding_result(args) if args.embedding else None
    if args.path is None:
        from .embedding import format_embedding_report
        print(json.dumps({"embedding": embedding}, indent=2) if args.json
              else format_embedding_report(embedding))
        return 0
    result = _dataset_result(args)
    if embedding is not None:
        result["embedding"] = embedding
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
        if args.plot:
            print(f"plot:       {result['plot']}")
        if embedding is not None:
            from .embedding import format_embedding_report
            print("embedding table:")
            print(format_embedding_report(embedding))
    return 0


def _dataset_result(args):
    """The loader on the dataset at args.path (run_bench), with its plot."""
    import sys
    from ..au import step_time_for
    step_time, step_label = step_time_for(args.batch_size, args.step_time, args.step_time_from)
    if args.au_search and step_time is None:
        raise SystemExit("--au-search needs --step-time or --step-time-from")
    result = run_bench(args.path, batches=args.batches, warmup=args.warmup,
                       batch_size=args.batch_size, num_threads=args.threads,
                       transform=_make_transform(args), device=args.device,
                       io_backend=args.io_backend, direct_io=args.direct_io,
                       prefetch=args.prefetch, shuffle=args.shuffle, format=args.format,
                       on_error=args.on_error, cache_dir=args.cache_dir,
                       cache_capacity=args.cache_capacity, interval=args.interval,
                       progress=not (args.quiet or args.json) and sys.stderr.isatty(),
                       step_time=step_time, step_label=step_label, au_search=args.au_search,
                       au_target=args.au_target, window_seconds=args.window,
                       rank=args.rank, world_size=args.world_size, num_nodes=args.num_nodes,
                       node_rank=args.node_rank)
    if args.plot:
        plot_timeline(result, args.plot)
        result["plot"] = os.path.abspath(args.plot)
    return result
