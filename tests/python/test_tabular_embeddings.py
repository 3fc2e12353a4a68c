"""Embedding rows delivered with tabular batches:
DataLoader(path, transform=gpufeed.Tabular(...), embeddings={column: table})
yields (dense, sparse, labels, emb) with emb[c] the table's rows of
sparse[:, c] (after hashing). Datasets written by np.save (TorchRec .npy
triplets) and ndarray.tofile (MLPerf records), tables by np.save; every
batch's embeddings are compared bit for bit with table.lookup of the batch's
own ids and with numpy_table[ids], and an epoch's rows (dense, sparse,
labels, embeddings) with a numpy reference of the whole dataset. Also:
resume mid-epoch, the rank split, int8/bfloat16/uint8 tables, stats, and
every refused argument."""

import collections

import pytest

import gpufeed
from gpufeed import _core

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

MLPERF = np.dtype([("label", "<i4"), ("dense", "<i4", (13,)), ("sparse", "<i4", (26,))])
MLPERF_SCHEMA = gpufeed.RecordSchema(label="int32", dense=("int32", 13), sparse=("int32", 26))
BLOCK_BYTES = 8192
# Column c's ids are hashed into HASH[c] rows: the tables' sizes where they
# are looked up, large elsewhere.
TABLE_ROWS = {3: 1009, 7: 503, 0: 211, 12: 1009, 25: 97}
HASH = [TABLE_ROWS.get(c, 100003) for c in range(26)]


class Data:
    """A tabular dataset on disk and its stored values, and how it opens."""

    def __init__(self, path, label, dense, sparse, **open_keywords):
        self.path, self.label, self.dense, self.sparse = path, label, dense, sparse
        self.open_keywords = open_keywords

    def __len__(self):
        return len(self.label)

    def loader(self, embeddings, sparse_dtype="int64", **keywords):
        transform = gpufeed.Tabular(hash_sizes=HASH, sparse_dtype=sparse_dtype)
        return gpufeed.DataLoader(self.path, transform=transform, embeddings=embeddings,
                                  batch_size=keywords.pop("batch_size", 256),
                                  **self.open_keywords, **keywords)


def write_npy(root):
    root.mkdir()
    rng = np.random.default_rng(1)
    parts = []
    for stem, n in (("day_0", 1500), ("day_1", 1100)):
        dense = rng.integers(-20, 200_000, (n, 13)).astype(np.int32)
        sparse = rng.integers(-2**31, 2**31, (n, 26)).astype(np.int32)
        labels = rng.integers(0, 2, n).astype(np.int32)
        for name, array in (("dense", dense), ("sparse", sparse), ("labels", labels)):
            np.save(root / f"{stem}_{name}.npy", array)
        parts.append((labels, dense, sparse))
    return Data(root, *(np.concatenate(p) for p in zip(*parts)),
                format_options=gpufeed.TabularOptions(block_bytes=BLOCK_BYTES))


def write_records(root, rows=2600, first_file_rows=1700, seed=2, block_bytes=BLOCK_BYTES):
    """MLPerf records in part_0.bin (first_file_rows) and part_1.bin (the rest)."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    array = np.zeros(rows, MLPERF)
    array["label"] = rng.integers(0, 2, rows)
    array["dense"] = rng.integers(-100, 100_000, (rows, 13))
    array["sparse"] = rng.integers(-2**31, 2**31, (rows, 26))
    array[:first_file_rows].tofile(root / "part_0.bin")
    array[first_file_rows:].tofile(root / "part_1.bin")
    return Data(root, array["label"], array["dense"], array["sparse"], format="records",
                format_options=gpufeed.TabularOptions(record_schema=MLPERF_SCHEMA,
                                                      block_bytes=block_bytes))


def write_table(root, name, rows, dim, dtype, seed):
    """(path, the numpy array np.save wrote): bfloat16 as its uint16 bits."""
    rng = np.random.default_rng(seed)
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        array = rng.integers(info.min, int(info.max) + 1, (rows, dim)).astype(dtype)
    elif dtype == "bfloat16":
        values = torch.from_numpy(rng.standard_normal((rows, dim)).astype(np.float32))
        array = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    else:
        array = rng.standard_normal((rows, dim)).astype(dtype)
    path = root / f"{name}.npy"
    np.save(path, array)
    return path, array


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("emb")
    return {"npy": write_npy(root / "npy"), "records": write_records(root / "records")}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """{name: (gpufeed.EmbeddingTable, numpy array)}; budgets below the
    tables' sizes, so lookups miss and evict."""
    root = tmp_path_factory.mktemp("tables")
    out = {}
    for name, rows, dim, dtype, seed in (("f32", 1009, 16, "float32", 5),
                                         ("f16", 503, 24, "float16", 6),
                                         ("i8", 211, 32, "int8", 7),
                                         ("bf16", 1009, 8, "bfloat16", 8),
                                         ("u8", 97, 12, "uint8", 9)):
        path, array = write_table(root, name, rows, dim, dtype, seed)
        table = gpufeed.EmbeddingTable(path, cache_bytes=16384,
                                       dtype="bfloat16" if dtype == "bfloat16" else None)
        out[name] = (table, array)
    return out


