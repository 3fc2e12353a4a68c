"""Fixed-size binary records (format="records") through open_dataset, on
files numpy's tofile writes: gpufeed.RecordSchema, gpufeed.TabularOptions,
their native structs, verify, and the errors of a bad size or schema."""

import os

import pytest

import gpufeed
from gpufeed import _core
from gpufeed._loader_options import _dataset_arguments, _format_options
from gpufeed._native import native_dataset_options
from gpufeed.transforms import RawTransform

np = pytest.importorskip("numpy")

MLPERF = np.dtype([("label", "<i4"), ("dense", "<i4", (13,)), ("sparse", "<i4", (26,))])
SMALL = np.dtype([("label", "i1"), ("dense", "<f2", (4,)), ("sparse", "<i8", (3,))])
SMALL_SCHEMA = gpufeed.RecordSchema(label="int8", dense=("float16", 4), sparse=("int64", 3))


def _records(dtype, n, seed=0, labels=None):
    rng = np.random.default_rng(seed)
    array = np.zeros(n, dtype)
    array["label"] = rng.integers(0, 2, n) if labels is None else labels
    array["dense"] = rng.integers(-1000, 1000, array["dense"].shape)
    array["sparse"] = rng.integers(0, 1 << 30, array["sparse"].shape)
    return array


def test_records_mlperf_rows_are_numpys_bytes(tmp_path):
    array = _records(MLPERF, 50)
    path = tmp_path / "train_data.bin"
    array.tofile(path)
    schema = gpufeed.RecordSchema(label="int32", dense=("int32", 13), sparse=("int32", 26))
    assert schema == gpufeed.RecordSchema() and schema.record_bytes == 160
    assert schema.numpy_dtype() == MLPERF
    ds = gpufeed.open_dataset(path, format="records", record_schema=schema)
    assert ds.format == "records" and len(ds) == 50
    assert [shard["records"] for shard in ds.shards] == [50]
    for i in (0, 1, 33, 49):
        record = ds[i]
        assert record.data == array[i].tobytes()
        assert record.label == int(array["label"][i]) and isinstance(record.label, int)
        assert record.key == f"{path}:{i}"
    # The default schema is MLPerf's: record_schema may be left out.
    assert gpufeed.open_dataset(path, format="records")[7].data == array[7].tobytes()


def test_records_another_schema_and_a_directory_in_natural_order(tmp_path):
    root = tmp_path / "days"
    root.mkdir()
    sizes = {"day_0": 3, "day_1": 4, "day_2": 5, "day_10": 6}
    arrays, first = [], 0
    for seed, (name, rows) in enumerate(sizes.items()):
        array = _records(SMALL, rows, seed, labels=np.arange(first, first + rows) % 100)
        array.tofile(root / name)
        arrays.append(array)
        first += rows
    (root / "gpufeed-notes.txt").write_text("not records")
    (root / ".hidden").write_bytes(b"x")
    assert SMALL_SCHEMA.record_bytes == 33 and SMALL_SCHEMA.numpy_dtype() == SMALL
    ds = gpufeed.open_dataset(root, format="records",
                              format_options=gpufeed.TabularOptions(record_schema=SMALL_SCHEMA,
                                                                    block_bytes=66))
    assert len(ds) == 18
    assert [os.path.basename(shard["path"]) for shard in ds.shards] == list(sizes)
    expected = np.concatenate(arrays)
    for i in range(18):
        assert ds[i].data == expected[i].tobytes()
        assert ds[i].label == i
    # float16 dense values round-trip as numpy's bytes.
    row = np.frombuffer(ds[12].data, SMALL)[0]
    assert np.array_equal(row["dense"], arrays[3]["dense"][0])


def test_records_size_not_a_multiple_names_the_file_and_sizes(tmp_path):
    path = tmp_path / "cut.bin"
    _records(MLPERF, 3).tofile(path)
    with open(path, "ab") as out:
        out.write(b"\0" * 7)
    with pytest.raises(gpufeed.CorruptRecordError) as error:
        gpufeed.open_dataset(path, format="records")
    message = str(error.value)
    assert str(path) in message and "487 bytes" in message and "record size 160" in message
    report = gpufeed.verify(path, format="records")
    assert len(report["problems"]) == 1 and "487 bytes" in report["problems"][0]
    # Another schema reads it: 487 = 13 * 37 + 6 is no multiple either, 487 bytes of uint8 are.
    one_byte = gpufeed.RecordSchema(label="uint8", dense=("uint8", 0), sparse=("uint8", 0))
    assert len(gpufeed.open_dataset(path, format="records", record_schema=one_byte)) == 487


