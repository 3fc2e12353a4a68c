"""gpufeed.EmbeddingTable: rows by id, bit-identical to numpy_table[ids], for
every dtype, .npy and raw files; bad ids and bad files named; the RAM tier
under a small budget, preload, 8 threads at once, the node cache shared by
two processes, the stats; and `gpufeed bench/diagnose --embedding`."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import gpufeed
from conftest import pack_list

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

# The dtypes a table can have, as stored on disk (bfloat16 as uint16).
STORED = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
          "int8": np.int8, "uint8": np.uint8}
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
         "int8": torch.int8, "uint8": torch.uint8}


def random_table(rows, dim, dtype, seed=0):
    """A (rows, dim) table of random bits (NaNs and infinities included for
    floats: the comparison is of bits)."""
    stored = np.dtype(STORED[dtype])
    bits = np.random.default_rng(seed).integers(0, 256, size=rows * dim * stored.itemsize,
                                                dtype=np.uint8)
    return bits.view(stored).reshape(rows, dim)


def save_npy(directory, dtype, rows=300, dim=12, seed=0):
    table = random_table(rows, dim, dtype, seed)
    path = directory / f"{dtype}.npy"
    np.save(path, table)
    return path, table


def as_bytes(tensor):
    """The tensor's bytes as a numpy uint8 array (bfloat16 through int16)."""
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.contiguous().numpy().view(np.uint8)


def assert_rows(out, table, ids, dtype):
    ids = np.asarray(ids, dtype=np.int64)
    assert out.dtype == TORCH[dtype]
    assert tuple(out.shape) == (len(ids), table.shape[1])
    assert np.array_equal(as_bytes(out), table[ids].view(np.uint8)), "rows differ from numpy"


def exercise_ids(rows):
    """Duplicates, no order, the first and the last row."""
    return [rows - 1, 0, 5, 5, rows // 2, 3, rows - 1, 1, 5, rows - 2]


@pytest.mark.parametrize("dtype", sorted(STORED))
def test_npy_rows_are_bit_identical_to_numpy(tmp_path, dtype):
    path, table = save_npy(tmp_path, dtype, dim=7 if dtype.endswith("int8") else 12)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="1MiB",
                                    dtype="bfloat16" if dtype == "bfloat16" else None)
    assert (opened.rows, opened.dim, opened.dtype) == (table.shape[0], table.shape[1],
                                                       TORCH[dtype])
    assert opened.row_bytes == table.shape[1] * table.dtype.itemsize
    assert opened.path == os.fspath(path)
    ids = exercise_ids(table.shape[0])
    assert_rows(opened.lookup(torch.tensor(ids)), table, ids, dtype)
    # Again: now from the RAM tier.
    assert_rows(opened.lookup(np.array(ids)), table, ids, dtype)
    every = np.random.default_rng(1).permutation(table.shape[0])
    assert_rows(opened.lookup(every), table, every, dtype)


@pytest.mark.parametrize("dtype", sorted(STORED))
def test_raw_file_with_dim_and_dtype(tmp_path, dtype):
    table = random_table(257, 5, dtype, seed=2)
    path = tmp_path / f"{dtype}.bin"
    table.tofile(path)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="64KiB", dim=5, dtype=dtype)
    assert (opened.rows, opened.dim, opened.dtype) == (257, 5, TORCH[dtype])
    ids = exercise_ids(257)
    assert_rows(opened.lookup(ids), table, ids, dtype)


def test_dtype_as_torch_or_numpy_dtype(tmp_path):
    table = random_table(40, 3, "float16")
    path = tmp_path / "table.raw"
    table.tofile(path)
    for dtype in (torch.float16, np.float16, np.dtype("float16")):
        opened = gpufeed.EmbeddingTable(path, dim=3, dtype=dtype)
        assert opened.dtype == torch.float16
        assert_rows(opened.lookup([39, 0]), table, [39, 0], "float16")
    with pytest.raises(ValueError, match="bfloat16"):
        gpufeed.EmbeddingTable(path, dim=3, dtype=np.uint16)
    with pytest.raises(ValueError, match="float64"):
        gpufeed.EmbeddingTable(path, dim=3, dtype="float64")


def test_npy_options_must_agree_with_the_header(tmp_path):
    path, _ = save_npy(tmp_path, "float32", dim=12)
    with pytest.raises(ValueError, match="float32.npy"):
        gpufeed.EmbeddingTable(path, dim=13)
    with pytest.raises(ValueError, match="float32.npy"):
        gpufeed.EmbeddingTable(path, dtype="float16")


