"""The tabular loader (transform=gpufeed.Tabular(...)) on data written by
independent writers: TorchRec's .npy triplets by np.save, binary records by
ndarray.tofile of a structured array, Criteo TSV as plain text. Every batch
is compared with a numpy reference of the transform (tabular_reference): the
multiset of rows over an epoch for each shuffle mode, the exact storage
order without shuffling, every row exactly once across ranks (padding by
wrapping as torch's DistributedSampler, src/pipeline/sampler.h), drop_last,
batch sizes up to 65,536, resume in a new process (also under another world
size), stats, and every bad input the issue names.

The criteo_tsv cases skip while that format is not built in."""

import collections
import json
import subprocess
import sys
import textwrap

import pytest

import gpufeed

np = pytest.importorskip("numpy")

HAVE_TSV = "criteo_tsv" in gpufeed.FORMATS
need_tsv = pytest.mark.skipif(not HAVE_TSV, reason="the criteo_tsv format is not built in yet")

MLPERF = np.dtype([("label", "<i4"), ("dense", "<i4", (13,)), ("sparse", "<i4", (26,))])
MLPERF_SCHEMA = gpufeed.RecordSchema(label="int32", dense=("int32", 13), sparse=("int32", 26))
# Another layout: a float label, float16 dense values, unsigned 16-bit ids.
SMALL = np.dtype([("label", "<f4"), ("dense", "<f2", (5,)), ("sparse", "<u2", (7,))])
SMALL_SCHEMA = gpufeed.RecordSchema(label="float32", dense=("float16", 5), sparse=("uint16", 7))
# 66 bytes a row: 70,000 rows (4.6 MB) for the 65,536-row batches.
NARROW = np.dtype([("label", "u1"), ("dense", "i1", (13,)), ("sparse", "<i2", (26,))])
NARROW_SCHEMA = gpufeed.RecordSchema(label="uint8", dense=("int8", 13), sparse=("int16", 26))

# Small blocks, so that shuffle="block" has many blocks to shuffle.
BLOCK_BYTES = 8192


class Table:
    """A dataset on disk and its stored values: label (N,), dense (N, D) and
    sparse (N, S) as the writer gave them (TSV: the integers the text spells,
    missing ones 0, ids as uint64), and how a loader opens it."""

    def __init__(self, path, label, dense, sparse, **open_keywords):
        self.path, self.label, self.dense, self.sparse = path, label, dense, sparse
        self.open_keywords = open_keywords

    def __len__(self):
        return len(self.label)

    def loader(self, transform=None, **keywords):
        return gpufeed.DataLoader(self.path, transform=transform or gpufeed.Tabular(),
                                  **self.open_keywords, **keywords)


def tabular_reference(table, dense_log1p=False, hash_sizes=None, sparse_dtype="int64"):
    """What gpufeed.Tabular makes of `table`, in numpy: (dense, sparse, labels)."""
    if dense_log1p:
        dense = np.log1p(np.maximum(table.dense.astype(np.float64), 0)).astype(np.float32)
    else:
        dense = table.dense.astype(np.float32)
    ids = table.sparse
    if ids.dtype != np.uint64:
        ids = ids.astype(np.int64)  # signed stays signed: the modulo is numpy's floor modulo
    if hash_sizes is not None:
        sizes = np.broadcast_to(np.asarray(hash_sizes, dtype=ids.dtype), ids.shape[1:])
        ids = ids % sizes
    sparse = ids.astype(sparse_dtype)  # int64 -> int32 narrowing as astype wraps
    labels = table.label.reshape(-1).astype(np.float32)
    return dense, sparse, labels


def row_keys(dense, sparse, labels):
    """One bytes-comparable key per row (a numpy void array): rows compare
    equal exactly when all their values do."""
    n = len(labels)
    parts = [np.ascontiguousarray(a).view(np.uint8).reshape(n, -1) for a in (dense, sparse, labels)]
    flat = np.ascontiguousarray(np.hstack(parts))
    return flat.view(np.dtype((np.void, flat.shape[1]))).reshape(n)


def epoch(loader, check_batches=None):
    """One epoch's (dense, sparse, labels) as numpy arrays, checking every
    batch's dtypes and shapes; check_batches gets the list of batch sizes."""
    dense, sparse, labels, sizes = [], [], [], []
    for d, s, y in loader:
        d, s, y = np.asarray(d), np.asarray(s), np.asarray(y)
        assert d.dtype == np.float32 and y.dtype == np.float32
        assert d.ndim == 2 and s.ndim == 2 and y.shape == (len(d),) and len(s) == len(d)
        dense.append(d.copy())
        sparse.append(s.copy())
        labels.append(y.copy())
        sizes.append(len(d))
    if check_batches is not None:
        check_batches(sizes)
    if not dense:
        return None
    return np.concatenate(dense), np.concatenate(sparse), np.concatenate(labels)


