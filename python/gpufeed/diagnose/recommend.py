"""The recommendations of ``gpufeed diagnose``, each naming the
measurement that triggered it."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Tuple

from .survey import MIB, SMALL_FILE_BYTES

__all__ = ["recommend"]


Recommendation = Dict[str, str]


class _Facts:
    """What the rules read from a diagnose report: its storage, data and
    measurements, and the loader run's judgement (`kind`: the bottleneck
    over its recent window, "consumer", "read", "decode", "copy",
    "cpu-contention"; "none" before a batch; None when the loader did not
    run)."""

    def __init__(self, report: Dict[str, Any]):
        self.report = report
        self.storage, self.data = report["storage"], report["data"]
        self.measured = report.get("measurements", {})
        self.consumer = report.get("consumer") or {}
        self.kind = self.consumer.get("bottleneck")
        self.shares = self.consumer.get("loader_shares")
        self.cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count())

    def devices(self) -> List[Dict[str, Any]]:
        """The block devices under the dataset (possibly none)."""
        return self.storage.get("block_devices") or []

    def rotational(self) -> bool:
        """Whether any block device under the dataset is rotational."""
        return any(d.get("rotational") for d in self.devices())

    def judged(self) -> str:
        """The shares the loader judged its bottleneck on, as text.
        REQUIRES: the loader ran (`shares` is not None)."""
        shares = self.shares
        text = (f"{self.kind}-bound: workers reading {shares['read']:.0%}, decoding "
                f"{shares['decode']:.0%} (on a CPU {shares.get('decode_cpu', 0):.0%}), the "
                f"consumer waited {shares['consumer_wait']:.0%}")
        if self.kind == "copy":
            text += f", the copy stream busy {shares['copy']:.0%}"
        return text


def _item(ident: str, advice: str, because: str) -> Recommendation:
    return {"id": ident, "advice": advice, "because": because}


def _pack(facts: _Facts) -> Iterator[Recommendation]:
    """Pack when most of many files are small and the dataset is not packed."""
    data, measured, report = facts.data, facts.measured, facts.report
    if data.get("packed") is not True and data["files"] >= 100 and data["small_file_share"] >= 0.5:
        small_rate = measured.get("small_files", {}).get("files_per_s")
        rate_text = f"; measured {small_rate:.0f} small files/s" if small_rate else ""
        yield _item(
            "pack",
            f"pack the small files into shards: gpufeed pack {report['path']} DST "
            "--shard-size 256MiB (one open per shard instead of one per sample)",
            f"{data['small_file_share']:.0%} of {data['files']} files are under "
            f"{SMALL_FILE_BYTES // MIB} MiB and the dataset is not packed"
            f" (format: {data.get('format') or 'none detected'}){rate_text}")


def _read_ahead(facts: _Facts) -> Iterator[Recommendation]:
    """Raise read-ahead when it is under 1 MiB and files average 1 MiB or more."""
    storage, data = facts.storage, facts.data
    read_ahead = storage.get("bdi_read_ahead_kb")
    devices = facts.devices()
    if read_ahead is None and devices:
        read_ahead = devices[0].get("read_ahead_kb")
    if (read_ahead is not None and read_ahead < 1024 and data["mean_file_bytes"] >= MIB):
        names = ", ".join(d["name"] for d in devices) or storage["mount"]["device_number"]
        target = (f"echo 4096 > /sys/block/{devices[0]['name']}/queue/read_ahead_kb"
                  if devices else
                  f"echo 4096 > /sys/class/bdi/{storage['mount']['device_number']}/read_ahead_kb")
        yield _item(
            "read_ahead",
            f"raise read-ahead to 4 MiB for sequential shard reads: {target} (as root; "
            "persist it with a udev rule)",
            f"read_ahead_kb is {read_ahead} on {names} and files average "
            f"{data['mean_file_bytes'] / MIB:.1f} MiB (sequential reads)")


def _stripe(facts: _Facts) -> Iterator[Recommendation]:
    """Stripe >1 GB files on Lustre over more OSTs (or check the striping)."""
    storage, data = facts.storage, facts.data
    lustre = storage.get("lustre") or {}
    if storage["filesystem"] == "lustre" and data.get("files_over_1gb"):
        count = lustre.get("stripe_count")
        if count is not None and 0 < count < 4:
            yield _item(
                "stripe",
                "stripe the shards over 4-8 OSTs: lfs setstripe -c 4 DIR, then re-pack (or "
                "lfs migrate -c 4 FILE) so one shard's reads go to several servers",
                f"{data['files_over_1gb']} file(s) exceed 1 GB with a stripe count of {count} "
                f"(lfs getstripe)")
        elif count is None:
            yield _item(
                "stripe",
                "check the striping of the >1 GB shards (lfs getstripe -c FILE) and use 4-8 OSTs",
                f"{data['files_over_1gb']} file(s) exceed 1 GB on Lustre; striping could not be "
                f"read ({lustre.get('error', 'no lfs')})")


def _cache(facts: _Facts) -> Iterator[Recommendation]:
    """Cache on node-local NVMe when the data is on a network filesystem or
    the loader is read-bound on a rotational disk. A local SSD that is
    read-bound gains nothing from a copy on another local SSD: there the
    loader's read-bound advice (pack, queue depth) applies."""
    storage, kind = facts.storage, facts.kind
    rotational = facts.rotational()
    if storage.get("network") or (kind == "read" and rotational):
        reasons = []
        if storage.get("network"):
            reasons.append(f"the data is on {storage['filesystem']} (a network/parallel "
                           "filesystem: every read crosses the network and shares its servers)")
        if kind == "read":
            reasons.append(f"the loader is {facts.judged()}")
        if rotational:
            reasons.append("the disk is rotational")
        yield _item(
            "cache",
            "cache the shards on node-local NVMe (DataLoader(cache_dir=/local/nvme/gpufeed, "
            "cache_capacity=...), gpufeed bench --cache-dir ...): later epochs read locally",
            "; ".join(reasons))


