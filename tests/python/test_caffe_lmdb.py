"""Tests of reading Caffe LMDBs (caffe.Datum values) with gpufeed.

gpufeed decodes caffe.Datum straight from the protobuf wire format, without
libprotobuf. To test that decoder against the real thing, the Datum values
here are produced by Google's protobuf library from a minimal caffe.proto
compiled with protoc, and written with the ``lmdb`` package the way Caffe's
convert_imageset writes them (keys ``"%08d_%s" % (index, filename)``, values
``datum.SerializeToString()``). Corrupt values are written as raw bytes so
that each kind of wire-format damage is exercised on purpose.

Needs protoc, google.protobuf, lmdb, numpy and PIL; skips (with the reason)
where one is missing. tests/run.sh installs python3-protobuf, python3-lmdb
and protobuf-compiler.
"""

import importlib.util
import io
import os
import random
import re
import shutil
import struct
import subprocess
import sys

import pytest

import gpufeed

lmdb = pytest.importorskip("lmdb", reason="python3-lmdb is needed to write Caffe LMDBs")
pytest.importorskip("google.protobuf",
                    reason="python3-protobuf is needed to build caffe.Datum values")
np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image", reason="PIL is needed to make JPEG bytes")

# Only the Datum message of Caffe's caffe.proto, field for field: gpufeed
# decodes exactly these fields, and nothing else in caffe.proto is needed.
_CAFFE_PROTO = """\
syntax = "proto2";

package caffe;

message Datum {
  optional int32 channels = 1;
  optional int32 height = 2;
  optional int32 width = 3;
  optional bytes data = 4;
  optional int32 label = 5;
  repeated float float_data = 6;
  optional bool encoded = 7 [default = false];
}
"""

# Plenty for the few kilobytes written here; LMDB only grows data.mdb as
# pages are used, so a generous map costs nothing.
_MAP_SIZE = 1 << 26