def raw(tensor):
    """A tensor's bytes as a numpy uint8 array (N, bytes per row)."""
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.numpy().view(np.uint8).reshape(tensor.shape[0], -1)


def check_batch(batch, embeddings):
    """Each emb[c] is the table's rows of sparse[:, c]: as table.lookup of
    those ids, and as the numpy array indexed by them."""
    dense, sparse, labels, emb = batch
    assert list(emb) == sorted(embeddings)
    for column, (table, array) in embeddings.items():
        rows = emb[column]
        assert rows.dtype == table.dtype and tuple(rows.shape) == (len(labels), table.dim)
        ids = sparse[:, column].to(torch.int64)
        assert np.array_equal(raw(rows), raw(table.lookup(ids)))
        assert np.array_equal(raw(rows), np.ascontiguousarray(array[ids.numpy()])
                              .view(np.uint8).reshape(len(labels), -1))


def row_keys(parts):
    """One bytes-comparable key per row over several arrays."""
    n = len(parts[0])
    flat = [np.ascontiguousarray(a).view(np.uint8).reshape(n, -1) for a in parts]
    return np.ascontiguousarray(np.hstack(flat)).view(np.dtype((np.void, sum(
        f.shape[1] for f in flat)))).reshape(n)


def reference_keys(data, embeddings, sparse_dtype="int64"):
    """The dataset's rows as the loader must give them, embeddings included."""
    dense = data.dense.astype(np.float32)
    ids = data.sparse.astype(np.int64) % np.asarray(HASH, np.int64)
    labels = data.label.reshape(-1).astype(np.float32)
    rows = [array[ids[:, column]] for column, (_, array) in sorted(embeddings.items())]
    return row_keys([dense, ids.astype(sparse_dtype), labels] + rows)


def epoch_keys(loader, embeddings):
    keys = []
    for batch in loader:
        check_batch(batch, embeddings)
        dense, sparse, labels, emb = batch
        keys.append(row_keys([dense.numpy(), sparse.numpy(), labels.numpy()] +
                             [raw(emb[c]) for c in sorted(emb)]))
    return np.concatenate(keys)


@pytest.mark.parametrize("name,shuffle,sparse_dtype", [("npy", "block", "int64"),
                                                       ("npy", True, "int32"),
                                                       ("records", False, "int64"),
                                                       ("records", "block", "int32")])
def test_every_batch_brings_the_tables_rows_of_its_ids(data, tables, name, shuffle,
                                                       sparse_dtype):
    table = data[name]
    embeddings = {7: tables["f16"], 3: tables["f32"]}  # given out of order: emb is in column order
    loader = table.loader({c: t for c, (t, _) in embeddings.items()}, sparse_dtype,
                          shuffle=shuffle, seed=4, num_threads=2)
    got = epoch_keys(loader, embeddings)
    want = reference_keys(table, embeddings, sparse_dtype)
    if shuffle is False:
        assert np.array_equal(got, want)  # storage order
    else:
        assert collections.Counter(got.tolist()) == collections.Counter(want.tolist())
    stats = loader.stats()
    assert stats["lookup_rows"] == 2 * len(table)
    assert stats["lookup_seconds"] > 0 and 0 < stats["lookup_share"] <= 1.01
    assert stats["lookup_cpu_seconds"] <= stats["lookup_seconds"]
    assert 0 <= stats["lookup_ram_hit_rate"] < 1  # 16 KiB RAM tiers: misses too
    assert stats["bottleneck"] in ("none", "consumer", "read", "decode", "copy",
                                   "cpu-contention", "lookup")
    if stats["bottleneck"] in ("consumer", "read", "decode", "lookup"):
        assert "lookup" in stats["verdict"]  # the workers' shares name it