def _decode(facts: _Facts) -> Iterator[Recommendation]:
    """Decode-bound: more threads (or the note that all cores decode), and
    uint8 output when the output is float32."""
    consumer, cores = facts.consumer, facts.cores
    threads = consumer.get("threads")
    if facts.kind != "decode":
        return
    if threads and cores and threads < cores:
        yield _item("threads",
                    f"use more decode threads: num_threads={cores} (this machine's cores)",
                    f"{threads} of {cores} cores; the loader is {facts.judged()}")
    else:
        yield _item("threads",
                    "decode is the limit on all cores: more decode threads need more cores (or "
                    "lower the output size); see the uint8 advice",
                    f"{threads} threads on {cores} cores; the loader is {facts.judged()}")
    if "float32" in consumer.get("transform", "float32"):
        yield _item("uint8",
                    'output uint8 and normalize on the GPU: ImageTransform(dtype="uint8") '
                    "(no float work per pixel on the CPU, 4x fewer bytes per batch over PCIe)",
                    f"decode-bound with float32 output: workers decoding "
                    f"{consumer['stages']['workers_decode']:.0%} of their time")


def _jpeg_rewrite(facts: _Facts) -> Iterator[Recommendation]:
    """Decode-bound on JPEGs that pack can make cheaper to decode, losslessly:
    progressive ones (baseline_jpeg), and baseline ones of at least 1 MP
    without restart markers (jpeg_restart_interval)."""
    jpeg = facts.data.get("jpeg") or {}
    if facts.kind != "decode" or not jpeg.get("jpegs"):
        return
    sampled = f"of {jpeg['jpegs']} JPEGs sampled from the dataset"
    progressive = jpeg["progressive"] / jpeg["jpegs"]
    large = jpeg["at_least_1mp_baseline_without_restarts"] / jpeg["jpegs"]
    if large >= 0.25:
        yield _item(
            "jpeg_restart_interval",
            "pack (or pack again from the source) with restart markers: gpufeed.pack(..., "
            "jpeg_restart_interval=16) / gpufeed pack --jpeg-restart-interval 16 rewrites JPEGs "
            "of at least 1 MP losslessly (the same pixels) so that a crop's decode passes over "
            "the rest: about 1.15x exact and 1.45x with ImageTransform(exact=False) on 2-12 MP "
            "photographs (it also makes progressive ones baseline)",
            f"the loader is {facts.judged()}; {large:.0%} {sampled} are baseline, of at least "
            f"1 MP and without restart markers (median {jpeg['median_megapixels']:.1f} MP)")
    elif progressive >= 0.1:
        yield _item(
            "baseline_jpeg",
            "pack (or pack again from the source) with gpufeed.pack(..., baseline_jpeg=True) / "
            "gpufeed pack --baseline-jpeg: progressive JPEGs rewritten as baseline, losslessly "
            "(the same pixels), decode about 3x faster",
            f"the loader is {facts.judged()}; {progressive:.0%} {sampled} are progressive")