@pytest.fixture(scope="session")
def caffe_pb2(tmp_path_factory):
    """The protoc-generated caffe_pb2 module, compiled once per session.

    Imported from its file under a private name and not put on sys.path, so
    that it cannot shadow (or be shadowed by) a real Caffe installation.
    Session scope matters too: the generated module registers caffe.proto in
    protobuf's process-wide descriptor pool, which is done once.
    """
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.skip("protoc (protobuf-compiler) is not installed")
    out_dir = tmp_path_factory.mktemp("caffe_proto")
    (out_dir / "caffe.proto").write_text(_CAFFE_PROTO)
    result = subprocess.run(
        [protoc, f"--proto_path={out_dir}", f"--python_out={out_dir}",
         str(out_dir / "caffe.proto")],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"protoc failed: {result.stderr}"
    spec = importlib.util.spec_from_file_location("_gpufeed_test_caffe_pb2",
                                                  out_dir / "caffe_pb2.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (ImportError, TypeError, AttributeError) as error:
        # Code from a protoc newer than the protobuf runtime fails here; that
        # is a broken toolchain, not a gpufeed bug.
        import google.protobuf
        version = subprocess.run([protoc, "--version"], capture_output=True, text=True,
                                 check=False).stdout.strip()
        pytest.skip(f"{version} output does not load with python protobuf "
                    f"{google.protobuf.__version__}: {error}")
    return module


def _caffe_key(index, filename):
    """A key as Caffe's convert_imageset makes it (bytes, as LMDB stores it)."""
    return ("%08d_%s" % (index, filename)).encode()


def _write_lmdb(directory, items):
    """Writes (key, value) byte pairs into a new LMDB environment, in the
    order given (LMDB itself keeps them sorted by key)."""
    directory.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(directory), map_size=_MAP_SIZE)
    try:
        with env.begin(write=True) as txn:
            for key, value in items:
                assert txn.put(key, value, overwrite=False), key
    finally:
        env.close()
    return directory


def _lmdb_keys(directory):
    """The keys in LMDB's own cursor order: the order gpufeed must follow."""
    env = lmdb.open(str(directory), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return [key for key, _ in txn.cursor()]
    finally:
        env.close()


def _jpeg(seed, height, width):
    """Real, small JPEG bytes (not just a JPEG-looking prefix)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _raw_datum(caffe_pb2, hwc, label):
    """A raw Datum as Caffe's CVMatToDatum builds it: CHW uint8 pixels."""
    chw = np.ascontiguousarray(hwc.transpose(2, 0, 1))
    datum = caffe_pb2.Datum(channels=chw.shape[0], height=chw.shape[1], width=chw.shape[2],
                            data=chw.tobytes(), label=label)
    return datum.SerializeToString(), chw


def _good_value(caffe_pb2, label=0):
    return caffe_pb2.Datum(data=_jpeg(label, 8, 8), encoded=True,
                           label=label).SerializeToString()


def test_generated_datum_matches_the_wire_format(caffe_pb2):
    # The corrupt values below are written by hand; this pins down that the
    # hand encoding agrees with protobuf's, including int32 -1 as a 10-byte
    # sign-extended varint (the form a negative Caffe label takes on disk).
    datum = caffe_pb2.Datum(channels=3, label=-1)
    assert datum.SerializeToString() == b"\x08\x03" + b"\x28" + b"\xff" * 9 + b"\x01"
    parsed = caffe_pb2.Datum.FromString(datum.SerializeToString())
    assert (parsed.channels, parsed.label, parsed.encoded) == (3, -1, False)


def test_encoded_records_follow_lmdb_key_order(caffe_pb2, tmp_path):
    filenames = [f"n0{i % 3}/img_{i}.JPEG" for i in range(7)]
    expected = {}
    items = []
    for index, filename in enumerate(filenames):
        key = _caffe_key(index, filename)
        jpeg = _jpeg(index, 6 + index, 9)
        label = index % 3
        expected[key] = (jpeg, label)
        items.append((key, caffe_pb2.Datum(data=jpeg, label=label,
                                           encoded=True).SerializeToString()))
    # Insertion order must not matter: gpufeed has to return LMDB key order.
    random.Random(7).shuffle(items)
    db = _write_lmdb(tmp_path / "train_lmdb", items)

    ds = gpufeed.open_dataset(db, format="caffe_lmdb")
    assert ds.format == "caffe_lmdb"
    assert ds.classes is None
    assert len(ds) == len(filenames)
    assert [shard["records"] for shard in ds.shards] == [len(filenames)]
    lmdb_order = _lmdb_keys(db)
    assert lmdb_order == sorted(expected)
    for index, key in enumerate(lmdb_order):
        record = ds[index]
        jpeg, label = expected[key]
        assert record.key == key.decode()
        assert record.data == jpeg
        assert record.data[:2] == b"\xff\xd8"
        assert record.label == label and isinstance(record.label, int)
        assert record.labels == [float(label)]
        assert record.shape is None
        assert record.encoded is True
    # Negative indices count from the end; past either end is an IndexError.
    assert ds[-1] == ds[len(ds) - 1]
    assert ds[-len(ds)] == ds[0]
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds[-len(ds) - 1]


def test_raw_records_have_chw_shape_and_exact_pixels(caffe_pb2, tmp_path):
    rng = np.random.default_rng(1)
    # H != W so that a swapped height and width would show.
    color = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (4, 6, 1), dtype=np.uint8)
    color_value, color_chw = _raw_datum(caffe_pb2, color, label=2)
    gray_value, gray_chw = _raw_datum(caffe_pb2, gray, label=5)
    db = _write_lmdb(tmp_path / "raw_lmdb", [(_caffe_key(1, "gray.png"), gray_value),
                                             (_caffe_key(0, "color.png"), color_value)])

    ds = gpufeed.open_dataset(db, format="caffe_lmdb")
    assert len(ds) == 2
    first, second = ds[0], ds[1]
    assert first.key == "00000000_color.png"
    assert first.shape == (3, 5, 7)
    assert first.encoded is False
    assert first.label == 2
    assert first.data == color_chw.tobytes()
    # The bytes are CHW: reshaping by .shape and transposing gives back HWC.
    pixels = np.frombuffer(first.data, dtype=np.uint8).reshape(first.shape)
    np.testing.assert_array_equal(pixels.transpose(1, 2, 0), color)

    assert second.key == "00000001_gray.png"
    assert second.shape == (1, 4, 6)
    assert second.encoded is False
    assert second.label == 5
    assert second.data == gray_chw.tobytes()


@pytest.mark.parametrize("label", [-1, -(2**31)])
@pytest.mark.parametrize("kind", ["encoded", "raw"])
def test_negative_labels_round_trip(caffe_pb2, tmp_path, kind, label):
    # Caffe stores label as int32; negatives (e.g. -1 for "ignore") are
    # 10-byte sign-extended varints that must come back as the same int.
    if kind == "encoded":
        value = caffe_pb2.Datum(data=_jpeg(0, 4, 4), encoded=True,
                                label=label).SerializeToString()
    else:
        value, _ = _raw_datum(caffe_pb2, np.zeros((2, 2, 3), np.uint8), label=label)
    db = _write_lmdb(tmp_path / "db", [(_caffe_key(0, "a.jpg"), value)])
    record = gpufeed.open_dataset(db, format="caffe_lmdb")[0]
    assert record.label == label
    assert record.labels == [float(label)]


@pytest.mark.parametrize("kind", ["encoded", "raw"])
@pytest.mark.parametrize("target", ["directory", "data.mdb"])
@pytest.mark.parametrize("format_name", ["auto", "caffe_lmdb"])
def test_format_detection(caffe_pb2, tmp_path, kind, target, format_name):
    # Detection looks at the first value only, so it must work whether that
    # is an encoded image or raw pixels.
    if kind == "encoded":
        value = _good_value(caffe_pb2, label=3)
    else:
        value, _ = _raw_datum(caffe_pb2, np.ones((3, 3, 3), np.uint8), label=3)
    db = _write_lmdb(tmp_path / "db", [(_caffe_key(0, "a.jpg"), value)])
    path = db if target == "directory" else db / "data.mdb"
    if format_name == "auto":
        ds = gpufeed.open_dataset(path)
    else:
        ds = gpufeed.open_dataset(path, format=format_name)
    assert ds.format == "caffe_lmdb"
    assert len(ds) == 1
    assert ds[0].label == 3
    assert ds[0].encoded is (kind == "encoded")


# Each corrupt value: (builder(caffe_pb2) -> bytes, acceptable byte offsets of
# the reported problem, a phrase the message must carry). A valid field comes
# first where possible, so that an offset stuck at 0 would be caught.
_CORRUPT_VALUES = {
    # Field 1 (channels, a varint) written as length-delimited; the offset is
    # that of its tag, after the 2-byte label field.
    "bad_wire_type": (
        lambda pb: pb.Datum(label=7).SerializeToString() + b"\x0a\x01\x03",
        {2}, "wire type"),
    # height's varint ends in a byte with the continuation bit set: the
    # offset is that of the field's tag or of the varint itself.
    "truncated_varint": (
        lambda pb: pb.Datum(channels=3).SerializeToString() + b"\x10\x80",
        {2, 3}, "varint"),
    # data (field 4) claims 1000 bytes and holds 3.
    "length_past_end": (
        lambda pb: pb.Datum(channels=1).SerializeToString() + b"\x22\xe8\x07abc",
        {2}, "1000"),
    # Valid protobuf, impossible Datum: 3x10000x10000 pixels in 10 bytes.
    "shape_mismatch": (
        lambda pb: pb.Datum(channels=3, height=10000, width=10000, data=bytes(10),
                            label=1).SerializeToString(),
        {0}, "3x10000x10000"),
}


def _lmdb_with_bad_value(caffe_pb2, directory, bad_value):
    """Good, bad, good: the bad value sits in the middle, and a good one is
    first so that detection (which reads the first value) still works."""
    bad_key = _caffe_key(1, "bad.jpg")
    _write_lmdb(directory, [(_caffe_key(0, "first.jpg"), _good_value(caffe_pb2, 0)),
                            (bad_key, bad_value),
                            (_caffe_key(2, "last.jpg"), _good_value(caffe_pb2, 2))])
    return bad_key.decode()


def _assert_names_location(message, directory, key, offsets):
    assert str(directory / "data.mdb") in message, message
    assert f'"{key}"' in message, message
    match = re.search(r"byte offset (\d+)", message)
    assert match, message
    assert int(match.group(1)) in offsets, message


@pytest.mark.parametrize("case", sorted(_CORRUPT_VALUES))
def test_corrupt_value_raises_with_file_key_and_offset(caffe_pb2, tmp_path, case):
    build, offsets, phrase = _CORRUPT_VALUES[case]
    db = tmp_path / "db"
    bad_key = _lmdb_with_bad_value(caffe_pb2, db, build(caffe_pb2))

    ds = gpufeed.open_dataset(db, format="caffe_lmdb")
    assert len(ds) == 3
    with pytest.raises(gpufeed.CorruptRecordError) as info:
        ds[1]
    error = info.value
    assert isinstance(error, gpufeed.Error) and isinstance(error, ValueError)
    message = str(error)
    _assert_names_location(message, db, bad_key, offsets)
    assert phrase in message
    # One bad value must not poison its neighbours (or the next read).
    assert ds[0].label == 0
    assert ds[2].label == 2
    with pytest.raises(gpufeed.CorruptRecordError):
        ds[-2]



# Raw Datums whose shape does not match their data, which gpufeed
# once accepted (regression tests for bugs found while writing this file).
_SHAPE_BUGS = {
    # No data field at all, yet a 3x4x4 shape: the length check is skipped
    # when data is empty, and a record with 0 bytes and shape (3, 4, 4) comes
    # back.
    "shape_without_data": lambda pb: pb.Datum(channels=3, height=4, width=4,
                                              label=1).SerializeToString(),
    # 609 * 36760123 * 823996703 == 2**64 + 5: the pixel count wraps around
    # in uint64 and matches the 5 bytes of data.
    "shape_product_overflows": lambda pb: pb.Datum(channels=609, height=36760123,
                                                   width=823996703, data=b"12345",
                                                   label=1).SerializeToString(),
}


@pytest.mark.parametrize("case", sorted(_SHAPE_BUGS))
def test_raw_shape_must_match_data_length(caffe_pb2, tmp_path, case):
    db = tmp_path / "db"
    _lmdb_with_bad_value(caffe_pb2, db, _SHAPE_BUGS[case](caffe_pb2))
    ds = gpufeed.open_dataset(db, format="caffe_lmdb")
    try:
        record = ds[1]
    except gpufeed.CorruptRecordError:
        return
    raise AssertionError(f"accepted {record!r} with {len(record.data)} bytes of data")


def _float_datum_unpacked(pb):
    # proto2's default for repeated float: one fixed32 field per value, as
    # Caffe writes float_data.
    return pb.Datum(channels=1, height=2, width=2, float_data=[0.5, 1.5, 2.5, 3.5],
                    label=4).SerializeToString()


def _float_datum_packed(pb):
    # The packed form (tag 0x32, one length) is equally valid protobuf.
    return (pb.Datum(channels=1, height=2, width=2, label=4).SerializeToString()
            + b"\x32\x10" + struct.pack("<4f", 0.5, 1.5, 2.5, 3.5))


@pytest.mark.parametrize("build", [_float_datum_unpacked, _float_datum_packed],
                         ids=["unpacked", "packed"])
def test_float_data_datum_is_not_supported(caffe_pb2, tmp_path, build):
    db = tmp_path / "db"
    bad_key = _lmdb_with_bad_value(caffe_pb2, db, build(caffe_pb2))
    ds = gpufeed.open_dataset(db, format="caffe_lmdb")
    with pytest.raises(gpufeed.NotSupportedError) as info:
        ds[1]
    message = str(info.value)
    assert isinstance(info.value, gpufeed.Error)
    assert "float_data" in message
    assert bad_key in message and str(db / "data.mdb") in message


def test_empty_lmdb_is_rejected(tmp_path):
    db = tmp_path / "empty_lmdb"
    db.mkdir()
    lmdb.open(str(db), map_size=_MAP_SIZE).close()
    assert (db / "data.mdb").exists()
    with pytest.raises(ValueError, match="empty") as info:
        gpufeed.open_dataset(db, format="caffe_lmdb")
    assert isinstance(info.value, gpufeed.Error)


def test_verify_good_lmdb_has_no_problems(caffe_pb2, tmp_path):
    raw_value, _ = _raw_datum(caffe_pb2, np.zeros((2, 3, 3), np.uint8), label=1)
    db = _write_lmdb(tmp_path / "db", [(_caffe_key(0, "a.jpg"), _good_value(caffe_pb2)),
                                       (_caffe_key(1, "b.png"), raw_value)])
    report = gpufeed.verify(db)
    assert report["problems"] == []
    assert report["format"] == "caffe_lmdb"
    assert report["records_checked"] == 2


@pytest.mark.parametrize("case", sorted(_CORRUPT_VALUES))
def test_verify_reports_corrupt_value_by_key(caffe_pb2, tmp_path, case):
    build, offsets, _ = _CORRUPT_VALUES[case]
    db = tmp_path / "db"
    bad_key = _lmdb_with_bad_value(caffe_pb2, db, build(caffe_pb2))
    report = gpufeed.verify(db)
    assert report["format"] == "caffe_lmdb"
    # verify walks every record rather than stopping at the bad one.
    assert report["records_checked"] == 3
    assert len(report["problems"]) == 1, report["problems"]
    _assert_names_location(report["problems"][0], db, bad_key, offsets)


def test_verify_command_line_exit_status(caffe_pb2, tmp_path):
    # The CLI is what users run in CI: its exit status is the contract.
    good = _write_lmdb(tmp_path / "good", [(_caffe_key(0, "a.jpg"), _good_value(caffe_pb2))])
    bad = tmp_path / "bad"
    bad_key = _lmdb_with_bad_value(caffe_pb2, bad, _CORRUPT_VALUES["bad_wire_type"][0](caffe_pb2))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "gpufeed", "verify"]
    passed = subprocess.run(command + [str(good)], capture_output=True, text=True, env=env,
                            check=False, timeout=60)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "OK" in passed.stdout
    failed = subprocess.run(command + [str(bad)], capture_output=True, text=True, env=env,
                            check=False, timeout=60)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "PROBLEM" in failed.stdout and bad_key in failed.stdout