def assert_same_rows(got, want, ordered):
    """got and want (dense, sparse, labels) hold the same rows: in the same
    order, or the same multiset."""
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
    got_keys, want_keys = row_keys(*got), row_keys(*want)
    if ordered:
        mismatch = np.flatnonzero(got_keys != want_keys)
        assert mismatch.size == 0, f"{mismatch.size} rows differ, the first at {mismatch[:5]}"
    else:
        assert np.array_equal(np.sort(got_keys), np.sort(want_keys)), "the multisets of rows differ"


# -- the writers -------------------------------------------------------------

def _save_triplet(root, stem, dense, sparse, labels):
    np.save(root / f"{stem}_dense.npy", dense)
    np.save(root / f"{stem}_sparse.npy", sparse)
    np.save(root / f"{stem}_labels.npy", labels)


def write_npy_int(root, seed=1):
    """int32 dense (negative values too), int32 ids (negative too), int32
    labels; day_1's labels (N, 1), the others (N,); natural stem order
    (day_2 before day_10: not the names' byte order)."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    labels, dense, sparse = [], [], []
    for stem, n in (("day_0", 1500), ("day_1", 1100), ("day_2", 400), ("day_10", 700)):
        d = rng.integers(-20, 200_000, (n, 13)).astype(np.int32)
        d[:, 3] = rng.integers(-5, 10, n)  # small counts, the log table's range
        s = rng.integers(-2**31, 2**31, (n, 26)).astype(np.int32)
        y = rng.integers(0, 2, n).astype(np.int32)
        _save_triplet(root, stem, d, s, y.reshape(n, 1) if stem == "day_1" else y)
        labels.append(y), dense.append(d), sparse.append(s)
    (root / "README.txt").write_text("not a member")
    return Table(root, np.concatenate(labels), np.concatenate(dense), np.concatenate(sparse),
                 format_options=gpufeed.TabularOptions(block_bytes=BLOCK_BYTES))


def write_npy_float(root, seed=2):
    """float32 dense, int64 ids beyond 32 bits and negative, bool labels
    (N,) in one triplet and (N, 1) in another."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    labels, dense, sparse = [], [], []
    for stem, n in (("day_0", 900), ("day_1", 1300), ("day_10", 500)):
        d = (rng.standard_normal((n, 13)) * 1000).astype(np.float32)
        s = rng.integers(-2**62, 2**62, (n, 26), dtype=np.int64)
        y = rng.integers(0, 2, n).astype(bool)
        _save_triplet(root, stem, d, s, y.reshape(n, 1) if stem == "day_10" else y)
        labels.append(y), dense.append(d), sparse.append(s)
    return Table(root, np.concatenate(labels), np.concatenate(dense), np.concatenate(sparse),
                 format_options=gpufeed.TabularOptions(block_bytes=BLOCK_BYTES))


def _records(dtype, n, rng):
    array = np.zeros(n, dtype)
    array["label"] = rng.integers(0, 2, n)
    if dtype["dense"].base.kind == "f":
        array["dense"] = rng.standard_normal(array["dense"].shape) * 50
    else:
        info = np.iinfo(dtype["dense"].base)
        array["dense"] = rng.integers(info.min, int(info.max) + 1, array["dense"].shape)
    info = np.iinfo(dtype["sparse"].base)
    array["sparse"] = rng.integers(info.min, int(info.max) + 1, array["sparse"].shape)
    return array


def write_records(root, dtype, schema, sizes, seed=3):
    """Files of records written by ndarray.tofile, in a directory (natural
    order of the names) or, for one size, a single file."""
    rng = np.random.default_rng(seed)
    if len(sizes) == 1:
        array = _records(dtype, sizes[0], rng)
        path = root.with_suffix(".bin")
        array.tofile(path)
    else:
        root.mkdir()
        arrays = []
        for i, n in enumerate(sizes):
            arrays.append(_records(dtype, n, rng))
            arrays[-1].tofile(root / f"part_{[0, 2, 10, 11][i]}.bin")
        array = np.concatenate(arrays)
        path = root
    return Table(path, array["label"], array["dense"], array["sparse"], format="records",
                 format_options=gpufeed.TabularOptions(record_schema=schema,
                                                       block_bytes=BLOCK_BYTES))


def tsv_line(label, dense, sparse, rng):
    """A Criteo TSV line spelling these values: a 0 dense value or id is
    written empty (missing) at random, ids in upper- or lowercase hex."""
    fields = [str(int(label))]
    for value in dense:
        fields.append("" if value == 0 and rng.random() < 0.7 else str(int(value)))
    for value in sparse:
        if value == 0 and rng.random() < 0.7:
            fields.append("")
        else:
            text = format(int(value), "x" if rng.random() < 0.5 else "X")
            fields.append(text.zfill(8) if rng.random() < 0.8 else text)
    return "\t".join(fields)


