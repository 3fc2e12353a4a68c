"""The node-local cache from Python: open_dataset and DataLoader keywords,
gpufeed.cache (stat, clear, warm, checkpoints), the `gpufeed cache` CLI, and
several real processes sharing one cache directory under a budget."""

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

import gpufeed
import gpufeed.cache
from conftest import run_cli

PIL = pytest.importorskip("PIL.Image")


@pytest.fixture
def packed(tmp_path):
    """A RecordIO dataset of 48 small JPEGs in several shards."""
    folder = tmp_path / "folder"
    for i in range(48):
        directory = folder / f"class{i % 4}"
        directory.mkdir(parents=True, exist_ok=True)
        image = PIL.new("RGB", (40 + i % 7, 36 + i % 5), ((i * 37) % 256, (i * 91) % 256, 80))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        (directory / f"img{i:03d}.jpg").write_bytes(buffer.getvalue())
    out = tmp_path / "packed"
    gpufeed.pack(folder, out, shard_size=8000)
    return out


def digests(dataset):
    return [hashlib.sha1(record.data).hexdigest() + str(record.label) for record in dataset]


def test_open_dataset_reads_the_same_records_through_the_cache(packed, tmp_path):
    cache_dir = tmp_path / "cache"
    plain = gpufeed.open_dataset(packed)
    assert len(plain.shards) > 3
    cached = gpufeed.open_dataset(packed, cache_dir=cache_dir, cache_capacity="64MiB")
    assert digests(cached) == digests(plain)
    summary = gpufeed.cache.warm(packed, cache_dir, capacity="64MiB")
    assert summary["shards"] == len(plain.shards)
    assert summary["filled"] + summary["already_cached"] == len(plain.shards)
    again = gpufeed.open_dataset(packed, cache_dir=cache_dir, cache_capacity=64 << 20)
    assert digests(again) == digests(plain)
    del cached, again
    report = gpufeed.cache.stat(cache_dir)
    assert report["entries"] == 2 * len(plain.shards)  # each .rec and its .idx
    (dataset,) = report["datasets"]
    assert dataset["dataset"] == str(packed)
    assert dataset["hits"] >= len(plain)  # the second pass read the copies only
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"


def test_torch_workers_forked_while_the_parent_fills_read_every_record(tmp_path):
    """torch's DataLoader forks its workers after the main process touched the
    dataset, whose copies are then still being made (fills and prefetches of
    the parent's threads): every worker reads every record right, none hangs
    (the loader's timeout), and the cache is complete and serves the same
    records afterwards. A worker used to wait forever for a part of a copy
    the parent's filler had claimed."""
    torch = pytest.importorskip("torch")
    numpy = pytest.importorskip("numpy")
    folder = tmp_path / "folder"
    rng = numpy.random.default_rng(5)
    for i in range(48):  # noise: about 300 KB per JPEG, so fills take a while
        directory = folder / f"class{i % 3}"
        directory.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (384, 384, 3), dtype=numpy.uint8)
        PIL.fromarray(pixels).save(directory / f"img{i:03d}.jpg", quality=95)
    packed = tmp_path / "packed"
    gpufeed.pack(folder, packed, shard_size=1 << 20)
    expected = digests(gpufeed.open_dataset(packed))

    def digest(record):
        return hashlib.sha1(record.data).hexdigest() + str(record.label)

    for attempt in range(3):
        cache_dir = tmp_path / f"cache{attempt}"
        # Without waiting, the parent's reads only queue the fills of every
        # shard, which run while the workers start; waiting, the prefetches
        # of the shards after the last one read run then.
        cached = gpufeed.open_dataset(packed, cache_dir=cache_dir, cache_capacity="256MiB",
                                      cache_wait=attempt == 1)
        for index in range(0, len(cached), 3):
            cached[index]
        loader = torch.utils.data.DataLoader(cached, batch_size=None, num_workers=2,
                                             timeout=60, collate_fn=digest)
        assert list(loader) == expected
        del loader, cached
        again = gpufeed.open_dataset(packed, cache_dir=cache_dir, cache_capacity="256MiB")
        assert digests(again) == expected


def test_dataloader_batches_are_the_same_with_and_without_the_cache(packed, tmp_path):
    options = dict(batch_size=8, shuffle="block", shuffle_window_shards=2, seed=1,
                   transform=gpufeed.ImageTransform(size=24), num_threads=2)
    plain = gpufeed.DataLoader(packed, **options)
    cached = gpufeed.DataLoader(packed, cache_dir=tmp_path / "cache", cache_capacity="32MiB",
                                **options)
    for epoch in range(2):
        plain.set_epoch(epoch)
        cached.set_epoch(epoch)
        for (a, la), (b, lb) in zip(plain, cached):
            assert (a == b).all() and (la == lb).all()
    with pytest.raises(ValueError):
        gpufeed.DataLoader(packed, cache_capacity="1GiB")  # no cache_dir
    with pytest.raises(ValueError):
        gpufeed.DataLoader(packed, cache_dir=tmp_path / "c2", cache_policy="checkpoint")