def test_empty_lookup_has_shape_zero_by_dim(tmp_path):
    path, table = save_npy(tmp_path, "bfloat16")
    opened = gpufeed.EmbeddingTable(path, dtype="bfloat16")
    for empty in ([], np.empty(0, dtype=np.int64), torch.empty(0, dtype=torch.int64)):
        out = opened.lookup(empty)
        assert tuple(out.shape) == (0, table.shape[1]) and out.dtype == torch.bfloat16


def test_ids_as_tensor_numpy_or_list_of_any_integer_dtype(tmp_path):
    path, table = save_npy(tmp_path, "float32", rows=120)
    opened = gpufeed.EmbeddingTable(path)
    ids = [119, 7, 7, 64, 0]
    for given in (torch.tensor(ids), torch.tensor(ids, dtype=torch.int32),
                  torch.tensor(ids, dtype=torch.uint8), np.array(ids, dtype=np.int16),
                  np.array(ids, dtype=np.uint64), ids, tuple(ids)):
        assert_rows(opened.lookup(given), table, ids, "float32")
    strided = torch.arange(120, dtype=torch.int64)[::2]  # not contiguous: copied
    assert_rows(opened.lookup(strided), table, strided.numpy(), "float32")
    with pytest.raises(ValueError, match="1-D"):
        opened.lookup(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="1-D"):
        opened.lookup(torch.tensor(3))
    with pytest.raises(TypeError, match="integers"):
        opened.lookup(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="integers"):
        opened.lookup([0.5])


@pytest.mark.parametrize("bad", [120, 10**12, -1, -120])
def test_an_id_out_of_range_names_the_id_and_the_table(tmp_path, bad):
    path, _ = save_npy(tmp_path, "float32", rows=120)
    opened = gpufeed.EmbeddingTable(path)
    with pytest.raises(IndexError) as raised:
        opened.lookup([3, bad, 4])
    assert isinstance(raised.value, gpufeed.OutOfRangeError)
    assert str(bad) in str(raised.value) and os.fspath(path) in str(raised.value)
    with pytest.raises(gpufeed.OutOfRangeError, match=str(2**64 - 1)):
        opened.lookup(np.array([2**64 - 1], dtype=np.uint64))
    assert opened.lookup([119]).shape == (1, 12)  # the table still works


def test_a_truncated_or_longer_npy_is_refused_naming_the_file(tmp_path):
    path, _ = save_npy(tmp_path, "float32", rows=100, dim=8)
    size = os.path.getsize(path)
    os.truncate(path, size - 5)
    with pytest.raises(gpufeed.Error, match="float32.npy"):
        gpufeed.EmbeddingTable(path)
    with open(path, "ab") as out:
        out.write(b"\0" * 37)
    with pytest.raises(gpufeed.Error, match="float32.npy"):
        gpufeed.EmbeddingTable(path)
    not_npy = tmp_path / "bad.npy"
    not_npy.write_bytes(b"this is not a numpy file at all" * 4)
    with pytest.raises(gpufeed.Error, match="bad.npy"):
        gpufeed.EmbeddingTable(not_npy)


@pytest.mark.parametrize("array", [np.zeros((4, 3), dtype=np.uint16), np.zeros((4, 3)),
                                   np.zeros(12, dtype=np.float32),
                                   np.zeros((2, 2, 3), dtype=np.float32)],
                         ids=["uint16-without-bfloat16", "float64", "1-D", "3-D"])
def test_a_npy_a_table_cannot_be_is_refused_naming_it(tmp_path, array):
    path = tmp_path / "other.npy"
    np.save(path, array)
    with pytest.raises(gpufeed.NotSupportedError, match="other.npy"):
        gpufeed.EmbeddingTable(path)


def test_a_raw_file_not_a_multiple_of_the_row_is_refused_naming_it(tmp_path):
    path = tmp_path / "odd.bin"
    path.write_bytes(b"\1" * (16 * 10 + 3))
    with pytest.raises(ValueError, match="odd.bin"):
        gpufeed.EmbeddingTable(path, dim=4, dtype="float32")
    with pytest.raises(ValueError):
        gpufeed.EmbeddingTable(path, dtype="float32")  # a raw file needs dim too
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        gpufeed.EmbeddingTable(tmp_path / "missing.npy")