def write_tsv(root, sizes=(1300, 900), seed=4, bad=None):
    """Criteo TSV files part_0.tsv, part_1.tsv ... written as text: missing
    values (-> 0), negative dense values, 8-digit and up to 16-digit hex ids
    in either case. bad: {row: line} lines written in place of those rows
    (the table keeps only the good rows; `bad_rows` lists the others)."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    labels, dense, sparse, keep = [], [], [], []
    row = 0
    for part, n in enumerate(sizes):
        y = rng.integers(0, 2, n)
        d = rng.integers(-3, 5000, (n, 13))
        d[rng.random((n, 13)) < 0.2] = 0
        s = rng.integers(0, 2**32, (n, 26), dtype=np.uint64)
        s[:, :3] = rng.integers(0, 2**63, (n, 3), dtype=np.uint64) * 2 + 1  # up to 16 digits
        s[rng.random((n, 26)) < 0.15] = 0
        lines = []
        for i in range(n):
            if bad is not None and row in bad:
                lines.append(bad[row])
                keep.append(False)
            else:
                lines.append(tsv_line(y[i], d[i], s[i], rng))
                keep.append(True)
            row += 1
        (root / f"part_{part}.tsv").write_text("\n".join(lines) + "\n")
        labels.append(y), dense.append(d), sparse.append(s)
    keep = np.array(keep)
    table = Table(root, np.concatenate(labels)[keep], np.concatenate(dense)[keep],
                  np.concatenate(sparse)[keep], format="criteo_tsv",
                  format_options=gpufeed.TabularOptions(block_bytes=BLOCK_BYTES))
    table.bad_rows = np.flatnonzero(~keep)
    return table


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular")
    made = {
        "npy_int": write_npy_int(root / "npy_int"),
        "npy_float": write_npy_float(root / "npy_float"),
        "records_mlperf": write_records(root / "mlperf", MLPERF, MLPERF_SCHEMA, [1700, 900, 1400]),
        "records_small": write_records(root / "small", SMALL, SMALL_SCHEMA, [2500], seed=5),
    }
    if HAVE_TSV:
        made["tsv"] = write_tsv(root / "tsv")
    return made


TABLES = ["npy_int", "npy_float", "records_mlperf", "records_small",
          pytest.param("tsv", marks=need_tsv)]


# -- values and order ----------------------------------------------------------

@pytest.mark.parametrize("shuffle", [False, True, "block"])
@pytest.mark.parametrize("name", TABLES)
def test_an_epoch_holds_every_row_once_as_the_reference(tables, name, shuffle):
    table = tables[name]
    n = len(table)
    want = tabular_reference(table)

    def sizes(batch_sizes):  # batch 1000: full batches, then the short rest
        assert batch_sizes == [1000] * (n // 1000) + ([n % 1000] if n % 1000 else [])

    loader = table.loader(batch_size=1000, shuffle=shuffle, seed=9)
    assert len(loader) == -(-n // 1000)
    got = epoch(loader, sizes)
    assert_same_rows(got, want, ordered=shuffle is False)
    if shuffle is not False:
        assert not np.array_equal(row_keys(*got), row_keys(*want)), "not shuffled"
        # The next epoch is another order of the same rows.
        again = epoch(loader)
        assert_same_rows(again, want, ordered=False)
        assert not np.array_equal(row_keys(*again), row_keys(*got))


TRANSFORMS = [
    dict(dense_log1p=True),
    dict(hash_sizes=1000),
    dict(dense_log1p=True, hash_sizes=97, sparse_dtype="int32"),
    dict(sparse_dtype="int32"),  # narrowing without a modulo
    dict(hash_sizes=(1 << 40) + 15),  # a modulus above 32 bits
]


def per_column_sizes(count):
    # Primes, powers of two, 1 and a modulus above 32 bits, one per column.
    base = [1, 2, 3, 1000, 65536, 100003, (1 << 31) - 1, (1 << 33) + 7, 7, 10]
    return [base[i % len(base)] for i in range(count)]


@pytest.mark.parametrize("shuffle", [False, "block"])
@pytest.mark.parametrize("name", TABLES)
def test_the_transforms_options_as_numpy(tables, name, shuffle):
    table = tables[name]
    columns = table.sparse.shape[1]
    cases = TRANSFORMS + [dict(hash_sizes=per_column_sizes(columns)),
                          dict(hash_sizes=per_column_sizes(columns), sparse_dtype="int32",
                               dense_log1p=True)]
    for options in cases:
        want = tabular_reference(table, **options)
        got = epoch(table.loader(gpufeed.Tabular(**options), batch_size=777, shuffle=shuffle,
                                 seed=4))
        assert got[0].shape[1] == table.dense.shape[1] and got[1].shape[1] == columns
        assert_same_rows(got, want, ordered=shuffle is False)
    # Floor modulo: negative ids land in [0, h).
    if table.sparse.dtype.kind == "i":
        got = epoch(table.loader(gpufeed.Tabular(hash_sizes=10), batch_size=4096, shuffle=False))
        assert got[1].min() >= 0 and got[1].max() < 10


OTHER_SCHEMAS = [
    # uint64 ids past 2**63 (unsigned modulo), int64 dense, an int8 label
    (np.dtype([("label", "i1"), ("dense", "<i8", (3,)), ("sparse", "<u8", (4,))]),
     gpufeed.RecordSchema(label="int8", dense=("int64", 3), sparse=("uint64", 4))),
    # uint32 dense and ids, a float16 label
    (np.dtype([("label", "<f2"), ("dense", "<u4", (2,)), ("sparse", "<u4", (5,))]),
     gpufeed.RecordSchema(label="float16", dense=("uint32", 2), sparse=("uint32", 5))),
    # a bool label, float32 dense, int8 ids
    (np.dtype([("label", "?"), ("dense", "<f4", (2,)), ("sparse", "i1", (3,))]),
     gpufeed.RecordSchema(label="bool", dense=("float32", 2), sparse=("int8", 3))),
]


@pytest.mark.parametrize("dtype,schema", OTHER_SCHEMAS, ids=["u64", "u32", "bool-i8"])
def test_other_field_types_as_numpy(tmp_path, dtype, schema):
    rng = np.random.default_rng(12)
    n = 1500
    array = np.zeros(n, dtype)
    array["label"] = rng.integers(0, 2, n)
    signed = dtype["dense"].base.kind != "u"
    array["dense"] = (rng.random(array["dense"].shape) * 1e6 - (5e5 if signed else 0)).astype(
        dtype["dense"].base)
    info = np.iinfo(dtype["sparse"].base)
    array["sparse"] = rng.integers(info.min, info.max, array["sparse"].shape,
                                   dtype=dtype["sparse"].base, endpoint=True)
    array.tofile(tmp_path / "rows.bin")
    table = Table(tmp_path / "rows.bin", array["label"], array["dense"], array["sparse"],
                  format="records",
                  format_options=gpufeed.TabularOptions(record_schema=schema, block_bytes=4096))
    columns = dtype["sparse"].shape[0]
    for options in (dict(), dict(dense_log1p=True), dict(hash_sizes=1000),
                    dict(hash_sizes=(1 << 40) + 3, sparse_dtype="int32"),
                    dict(hash_sizes=per_column_sizes(columns))):
        for shuffle in (False, True):
            got = epoch(table.loader(gpufeed.Tabular(**options), batch_size=333,
                                     shuffle=shuffle))
            assert_same_rows(got, tabular_reference(table, **options), ordered=shuffle is False)


def test_reference_spells_numpys_rules():
    # The reference itself, on values where the rules differ from C's.
    table = Table(None, np.array([True, False]), np.array([[-2, 3]], np.int32).repeat(2, 0),
                  np.array([[-7, 2**31 - 1]], np.int64).repeat(2, 0))
    dense, sparse, labels = tabular_reference(table, dense_log1p=True, hash_sizes=[5, 2**31],
                                              sparse_dtype="int32")
    assert dense[0].tolist() == [0.0, np.float32(np.log(4.0))]
    assert sparse[0].tolist() == [3, 2**31 - 1]  # -7 floor-mod 5 = 3
    assert labels.tolist() == [1.0, 0.0]
    narrowed = tabular_reference(Table(None, labels, dense, np.array([[2**32 + 5, -1]])),
                                 sparse_dtype="int32")[1]
    assert narrowed[0].tolist() == [5, -1]


# -- ranks, drop_last, batch sizes ----------------------------------------------

def padded_positions(n, world, rank, drop_last, batch_size):
    """Positions of the epoch order rank `rank` takes (sampler.h: r, r + w,
    ... of the order padded by wrapping to a multiple of w, or trimmed to
    whole batches per rank with drop_last)."""
    if drop_last:
        per_rank = (n // world) // batch_size * batch_size
    else:
        per_rank = -(-n // world)
    return [(rank + k * world) % n for k in range(per_rank)]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", ["npy_int", "records_mlperf", pytest.param("tsv", marks=need_tsv)])
def test_ranks_together_take_every_row_exactly_once(tables, name, world, drop_last):
    table = tables[name]
    n = len(table)
    batch_size = 512
    want = tabular_reference(table)
    want_keys = row_keys(*want)
    assert len(np.unique(want_keys)) == n  # rows are told apart by their values
    for shuffle in (False, True, "block"):
        keys = []
        for rank in range(world):
            loader = table.loader(batch_size=batch_size, shuffle=shuffle, seed=21, rank=rank,
                                  world_size=world, drop_last=drop_last)
            positions = padded_positions(n, world, rank, drop_last, batch_size)
            assert len(loader) == (len(positions) // batch_size if drop_last
                                   else -(-len(positions) // batch_size))
            got = epoch(loader)
            assert len(got[2]) == len(positions), (shuffle, rank)
            if shuffle is False:
                # Storage order, split and padded as DistributedSampler does.
                assert_same_rows(got, tuple(a[positions] for a in want), ordered=True)
            keys.append(row_keys(*got))
        keys = np.concatenate(keys)
        counts = collections.Counter(keys.tolist())
        assert set(counts) <= set(want_keys.tolist()), shuffle
        if drop_last:
            # Trimmed: no row twice.
            assert max(counts.values()) == 1
            assert len(keys) == world * ((n // world) // batch_size * batch_size)
        else:
            # Every row; the padding repeats (world - n % world) % world rows once more.
            assert len(counts) == n, shuffle
            assert sum(counts.values()) - n == (world - n % world) % world
            assert max(counts.values()) <= 2


@pytest.mark.parametrize("batch_size", [8192, 65536])
def test_large_batches(tmp_path, batch_size):
    table = write_records(tmp_path / "narrow", NARROW, NARROW_SCHEMA, [40000, 30000], seed=6)
    n = len(table)  # 70,000
    want = tabular_reference(table, hash_sizes=4099)
    for shuffle, drop_last in ((False, False), ("block", False), (True, True)):
        full = n // batch_size
        expected = [batch_size] * full + ([] if drop_last else [n - full * batch_size])
        got = epoch(table.loader(gpufeed.Tabular(hash_sizes=4099), batch_size=batch_size,
                                 shuffle=shuffle, seed=2, drop_last=drop_last),
                    lambda sizes: sizes == expected or pytest.fail(f"{sizes} != {expected}"))
        if drop_last:
            keys = row_keys(*got)
            assert len(np.unique(keys)) == len(keys) == full * batch_size
            assert np.isin(keys, row_keys(*want)).all()
        else:
            assert_same_rows(got, want, ordered=shuffle is False)


# -- resume ------------------------------------------------------------------------

RESUME = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    import gpufeed
    path, fmt, jobs, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    keywords = dict(format_options=gpufeed.TabularOptions(block_bytes=%d))
    if fmt != "auto":
        keywords["format"] = fmt
    arrays = {}
    for job, (state, world) in enumerate(jobs):
        for rank in range(world):
            loader = gpufeed.DataLoader(path, batch_size=%d, shuffle=state["shuffle_name"],
                                        seed=13, rank=rank, world_size=world,
                                        transform=gpufeed.Tabular(hash_sizes=100003), **keywords)
            loader.load_state_dict(state)
            parts = [[np.asarray(t).copy() for t in batch] for batch in loader]
            for i, name in enumerate(("dense", "sparse", "labels")):
                arrays[f"{job}_{name}{rank}"] = np.concatenate([p[i] for p in parts])
    np.savez(out, **arrays)
    print("ok")
""")
RESUME_BATCH = 300