def test_records_verify_counts_rows_and_files(tmp_path):
    _records(SMALL, 9).tofile(tmp_path / "a.bin")
    _records(SMALL, 4, 1).tofile(tmp_path / "b.bin")
    report = gpufeed.verify(tmp_path, format="records", record_schema=SMALL_SCHEMA)
    assert report["problems"] == []
    assert (report["records_checked"], report["shards_checked"]) == (13, 2)


def test_records_schema_and_options_are_checked():
    with pytest.raises(ValueError, match="label type must be one of"):
        gpufeed.RecordSchema(label="int128")
    with pytest.raises(ValueError, match=r"\(type, count\) pair"):
        gpufeed.RecordSchema(dense="int32")
    with pytest.raises(ValueError, match="count"):
        gpufeed.RecordSchema(sparse=("int32", -1))
    assert gpufeed.RecordSchema(label=np.float32, dense=(np.dtype("f2"), 2)).label == "float32"
    with pytest.raises(ValueError, match="block_bytes"):
        gpufeed.TabularOptions(block_bytes=0)
    with pytest.raises(TypeError, match="RecordSchema"):
        gpufeed.TabularOptions(record_schema={"label": "int32"})
    # Raw records are never detected: record_schema needs format="records".
    with pytest.raises(ValueError, match='format="records"'):
        gpufeed.open_dataset("/nonexistent", record_schema=gpufeed.RecordSchema())
    with pytest.raises(TypeError, match="not both"):
        gpufeed.open_dataset("/nonexistent", format="records",
                             record_schema=gpufeed.RecordSchema(),
                             format_options=gpufeed.TabularOptions())
    with pytest.raises(ValueError, match="is for records"):
        gpufeed.open_dataset("/nonexistent", format="recordio",
                             format_options=gpufeed.TabularOptions())


def test_records_native_structs():
    defaults = _core.DatasetOptions().tabular
    schema = defaults.record_schema
    assert (str(schema.label), str(schema.dense), schema.dense_count, str(schema.sparse),
            schema.sparse_count, schema.record_bytes) == ("int32", "int32", 13, "int32", 26, 160)
    assert (defaults.block_bytes, defaults.index_dir) == (8 << 20, "")
    assert sorted(str(t) for t in _core.FieldType.__members__.values()) == sorted(
        gpufeed.tabular.FIELD_TYPES)
    with pytest.raises(gpufeed.InvalidArgumentError, match="unknown field type"):
        _core.FieldType("int128")
    options = gpufeed.TabularOptions(record_schema=SMALL_SCHEMA, block_bytes=4096,
                                     index_dir="idx")
    native = native_dataset_options("records", tabular=options._native()).tabular
    assert (str(native.record_schema.label), native.record_schema.sparse_count,
            native.record_schema.record_bytes) == ("int8", 3, 33)
    assert native.block_bytes == 4096 and native.index_dir == os.path.abspath("idx")


def test_records_options_reach_the_loaders_dataset_options(tmp_path):
    # The DataLoader's route to its DatasetOptions (the loader's tabular
    # kind is not tested here).
    _, _, tabular = _format_options("records", None, None, None, None, SMALL_SCHEMA)
    path, dataset = _dataset_arguments(tmp_path, "records", gpufeed.WebDatasetOptions(),
                                       gpufeed.TokenOptions(), RawTransform(shape=(33,)), {}, tabular)
    assert native_dataset_options(**dataset).tabular.record_schema.record_bytes == 33
    _records(SMALL, 2).tofile(tmp_path / "a.bin")
    ds = gpufeed.open_dataset(tmp_path, format="records", record_schema=SMALL_SCHEMA)
    path, dataset = _dataset_arguments(ds, "auto", gpufeed.WebDatasetOptions(),
                                       gpufeed.TokenOptions(), RawTransform(shape=(33,)), {})
    assert dataset["format"] == "records" and path == str(tmp_path)
    assert native_dataset_options(**dataset).tabular.record_schema.record_bytes == 33