def test_eviction_under_a_small_budget_keeps_rows_exact(tmp_path):
    """4096 rows of 128 bytes under a 64 KiB budget: a few hundred rows at
    most stay resident, and every lookup of Zipf and uniform ids is exact."""
    from gpufeed.bench.embedding import ZipfIds
    path, table = save_npy(tmp_path, "float32", rows=4096, dim=32)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="64KiB")
    zipf = ZipfIds(4096, seed=3)
    uniform = np.random.default_rng(4)
    for step in range(60):
        ids = zipf.draw(512) if step % 2 else uniform.integers(0, 4096, 512)
        assert_rows(opened.lookup(ids), table, ids, "float32")
    stats = opened.stats()
    assert stats["capacity_rows"] < 4096 // 4
    assert stats["resident_rows"] <= stats["capacity_rows"]
    assert stats["resident_bytes"] <= 64 * 1024
    assert stats["evicted"] + stats["rejected"] > 0
    assert stats["ram_hits"] > 0 and stats["source_rows"] > 0


def test_preload_serves_every_lookup_from_ram(tmp_path):
    path, table = save_npy(tmp_path, "int8", rows=500, dim=16)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="1MiB", preload=True)
    assert opened.stats()["preload_bytes"] >= table.nbytes
    ids = np.random.default_rng(5).integers(0, 500, 2000)
    assert_rows(opened.lookup(ids), table, ids, "int8")
    stats = opened.stats()
    assert stats["ram_hits"] == stats["rows"] == 2000
    assert stats["source_rows"] == stats["nvme_rows"] == stats["source_reads"] == 0
    assert stats["resident_rows"] == 500


def test_preload_of_a_table_larger_than_the_budget_is_refused(tmp_path):
    path, _ = save_npy(tmp_path, "float32", rows=4096, dim=32)  # 512 KiB
    with pytest.raises(ValueError, match="float32.npy"):
        gpufeed.EmbeddingTable(path, cache_bytes="64KiB", preload=True)


def test_eight_threads_looking_up_at_once_get_exact_rows(tmp_path):
    path, table = save_npy(tmp_path, "float16", rows=3000, dim=24)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="32KiB")
    failures = []
    start = threading.Barrier(8)

    def work(seed):
        generator = np.random.default_rng(seed)
        start.wait()
        for _ in range(40):
            ids = generator.integers(0, 3000, 700)
            out = opened.lookup(ids)
            if not np.array_equal(as_bytes(out), table[ids].view(np.uint8)):
                failures.append(seed)
                return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, f"threads {failures} got wrong rows"
    stats = opened.stats()
    assert stats["lookups"] == 8 * 40 and stats["rows"] == 8 * 40 * 700


# Process B of the node-cache test: opens the table with the same cache_dir
# and no RAM tier, looks up every row, prints its stats and whether the rows
# were exact.
READER = r"""
import json, sys
import numpy as np
import gpufeed
path, cache_dir = sys.argv[1], sys.argv[2]
table = gpufeed.EmbeddingTable(path, cache_bytes=0, cache_dir=cache_dir)
expected = np.load(path)
ids = np.random.default_rng(7).permutation(table.rows)
exact = bool(np.array_equal(table.lookup(ids).numpy().view(np.uint8),
                            expected[ids].view(np.uint8)))
print(json.dumps(dict(table.stats(), exact=exact)))
"""


