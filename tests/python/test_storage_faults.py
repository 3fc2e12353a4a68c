"""Faults of a network filesystem through the real kernel read path
(docs/reliability.md, "Storage faults"): a FUSE passthrough (faultfs.py)
fails, delays or hangs the reads gpufeed makes, or dies, and the loader
retries, raises, skips without duplicates, times out and closes -- for the
default backend, io_uring with O_DIRECT and the pread pool, and on a
direct_io mount (where io_uring returns wrong bytes past a failed part).

Every record holds 1,500 int32 tokens that encode its index at every
position, so a wrong byte anywhere in a delivered row is seen."""

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import conftest
import gpufeed
from faultfs_fixture import faultfs  # noqa: F401  (the fixture)

np = pytest.importorskip("numpy")

TOKENS = 1500          # 6,000-byte payloads: every record spans pages
RECORDS = 40
BATCH = 4
SHARD = "part-00001.rec"
# A hang guard, not a speed assertion: only a stuck loader comes near it.
HANG_GUARD_SECONDS = 60

BACKENDS = [
    pytest.param({}, id="default"),
    pytest.param({"io_backend": "io_uring", "direct_io": True}, id="io_uring-odirect"),
    pytest.param({"io_backend": "pread"}, id="pread"),
]


BIG_TOKENS = 80000     # 320,000-byte payloads: a record read spans three FUSE requests
BIG_RECORDS = 6


def tokens_of(i, count=TOKENS):
    return (np.arange(count, dtype=np.int64) * 7919 + i * 104729).astype(np.int32)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    return conftest.pack_list(root, [(tokens_of(i).tobytes(), i % 3) for i in range(RECORDS)],
                              shard_size=64 << 10)


@pytest.fixture(scope="module")
def big_packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    return conftest.pack_list(root, [(tokens_of(i, BIG_TOKENS).tobytes(), i % 3)
                                     for i in range(BIG_RECORDS)], shard_size=1 << 20)


