"""Token corpora (Megatron .bin/.idx, llm.c shards, headerless token files)
through open_dataset, the CLI and DataLoader(transform=TokenWindows(...)).

Every corpus is written here by numpy, independently of gpufeed's code; the
Megatron writer follows megatron/core/datasets/indexed_dataset.py's
_IndexWriter byte for byte. The reference windows are cut from the raw
tokens: window i = stream[i*L : i*L+L+1]."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpufeed

MEGATRON_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                  np.float64: 6, np.float32: 7, np.uint16: 8}


def write_megatron(prefix, documents, dtype):
    """PREFIX.bin + PREFIX.idx as Megatron-Core writes them (one sequence per
    document)."""
    dtype = np.dtype(dtype)
    with open(f"{prefix}.bin", "wb") as data:
        for document in documents:
            data.write(np.asarray(document, dtype=dtype).tobytes(order="C"))
    lengths = np.array([len(d) for d in documents], dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * dtype.itemsize
    document_indices = np.arange(len(documents) + 1, dtype=np.int64)
    with open(f"{prefix}.idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00")
        index.write(struct.pack("<Q", 1))
        index.write(struct.pack("<B", MEGATRON_CODES[dtype.type]))
        index.write(struct.pack("<Q", len(lengths)))
        index.write(struct.pack("<Q", len(document_indices)))
        index.write(lengths.tobytes(order="C"))
        index.write(pointers.tobytes(order="C"))
        index.write(document_indices.tobytes(order="C"))
    return np.concatenate([np.asarray(d, dtype=dtype) for d in documents])


def write_llmc(path, tokens, dtype=np.uint16):
    """An llm.c shard: 256 int32 header (magic, version, count), then tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1] = (20240520, 1) if dtype == np.uint16 else (20240801, 7)
    header[2] = len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def reference_windows(stream, seq_len):
    count = (len(stream) - 1) // seq_len
    return [stream[i * seq_len:i * seq_len + seq_len + 1].astype(np.int64) for i in range(count)]


def loader_rows(loader):
    rows = []
    for x, y in loader:
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.ndim == 2
        for a, b in zip(x, y):
            rows.append(np.concatenate([a, b[-1:]]).astype(np.int64))
            assert np.array_equal(a[1:], b[:-1])
    return rows


def as_sorted(rows):
    return sorted(tuple(int(v) for v in row) for row in rows)


def random_documents(rng, count, high, min_len=1, max_len=300):
    return [rng.integers(0, high, size=int(rng.integers(min_len, max_len))) for _ in range(count)]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_epoch_equals_reference(tmp_path, dtype):
    rng = np.random.default_rng(1)
    stream = write_megatron(tmp_path / "corpus_text_document",
                            random_documents(rng, 60, 50000), dtype)
    loader = gpufeed.DataLoader(tmp_path / "corpus_text_document", batch_size=7, seed=3,
                                transform=gpufeed.TokenWindows(seq_len=33), num_threads=2)
    x, y = next(iter(loader))
    assert x.dtype.__str__().endswith("int64") and tuple(x.shape) == (7, 33)
    loader.set_epoch(0)
    rows = loader_rows(loader)
    assert as_sorted(rows) == as_sorted(reference_windows(stream, 33))
    # Another epoch: the same windows in another order.
    loader.set_epoch(1)
    again = loader_rows(loader)
    assert as_sorted(again) == as_sorted(rows)
    assert [tuple(r) for r in again] != [tuple(r) for r in rows]
    stats = loader.stats()
    assert stats["samples"] > 0 and stats["bottleneck"] in ("consumer", "read", "decode", "none",
                                                             "cpu-contention")


