"""`gpufeed diagnose PATH`: storage facts, the data survey, measured I/O, the
loader run and recommendations tied to their measurements."""

import json
import os
import subprocess

import pytest

import gpufeed
from gpufeed import cli, diagnose
from conftest import run_cli, write_random_jpegs

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    """An ImageFolder of 120 small real JPEGs (3 classes): the case that
    should be packed."""
    return write_random_jpegs(tmp_path_factory.mktemp("diagnose") / "folder", 120, 3,
                              lambda index: (40, 56), seed=1, quality=80, class_prefix="class_")


def run_in_process(capsys, *args):
    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_small_files_dataset_json_and_pack_recommendation(small_files, capsys):
    status, out, _ = run_in_process(capsys, "diagnose", small_files, "--seconds", "1",
                                    "--io-seconds", "0.3", "--io-threads", "4", "--json")
    assert status == 0
    report = json.loads(out)
    storage, data = report["storage"], report["data"]
    # statfs agrees with coreutils' answer for this path.
    magic = subprocess.run(["stat", "-f", "-c", "%t", str(small_files)], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert int(storage["statfs_magic"], 16) == int(magic, 16)
    assert storage["filesystem"] == diagnose.FILESYSTEM_MAGIC.get(int(magic, 16),
                                                                  storage["filesystem"])
    assert storage["mount"]["mount_point"] and str(small_files).startswith(
        storage["mount"]["mount_point"].rstrip("/"))
    assert data["files"] == 120 and data["small_file_share"] == 1.0
    assert data["format"] == "imagefolder" and data["packed"] is False
    assert sum(bucket["files"] for bucket in data["histogram"]) == 120
    measured = report["measurements"]
    assert measured["sequential"]["mb_per_s"] > 0
    assert measured["random"]["iops"] > 0
    assert measured["small_files"]["files_per_s"] > 0
    assert "posix_fadvise" in measured["random"]["method"]
    consumer = report["consumer"]
    assert consumer["samples_per_s"] > 0
    assert consumer["verdict"].split(":")[0] in ("read-bound", "decode-bound", "consumer-bound", "cpu-contention-bound")
    assert consumer["bottleneck"] in ("consumer", "read", "decode", "cpu-contention")
    assert consumer["verdict"].startswith(consumer["bottleneck"] + "-bound")
    assert set(consumer["loader_shares"]) == {"read", "decode", "decode_cpu", "cpu_wait", "blocked", "other", "consumer_wait", "copy"}
    assert "disk" in consumer and "gpu" in consumer
    ids = {item["id"]: item for item in report["recommendations"]}
    assert "pack" in ids
    assert "100% of 120 files" in ids["pack"]["because"]
    assert f"gpufeed pack {small_files}" in ids["pack"]["advice"]
    for item in report["recommendations"]:
        assert item["because"], item


def test_packed_dataset_gets_no_pack_advice_and_text_report(small_files, tmp_path):
    packed = tmp_path / "packed"
    gpufeed.pack(small_files, packed, progress=False)
    result = run_cli("diagnose", packed, "--seconds", "1", "--io-seconds", "0.3",
                     "--io-threads", "4")
    for heading in ("== storage", "== data", "== measured", "== consumer side",
                    "== recommendations", "filesystem:", "verdict:", "GPU:"):
        assert heading in result.stdout
    assert "recordio" in result.stdout and "packed" in result.stdout
    assert "pack the small files" not in result.stdout


def test_not_a_dataset_still_surveyed(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello\n" * 1000)
    status, out, _ = run_in_process(capsys, "diagnose", tmp_path, "--io-seconds", "0.1",
                                    "--seconds", "0.5", "--json")
    report = json.loads(out)
    assert status == 0 and report["data"]["files"] == 1 and report["data"]["format"] is None
    assert "skipped" in report["consumer"]
    status, _, err = run_in_process(capsys, "diagnose", tmp_path / "missing")
    assert status == 1 and "missing" in err


def test_filesystem_type_of_tmpfs():
    if not os.path.isdir("/dev/shm") or diagnose.mount_of("/dev/shm")["fstype"] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    magic, name = diagnose.filesystem_type("/dev/shm")
    assert (magic, name) == (0x01021994, "tmpfs")
    info = diagnose.storage_info("/dev/shm")
    assert info["block_devices"] == [] and info["network"] is False


def test_mountinfo_parsing_picks_the_longest_prefix(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 26 0:52 / /lus rw,noatime shared:5 - lustre 10.0.0.1@o2ib:/fs rw,flock,lazystatfs\n"
        "41 40 0:53 / /lus/my\\040data rw - nfs4 server:/export rw,vers=4.2,rsize=1048576\n")
    entry = diagnose.mount_of("/lus/x", str(mountinfo))
    assert entry["fstype"] == "lustre" and entry["device_number"] == "0:52"
    assert entry["super_options"] == ["rw", "flock", "lazystatfs"]
    entry = diagnose.mount_of("/lus/my data/shard.rec", str(mountinfo))
    assert entry["mount_point"] == "/lus/my data" and "rsize=1048576" in entry["super_options"]
    assert diagnose.mount_of("/home", str(mountinfo))["mount_point"] == "/"


def test_block_device_resolution_through_dm_and_partition(tmp_path):
    # A sysfs-shaped tree: dm-0 (253:0) built on nvme0n1p2, a partition of
    # nvme0n1. No device mapper exists on the test machine, so the tree is
    # written out; the resolution code reads it exactly as it reads /sys.
    sys_root = tmp_path / "sys"
    block = sys_root / "devices" / "virtual" / "block"
    disk = sys_root / "devices" / "pci" / "nvme0n1"
    (disk / "nvme0n1p2").mkdir(parents=True)
    (disk / "nvme0n1p2" / "partition").write_text("2\n")
    (disk / "queue").mkdir()
    (disk / "queue" / "read_ahead_kb").write_text("128\n")
    (disk / "queue" / "scheduler").write_text("[none] mq-deadline\n")
    (disk / "queue" / "rotational").write_text("0\n")
    (block / "dm-0" / "slaves").mkdir(parents=True)
    os.symlink(disk / "nvme0n1p2", block / "dm-0" / "slaves" / "nvme0n1p2")
    (sys_root / "dev" / "block").mkdir(parents=True)
    os.symlink(block / "dm-0", sys_root / "dev" / "block" / "253:0")
    disks = diagnose.block_devices("253:0", str(sys_root))
    assert disks == [{"name": "nvme0n1", "via": ["dm-0", "nvme0n1p2"], "dev": None,
                      "read_ahead_kb": 128, "scheduler": "none", "rotational": False,
                      "max_sectors_kb": None, "model": None}]


def _report(**overrides):
    report = {
        "path": "/lus/train",
        "storage": {"filesystem": "lustre", "network": True, "block_devices": [],
                    "bdi_read_ahead_kb": 512, "mount": {"device_number": "0:52"},
                    "lustre": {"stripe_count": 1, "stripe_size": 1048576}},
        "data": {"files": 40, "small_file_share": 0.0, "packed": True, "format": "recordio",
                 "mean_file_bytes": 2e9, "files_over_1gb": 40},
        "measurements": {},
        "consumer": {"verdict": "read-bound: workers spent 80% of their time reading", "threads": 1,
                     "bottleneck": "read",
                     "loader_shares": {"read": 0.8, "decode": 0.1, "consumer_wait": 0.7,
                                       "copy": 0.0},
                     "transform": "ImageTransform(dtype='float32')",
                     "stages": {"workers_read": 0.8, "workers_decode": 0.1, "workers_blocked": 0,
                                "workers_starved": 0.1, "consumer_busy": 0.3,
                                "consumer_starved": 0.7}},
    }
    report.update(overrides)
    return report


def test_recommendations_for_a_lustre_read_bound_run():
    # Lustre cannot be mounted here: the rules are checked on the report a
    # Lustre client would produce.
    ids = {item["id"]: item["because"] for item in diagnose.recommend(_report())}
    assert "1 GB with a stripe count of 1" in ids["stripe"]
    assert "lustre" in ids["cache"] and "read-bound" in ids["cache"]
    assert "read_ahead_kb is 512" in ids["read_ahead"]
    assert "pack" not in ids and "threads" not in ids
    assert "prefetch" not in ids  # workers were busy 90%: not a burst problem


def test_recommendations_for_decode_bound_and_bursts():
    decode = _report(consumer={"verdict": "decode-bound: decode threads 95% busy", "threads": 1,
                               "bottleneck": "decode",
                               "loader_shares": {"read": 0.02, "decode": 0.93,
                                                 "consumer_wait": 0.5, "copy": 0.0},
                               "transform": "ImageTransform(dtype='float32')",
                               "stages": {"workers_read": 0.02, "workers_decode": 0.93,
                                          "workers_blocked": 0, "workers_starved": 0.05,
                                          "consumer_busy": 0.5, "consumer_starved": 0.5}})
    ids = {item["id"] for item in diagnose.recommend(decode)}
    assert {"uint8", "threads"} <= ids
    bursts = _report(consumer={"verdict": "consumer-bound: Next() waited 6%", "threads": 2,
                               "bottleneck": "consumer",
                               "loader_shares": {"read": 0.2, "decode": 0.3,
                                                 "consumer_wait": 0.04, "copy": 0.0},
                               "transform": "ImageTransform(dtype='uint8')",
                               "stages": {"workers_read": 0.2, "workers_decode": 0.3,
                                          "workers_blocked": 0.1, "workers_starved": 0.4,
                                          "consumer_busy": 0.9, "consumer_starved": 0.1}})
    ids = {item["id"] for item in diagnose.recommend(bursts)}
    assert "prefetch" in ids and "uint8" not in ids


def _local_report(bottleneck, shares, transform="ImageTransform(dtype='float32')", threads=1):
    """A packed dataset on a local SSD with the loader judged `bottleneck`:
    only the loader's judgement can trigger advice."""
    stages = {"workers_read": shares["read"], "workers_decode": shares["decode"],
              "workers_blocked": 0.0,
              "workers_starved": max(0.0, 1.0 - shares["read"] - shares["decode"]),
              "consumer_busy": 1.0 - shares["consumer_wait"],
              "consumer_starved": shares["consumer_wait"]}
    return _report(
        storage={"filesystem": "ext4", "network": False, "bdi_read_ahead_kb": 4096,
                 "mount": {"device_number": "259:1"}, "lustre": None,
                 "block_devices": [{"name": "nvme0n1", "read_ahead_kb": 4096,
                                    "rotational": False}]},
        data={"files": 4, "small_file_share": 0.0, "packed": True, "format": "recordio",
              "mean_file_bytes": 2e8, "files_over_1gb": 0},
        consumer={"verdict": "(the sentence is not read)", "bottleneck": bottleneck,
                  "threads": threads, "transform": transform, "loader_shares": shares,
                  "stages": stages})


@pytest.mark.parametrize("bottleneck, shares, expected", [
    ("none", {"read": 0.0, "decode": 0.0, "consumer_wait": 0.0, "copy": 0.0}, set()),
    ("consumer", {"read": 0.3, "decode": 0.4, "consumer_wait": 0.01, "copy": 0.0}, set()),
    ("decode", {"read": 0.02, "decode": 0.95, "consumer_wait": 0.6, "copy": 0.0},
     {"threads", "uint8"}),
    # A read-bound loader on a local SSD: pack and queue depth, not a cache.
    ("read", {"read": 0.9, "decode": 0.05, "consumer_wait": 0.7, "copy": 0.0}, set()),
    ("copy", {"read": 0.1, "decode": 0.2, "consumer_wait": 0.7, "copy": 0.92}, {"copy"}),
])
def test_recommendations_follow_the_bottleneck_name(bottleneck, shares, expected):
    items = diagnose.recommend(_local_report(bottleneck, shares))
    assert {item["id"] for item in items} == expected
    for item in items:
        assert item["because"], item
        if item["id"] in ("threads", "copy"):
            assert f"{bottleneck}-bound" in item["because"], item


def test_copy_bound_advice_names_uint8_pcie_and_numa():
    items = diagnose.recommend(_local_report(
        "copy", {"read": 0.1, "decode": 0.2, "consumer_wait": 0.7, "copy": 0.92}))
    (copy,) = [item for item in items if item["id"] == "copy"]
    assert 'dtype="uint8"' in copy["advice"] and "normalize_on_device" in copy["advice"]
    assert "PCIe" in copy["advice"] and "NUMA" in copy["advice"]
    assert "copy stream busy 92%" in copy["because"]
    assert "consumer waited 70%" in copy["because"]


def test_read_bound_on_a_rotational_disk_gets_the_cache_advice():
    report = _local_report("read", {"read": 0.9, "decode": 0.05, "consumer_wait": 0.7,
                                    "copy": 0.0})
    report["storage"]["block_devices"][0]["rotational"] = True
    ids = {item["id"]: item["because"] for item in diagnose.recommend(report)}
    assert "read-bound: workers reading 90%" in ids["cache"] and "rotational" in ids["cache"]
    assert "block_shuffle" in ids


def test_jpeg_survey_counts_what_pack_can_rewrite(tmp_path):
    """The data survey's JPEG sample: progressive files, files of at least
    1 MP, and which of those are baseline without restart markers (a file
    packed with jpeg_restart_interval has them); other records are not
    JPEGs. The headers read are the ones PIL wrote."""
    rng = np.random.default_rng(3)
    large = np.cumsum(rng.integers(0, 9, (800, 1280, 3)), axis=1).astype(np.uint8)
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    PIL.fromarray(large).save(folder / "0_large.jpg", quality=85)
    PIL.fromarray(large).save(folder / "1_large_progressive.jpg", quality=85, progressive=True)
    PIL.fromarray(large[:300, :400]).save(folder / "2_small.jpg", quality=85)
    PIL.fromarray(large[:32, :32]).save(folder / "3_image.png")
    gpufeed.pack(tmp_path / "folder", tmp_path / "restarts", progress=False,
                 jpeg_restart_interval=16)
    restarted = gpufeed.open_dataset(tmp_path / "restarts")[0].data
    assert diagnose.jpeg_header(restarted) == {"width": 1280, "height": 800,
                                               "progressive": False, "restart_interval": 16}
    assert diagnose.jpeg_header((folder / "1_large_progressive.jpg").read_bytes())["progressive"]
    assert diagnose.jpeg_header((folder / "3_image.png").read_bytes()) is None
    assert diagnose.jpeg_header(restarted[:100]) is None  # cut before its first scan
    (folder / "4_restarted.jpg").write_bytes(restarted)
    dataset = gpufeed.open_dataset(tmp_path / "folder")
    assert diagnose.jpeg_survey(dataset) == {
        "sampled": 5, "jpegs": 4, "progressive": 1, "at_least_1mp": 3,
        "at_least_1mp_baseline_without_restarts": 1, "median_megapixels": 1.024}
    (folder / "0_large.jpg").unlink()  # a record that can no longer be read
    assert "skipped" in diagnose.jpeg_survey(dataset)


def test_decode_bound_on_large_or_progressive_jpegs_gets_the_pack_rewrite_advice():
    shares = {"read": 0.02, "decode": 0.95, "consumer_wait": 0.6, "copy": 0.0}
    report = _local_report("decode", shares)
    report["data"]["jpeg"] = {"sampled": 64, "jpegs": 64, "progressive": 2, "at_least_1mp": 60,
                              "at_least_1mp_baseline_without_restarts": 58,
                              "median_megapixels": 4.1}
    items = {item["id"]: item for item in diagnose.recommend(report)}
    advice = items["jpeg_restart_interval"]
    assert "jpeg_restart_interval=16" in advice["advice"] and "exact=False" in advice["advice"]
    assert "decode-bound" in advice["because"] and "91% of 64 JPEGs" in advice["because"]
    assert "baseline_jpeg" not in items
    # Mostly progressive, small: the baseline rewrite.
    report["data"]["jpeg"].update(progressive=40, at_least_1mp=0,
                                  at_least_1mp_baseline_without_restarts=0)
    ids = {item["id"] for item in diagnose.recommend(report)}
    assert "baseline_jpeg" in ids and "jpeg_restart_interval" not in ids
    # Not decode-bound: neither.
    report = _local_report("read", {"read": 0.9, "decode": 0.05, "consumer_wait": 0.7,
                                    "copy": 0.0})
    report["data"]["jpeg"] = {"sampled": 64, "jpegs": 64, "progressive": 64, "at_least_1mp": 0,
                              "at_least_1mp_baseline_without_restarts": 0,
                              "median_megapixels": 0.2}
    ids = {item["id"] for item in diagnose.recommend(report)}
    assert not ids & {"baseline_jpeg", "jpeg_restart_interval"}