def test_unsafe_cache_directories_are_refused(packed, tmp_path):
    open_dir = tmp_path / "world"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(PermissionError, match="writable by other users"):
        gpufeed.open_dataset(packed, cache_dir=open_dir)
    link = tmp_path / "link"
    (tmp_path / "real").mkdir(mode=0o700)
    link.symlink_to(tmp_path / "real")
    with pytest.raises(PermissionError):
        gpufeed.open_dataset(packed, cache_dir=link)


def test_a_pinned_dataset_larger_than_the_capacity_is_an_error(packed, tmp_path):
    with pytest.raises(ValueError, match="pinned"):
        gpufeed.open_dataset(packed, cache_dir=tmp_path / "cache", cache_capacity=1000,
                             cache_policy="pinned")


def test_checkpoints_keep_the_newest_and_restart_finds_the_latest(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cache_dir = tmp_path / "cache"
    copies = []
    for step in range(4):
        path = run / f"step{step}.pt"
        path.write_bytes(os.urandom(3000 + step))
        os.utime(path, (1000 + step, 1000 + step))
        copies.append(gpufeed.cache.put_checkpoint(path, cache_dir, keep=2))
        with open(copies[-1], "rb") as local:
            assert local.read() == path.read_bytes()
    assert [os.path.exists(copy) for copy in copies] == [False, False, True, True]
    local, source = gpufeed.cache.latest_checkpoint(run, cache_dir)
    assert local == copies[3] and source == str(run / "step3.pt")
    assert gpufeed.cache.latest_checkpoint(tmp_path / "other", cache_dir) is None


def test_the_cache_command(packed, tmp_path):
    cache_dir = tmp_path / "cache"
    result = run_cli("cache", "warm", packed, cache_dir, "--capacity", "64MiB")
    assert "copied" in result.stdout
    result = run_cli("cache", "stat", cache_dir, "--json")
    report = json.loads(result.stdout)
    # Each .rec and its .idx (the manifest identifies both).
    assert report["entries"] == 2 * len(gpufeed.open_dataset(packed).shards)
    result = run_cli("cache", "stat", cache_dir)
    assert str(packed) in result.stdout and "entries" in result.stdout
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights" * 100)
    result = run_cli("cache", "put-checkpoint", checkpoint, cache_dir, "--keep", "1")
    assert open(result.stdout.strip(), "rb").read() == checkpoint.read_bytes()
    result = run_cli("cache", "clear", cache_dir, "--dataset", packed)
    assert "removed" in result.stdout
    assert gpufeed.cache.stat(cache_dir)["entries"] == 1  # the checkpoint stays
    result = run_cli("cache", "stat", tmp_path / "missing", check=False)
    assert result.returncode == 1 and "no such cache directory" in result.stderr


READER = textwrap.dedent("""
    import hashlib, json, random, sys
    import gpufeed
    path, cache_dir, capacity, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ds = gpufeed.open_dataset(path, cache_dir=cache_dir, cache_capacity=capacity,
                              cache_wait=bool(seed % 2))
    out = {}
    for _ in range(2):
        order = list(range(len(ds)))
        random.Random(seed).shuffle(order)
        for i in order:
            record = ds[i]
            out[i] = hashlib.sha1(record.data).hexdigest() + str(record.label)
    print(json.dumps(out))
""")


def test_four_processes_share_one_cache_under_a_budget(packed, tmp_path):
    plain = gpufeed.open_dataset(packed)
    expected = {str(i): digest for i, digest in enumerate(digests(plain))}
    shard_bytes = max(shard["bytes"] for shard in plain.shards)
    capacity = 2 * shard_bytes + shard_bytes // 2  # less than the dataset
    assert capacity < sum(shard["bytes"] for shard in plain.shards)
    cache_dir = tmp_path / "cache"
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(packed), str(cache_dir),
                                 str(capacity), str(seed)], stdout=subprocess.PIPE, text=True)
               for seed in range(4)]
    for reader in readers:
        output, _ = reader.communicate(timeout=300)
        assert reader.returncode == 0
        assert json.loads(output) == expected
    report = gpufeed.cache.stat(cache_dir)
    assert report["bytes"] <= capacity
    (dataset,) = report["datasets"]
    # Every record twice per process, and each shard's .idx once.
    assert dataset["hits"] + dataset["misses"] == 4 * (2 * len(plain) + len(plain.shards))