def wait_for_complete_copy(cache_dir, seconds=60):
    """Until the node cache holds a complete entry and no fill is running."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = gpufeed.cache.stat(cache_dir)
        if report["entries"] >= 1 and report["fills_in_progress"] == 0:
            return report
        time.sleep(0.05)
    raise AssertionError(f"no complete copy in {cache_dir} after {seconds} s")


def test_the_node_cache_is_shared_by_two_processes(tmp_path):
    path, table = save_npy(tmp_path, "float32", rows=2000, dim=16)
    cache_dir = tmp_path / "cache"
    first = gpufeed.EmbeddingTable(path, cache_bytes=0, cache_dir=cache_dir)
    ids = np.arange(2000)
    assert_rows(first.lookup(ids), table, ids, "float32")
    wait_for_complete_copy(cache_dir)
    done = subprocess.run([sys.executable, "-c", READER, str(path), str(cache_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["exact"]
    assert stats["nvme_rows"] > 0 and stats["source_rows"] == 0, stats
    assert stats["source_reads"] == stats["source_bytes"] == 0
    assert stats["nvme_rows"] == 2000 and stats["ram_hits"] == 0


def test_a_table_inherited_by_fork_raises_in_the_child_and_the_parents_goes_on(tmp_path):
    """A torch DataLoader worker (a forked child) that looks up in the parent's
    table gets ValueError naming the cause, not a hang; the parent's table
    keeps serving exact rows."""
    path, table = save_npy(tmp_path, "float32", rows=500, dim=8)
    opened = gpufeed.EmbeddingTable(path, cache_bytes=1 << 14)
    ids = np.array([3, 499, 3, 0])
    assert_rows(opened.lookup(ids), table, ids, "float32")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        signal.alarm(20)  # a hang kills the child: the parent reads no message
        os.close(read)
        try:
            opened.lookup(ids)
            message = b"no error"
        except ValueError as error:
            message = str(error).encode()
        except BaseException as error:  # anything else is a failure the parent reports
            message = repr(error).encode()
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as reader:
        message = reader.read().decode()
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert "inherited by fork" in message and str(path) in message, message
    assert_rows(opened.lookup(ids), table, ids, "float32")


def test_stats_fields_and_latency(tmp_path):
    path, table = save_npy(tmp_path, "uint8", rows=1000, dim=32)
    opened = gpufeed.EmbeddingTable(path, cache_bytes="1MiB")
    before = opened.stats()
    assert before["lookups"] == before["rows"] == 0 and before["hit_rate"] == 0.0
    assert list(before) == ["lookups", "rows", "ram_hits", "nvme_rows", "source_rows",
                            "nvme_reads", "nvme_bytes", "source_reads", "source_bytes",
                            "admitted", "rejected", "evicted", "resident_rows",
                            "resident_bytes", "capacity_rows", "preload_bytes", "p50_us",
                            "p99_us", "mean_us", "lookup_seconds", "hit_rate"]
    generator = np.random.default_rng(8)
    for _ in range(30):  # no id twice in one call: every id is a hit or a row read
        opened.lookup(generator.choice(1000, 256, replace=False))
    stats = opened.stats()
    assert stats["lookups"] == 30 and stats["rows"] == 30 * 256
    assert stats["rows"] == stats["ram_hits"] + stats["nvme_rows"] + stats["source_rows"]
    assert stats["source_rows"] <= 1000 and stats["source_bytes"] >= stats["source_rows"] * 32
    assert stats["nvme_rows"] == stats["nvme_reads"] == 0  # no cache_dir
    assert 0 < stats["p50_us"] <= stats["p99_us"]
    assert stats["mean_us"] > 0 and stats["lookup_seconds"] > 0
    assert stats["hit_rate"] == pytest.approx(stats["ram_hits"] / stats["rows"])
    assert 0.0 < stats["hit_rate"] < 1.0
    opened.reset_stats()
    after = opened.stats()
    assert after["lookups"] == after["rows"] == after["ram_hits"] == 0
    assert after["resident_rows"] == stats["resident_rows"]  # the tiers' contents stay
    fresh = gpufeed.EmbeddingTable(path, cache_bytes="1MiB")
    assert_rows(fresh.lookup([999, 999, 999]), table, [999, 999, 999], "uint8")
    duplicates = fresh.stats()  # a row asked for 3 times in one call counts 3 times, read once
    assert (duplicates["rows"], duplicates["source_rows"], duplicates["source_reads"]) == (3, 1, 1)
    assert "uint8.npy" in repr(opened) and "rows=1000" in repr(opened)
    assert opened._native.rows == 1000  # the native table the DataLoader takes


def test_zipf_ids_are_bounded_skewed_and_seeded():
    from gpufeed.bench.embedding import ZipfIds
    first, again = ZipfIds(10000, seed=1), ZipfIds(10000, seed=1)
    ids = first.draw(50000)
    assert np.array_equal(ids, again.draw(50000))
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 10000
    counts = np.bincount(ids, minlength=10000)
    top = np.sort(counts)[::-1][:100].sum() / len(ids)
    assert top == pytest.approx(first.top_share(100), abs=0.02)
    assert first.top_share(0) == 0.0 and first.top_share(10**9) == pytest.approx(1.0)
    # The hot rows are scattered over the table, not its first rows.
    assert np.argsort(counts)[-10:].max() > 100


def run_in_process(capsys, *args):
    """The CLI in this process; returns (exit status, stdout, stderr)."""
    from gpufeed import cli
    status = cli.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_bench_embedding_reports_rates_hits_and_tiers(tmp_path, capsys):
    path, _ = save_npy(tmp_path, "float32", rows=5000, dim=16)
    status, out, err = run_in_process(capsys, "bench", "--embedding", path, "--embedding-ids", 20000,
                               "--embedding-batch", 1000, "--cache-bytes", "128KiB", "--json")
    assert status == 0, err
    result = json.loads(out)["embedding"]
    stats = result["stats"]
    assert result["rows"] == 5000 and result["dim"] == 16 and result["dtype"] == "float32"
    assert stats["lookups"] == 20 and stats["rows"] == 20000
    assert result["lookups_per_s"] > 0 and result["rows_per_s"] > 0
    assert 0 < result["ideal_hit_rate"] < 1 and 0 <= stats["hit_rate"] <= 1
    assert stats["p50_us"] <= stats["p99_us"]
    status, out, err = run_in_process(capsys, "bench", "--embedding", path, "--embedding-ids", 4000,
                               "--embedding-batch", 1000, "--cache-bytes", "1MiB", "--preload")
    assert status == 0, err
    for label in ("lookups/s", "rows/s", "hit rate:   100.0%", "p50", "p99", "tiers:"):
        assert label in out, out
    status, _, err = run_in_process(capsys, "bench", "--embedding", tmp_path / "missing.npy")
    assert status == 1 and "missing.npy" in err
    with pytest.raises(SystemExit):
        run_in_process(capsys, "bench")


def test_diagnose_embedding_says_whether_lookups_are_source_bound(tmp_path, capsys):
    path, _ = save_npy(tmp_path, "float32", rows=20000, dim=32)
    status, out, err = run_in_process(capsys, "diagnose", "--embedding", path, "--cache-bytes", "0",
                               "--embedding-lookups", 3, "--json")
    assert status == 0, err
    report = json.loads(out)["embedding"]
    assert report["rows"] == 20000 and report["stats"]["hit_rate"] == 0.0
    assert report["judgement"]["source_bound"]
    sentence = report["judgement"]["sentence"]
    assert sentence.startswith("lookups are bound by the source") and "cache_dir" in sentence
    status, out, err = run_in_process(capsys, "diagnose", "--embedding", path, "--cache-bytes", "8MiB",
                               "--preload", "--embedding-lookups", 3)
    assert status == 0, err
    assert "== embedding table" in out and "20000 x 32 float32" in out
    assert "served from memory, not bound by the source" in out


def test_bench_and_diagnose_take_a_dataset_and_a_table_together(tmp_path, capsys):
    path, _ = save_npy(tmp_path, "float16", rows=3000, dim=8)
    packed = pack_list(tmp_path / "data", [(bytes([i]) * 40, i % 3) for i in range(24)], 4096)
    status, out, err = run_in_process(capsys, "bench", packed, "--transform", "raw", "--batches",
                                      3, "--warmup", 1, "--batch-size", 4, "--threads", 1,
                                      "--embedding", path, "--embedding-ids", 2000, "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["batches"] == 3 and result["embedding"]["stats"]["rows"] == 2000
    status, out, err = run_in_process(capsys, "diagnose", packed, "--no-loader", "--io-seconds",
                                      0.05, "--embedding", path, "--embedding-lookups", 2)
    assert status == 0, err
    assert "== data" in out and "== embedding table" in out and "3000 x 8 float16" in out


def test_the_native_binding_checks_its_buffers(tmp_path):
    """gpufeed._core.EmbeddingTable, as the DataLoader's pipeline takes it
    (table._native): lookup into a buffer or an address, buffers checked."""
    from gpufeed import _core
    path, table = save_npy(tmp_path, "float32", rows=50, dim=4)
    options = _core.EmbeddingTableOptions()
    options.dtype = "float32"
    assert options.dtype == _core.TensorDtype.FLOAT32
    options.dtype = None
    assert options.dtype is None
    options.cache_bytes = 1 << 20
    native = _core.EmbeddingTable(str(path), options)
    assert isinstance(gpufeed.EmbeddingTable(path)._native, _core.EmbeddingTable)
    ids = np.array([49, 0, 7], dtype=np.int64)
    out = np.empty((3, 4), dtype=np.float32)
    native.lookup(ids, out)
    assert np.array_equal(out.view(np.uint8), table[ids].view(np.uint8))
    into = torch.empty((3, 4), dtype=torch.float32)
    native.lookup(ids, into.data_ptr(), into.numel() * 4)
    assert np.array_equal(as_bytes(into), table[ids].view(np.uint8))
    with pytest.raises(ValueError, match="int64"):
        native.lookup(ids.astype(np.int32), out)
    with pytest.raises(ValueError, match="contiguous"):
        native.lookup(np.arange(6, dtype=np.int64)[::2], out)
    with pytest.raises(ValueError, match="need 48"):
        native.lookup(ids, np.empty((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="need 48"):
        native.lookup(ids, into.data_ptr(), 40)
    readonly = np.empty((3, 4), dtype=np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        native.lookup(ids, readonly)
    with pytest.raises(ValueError, match="dtype"):
        options.dtype = "float64"
