"""The node-local cache serves every format through the storage layer
(src/storage): RecordIO, gpufeed LMDB, Caffe LMDB, WebDataset tars and ImageFolder (its files
in bundles of 256, one cache entry each). For each, a first
epoch in one process reads the source about once (reads of a file being
copied are served from the copy's written part), and a second epoch in a
new process reads almost nothing from the source; batches are the same as
without the cache."""

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpufeed
import gpufeed.cache

PIL = pytest.importorskip("PIL.Image")
lmdb = pytest.importorskip("lmdb")


def _jpeg(i):
    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (48 + i % 9, 56 + i % 7, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PIL.fromarray(pixels).save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _encoded_datum(jpeg, label):
    """caffe.Datum{data=jpeg, label=label, encoded=true}, as protobuf writes it."""
    return (b"\x22" + _varint(len(jpeg)) + jpeg + b"\x28" + _varint(label) + b"\x38\x01")


def _make(kind, root, count=96):
    if kind == "caffe_lmdb":
        path = root / "caffe"
        path.mkdir()
        env = lmdb.open(str(path), map_size=1 << 26)
        with env.begin(write=True) as txn:
            for i in range(count):
                txn.put(b"%08d_img%d.jpg" % (i, i), _encoded_datum(_jpeg(i), i % 5))
        env.close()
        return path
    folder = root / "folder"
    for i in range(count):
        directory = folder / f"class{i % 4}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"img{i:03d}.jpg").write_bytes(_jpeg(i))
    if kind == "imagefolder":
        return folder
    out = root / "packed"
    gpufeed.pack(folder, out, format=kind, shard_size=40000, progress=False)
    return out


_EPOCH = textwrap.dedent("""
    import hashlib, json, os, sys
    import gpufeed
    path, cache_dir, epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kwargs = dict(batch_size=8, shuffle=True, seed=3, num_threads=2,
                  transform=gpufeed.ImageTransform(size=16))
    if cache_dir:
        kwargs.update(cache_dir=cache_dir, cache_capacity="256MiB")
    loader = gpufeed.DataLoader(path, **kwargs)
    loader.set_epoch(epoch)
    digest = hashlib.sha1()
    for images, labels in loader:
        digest.update(images.numpy().tobytes())
        digest.update(labels.numpy().tobytes())
    stats = loader.stats()
    total = sum(shard["bytes"] for shard in gpufeed.open_dataset(path).shards)
    if not total:  # an ImageFolder: its files
        total = sum(os.path.getsize(os.path.join(directory, name))
                    for directory, _, names in os.walk(path) for name in names)
    print(json.dumps(dict(digest=digest.hexdigest(), source_bytes=stats["source_bytes"],
                          cache_reads=stats["cache_reads"], source_opens=stats["source_opens"],
                          dataset_bytes=total)))
""")


def _epoch(path, cache_dir, epoch):
    result = subprocess.run([sys.executable, "-c", _EPOCH, str(path), str(cache_dir or ""),
                             str(epoch)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["recordio", "lmdb", "caffe_lmdb", "imagefolder", "webdataset"])
def test_every_format_is_cached_and_a_new_process_reads_the_copies(kind, tmp_path):
    path = _make(kind, tmp_path)
    cache_dir = tmp_path / "cache"
    plain = [_epoch(path, None, epoch) for epoch in (0, 1)]
    first = _epoch(path, cache_dir, 0)
    second = _epoch(path, cache_dir, 1)  # a new process
    assert first["digest"] == plain[0]["digest"]
    assert second["digest"] == plain[1]["digest"]
    total = first["dataset_bytes"]
    # Epoch 1: the source once (fills), not fills plus source reads.
    assert first["source_bytes"] <= 1.1 * total, first
    # Epoch 2 in a new process: every file is a complete copy.
    assert second["source_bytes"] < 0.05 * total, second
    assert second["cache_reads"] > 0
    report = gpufeed.cache.stat(cache_dir)
    if kind == "imagefolder":
        # One entry per 256 files: the files, then a trailer of 16 bytes a file.
        assert report["entries"] == 1
        assert total < report["bytes"] <= total + 16 * 96 + 32
    elif kind == "recordio":
        # The .idx files too: the manifest identifies them (lazy opens).
        assert report["bytes"] == total + _index_bytes(path)
    else:
        assert report["bytes"] == total
    assert report["fills_in_progress"] == 0


def _index_bytes(path):
    manifest = json.loads((Path(path) / "gpufeed.json").read_text())
    return sum(shard["index_bytes"] for shard in manifest["shards"])


def test_without_waiting_for_fills_no_read_waits_and_the_copies_still_land(tmp_path):
    path = _make("recordio", tmp_path, count=48)
    cache_dir = tmp_path / "cache"
    loader = gpufeed.DataLoader(path, batch_size=8, shuffle=True, seed=1, num_threads=2,
                                transform=gpufeed.ImageTransform(size=16), cache_dir=cache_dir,
                                cache_capacity="64MiB", cache_wait=False)
    batches = sum(1 for _ in loader)
    assert batches == 6
    del loader  # closing finishes the queued fills
    total = sum(shard["bytes"] for shard in gpufeed.open_dataset(path).shards)
    assert gpufeed.cache.stat(cache_dir)["bytes"] == total + _index_bytes(path)