def resume_elsewhere(tmp_path, table, shuffle, jobs):
    """The rest of the epoch from each (state, world) of `jobs`, read by
    `world` ranks in one new process: per job, each rank's rows in its order."""
    jobs = [(dict(state, shuffle_name=shuffle), world) for state, world in jobs]
    out = tmp_path / "rest.npz"
    script = RESUME % (BLOCK_BYTES, RESUME_BATCH)
    fmt = table.open_keywords.get("format", "auto")
    result = subprocess.run([sys.executable, "-c", script, str(table.path), fmt,
                             json.dumps(jobs), str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr
    saved = np.load(out)
    return [[tuple(saved[f"{job}_{name}{rank}"] for name in ("dense", "sparse", "labels"))
             for rank in range(world)] for job, (_, world) in enumerate(jobs)]


@pytest.mark.parametrize("shuffle", ["block", True])
@pytest.mark.parametrize("name", ["npy_int", "records_mlperf", pytest.param("tsv", marks=need_tsv)])
def test_resume_in_a_new_process_also_with_another_world_size(tables, tmp_path, name, shuffle):
    table = tables[name]
    n = len(table)
    transform = gpufeed.Tabular(hash_sizes=100003)
    make = lambda **kw: table.loader(transform, batch_size=RESUME_BATCH, shuffle=shuffle,
                                     seed=13, **kw)
    full = epoch(make())
    full_keys = row_keys(*full)
    assert_same_rows(full, tabular_reference(table, hash_sizes=100003), ordered=False)

    # One rank here: five batches, then its state.
    loader = make()
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    state = loader.state_dict()
    assert state["consumed"] == 5 * RESUME_BATCH and state["epoch"] == 0
    del iterator
    loader.close()
    # Two ranks here, two batches each, then rank 0's state.
    seen = collections.Counter()
    states = []
    for rank in range(2):
        loader = make(rank=rank, world_size=2)
        iterator = iter(loader)
        for _ in range(2):
            seen.update(row_keys(*[np.asarray(t) for t in next(iterator)]).tolist())
        states.append(loader.state_dict())
        del iterator
        loader.close()
    assert states[0]["consumed"] == states[1]["consumed"] == 4 * RESUME_BATCH

    # In a new process: the first state under 1, 2 and 3 ranks, the second under 3.
    one, two, three, after_two = resume_elsewhere(
        tmp_path, table, shuffle, [(state, 1), (state, 2), (state, 3), (states[0], 3)])
    # One rank: exactly the rest, in order.
    assert np.array_equal(row_keys(*one[0]), full_keys[5 * RESUME_BATCH:])
    # Two and three ranks: the rest exactly once, padded by wrapping.
    remaining = collections.Counter(full_keys[5 * RESUME_BATCH:].tolist())
    left = n - 5 * RESUME_BATCH
    for world, parts in ((2, two), (3, three)):
        counts = collections.Counter(np.concatenate([row_keys(*p) for p in parts]).tolist())
        assert len({len(p[2]) for p in parts}) == 1  # every rank the same count
        assert not remaining - counts, "rows of the rest missing"
        assert set(counts) == set(remaining), "rows read before the state, or foreign"
        assert sum(counts.values()) == left + (world - left % world) % world
    # Two ranks before, three after: every row, only the padding twice.
    for part in after_two:
        seen.update(row_keys(*part).tolist())
    assert set(seen) == set(full_keys.tolist())
    left = n - 4 * RESUME_BATCH
    assert sum(seen.values()) == 4 * RESUME_BATCH + left + (3 - left % 3) % 3


def test_stats_and_verdict(tables):
    table = tables["records_mlperf"]
    loader = table.loader(batch_size=1000, shuffle="block", seed=1)
    assert loader.stats()["bottleneck"] == "none"
    epoch(loader)
    for span in ("open", "recent", "epoch"):
        stats = loader.stats(span)
        assert stats["verdict"] and str(stats).strip()
        assert stats["bottleneck"] in ("consumer", "read", "decode", "copy", "cpu-contention")
        # The decode stage's work for tabular rows is parsing: "parse-bound".
        words = {"decode": "parse"}.get(stats["bottleneck"], stats["bottleneck"])
        assert stats["verdict"].startswith(words + "-bound"), stats["verdict"]
    stats = loader.stats("epoch")
    assert stats["samples"] == len(table) and stats["batches"] == 4 and stats["skipped"] == 0
    # Whole 160-byte rows were read: at least the dataset's bytes (since
    # open: the epoch span starts at its first batch, after reads ahead).
    assert loader.stats("open")["bytes_read"] >= len(table) * MLPERF.itemsize


# The image advice the verdict gives (docs/tuning.md); a tabular batch is
# read- or parse-bound and is told neither.
IMAGE_ADVICE = ("uint8", "normalize", "packing small files", "decode thread")


def test_the_verdict_of_tabular_rows_gives_no_image_advice(tables):
    loader = tables["records_mlperf"].loader(batch_size=1000, shuffle="block", seed=1)
    for _ in range(3):
        epoch(loader)
        stats = loader.stats("epoch")
        verdict = stats["verdict"]
        assert stats["sample_kind"] == "tabular"
        assert not verdict.startswith("decode-bound"), verdict
        assert not [words for words in IMAGE_ADVICE if words in verdict], verdict


# -- bad input -----------------------------------------------------------------

def test_a_records_file_of_no_whole_records_names_the_file_and_size(tmp_path):
    table = write_records(tmp_path / "cut", MLPERF, MLPERF_SCHEMA, [10])
    with open(table.path, "ab") as out:
        out.write(b"\x01" * 37)
    with pytest.raises(gpufeed.CorruptRecordError) as error:
        table.loader(batch_size=4)
    assert str(table.path) in str(error.value) and "1637 bytes" in str(error.value)
    # In a directory too: the bad file is named, not the directory only.
    root = tmp_path / "dir"
    root.mkdir()
    _records(MLPERF, 5, np.random.default_rng(0)).tofile(root / "a.bin")
    (root / "b.bin").write_bytes(b"\0" * 161)
    with pytest.raises(gpufeed.CorruptRecordError, match=r"b\.bin.*161 bytes"):
        gpufeed.DataLoader(root, format="records", batch_size=4, transform=gpufeed.Tabular())


def _triplet_dir(tmp_path, name, **changes):
    """day_0 (good) and day_1 with `changes` applied to what np.save gets."""
    root = tmp_path / name
    root.mkdir()
    rng = np.random.default_rng(0)
    for stem, n in (("day_0", 12), ("day_1", 10)):
        members = dict(dense=rng.random((n, 13)).astype(np.float32),
                       sparse=rng.integers(0, 100, (n, 26)).astype(np.int32),
                       labels=rng.integers(0, 2, n).astype(np.int32))
        if stem == "day_1":
            for member, change in changes.items():
                members[member] = change(members[member])
        _save_triplet(root, stem, members["dense"], members["sparse"], members["labels"])
    return root


def _open_error(path, exception):
    """The error of opening `path` both ways (open_dataset and a tabular
    DataLoader), which must agree."""
    with pytest.raises(exception) as opened:
        gpufeed.open_dataset(path)
    with pytest.raises(exception) as loaded:
        gpufeed.DataLoader(path, batch_size=4, transform=gpufeed.Tabular())
    assert str(opened.value) == str(loaded.value) or str(opened.value) in str(loaded.value)
    return str(loaded.value)


def test_npy_triplets_with_unequal_rows_name_the_files(tmp_path):
    root = _triplet_dir(tmp_path, "unequal", sparse=lambda a: a[:9])
    message = _open_error(root, gpufeed.CorruptRecordError)
    assert "day_1" in message and "row counts differ" in message
    assert str(root / "day_1_dense.npy") in message and str(root / "day_1_sparse.npy") in message
    assert "10 rows" in message and "9 rows" in message


def test_npy_truncated_data_names_the_file(tmp_path):
    root = _triplet_dir(tmp_path, "truncated")
    path = root / "day_1_sparse.npy"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 5)
    message = _open_error(root, gpufeed.CorruptRecordError)
    assert str(path) in message and "truncated" in message


def test_npy_fortran_order_big_endian_and_unknown_dtypes_name_the_file(tmp_path):
    root = _triplet_dir(tmp_path, "fortran", dense=np.asfortranarray)
    message = _open_error(root, gpufeed.NotSupportedError)
    assert str(root / "day_1_dense.npy") in message and "Fortran" in message
    root = _triplet_dir(tmp_path, "big", sparse=lambda a: a.astype(">i4"))
    message = _open_error(root, gpufeed.Error)
    assert str(root / "day_1_sparse.npy") in message and "big-endian" in message
    root = _triplet_dir(tmp_path, "complex", dense=lambda a: a.astype(np.complex64))
    message = _open_error(root, gpufeed.Error)
    assert str(root / "day_1_dense.npy") in message
    # A triplet of other dtypes than the first: both files named.
    root = _triplet_dir(tmp_path, "mixed", sparse=lambda a: a.astype(np.int64))
    message = _open_error(root, gpufeed.CorruptRecordError)
    assert str(root / "day_1_sparse.npy") in message and str(root / "day_0_sparse.npy") in message


def test_npy_triplet_missing_a_member_names_it(tmp_path):
    root = _triplet_dir(tmp_path, "missing")
    (root / "day_1_labels.npy").unlink()
    message = _open_error(root, gpufeed.NotFoundError)
    assert "day_1_labels.npy" in message


BAD_LINES = {
    # wrong field count, a non-hex id, a non-integer dense value, an empty line
    17: "1\t2\t3",
    250: "0\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["zz"] + ["0a"] * 25),
    1301: "1\t1.5\t" + "\t".join(["1"] * 12) + "\t" + "\t".join(["0a"] * 26),
    1700: "0\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["0a"] * 27),
}


@need_tsv
def test_tsv_bad_lines_raise_naming_file_and_line(tmp_path):
    table = write_tsv(tmp_path / "bad", bad=BAD_LINES)
    loader = table.loader(batch_size=100, shuffle=False)
    with pytest.raises(gpufeed.CorruptRecordError) as error:
        epoch(loader)
    message = str(error.value)
    # Row 17 is line 18 of part_0.tsv.
    assert str(tmp_path / "bad" / "part_0.tsv") in message and "line 18" in message, message
    # Each bad line on its own: its file and its line number (1-based) named.
    for row, _ in BAD_LINES.items():
        file, line = (0, row + 1) if row < 1300 else (1, row - 1300 + 1)
        loader = table.loader(batch_size=1, shuffle=False)
        loader.load_state_dict(dict(loader.state_dict(), consumed=row))
        with pytest.raises(gpufeed.CorruptRecordError) as error:
            next(iter(loader))
        message = str(error.value)
        assert f"part_{file}.tsv" in message and f"line {line}" in message, (row, message)


@need_tsv
@pytest.mark.parametrize("shuffle", [False, True, "block"])
def test_tsv_bad_lines_are_skipped_and_counted(tmp_path, shuffle):
    table = write_tsv(tmp_path / "bad", bad=BAD_LINES)
    n = len(table) + len(BAD_LINES)
    loader = table.loader(batch_size=128, shuffle=shuffle, seed=3, on_error="skip",
                          max_skipped=len(BAD_LINES))
    got = epoch(loader)
    # Every good row exactly once; the bad ones left out of their batches.
    assert len(got[2]) == n - len(BAD_LINES)
    keys = row_keys(*got).tolist()
    want_keys = set(row_keys(*tabular_reference(table)).tolist())
    assert set(keys) == want_keys and len(set(keys)) == len(keys)
    skipped = loader.stats("open")["skipped"]  # the epoch span starts at its first batch
    assert skipped == len(BAD_LINES)
    listed = loader.skipped_samples()
    assert len(listed) == len(BAD_LINES)
    assert all(s["path"].endswith(".tsv") for s in listed), listed


@need_tsv
def test_a_batch_larger_than_a_run_skips_bad_lines_in_every_part(tmp_path):
    # A worker claims at most 16,384 rows: a batch of 40,000 is written by
    # both workers in three runs, and a bad line in any of them is left out
    # of that batch alone.
    bad = {5: BAD_LINES[17], 20000: BAD_LINES[250], 36000: BAD_LINES[1301]}
    table = write_tsv(tmp_path / "large", sizes=(30000, 12000), bad=bad)
    loader = table.loader(batch_size=40000, shuffle="block", seed=3, on_error="skip",
                          max_skipped=len(bad), num_threads=2)
    sizes = []
    got = epoch(loader, check_batches=sizes.extend)
    assert sum(sizes) == 42000 - len(bad) and len(sizes) == 2
    keys = row_keys(*got).tolist()
    assert set(keys) == set(row_keys(*tabular_reference(table)).tolist())
    assert len(set(keys)) == len(keys)
    assert loader.stats("open")["skipped"] == len(bad)


def test_hash_sizes_and_sparse_dtype_are_checked(tables):
    table = tables["npy_int"]
    with pytest.raises(ValueError, match="26 sparse columns"):
        table.loader(gpufeed.Tabular(hash_sizes=[10] * 25), batch_size=4)
    with pytest.raises(gpufeed.InvalidArgumentError):
        table.loader(gpufeed.Tabular(hash_sizes=[10] * 27), batch_size=4)
    # One per column of another dataset: 7 columns here.
    with pytest.raises(ValueError, match="7 sparse columns"):
        tables["records_small"].loader(gpufeed.Tabular(hash_sizes=[10] * 26), batch_size=4)
    for bad in ([0] * 26, 0, -3):
        with pytest.raises(ValueError, match="positive"):
            gpufeed.Tabular(hash_sizes=bad)
    with pytest.raises(ValueError, match="sparse_dtype"):
        gpufeed.Tabular(sparse_dtype="float32")
    # A list of one size is every column's.
    got = epoch(table.loader(gpufeed.Tabular(hash_sizes=[10]), batch_size=4096, shuffle=False))
    assert_same_rows(got, tabular_reference(table, hash_sizes=10), ordered=True)


def test_a_dataset_that_is_not_tabular_is_refused(image_folder, tmp_path):
    with pytest.raises(gpufeed.InvalidArgumentError, match="not a tabular one") as error:
        gpufeed.DataLoader(image_folder, batch_size=4, transform=gpufeed.Tabular())
    assert str(image_folder) in str(error.value)


# -- cache warm of formats that are never detected ---------------------------

@need_tsv
def test_cache_warm_copies_records_and_tsv_named_by_format(tmp_path):
    import gpufeed.cache
    table = write_tsv(tmp_path / "tsv")
    warmed = gpufeed.cache.warm(table.path, tmp_path / "cache-tsv", format="criteo_tsv")
    assert warmed["shards"] >= 1 and warmed["filled"] == warmed["shards"]
    loader = gpufeed.DataLoader(table.path, format="criteo_tsv", batch_size=64, shuffle=False,
                                cache_dir=tmp_path / "cache-tsv", transform=gpufeed.Tabular())
    rows = sum(len(labels) for _, _, labels in loader)
    stats = loader.stats("open")
    assert rows == len(table) and stats["cache_reads"] > 0, stats

    schema = MLPERF_SCHEMA
    records = tmp_path / "records"
    records.mkdir()
    np.zeros(100, dtype=MLPERF).tofile(records / "part-0")
    with pytest.raises(gpufeed.Error):
        gpufeed.cache.warm(records, tmp_path / "cache-records")  # never detected
    warmed = gpufeed.cache.warm(records, tmp_path / "cache-records", format="records",
                                record_schema=schema)
    assert warmed["shards"] == 1 and warmed["filled"] == 1


def test_inspect_shows_the_fields_of_a_row(tables, tmp_path):
    info = gpufeed.open_dataset(tables["npy_int"].path).tabular
    assert info["dense_count"] == 13 and info["sparse_count"] == 26 and not info["text"]
    assert info["rows"] == len(tables["npy_int"]) and info["blocks"] >= 1
    assert str(info["dense"]) == "int32"
    out = subprocess.run([sys.executable, "-m", "gpufeed", "inspect", str(tables["npy_int"].path)],
                         capture_output=True, text=True, check=True).stdout
    assert "13 x int32 dense" in out, out
    records = gpufeed.open_dataset(tables["records_mlperf"].path, format="records")
    assert records.tabular["row_bytes"] == 160


def test_node_shuffle_gives_every_row_once_across_nodes_and_ranks(tables):
    """shuffle="node": segments partitioned over 2 nodes of 2 ranks each,
    rows from anywhere within a node; every row once over the job (the
    world of 4 pads by wrapping, as DistributedSampler)."""
    table = tables["npy_int"]
    want = collections.Counter(row_keys(*tabular_reference(table)).tolist())
    got = collections.Counter()
    for rank in range(4):
        loader = table.loader(batch_size=256, shuffle="node", seed=7, rank=rank, world_size=4,
                              num_nodes=2, node_rank=rank // 2)
        got.update(row_keys(*epoch(loader)).tolist())
    assert set(got) == set(want)
    assert sum(got.values()) - len(table) < 4  # only the padding repeats rows
