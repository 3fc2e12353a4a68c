"""The recommendations of ``gpufeed diagnose``, each naming the
measurement that triggered it."""

from __future__ import annotations

import os
from typing import Any, Dict, List

from .survey import MIB, SMALL_FILE_BYTES

__all__ = ["recommend"]


def recommend(report: Dict[str, Any]) -> List[Dict[str, str]]:
    """Each recommendation: id, advice, and `because`: the measurement that
    triggered it."""
    out: List[Dict[str, str]] = []
    storage, data = report["storage"], report["data"]
    measured = report.get("measurements", {})
    consumer = report.get("consumer") or {}
    # The loader's bottleneck over its recent window ("consumer", "read",
    # "decode", "copy", "cpu-contention"; "none" before a batch), None when
    # the loader did not run.
    kind = consumer.get("bottleneck")
    shares = consumer.get("loader_shares")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def add(ident: str, advice: str, because: str) -> None:
        out.append({"id": ident, "advice": advice, "because": because})

    def judged() -> str:
        # The shares the loader judged its bottleneck on.
        text = (f"{kind}-bound: workers reading {shares['read']:.0%}, decoding "
                f"{shares['decode']:.0%} (on a CPU {shares.get('decode_cpu', 0):.0%}), the "
                f"consumer waited {shares['consumer_wait']:.0%}")
        if kind == "copy":
            text += f", the copy stream busy {shares['copy']:.0%}"
        return text

    if data.get("packed") is not True and data["files"] >= 100 and data["small_file_share"] >= 0.5:
        small_rate = measured.get("small_files", {}).get("files_per_s")
        rate_text = f"; measured {small_rate:.0f} small files/s" if small_rate else ""
        add("pack",
            f"pack the small files into shards: gpufeed pack {report['path']} DST "
            "--shard-size 256MiB (one open per shard instead of one per sample)",
            f"{data['small_file_share']:.0%} of {data['files']} files are under "
            f"{SMALL_FILE_BYTES // MIB} MiB and the dataset is not packed"
            f" (format: {data.get('format') or 'none detected'}){rate_text}")

    read_ahead = storage.get("bdi_read_ahead_kb")
    devices = storage.get("block_devices") or []
    if read_ahead is None and devices:
        read_ahead = devices[0].get("read_ahead_kb")
    if (read_ahead is not None and read_ahead < 1024 and data["mean_file_bytes"] >= MIB):
        names = ", ".join(d["name"] for d in devices) or storage["mount"]["device_number"]
        target = (f"echo 4096 > /sys/block/{devices[0]['name']}/queue/read_ahead_kb"
                  if devices else
                  f"echo 4096 > /sys/class/bdi/{storage['mount']['device_number']}/read_ahead_kb")
        add("read_ahead",
            f"raise read-ahead to 4 MiB for sequential shard reads: {target} (as root; "
            "persist it with a udev rule)",
            f"read_ahead_kb is {read_ahead} on {names} and files average "
            f"{data['mean_file_bytes'] / MIB:.1f} MiB (sequential reads)")

    lustre = storage.get("lustre") or {}
    if storage["filesystem"] == "lustre" and data.get("files_over_1gb"):
        count = lustre.get("stripe_count")
        if count is not None and 0 < count < 4:
            add("stripe",
                "stripe the shards over 4-8 OSTs: lfs setstripe -c 4 DIR, then re-pack (or "
                "lfs migrate -c 4 FILE) so one shard's reads go to several servers",
                f"{data['files_over_1gb']} file(s) exceed 1 GB with a stripe count of {count} "
                f"(lfs getstripe)")
        elif count is None:
            add("stripe",
                "check the striping of the >1 GB shards (lfs getstripe -c FILE) and use 4-8 OSTs",
                f"{data['files_over_1gb']} file(s) exceed 1 GB on Lustre; striping could not be "
                f"read ({lustre.get('error', 'no lfs')})")

    rotational = any(d.get("rotational") for d in devices)
    # A local SSD that is read-bound gains nothing from a copy on another
    # local SSD: there the loader's read-bound advice (pack, queue depth) applies.
    if storage.get("network") or (kind == "read" and rotational):
        reasons = []
        if storage.get("network"):
            reasons.append(f"the data is on {storage['filesystem']} (a network/parallel "
                           "filesystem: every read crosses the network and shares its servers)")
        if kind == "read":
            reasons.append(f"the loader is {judged()}")
        if rotational:
            reasons.append("the disk is rotational")
        add("cache",
            "cache the shards on node-local NVMe (DataLoader(cache_dir=/local/nvme/gpufeed, "
            "cache_capacity=...), gpufeed bench --cache-dir ...): later epochs read locally",
            "; ".join(reasons))

    threads = consumer.get("threads")
    if kind == "decode":
        if threads and cores and threads < cores:
            add("threads",
                f"use more decode threads: num_threads={cores} (this machine's cores)",
                f"{threads} of {cores} cores; the loader is {judged()}")
        else:
            add("threads",
                "decode is the limit on all cores: more decode threads need more cores (or "
                "lower the output size); see the uint8 advice",
                f"{threads} threads on {cores} cores; the loader is {judged()}")
        if "float32" in consumer.get("transform", "float32"):
            add("uint8",
                'output uint8 and normalize on the GPU: ImageTransform(dtype="uint8") '
                "(no float work per pixel on the CPU, 4x fewer bytes per batch over PCIe)",
                f"decode-bound with float32 output: workers decoding "
                f"{consumer['stages']['workers_decode']:.0%} of their time")

    if kind == "cpu-contention":
        machine = consumer.get("machine", {})
        add("contention",
            "give the loader its own CPUs: move other work off this node's cores, or pin the "
            "training process and the loader to separate cores (taskset / numactl); on a VM, "
            "ask for dedicated vCPUs",
            f"the loader is {judged()}; other processes kept "
            f"{machine.get('external_cpu_cores', 0):.1f} of {machine.get('cores', 0)} CPUs busy, "
            f"steal {machine.get('steal_share', 0):.0%}; on idle CPUs about "
            f"+{consumer.get('expected_gain', 0):.0%}")

    if kind == "copy":
        add("copy",
            'ship uint8 and normalize on the GPU: ImageTransform(dtype="uint8"), or float output '
            'with normalize_on_device left on (the default with device="cuda"), puts 4x fewer '
            "bytes than float32 on PCIe; lower the output size; if the copy stream stays busy, "
            "check the PCIe link (nvidia-smi -q: link generation and width) and run on the "
            "GPU's NUMA node (nvidia-smi topo -m, then numactl --cpunodebind=N --membind=N)",
            f"the loader is {judged()}")

    stages = consumer.get("stages")
    # Copy-bound: the consumer waits on the copy stream, not on bursts from
    # the workers, and a deeper window does not make the stream faster.
    if stages and kind != "copy":
        busy = stages["workers_read"] + stages["workers_decode"]
        if stages["consumer_starved"] >= 0.05 and busy < 0.7:
            add("prefetch",
                "raise prefetch to 4: the workers have spare time but the consumer still waits, "
                "so batches arrive in bursts",
                f"the consumer waited {stages['consumer_starved']:.0%} of the run while the "
                f"workers were busy only {busy:.0%}")
    if rotational and data.get("packed"):
        add("block_shuffle",
            'use shuffle="block" on spinning disks: whole shards in random order, samples '
            "shuffled inside a window of shards (sequential reads)",
            "the block device is rotational (queue/rotational = 1)" +
            (f"; random 4 KiB reads measured {measured['random']['iops']:.0f} IOPS"
             if measured.get("random", {}).get("iops") else ""))
    return out