def test_megatron_inspect_verify_and_dataset(tmp_path):
    rng = np.random.default_rng(2)
    documents = random_documents(rng, 25, 60000)
    stream = write_megatron(tmp_path / "c", documents, np.uint16)
    dataset = gpufeed.open_dataset(tmp_path / "c", seq_len=16)
    assert dataset.format == "megatron"
    info = dataset.tokens
    assert info["tokens"] == len(stream) and info["documents"] == 25
    assert info["token_dtype"] == "uint16" and info["windows"] == (len(stream) - 1) // 16
    assert len(dataset) == info["windows"]
    assert dataset[3].data == stream[48:65].tobytes()
    # The .bin or the .idx name the same corpus.
    assert gpufeed.open_dataset(tmp_path / "c.bin").tokens["tokens"] == len(stream)
    out = subprocess.run([sys.executable, "-m", "gpufeed", "inspect", str(tmp_path / "c"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["format"] == "megatron" and report["tokens"] == len(stream)
    assert report["documents"] == 25 and report["files"] == 1
    text = subprocess.run([sys.executable, "-m", "gpufeed", "inspect", str(tmp_path / "c")],
                          capture_output=True, text=True, check=True).stdout
    assert "tokens:" in text and "uint16" in text and "documents:  25" in text
    assert "index:      none" in text and report["heads"] is None
    run_cli("index", tmp_path / "c")
    text = run_cli("inspect", tmp_path / "c")
    assert f"index:      {tmp_path / 'gpufeed.json'}, {tmp_path / 'gpufeed.heads'} (heads)" in text
    verified = gpufeed.verify(tmp_path / "c")
    assert verified["problems"] == [] and verified["records_checked"] == len(stream)
    out = subprocess.run([sys.executable, "-m", "gpufeed", "verify", str(tmp_path / "c")],
                         capture_output=True, text=True, check=True).stdout
    assert f"checked {len(stream)} tokens in 1 file(s) (megatron)" in out


def test_llmc_directory_in_order_spanning_files(tmp_path):
    rng = np.random.default_rng(4)
    shards = [rng.integers(0, 50257, size=n) for n in (1000, 37, 2500)]
    for i, tokens in enumerate(shards):
        write_llmc(tmp_path / f"fineweb_train_{i:06d}.bin", tokens)
    stream = np.concatenate(shards).astype(np.uint16)
    loader = gpufeed.DataLoader(tmp_path, batch_size=5, shuffle=False,
                                transform=gpufeed.TokenWindows(seq_len=64, dtype="int32",
                                                               block_bytes=1024),
                                num_threads=3)
    rows = loader_rows(loader)
    assert [tuple(r) for r in rows] == [tuple(r) for r in reference_windows(stream, 64)]
    x, _ = next(iter(loader))
    assert str(x.dtype).endswith("int32")
    dataset = gpufeed.open_dataset(tmp_path)
    assert dataset.format == "llmc" and len(dataset.shards) == 3


def test_llmc_uint32_block_shuffle(tmp_path):
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 2 ** 31, size=20000)
    write_llmc(tmp_path / "shard.bin", tokens, np.uint32)
    stream = tokens.astype(np.uint32)
    loader = gpufeed.DataLoader(tmp_path / "shard.bin", batch_size=16, shuffle="block", seed=9,
                                transform=gpufeed.TokenWindows(seq_len=100, block_bytes=4000),
                                num_threads=2, direct_io=True)
    rows = loader_rows(loader)
    assert as_sorted(rows) == as_sorted(reference_windows(stream, 100))
    # Block shuffle keeps windows of one block window together: consecutive
    # windows come from within a few blocks (10 windows each, 4 per window).
    windows = [int(np.flatnonzero(stream == r[0])[0]) // 100 for r in rows[:30]]
    assert len(set(w // 10 for w in windows)) <= 4
    assert loader.stats()["io_requests"] <= 20  # one read per block


def test_headerless_needs_token_dtype(tmp_path):
    rng = np.random.default_rng(6)
    tokens = rng.integers(0, 65535, size=5001).astype(np.uint16)
    tokens.tofile(tmp_path / "train.bin")
    with pytest.raises(ValueError, match="token_dtype"):
        gpufeed.DataLoader(tmp_path / "train.bin", batch_size=4,
                           transform=gpufeed.TokenWindows(seq_len=50))
    with pytest.raises(ValueError, match="token_dtype"):
        gpufeed.DataLoader(tmp_path / "train.bin", batch_size=4, format="tokens",
                           transform=gpufeed.TokenWindows(seq_len=50))
    loader = gpufeed.DataLoader(tmp_path / "train.bin", batch_size=4, format="tokens",
                                transform=gpufeed.TokenWindows(seq_len=50, token_dtype="uint16"))
    assert as_sorted(loader_rows(loader)) == as_sorted(reference_windows(tokens, 50))
    assert len(loader) == (100 + 3) // 4


def test_image_transform_on_tokens_is_refused(tmp_path):
    write_llmc(tmp_path / "a.bin", np.arange(1000))
    with pytest.raises(ValueError, match="TokenWindows"):
        gpufeed.DataLoader(tmp_path / "a.bin", batch_size=4)


def test_exactly_once_across_ranks(tmp_path):
    rng = np.random.default_rng(7)
    stream = write_megatron(tmp_path / "c", random_documents(rng, 40, 30000), np.uint16)
    reference = as_sorted(reference_windows(stream, 20))
    for shuffle in (True, "block", False):
        seen = []
        for rank in range(3):
            loader = gpufeed.DataLoader(tmp_path / "c", batch_size=4, shuffle=shuffle, seed=5,
                                        rank=rank, world_size=3, drop_last=True,
                                        transform=gpufeed.TokenWindows(seq_len=20,
                                                                       block_bytes=400))
            seen += loader_rows(loader)
        assert len(set(tuple(r) for r in seen)) == len(seen)
        assert len(seen) == (len(reference) // 12) * 12
        assert set(tuple(r) for r in seen) <= set(reference)


RESUME = r"""
import json, sys
import numpy as np
import gpufeed
path, state, world = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
rows = []
for rank in range(world):
    loader = gpufeed.DataLoader(path, batch_size=4, shuffle="block", seed=11, rank=rank,
                                world_size=world,
                                transform=gpufeed.TokenWindows(seq_len=25, block_bytes=500))
    loader.load_state_dict(state)
    for x, y in loader:
        for a, b in zip(np.asarray(x), np.asarray(y)):
            rows.append([int(v) for v in a] + [int(b[-1])])
print(json.dumps(rows))
"""


def test_resume_in_a_new_process_with_another_world_size(tmp_path):
    rng = np.random.default_rng(8)
    stream = write_megatron(tmp_path / "c", random_documents(rng, 30, 30000), np.uint16)
    make = lambda: gpufeed.DataLoader(tmp_path / "c", batch_size=4, shuffle="block", seed=11,
                                      transform=gpufeed.TokenWindows(seq_len=25, block_bytes=500))
    full = [tuple(r) for r in loader_rows(make())]
    loader = make()
    first = []
    iterator = iter(loader)
    for _ in range(5):
        x, y = next(iterator)
        first += [tuple(int(v) for v in a) + (int(b[-1]),) for a, b in zip(np.asarray(x), np.asarray(y))]
    state = loader.state_dict()
    assert first == full[:20]
    for world in (1, 2):
        out = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path / "c"), json.dumps(state),
                              str(world)], capture_output=True, text=True, check=True).stdout
        rest = [tuple(r) for r in json.loads(out)]
        if world == 1:
            assert first + rest == full
        else:
            # Two ranks together cover the rest (the last may be padded).
            assert set(rest) == set(full[20:])
    # The state says what its positions count; another window length or
    # block size would name other tokens: refused, not silently followed.
    assert state["seq_len"] == 25 and state["token_block_bytes"] == 500
    assert state["samples"] == (len(stream) - 1) // 25
    for other in (gpufeed.TokenWindows(seq_len=24, block_bytes=500),
                  gpufeed.TokenWindows(seq_len=25, block_bytes=1000)):
        wrong = gpufeed.DataLoader(tmp_path / "c", batch_size=4, shuffle="block", seed=11,
                                   transform=other)
        with pytest.raises(gpufeed.InvalidArgumentError, match="seq_len 25 and block_bytes 500"):
            wrong.load_state_dict(state)


def corrupt_cases(tmp_path):
    rng = np.random.default_rng(9)
    prefix = tmp_path / "m"
    write_megatron(prefix, random_documents(rng, 10, 1000, 5, 50), np.uint16)
    index = (tmp_path / "m.idx").read_bytes()
    return prefix, index


def test_corrupt_megatron_index_names_file_and_offset(tmp_path):
    prefix, index = corrupt_cases(tmp_path)
    idx = tmp_path / "m.idx"
    cases = [
        (b"XXIDIDX\x00\x00" + index[9:], "byte offset 0"),
        (index[:17] + b"\x07" + index[18:], "byte offset 17"),       # float32 dtype
        (index[:-8], "truncated"),                                   # cut short
        (index[:34] + struct.pack("<i", -3) + index[38:], "negative length"),
        (index[:34 + 40] + struct.pack("<q", 8) + index[34 + 48:], "byte offset 74"),
    ]
    for data, message in cases:
        idx.write_bytes(data)
        with pytest.raises(gpufeed.CorruptRecordError) as raised:
            gpufeed.open_dataset(prefix)
        assert "m.idx" in str(raised.value) and message in str(raised.value), str(raised.value)
        assert gpufeed.verify(prefix)["problems"]
    idx.write_bytes(index)
    # A .bin shorter than the index says.
    data = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "m.bin").write_bytes(data[:-10])
    with pytest.raises(gpufeed.CorruptRecordError, match="past the end"):
        gpufeed.open_dataset(prefix)
    (tmp_path / "m.bin").unlink()
    with pytest.raises(FileNotFoundError):
        gpufeed.open_dataset(prefix)


def test_corrupt_llmc_and_headerless(tmp_path):
    write_llmc(tmp_path / "a.bin", np.arange(1000))
    data = (tmp_path / "a.bin").read_bytes()
    (tmp_path / "a.bin").write_bytes(data[:-2])
    with pytest.raises(gpufeed.CorruptRecordError, match="a.bin at byte offset 8"):
        gpufeed.open_dataset(tmp_path / "a.bin")
    (tmp_path / "a.bin").write_bytes(data[:500])
    with pytest.raises(gpufeed.CorruptRecordError, match="truncated"):
        gpufeed.open_dataset(tmp_path / "a.bin")
    (tmp_path / "t.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(gpufeed.CorruptRecordError, match="t.bin at byte offset 2"):
        gpufeed.open_dataset(tmp_path / "t.bin", format="tokens", token_dtype="uint16")
    with pytest.raises(ValueError, match="holds uint16"):
        write_llmc(tmp_path / "b.bin", np.arange(100))
        gpufeed.open_dataset(tmp_path / "b.bin", token_dtype="int32")


def test_node_cache_serves_the_token_files(tmp_path):
    rng = np.random.default_rng(10)
    stream = write_megatron(tmp_path / "c", random_documents(rng, 50, 50000), np.uint16)
    for epoch in range(2):
        loader = gpufeed.DataLoader(tmp_path / "c", batch_size=4, shuffle="block", seed=2,
                                    cache_dir=tmp_path / "cache", cache_capacity="1GiB",
                                    transform=gpufeed.TokenWindows(seq_len=30, block_bytes=600))
        loader.set_epoch(epoch)
        assert as_sorted(loader_rows(loader)) == as_sorted(reference_windows(stream, 30))
        stats = loader.stats()
        loader.close()
    # The second loader found the copy the first one made: nothing from the source.
    assert stats["source_bytes"] == 0 and stats["cache_reads"] > 0


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gpufeed", *map(str, args)],
                          capture_output=True, text=True, check=True).stdout


def windows_of(dataset):
    return [dataset[i].data for i in range(len(dataset))]


def test_index_llmc_directory_opens_nothing_until_read(tmp_path):
    rng = np.random.default_rng(11)
    shards = [rng.integers(0, 50257, size=n) for n in (500, 3, 900)]
    for i, tokens in enumerate(shards):
        write_llmc(tmp_path / f"fineweb_train_{i:06d}.bin", tokens)
    eager = gpufeed.open_dataset(tmp_path, seq_len=32)
    assert eager.storage_stats()["source_opens"] == 3
    out = run_cli("index", tmp_path)
    assert f"described {sum(map(len, shards))} tokens" in out
    manifest = json.loads((tmp_path / "gpufeed.json").read_text())
    assert manifest["format"] == "llmc" and len(manifest["shards"]) == 3
    first = manifest["shards"][0]
    assert first["file"] == "fineweb_train_000000.bin" and first["tokens"] == 500
    assert first["data_offset"] == 1024 and first["token_dtype"] == "uint16"
    assert first["bytes"] == 1024 + 1000 and len(first["xxh64"]) == 16
    lazy = gpufeed.open_dataset(tmp_path, seq_len=32)
    assert lazy.format == "llmc" and lazy.storage_stats()["source_opens"] == 0
    assert lazy.storage_stats()["source_stats"] == 0
    assert windows_of(lazy) == windows_of(eager)
    assert lazy.storage_stats()["source_opens"] == 3
    stream = np.concatenate(shards).astype(np.uint16)
    loader = gpufeed.DataLoader(tmp_path, batch_size=4, shuffle=False,
                                transform=gpufeed.TokenWindows(seq_len=32, block_bytes=256))
    assert [tuple(r) for r in loader_rows(loader)] == \
        [tuple(r) for r in reference_windows(stream, 32)]
    verified = gpufeed.verify(tmp_path)
    assert verified["problems"] == [] and verified["checksums_checked"] == 3


def test_index_megatron_prefix_and_a_changed_file(tmp_path):
    rng = np.random.default_rng(12)
    stream = write_megatron(tmp_path / "c", random_documents(rng, 30, 60000), np.uint16)
    eager = gpufeed.open_dataset(tmp_path / "c", seq_len=16)
    run_cli("index", tmp_path / "c")
    manifest = json.loads((tmp_path / "gpufeed.json").read_text())
    assert manifest["format"] == "megatron"
    assert manifest["shards"][0]["file"] == "c.bin" and manifest["shards"][0]["index"] == "c.idx"
    assert manifest["shards"][0]["documents"] == 30
    lazy = gpufeed.open_dataset(tmp_path / "c", seq_len=16)
    assert lazy.storage_stats()["source_opens"] == 0 and lazy.tokens["documents"] == 30
    assert windows_of(lazy) == windows_of(eager)
    assert lazy.storage_stats()["source_opens"] == 1
    assert gpufeed.open_dataset(tmp_path, seq_len=16).tokens["tokens"] == len(stream)
    # The .bin replaced by a shorter one: its first read fails naming it.
    (tmp_path / "c.bin").write_bytes(stream[:-4].tobytes())
    changed = gpufeed.open_dataset(tmp_path / "c", seq_len=16)
    with pytest.raises(gpufeed.CorruptRecordError, match=r"c\.bin.*gpufeed\.json"):
        changed[0]


def test_index_headerless_names_its_dtype(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16)
    (tmp_path / "train.bin").write_bytes(tokens.tobytes())
    with pytest.raises(subprocess.CalledProcessError):
        run_cli("index", tmp_path / "train.bin")
    run_cli("index", tmp_path / "train.bin", "--format", "tokens", "--token-dtype", "uint16")
    manifest = json.loads((tmp_path / "gpufeed.json").read_text())
    assert manifest["format"] == "tokens" and manifest["shards"][0]["token_dtype"] == "uint16"
    lazy = gpufeed.open_dataset(tmp_path / "train.bin", seq_len=10)
    assert lazy.storage_stats()["source_opens"] == 0
    assert lazy[5].data == tokens[50:61].tobytes()


def test_index_writes_heads_and_global_shuffle_reads_each_window_one_token_short(tmp_path):
    # seq_len 256 of uint16: 514-byte windows at a 512-byte stride, so every
    # window's last token starts a 512-byte boundary that gpufeed.heads keeps.
    rng = np.random.default_rng(13)
    stream = write_megatron(tmp_path / "c", random_documents(rng, 40, 60000, 100, 400), np.uint16)
    out = run_cli("index", tmp_path)
    assert "gpufeed.heads" in out and (tmp_path / "gpufeed.heads").stat().st_size > 0
    expected = as_sorted(reference_windows(stream, 256))
    for direct in (False, True):
        loader = gpufeed.DataLoader(tmp_path, batch_size=8, shuffle=True, seed=5, drop_last=False,
                                    direct_io=direct, transform=gpufeed.TokenWindows(seq_len=256))
        assert as_sorted(loader_rows(loader)) == expected
        assert loader.stats()["bytes_read"] == len(expected) * 256 * 2
    # The .bin rewritten at the same size after indexing: the heads disagree
    # with the bytes read, and the window says where.
    (tmp_path / "c.bin").write_bytes((stream ^ 0xFFFF).astype(np.uint16).tobytes())
    loader = gpufeed.DataLoader(tmp_path, batch_size=8, shuffle=True, seed=5,
                                transform=gpufeed.TokenWindows(seq_len=256))
    with pytest.raises(gpufeed.CorruptRecordError,
                       match=r"c\.bin at byte offset \d+: .*gpufeed\.heads.*sample \d+"):
        for _ in loader:
            pass