def test_a_batch_written_by_both_workers_brings_every_rows_embeddings(tmp_path, tables):
    # A worker claims at most 16,384 rows: a batch of 36,000 is written in
    # three runs, each looking its own rows up into its part of the planes.
    large = write_records(tmp_path / "large", rows=40000, first_file_rows=30000, seed=3,
                          block_bytes=160 * 3000)
    embeddings = {3: tables["f32"], 7: tables["f16"]}
    loader = large.loader({c: t for c, (t, _) in embeddings.items()}, batch_size=36000,
                          shuffle="block", seed=2, num_threads=2)
    got = epoch_keys(loader, embeddings)
    want = reference_keys(large, embeddings)
    assert collections.Counter(got.tolist()) == collections.Counter(want.tolist())


def test_int8_bfloat16_and_uint8_tables(data, tables):
    embeddings = {0: tables["i8"], 12: tables["bf16"], 25: tables["u8"]}
    loader = data["records"].loader({c: t for c, (t, _) in embeddings.items()},
                                    shuffle="block", seed=1)
    got = epoch_keys(loader, embeddings)
    assert collections.Counter(got.tolist()) == collections.Counter(
        reference_keys(data["records"], embeddings).tolist())
    dense, sparse, labels, emb = next(iter(loader))
    assert (emb[0].dtype, emb[12].dtype, emb[25].dtype) == (torch.int8, torch.bfloat16,
                                                           torch.uint8)


def test_resume_mid_epoch_gives_the_same_remaining_batches(data, tables):
    embeddings = {3: tables["f32"], 7: tables["f16"]}
    make = lambda: data["npy"].loader({c: t for c, (t, _) in embeddings.items()},
                                      shuffle=True, seed=9, batch_size=200)
    first = make()
    iterator = iter(first)
    for _ in range(4):
        next(iterator)
    state = first.state_dict()
    assert state["consumed"] == 800
    rest = list(iterator)
    first.close()
    second = make()
    second.load_state_dict(state)
    resumed = list(second)
    assert len(resumed) == len(rest) == 9  # 2600 rows: 13 batches of 200
    for want, got in zip(rest, resumed):
        check_batch(got, embeddings)
        for a, b in zip(want[:3], got[:3]):
            assert torch.equal(a, b)
        assert list(got[3]) == list(want[3])
        for column in want[3]:
            assert np.array_equal(raw(got[3][column]), raw(want[3][column]))


def test_two_ranks_cover_every_row_once_with_its_embeddings(data, tables):
    embeddings = {3: tables["f32"], 25: tables["u8"]}
    keys = []
    for rank in range(2):
        loader = data["records"].loader({c: t for c, (t, _) in embeddings.items()},
                                        shuffle="block", seed=2, rank=rank, world_size=2)
        keys.append(epoch_keys(loader, embeddings))
        assert len(keys[-1]) == 1300
    got = collections.Counter(np.concatenate(keys).tolist())
    want = collections.Counter(reference_keys(data["records"], embeddings).tolist())
    assert got == want


def test_refused_arguments_name_the_keyword_or_the_column(data, tables):
    table = tables["f32"][0]
    path = data["npy"].path
    for transform in (None, gpufeed.TokenWindows(seq_len=16)):
        with pytest.raises(ValueError, match=r"embeddings=.*gpufeed\.Tabular"):
            gpufeed.DataLoader(path, transform=transform, embeddings={3: table})
    with pytest.raises(ValueError, match="sparse column 26"):
        data["npy"].loader({26: table})
    for key in (-1, "3", 2.0, True):
        with pytest.raises(ValueError, match="sparse column indices"):
            data["npy"].loader({key: table})
    with pytest.raises(TypeError, match=r"embeddings\[3\] must be a gpufeed.EmbeddingTable"):
        data["npy"].loader({3: np.zeros((4, 4), np.float32)})
    with pytest.raises(TypeError, match="must be a dict"):
        data["npy"].loader([(3, table)])
    with pytest.raises(ValueError, match="at most 7"):
        data["npy"].loader({c: table for c in range(8)})
    # Without hashing, a stored id past the table's end fails its batch
    # naming the sample, the column and the id (an IndexError).
    loader = gpufeed.DataLoader(path, transform=gpufeed.Tabular(), embeddings={3: table},
                                batch_size=64, shuffle=False,
                                **data["npy"].open_keywords)
    with pytest.raises(IndexError, match=r"sample \d+, embedding of sparse column 3: id"):
        next(iter(loader))


def test_plain_tabular_loading_still_yields_three_tensors(data):
    for embeddings in (None, {}):
        loader = data["npy"].loader(embeddings)
        batch = next(iter(loader))
        assert len(batch) == 3
        assert loader.stats()["lookup_rows"] == 0
        assert loader.stats()["lookup_ram_hit_rate"] == -1


def test_lookup_is_a_bottleneck_name():
    assert str(_core.Bottleneck("lookup")) == "lookup"
    assert _core.Bottleneck.LOOKUP == _core.Bottleneck("lookup")
