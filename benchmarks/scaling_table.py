"""The arithmetic of a 1,000-node job (docs/scaling.md), from gpufeed's own
storage counters.

    python benchmarks/scaling_table.py [--nodes 1000] [--gpus-per-node 8] [--markdown]

First it measures, on this machine, what one loader process does to the
source per shard: it packs a small RecordIO dataset and runs one epoch of a
rank of a 2-node x 2-rank job under each setting (global shuffle without and
with a node cache, node-partitioned with a node cache), reading
LoaderStats' source_opens, source_stats and source_bytes at open and after
the epoch, and gpufeed.cache.stat for what the node cache fetched; once with
the manifest `pack` writes (lazy opens: a file is opened at its first read,
and with a node cache only by the process filling its copy) and once with
the manifest stripped of index_bytes/index_xxh64 (eager: every process opens
every shard at open). Then it scales those figures to the job: an eager
process opens every file; a lazy one opens the files it reads (global, no
cache: every file, by every rank), or with a node cache its node's fills do
(global shuffle: every file once per node; node-partitioned: each file once
per job); per epoch a rank reads its 1/R of the samples; a node cache
fetches each shard its node reads once. The lazy opens fall at the start of
epoch 1 (a rank's first reads touch its shards), counted as "at start".
ImageNet is RecordIO (lazy). The token corpus is measured the same way over
8 llm.c shards read as 2,048-token windows, without a manifest (eager:
every process opens and reads the header of every file at open) and with
the gpufeed.json `gpufeed index` writes (lazy), and both are scaled.

Assumptions (flags): the processes open their datasets within
--startup-seconds (60); an epoch lasts samples / (R x per-GPU rate); the
descriptor cache holds --fd-cache files per process (4096: RLIMIT_NOFILE
>= 16384; gpufeed keeps a quarter of the limit, at most 4096), so without a
node cache a dataset of more files than that reopens a file for
(1 - fd_cache / files) of the reads (with a node cache the reads go to
local copies). Sizes: ImageNet-1k as 1.28 M images of 110 KB in 1,024 RecordIO
shards (.rec + .idx); 10 B tokens of 2 bytes in 10,000 token files (one file
each, no index; 2,048-token windows).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

GB = 1e9


def measure(work: Path) -> dict:
    """Per-process counters of one rank (rank 0 of 2 nodes x 2 ranks) over
    an 8-shard dataset, per setting."""
    import gpufeed
    files = work / "files"
    files.mkdir(parents=True)
    lines = []
    for index in range(256):
        (files / f"{index:04d}.bin").write_bytes(bytes([index % 256]) * 2000)
        lines.append(f"files/{index:04d}.bin\t{index}")
    (work / "list.txt").write_text("\n".join(lines) + "\n")
    packed = work / "packed"
    gpufeed.pack(work / "list.txt", packed, shard_size=32 * (2000 + 32), progress=False)
    shards = len(list(packed.glob("*.rec")))
    # The same shards with a manifest of an older pack: opened eagerly.
    eager = work / "eager"
    shutil.copytree(packed, eager)
    manifest = json.loads((eager / "gpufeed.json").read_text())
    for shard in manifest["shards"]:
        shard.pop("index_bytes", None)
        shard.pop("index_xxh64", None)
    (eager / "gpufeed.json").write_text(json.dumps(manifest))
    # Token files: 8 llm.c shards, as they are (eager) and indexed (lazy).
    token_eager, token_lazy = work / "tokens-eager", work / "tokens-lazy"
    token_eager.mkdir()
    header = (20240520).to_bytes(4, "little") + (1).to_bytes(4, "little")
    for index in range(8):
        count = 20 * 64 + 1
        (token_eager / f"shard_{index:03d}.bin").write_bytes(
            (header + count.to_bytes(4, "little")).ljust(1024, b"\0") + bytes(2 * count))
    shutil.copytree(token_eager, token_lazy)
    gpufeed.write_token_manifest(token_lazy)
    out = {"nodes": 2,
           "recordio": {"units": shards, "lazy": {}, "eager": {}},
           "tokens": {"units": 8, "lazy": {}, "eager": {}}}
    for kind, mode, dataset in (("recordio", "lazy", packed), ("recordio", "eager", eager),
                                ("tokens", "lazy", token_lazy), ("tokens", "eager", token_eager)):
        for name, shuffle, cached in (("global", "global", False),
                                      ("global+cache", "global", True),
                                      ("node+cache", "node", True)):
            out[kind][mode][name] = _measure_one(dataset, work / f"cache-{kind}-{mode}-{name}",
                                                 shuffle, cached, kind == "tokens")
    return out


def _measure_one(packed: Path, cache_dir: Path, shuffle: str, cached: bool,
                 tokens: bool) -> dict:
    """One epoch of rank 0 of a 2-node x 2-rank job over `packed`."""
    import gpufeed
    transform = gpufeed.TokenWindows(seq_len=64) if tokens else gpufeed.RawTransform(shape=(8,))
    loader = gpufeed.DataLoader(packed, batch_size=4, shuffle=shuffle, rank=0, world_size=4,
                                num_nodes=2, node_rank=0, num_threads=1, transform=transform,
                                cache_dir=cache_dir if cached else None)
    at_open = loader.stats()
    for _ in loader:
        pass
    after = loader.stats()
    loader.close()  # lets its queued copies finish
    fetched = sum(d["fills"] for d in gpufeed.cache.stat(cache_dir)["datasets"]) \
        if cached else 0
    return {
        "opens_at_open": int(at_open["source_opens"]),
        "stats_at_open": int(at_open["source_stats"]),
        "opens_per_epoch": int(after["source_opens"] - at_open["source_opens"]),
        "stats_per_epoch": int(after["source_stats"] - at_open["source_stats"]),
        "shards_fetched": int(fetched),
    }


def table(measured: dict, nodes: int, gpus: int, startup: float, fd_cache: int,
          image_rate: float, token_rate: float) -> list:
    ranks = nodes * gpus
    datasets = [
        # name, samples per epoch, units (RecordIO shards of a .rec and an
        # .idx; token files), files, bytes, per-GPU rate, measured as, lazy
        ("ImageNet 1.28 M images, 1,024 shards", 1.28e6, 1024, 2048, 1.28e6 * 110e3, image_rate,
         "recordio", True),
        ("10 B tokens, 10,000 files, no manifest", 10e9 / 2048, 10000, 10000, 10e9 * 2,
         token_rate / 2048, "tokens", False),
        ("10 B tokens, 10,000 files, gpufeed index", 10e9 / 2048, 10000, 10000, 10e9 * 2,
         token_rate / 2048, "tokens", True),
    ]
    rows = []
    for name, samples, units, files, size, rate, kind, lazy in datasets:
        epoch_seconds = samples / (ranks * rate)
        reads_per_rank = samples / ranks
        for setting in ("global", "global+cache", "node+cache"):
            m = measured[kind]["lazy" if lazy else "eager"][setting]
            # Opens (and open + fstat operations) one measured process made
            # per unit of the small dataset, at open and in its epoch,
            # scaled to the dataset's units.
            opens = m["opens_at_open"] + (m["opens_per_epoch"] if lazy else 0)
            ops = opens + m["stats_at_open"] + (m["stats_per_epoch"] if lazy else 0)
            per_shard = 1 / measured[kind]["units"]
            if not lazy:
                openers = ranks  # every process opens every file at open
            elif setting == "global":
                openers = ranks  # every rank reads (so opens) every file
            elif setting == "global+cache":
                openers = nodes  # the measured process is its node's only filler
            else:
                # Its node's share, filled once: the measured nodes together
                # open each file once, so does the job.
                openers = measured["nodes"]
            opens_at_start = openers * units * opens * per_shard
            startup_ops = openers * units * ops * per_shard
            # Per epoch: reopens when a process reads more files than its
            # descriptor cache holds (without a cache a rank reads from every
            # file; with a node cache a process reads local copies and the
            # source only to fill; node-partitioned fills touch 1/N).
            if setting == "global":
                # Every file was opened at start; the descriptor cache keeps
                # fd_cache of them, so a read finds its file closed with
                # probability 1 - fd_cache / files.
                miss = max(0.0, 1 - fd_cache / files)
                epoch_ops = ranks * reads_per_rank * miss * 2  # open + fstat
                source_epoch1 = size
                source_later = size
                cache_per_node = 0.0
            elif setting == "global+cache":
                epoch_ops = 0.0
                source_epoch1 = size * nodes  # every node fetches every shard
                source_later = 0.0
                cache_per_node = size
            else:
                epoch_ops = 0.0
                source_epoch1 = size
                source_later = 0.0
                cache_per_node = size / nodes
            rows.append({
                "dataset": name, "setting": setting,
                "opens_at_start": opens_at_start,
                "startup_ops_per_s": startup_ops / startup,
                "epoch_seconds": epoch_seconds,
                "epoch_ops": epoch_ops,
                "epoch_ops_per_s": epoch_ops / epoch_seconds,
                "source_gb_epoch1": source_epoch1 / GB,
                "source_gb_epoch1_per_node": source_epoch1 / nodes / GB,
                "source_gb_later": source_later / GB,
                "cache_gb_per_node": cache_per_node / GB,
            })
    return rows


def _format(rows: list, markdown: bool, limit: float) -> str:
    header = ["dataset", "setting", "opens at start", "MDS ops/s at start", "epoch s",
              "MDS ops/s in epoch", "source GB epoch 1 (per node)", "source GB later epochs",
              "cache GB/node", f"MDS < {limit:,.0f}/s"]
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
    for r in rows:
        ok = r["startup_ops_per_s"] < limit and r["epoch_ops_per_s"] < limit
        verdict = "yes" if ok else ("in epochs only" if r["epoch_ops_per_s"] < limit else "no")
        cells = [r["dataset"], r["setting"], f"{r['opens_at_start']:,.0f}",
                 f"{r['startup_ops_per_s']:,.0f}", f"{r['epoch_seconds']:.2f}",
                 f"{r['epoch_ops_per_s']:,.0f}",
                 f"{r['source_gb_epoch1']:,.0f} ({r['source_gb_epoch1_per_node']:,.2f})",
                 f"{r['source_gb_later']:,.0f}", f"{r['cache_gb_per_node']:,.2f}", verdict]
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--startup-seconds", type=float, default=60.0)
    parser.add_argument("--fd-cache", type=int, default=4096)
    parser.add_argument("--image-rate", type=float, default=2000.0,
                        help="images/s one GPU trains on (ResNet-50 class)")
    parser.add_argument("--token-rate", type=float, default=50000.0,
                        help="tokens/s one GPU trains on")
    parser.add_argument("--mds-limit", type=float, default=50000.0)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpufeed-scaling-") as work:
        measured = measure(Path(work))
    for kind, what in (("recordio", "RecordIO shards (.rec + .idx)"),
                       ("tokens", "llm.c token files")):
        print(f"measured per process over {measured[kind]['units']} {what}:")
        for mode in ("lazy", "eager"):
            for setting in ("global", "global+cache", "node+cache"):
                print(f"  {mode:5s} {setting:13s} {measured[kind][mode][setting]}")
    print(f"\n{args.nodes} nodes x {args.gpus_per_node} GPUs = "
          f"{args.nodes * args.gpus_per_node} ranks; startup window {args.startup_seconds:g} s; "
          f"descriptor cache {args.fd_cache} files per process\n")
    rows = table(measured, args.nodes, args.gpus_per_node, args.startup_seconds, args.fd_cache,
                 args.image_rate, args.token_rate)
    print(_format(rows, args.markdown, args.mds_limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