def _contention(facts: _Facts) -> Iterator[Recommendation]:
    """CPU contention: give the loader its own CPUs."""
    if facts.kind == "cpu-contention":
        consumer = facts.consumer
        machine = consumer.get("machine", {})
        yield _item(
            "contention",
            "give the loader its own CPUs: move other work off this node's cores, or pin the "
            "training process and the loader to separate cores (taskset / numactl); on a VM, "
            "ask for dedicated vCPUs",
            f"the loader is {facts.judged()}; other processes kept "
            f"{machine.get('external_cpu_cores', 0):.1f} of {machine.get('cores', 0)} CPUs busy, "
            f"steal {machine.get('steal_share', 0):.0%}; on idle CPUs about "
            f"+{consumer.get('expected_gain', 0):.0%}")


def _copy(facts: _Facts) -> Iterator[Recommendation]:
    """Copy-bound: fewer bytes over PCIe, then the link and the NUMA node."""
    if facts.kind == "copy":
        yield _item(
            "copy",
            'ship uint8 and normalize on the GPU: ImageTransform(dtype="uint8"), or float output '
            'with normalize_on_device left on (the default with device="cuda"), puts 4x fewer '
            "bytes than float32 on PCIe; lower the output size; if the copy stream stays busy, "
            "check the PCIe link (nvidia-smi -q: link generation and width) and run on the "
            "GPU's NUMA node (nvidia-smi topo -m, then numactl --cpunodebind=N --membind=N)",
            f"the loader is {facts.judged()}")


def _prefetch(facts: _Facts) -> Iterator[Recommendation]:
    """A deeper prefetch window when the consumer waits on bursts while the
    workers have spare time. Not when copy-bound: there the consumer waits
    on the copy stream, and a deeper window does not make the stream faster."""
    stages = facts.consumer.get("stages")
    if stages and facts.kind != "copy":
        busy = stages["workers_read"] + stages["workers_decode"]
        if stages["consumer_starved"] >= 0.05 and busy < 0.7:
            yield _item(
                "prefetch",
                "raise prefetch to 4: the workers have spare time but the consumer still waits, "
                "so batches arrive in bursts",
                f"the consumer waited {stages['consumer_starved']:.0%} of the run while the "
                f"workers were busy only {busy:.0%}")


def _block_shuffle(facts: _Facts) -> Iterator[Recommendation]:
    """Block shuffle for packed data on a rotational disk."""
    measured = facts.measured
    if facts.rotational() and facts.data.get("packed"):
        yield _item(
            "block_shuffle",
            'use shuffle="block" on spinning disks: whole shards in random order, samples '
            "shuffled inside a window of shards (sequential reads)",
            "the block device is rotational (queue/rotational = 1)" +
            (f"; random 4 KiB reads measured {measured['random']['iops']:.0f} IOPS"
             if measured.get("random", {}).get("iops") else ""))


# The rules in the order their recommendations are listed.
_RULES: Tuple[Callable[[_Facts], Iterator[Recommendation]], ...] = (
    _pack, _read_ahead, _stripe, _cache, _decode, _jpeg_rewrite, _contention, _copy, _prefetch,
    _block_shuffle)


def recommend(report: Dict[str, Any]) -> List[Dict[str, str]]:
    """Each recommendation: id, advice, and `because`: the measurement that
    triggered it."""
    facts = _Facts(report)
    out: List[Dict[str, str]] = []
    for rule in _RULES:
        out.extend(rule(facts))
    return out
