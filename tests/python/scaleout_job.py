"""A multi-node torch.distributed job on one machine, for tests/python/test_scaleout.py
and by hand:

    python tests/python/scaleout_job.py --nodes 4 --ranks-per-node 4 [--work DIR]

Every "node" is a group of processes with contiguous global ranks (as torchrun
assigns them) and its own node-cache directory over one shared source directory
of packed RecordIO shards. The processes meet through torch.distributed's env://
rendezvous on the loopback (gloo backend) and run gpufeed.DataLoader with
shuffle="node". Each rank writes what it saw (sample ids per epoch, the storage
counters) to a JSON file; `summarize` adds them up and the CLI prints the table.

Phases: "train" runs epochs 0 and 1 and stops epoch 2 after `stop_batches`
batches, saving the state; "resume" loads that state in a job of another size
and finishes epoch 2.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

RECORD_BYTES = 1000
RECORDS = 1024
BATCH = 8
SEED = 17
COUNTERS = ("source_opens", "source_stats", "source_bytes", "cache_reads")


def make_dataset(root: Path, records: int = RECORDS, shards: int = 16) -> Path:
    """`records` raw records of RECORD_BYTES (label = sample id) packed into
    `shards` shards of equal size. Returns the packed directory."""
    import gpufeed
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(records):
        (files / f"{index:05d}.bin").write_bytes(bytes([index % 251]) * RECORD_BYTES)
        lines.append(f"files/{index:05d}.bin\t{index}")
    (root / "list.txt").write_text("\n".join(lines) + "\n")
    # A RecordIO record: 8 bytes of framing, 24 of IRHeader, the payload.
    per_shard = records // shards * (8 + 24 + RECORD_BYTES)
    packed = root / "packed"
    gpufeed.pack(root / "list.txt", packed, shard_size=per_shard, progress=False)
    return packed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(dataset, work: Path, nodes: int, ranks_per_node: int, phase: str,
           stop_batches: int = 0, timeout: float = 300) -> list:
    """Runs one job of nodes x ranks_per_node processes; returns their reports
    (by rank). Raises RuntimeError with the failing rank's output."""
    world = nodes * ranks_per_node
    out = work / f"{phase}-{nodes}x{ranks_per_node}"
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    processes = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank % ranks_per_node),
                   LOCAL_WORLD_SIZE=str(ranks_per_node), GROUP_RANK=str(rank // ranks_per_node),
                   OMP_NUM_THREADS="1")
        log = open(out / f"rank{rank}.log", "w")
        processes.append((subprocess.Popen(
            [sys.executable, __file__, "--worker", phase, "--dataset", str(dataset),
             "--work", str(work), "--out", str(out), "--stop-batches", str(stop_batches)],
            env=env, stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    failed = []
    for rank, (process, log) in enumerate(processes):
        try:
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other, _ in processes:
                other.kill()
            code = "timeout"
        log.close()
        if code != 0:
            failed.append((rank, code))
    if failed:
        rank, code = failed[0]
        raise RuntimeError(f"{phase} rank {rank} exited with {code}:\n" +
                           (out / f"rank{rank}.log").read_text()[-4000:])
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


def _worker(phase: str, dataset: str, work: Path, out: Path, stop_batches: int) -> None:
    import datetime
    import torch.distributed as dist
    import gpufeed
    rank = int(os.environ["RANK"])
    node = int(os.environ["GROUP_RANK"])
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=240))
    cache_dir = work / "cache" / f"node{node}"
    # num_nodes and node_rank come from WORLD_SIZE / LOCAL_WORLD_SIZE and GROUP_RANK.
    loader = gpufeed.DataLoader(dataset, batch_size=BATCH, shuffle="node", seed=SEED,
                                transform=gpufeed.RawTransform(shape=(8,)), num_threads=1,
                                cache_dir=cache_dir, cache_capacity=64 << 20)

    def counters():
        stats = loader.stats()
        return {name: int(stats[name]) for name in COUNTERS}

    def take(limit=None):
        ids = []
        for index, (_, labels) in enumerate(loader):
            ids += [int(x) for x in labels.reshape(-1).tolist()]
            if limit is not None and index + 1 == limit:
                break
        return ids

    report = {"rank": rank, "node": node, "counters": [counters()], "epochs": {}}
    if phase == "train":
        dist.barrier()
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            report["epochs"][epoch] = take()
            report["counters"].append(counters())
            dist.barrier()  # every fill of the epoch is done before the next one
        if int(os.environ["LOCAL_RANK"]) == 0:
            report["cache_bytes"] = int(gpufeed.cache.stat(cache_dir)["bytes"])
        loader.set_epoch(2)
        report["epochs"][2] = take(stop_batches)
        report["state"] = loader.state_dict()
    else:
        state = json.loads((work / "state.json").read_text())
        loader.load_state_dict(state)
        report["epochs"][2] = take()
        report["counters"].append(counters())
        report["state_after"] = loader.state_dict()
    dist.barrier()
    loader.close()
    dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(report))


def summarize(reports: list) -> dict:
    """Job-wide sums of the counters per phase of the train job."""
    def total(index, name):
        return sum(r["counters"][index][name] for r in reports)
    summary = {"processes": len(reports)}
    for name in COUNTERS:
        # "open": right after the loaders opened (which starts epoch 0: its
        # first fills may fall before this reading).
        summary[f"open.{name}"] = total(0, name)
        if len(reports[0]["counters"]) > 2:
            summary[f"epoch0.{name}"] = total(1, name) - total(0, name)
            summary[f"epoch1.{name}"] = total(2, name) - total(1, name)
        summary[f"job.{name}"] = total(-1, name)
    summary["cache_bytes_per_node"] = [r["cache_bytes"] for r in reports if "cache_bytes" in r]
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=("train", "resume"))
    parser.add_argument("--dataset")
    parser.add_argument("--work")
    parser.add_argument("--out")
    parser.add_argument("--stop-batches", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--ranks-per-node", type=int, default=4)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.dataset, Path(args.work), Path(args.out), args.stop_batches)
        return 0
    import tempfile
    work = Path(args.work or tempfile.mkdtemp(prefix="gpufeed-scaleout-"))
    dataset = make_dataset(work / "data")
    reports = launch(dataset, work, args.nodes, args.ranks_per_node, "train", stop_batches=3)
    for key, value in summarize(reports).items():
        print(f"{key:28s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