def record_ranges(path):
    """{sample: (shard name, offset, end)} from the shards' .idx files, in
    the manifest's order (sample numbers follow it)."""
    with open(os.path.join(path, "gpufeed.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    ranges, sample = {}, 0
    for shard in manifest["shards"]:
        name = shard["file"]
        size = os.path.getsize(os.path.join(path, name))
        index = os.path.join(path, shard["index"])
        with open(index, encoding="utf-8") as handle:
            offsets = sorted(int(line.split("\t")[1]) for line in handle if line.strip())
        for k, offset in enumerate(offsets):
            end = offsets[k + 1] if k + 1 < len(offsets) else size
            ranges[sample] = (name, offset, end)
            sample += 1
    return ranges


def fault_range(path, shard=SHARD, start=8192, end=8192 + 3 * 4096):
    """A page-aligned range inside `shard`, and the samples whose records overlap it."""
    ranges = record_ranges(path)
    hit = {s for s, (name, a, b) in ranges.items() if name == shard and a < end and start < b}
    assert 1 <= len(hit) <= 3, hit
    return start, end, hit


def loader(path, tokens=TOKENS, **kwargs):
    kwargs.setdefault("batch_size", BATCH)
    kwargs.setdefault("shuffle", False)
    return gpufeed.DataLoader(str(path), transform=gpufeed.RawTransform("int32", (tokens,)),
                              label_dtype="int64", **kwargs)


def check_rows(batch):
    """Each row's tokens are exactly its record's; returns the sample ids."""
    rows, _ = batch
    ids = []
    for row in rows.numpy():
        i = (int(row[0]) // 104729)
        assert np.array_equal(row, tokens_of(i, len(row))), f"row of sample {i} holds wrong bytes"
        ids.append(i)
    return ids


def run_epoch(it_loader, errors):
    ids = []
    iterator = iter(it_loader)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return ids
        except OSError as error:
            errors.append(error)
            continue
        ids += check_rows(batch)


@pytest.mark.parametrize("io", BACKENDS)
def test_eio_on_a_shard_range_raises_naming_file_offset_sample_then_goes_on(faultfs, packed, io):
    mount = faultfs(packed)
    start, end, hit = fault_range(packed)
    mount.set_faults([{"path": SHARD, "start": start, "end": end, "error": "EIO"}])
    data = loader(mount.path, io_retries=1, **io)
    for _ in range(2):  # the next epoch goes on too
        errors = []
        ids = run_epoch(data, errors)
        bad_batches = {s // BATCH for s in hit}
        assert len(errors) == len(bad_batches)
        assert sorted(ids) == sorted(set(range(RECORDS)) - {
            s for b in bad_batches for s in range(b * BATCH, (b + 1) * BATCH)})
        for error in errors:
            assert isinstance(error, gpufeed.StorageIOError)
            assert error.errno == errno.EIO, error
            message = str(error)
            assert SHARD in message and "offset" in message and "sample" in message, message
            assert "after 1 retries" in message, message
    data.close()


@pytest.mark.parametrize("io", BACKENDS)
def test_eio_on_a_shard_range_skips_exactly_the_overlapping_records_once(faultfs, packed, io):
    mount = faultfs(packed)
    start, end, hit = fault_range(packed)
    mount.set_faults([{"path": SHARD, "start": start, "end": end, "error": "EIO"}])
    data = loader(mount.path, on_error="skip", max_skipped=0.5, shuffle=True, io_retries=1, **io)
    errors = []
    ids = run_epoch(data, errors)
    assert errors == []
    assert len(ids) == len(set(ids)), "a sample was delivered twice"
    assert set(ids) == set(range(RECORDS)) - hit
    assert len(data) == (RECORDS + BATCH - 1) // BATCH  # the batch count is kept
    skipped = data.skipped_samples()
    assert {entry["sample"] for entry in skipped} == hit
    ranges = record_ranges(packed)
    for entry in skipped:
        assert entry["path"].endswith(SHARD), entry
        assert entry["offset"] == ranges[entry["sample"]][1], entry
        assert "Input/output error" in entry["reason"], entry
    assert data.stats()["skipped"] == len(hit)
    data.close()


@pytest.mark.parametrize("io", BACKENDS)
def test_an_outage_shorter_than_the_retries_skips_nothing(faultfs, packed, io):
    mount = faultfs(packed)
    data = loader(mount.path, on_error="skip", shuffle=True, **io)
    mount.set_faults([{"path": "*", "error": "EIO", "for_ms": 300}])
    errors = []
    ids = run_epoch(data, errors)
    assert errors == []
    assert sorted(ids) == list(range(RECORDS))
    assert data.skipped_samples() == [] and data.stats()["skipped"] == 0
    assert any(r["result"] == "EIO" for r in mount.reads()), "the outage reached no read"
    data.close()


@pytest.mark.parametrize("io", BACKENDS)
def test_a_hung_read_fails_within_io_timeout_and_close_returns(faultfs, packed, io):
    mount = faultfs(packed)
    start, end, hit = fault_range(packed)
    mount.set_faults([{"path": SHARD, "start": start, "end": end, "hang": True}])
    data = loader(mount.path, io_timeout=2.0, **io)
    started = time.monotonic()
    errors = []
    ids = run_epoch(data, errors)
    took = time.monotonic() - started
    assert errors, "no error for the hung read"
    for error in errors:
        assert error.errno == errno.ETIMEDOUT, error
        assert "io_timeout=2 s" in str(error) and SHARD in str(error), error
    # The kernel's readahead asks for more of the shard than a record in one
    # FUSE request, so records near the hung range hang too; the other
    # shards' samples all come.
    in_shard = {s for s, (name, _, _) in record_ranges(packed).items() if name == SHARD}
    lost = set(range(RECORDS)) - set(ids)
    assert hit <= lost, (sorted(lost), hit)
    assert lost <= {s for b in {h // BATCH for h in in_shard}
                    for s in range(b * BATCH, (b + 1) * BATCH)}, sorted(lost)
    assert took < HANG_GUARD_SECONDS
    started = time.monotonic()
    data.close()
    assert time.monotonic() - started < 10
    mount.clear_faults()  # the reads left behind return


@pytest.mark.parametrize("io", BACKENDS)
def test_the_filesystem_client_killed_mid_epoch_is_a_clear_error(faultfs, packed, io):
    mount = faultfs(packed)
    data = loader(mount.path, io_timeout=20.0, prefetch=1, **io)
    iterator = iter(data)
    check_rows(next(iterator))
    mount.kill()
    started = time.monotonic()
    errors = []
    while True:
        try:
            check_rows(next(iterator))
        except StopIteration:
            break
        except OSError as error:
            errors.append(error)
    assert errors, "reads after the client died all succeeded"
    assert time.monotonic() - started < 20
    assert any(error.errno == errno.ENOTCONN for error in errors), errors
    data.close()


@pytest.mark.parametrize("io", BACKENDS)
def test_the_node_cache_keeps_nothing_from_a_fault_and_a_new_process_reads_right(
        faultfs, packed, tmp_path, io):
    mount = faultfs(packed)
    cache = tmp_path / "cache"
    start, end, hit = fault_range(packed)
    mount.set_faults([{"path": SHARD, "start": start, "end": end, "error": "EIO"}])
    data = loader(mount.path, cache_dir=str(cache), on_error="skip", max_skipped=0.5,
                  io_retries=0, **io)
    ids = run_epoch(data, [])
    assert set(ids) == set(range(RECORDS)) - hit
    data.close()
    mount.clear_faults()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import test_storage_faults as t
        data = t.loader({str(mount.path)!r}, cache_dir={str(cache)!r}, cache_wait=True, **{io!r})
        for epoch in range(2):
            data.set_epoch(epoch)
            ids = t.run_epoch(data, [])
            assert sorted(ids) == list(range(t.RECORDS)), ids
        print(data.stats()["cache_reads"])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=HANG_GUARD_SECONDS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 0, "the second epoch was not read from the cache"


@pytest.mark.parametrize("io", BACKENDS)
def test_a_direct_io_mount_never_hands_on_bytes_past_a_failed_part(faultfs, big_packed, io):
    # On Linux 6.18 an io_uring read of a direct_io FUSE file that spans
    # several FUSE requests (128 KiB each) returns the whole length when a
    # later one fails, its tail the file's own bytes again
    # (tests/tools/fuse_uring_probe.py). Each record read here spans three.
    mount = faultfs(big_packed, direct_io=True)
    data = loader(mount.path, tokens=BIG_TOKENS, batch_size=2, shuffle=True, **io)
    assert sorted(run_epoch(data, [])) == list(range(BIG_RECORDS))
    ranges = record_ranges(big_packed)
    name, offset, end = ranges[1]
    # The last 64 KiB of sample 1's record fail: its first FUSE requests do not.
    start = (end - (64 << 10)) // 4096 * 4096
    start, end, hit = fault_range(big_packed, name, start, start + 4096)
    assert hit == {1}, hit
    mount.set_faults([{"path": name, "start": start, "end": end, "error": "EIO"}])
    skipping = loader(mount.path, tokens=BIG_TOKENS, batch_size=2, on_error="skip",
                      max_skipped=0.5, io_retries=0, **io)
    errors = []
    ids = run_epoch(skipping, errors)  # check_rows: every delivered byte is right
    assert errors == [] and set(ids) == set(range(BIG_RECORDS)) - hit
    assert [entry["sample"] for entry in skipping.skipped_samples()] == [1]
    data.close()
    skipping.close()


def write_other_paths(root):
    """A token corpus (an llm.c shard), WebDataset tars and an embedding
    table under root; returns the relative paths. Each holds more samples
    than a loader reads ahead at open (2 x 64 reads beyond its prefetch
    window under global shuffle), so that reads remain to be made after a
    test sets its faults."""
    root.mkdir(parents=True, exist_ok=True)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, 160000
    tokens = (np.arange(160000) % 50000).astype(np.uint16)
    (root / "tokens").mkdir()
    (root / "tokens" / "shard_000.bin").write_bytes(header.tobytes() + tokens.tobytes())
    import io as bytes_io
    import tarfile
    rng = np.random.default_rng(3)
    from PIL import Image
    for shard in range(2):
        with tarfile.open(root / f"wds-{shard}.tar", "w") as tar:
            for k in range(96):
                buffer = bytes_io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(
                    buffer, format="JPEG")
                for suffix, data in ((".jpg", buffer.getvalue()), (".cls", b"1")):
                    info = tarfile.TarInfo(f"s{shard}_{k:03d}{suffix}")
                    info.size = len(data)
                    tar.addfile(info, bytes_io.BytesIO(data))
    np.save(root / "table.npy", np.arange(4000 * 16, dtype=np.float32).reshape(4000, 16))
    return root


def open_path(kind, mount, **io):
    if kind == "tokens":
        return gpufeed.DataLoader(os.path.join(mount.path, "tokens"), batch_size=8, prefetch=1,
                                  transform=gpufeed.TokenWindows(seq_len=512), **io)
    if kind == "webdataset":
        tars = sorted(os.path.join(mount.path, name) for name in os.listdir(mount.path)
                      if name.endswith(".tar"))
        return gpufeed.DataLoader(tars, batch_size=4, prefetch=1,
                                  transform=gpufeed.ImageTransform(16, train=False), **io)
    io.pop("on_error", None)
    return gpufeed.EmbeddingTable(os.path.join(mount.path, "table.npy"), cache_bytes="64KiB",
                                  **{k: v for k, v in io.items() if k != "max_skipped"})


def drain(kind, reader):
    """Reads everything; returns the OSErrors raised."""
    errors = []
    if kind == "embedding":
        for start in range(0, 4000, 500):
            try:
                reader.lookup(np.arange(start, start + 500))
            except OSError as error:
                errors.append(error)
        return errors
    iterator = iter(reader)
    while True:
        try:
            next(iterator)
        except StopIteration:
            return errors
        except OSError as error:
            errors.append(error)


@pytest.mark.parametrize("io", BACKENDS[:2])
@pytest.mark.parametrize("kind", ["tokens", "webdataset", "embedding"])
def test_token_webdataset_and_embedding_reads_raise_and_time_out_too(
        faultfs, tmp_path_factory, kind, io):
    mount = faultfs(write_other_paths(tmp_path_factory.mktemp("paths") / "src"))
    reader = open_path(kind, mount, io_retries=1, **io)
    mount.set_faults([{"path": "*", "start": 4096, "error": "EIO"}])
    errors = drain(kind, reader)
    assert errors and all(error.errno == errno.EIO for error in errors), errors
    if kind != "embedding":
        reader.close()
    mount.clear_faults()
    reader = open_path(kind, mount, io_timeout=1.0, **io)
    # Reads are in flight already: no page dropping (see set_faults).
    mount.set_faults([{"path": "*", "start": 4096, "hang": True}], drop_pages=False)
    started = time.monotonic()
    errors = drain(kind, reader)
    assert errors and all(error.errno == errno.ETIMEDOUT for error in errors), errors
    assert time.monotonic() - started < HANG_GUARD_SECONDS
    if kind != "embedding":
        reader.close()
    mount.clear_faults()
