"""Every kind of bad input ends in a clear error that names the file and the
byte offset (gpufeed.CorruptRecordError) or the missing path — never a crash,
a hang or silently wrong bytes."""

import os
import struct
import subprocess
import sys
import tempfile

import pytest

import gpufeed

MAGIC = 0xCED7230A


def frame(payload: bytes, cflag: int = 0, magic: int = MAGIC, length=None) -> bytes:
    """One RecordIO part with an explicit header, padded to 4 bytes."""
    length = len(payload) if length is None else length
    pad = (-len(payload)) % 4
    return struct.pack("<II", magic, (cflag << 29) | length) + payload + b"\0" * pad


def ir_payload(data: bytes, label: float = 1.0, id: int = 0) -> bytes:
    return struct.pack("<IfQQ", 0, label, id, 0) + data


@pytest.fixture
def rec_dataset(tmp_path):
    """Three good records written by gpufeed, returned with their offsets."""
    files = tmp_path / "src"
    files.mkdir()
    lines = []
    for i, data in enumerate([b"first-record", b"second-record", b"third-record"]):
        (files / f"{i}.bin").write_bytes(data)
        lines.append(f"src/{i}.bin\t{i}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "packed"
    gpufeed.pack(tmp_path / "list.txt", out, progress=False)
    rec = out / "part-00000.rec"
    idx = out / "part-00000.idx"
    offsets = [int(line.split("\t")[1]) for line in idx.read_text().splitlines()]
    return out, rec, idx, offsets


def forget_index_checksums(out):
    """Drops index_bytes/index_xxh64 from the manifest, as an older pack wrote
    it: the dataset then opens eagerly and reads each .idx at open. The tests
    that edit an .idx use it to see the index's own errors; with the fields
    the edited .idx is refused first (test_edited_index_is_refused_at_first_read)."""
    import json
    manifest = json.loads((out / "gpufeed.json").read_text())
    for shard in manifest["shards"]:
        shard.pop("index_bytes", None)
        shard.pop("index_xxh64", None)
    (out / "gpufeed.json").write_text(json.dumps(manifest))


def read_all(path, **kwargs):
    ds = gpufeed.open_dataset(path, **kwargs)
    return [ds[i] for i in range(len(ds))]


def assert_corrupt(excinfo, path, *needles):
    message = str(excinfo.value)
    assert isinstance(excinfo.value, gpufeed.CorruptRecordError)
    assert isinstance(excinfo.value, gpufeed.Error)
    assert str(path) in message, message
    assert "offset" in message, message
    for needle in needles:
        assert needle in message, message


def test_truncated_mid_header(tmp_path):
    rec = tmp_path / "t.rec"
    rec.write_bytes(frame(ir_payload(b"abc")) + frame(ir_payload(b"def"))[:5])
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "truncated in a record header", "byte offset 36")


def test_truncated_mid_payload(tmp_path):
    rec = tmp_path / "t.rec"
    rec.write_bytes(frame(ir_payload(b"abc")) + frame(ir_payload(b"defghij"))[:20])
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "runs past the end")


def test_truncated_shard_with_index_is_caught(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    data = rec.read_bytes()
    rec.write_bytes(data[: offsets[2] + 12])  # the last record loses its tail
    # The manifest recorded the shard's size: the open names the shard.
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(out)
    assert_corrupt(excinfo, rec, f"byte offset {offsets[2] + 12}", "manifest")
    # Without a manifest the .idx count still matches; the read of sample 2
    # names it all.
    (out / "gpufeed.json").unlink()
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(out)
    assert_corrupt(excinfo, rec, "sample 2", f"byte offset {offsets[2]}")


def test_wrong_magic(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    data = bytearray(rec.read_bytes())
    data[offsets[1]] ^= 0xFF
    rec.write_bytes(bytes(data))
    ds = gpufeed.open_dataset(out)
    assert ds[0].data == b"first-record"  # the good records stay readable
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        ds[1]
    assert_corrupt(excinfo, rec, "bad magic", "sample 1", f"byte offset {offsets[1]}")


def test_pre_2016_magic_is_named(tmp_path):
    rec = tmp_path / "old.rec"
    rec.write_bytes(frame(ir_payload(b"abc"), magic=0x3ED7230A))
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "pre-2016")


def test_length_past_end_of_file_is_not_allocated(tmp_path):
    rec = tmp_path / "huge.rec"
    # 500 MiB claimed (under the 29-bit limit) in a 1 KiB file.
    rec.write_bytes(struct.pack("<II", MAGIC, 500 * 2**20) + b"x" * 1016)
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "runs past the end", "byte offset 0")


def test_continuation_without_start(tmp_path):
    rec = tmp_path / "c.rec"
    rec.write_bytes(frame(ir_payload(b"ok")) + frame(b"orphan part", cflag=3))
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "without a start part", "byte offset 36")


def test_new_record_inside_multipart_record(tmp_path):
    rec = tmp_path / "m.rec"
    rec.write_bytes(frame(ir_payload(b"abcd"), cflag=1) + frame(b"next", cflag=0))
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        read_all(rec)
    assert_corrupt(excinfo, rec, "before the multi-part record")


def test_index_offset_past_the_end(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    forget_index_checksums(out)
    idx.write_text(f"0\t0\n1\t{offsets[1]}\n2\t999999\n")
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        gpufeed.open_dataset(out)
    assert_corrupt(excinfo, idx, "line 3", "past the end")


def test_index_offset_not_at_record_boundary(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    forget_index_checksums(out)
    inside = offsets[1] + 8  # 4-aligned, but inside record 1
    idx.write_text(f"0\t0\n1\t{inside}\n2\t{offsets[2]}\n")
    ds = gpufeed.open_dataset(out)
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        ds[1]
    assert_corrupt(excinfo, rec, "not at a record boundary", f"{idx} line 2")
    idx.write_text(f"0\t0\n1\t{offsets[1] + 2}\n2\t{offsets[2]}\n")
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        gpufeed.open_dataset(out)
    assert_corrupt(excinfo, idx, "not at a record boundary")


def test_index_count_disagrees_with_manifest(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    forget_index_checksums(out)
    idx.write_text(f"0\t0\n1\t{offsets[1]}\n")
    with pytest.raises(gpufeed.CorruptRecordError, match="manifest says 3"):
        gpufeed.open_dataset(out)


def test_edited_index_is_refused_at_first_read(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    # The manifest identifies the .idx (index_bytes, index_xxh64): the open
    # reads neither file; the first read of the shard refuses the edited
    # index by name, whatever it says.
    idx.write_text(f"0\t0\n1\t{offsets[1]}\n2\t999999\n")
    ds = gpufeed.open_dataset(out)
    assert len(ds) == 3
    with pytest.raises(gpufeed.CorruptRecordError) as excinfo:
        ds[0]
    assert str(idx) in str(excinfo.value) and "gpufeed.json" in str(excinfo.value)
    assert "sample 0" in str(excinfo.value)
    idx.unlink()
    ds = gpufeed.open_dataset(out)  # a missing index, too, shows at first read
    with pytest.raises(FileNotFoundError) as excinfo:
        ds[2]
    assert str(idx) in str(excinfo.value)


def test_missing_index_named_by_manifest(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    forget_index_checksums(out)
    idx.unlink()
    with pytest.raises(FileNotFoundError) as excinfo:
        gpufeed.open_dataset(out)
    assert isinstance(excinfo.value, gpufeed.Error)
    assert str(idx) in str(excinfo.value)
    assert "gpufeed index" in str(excinfo.value)


def test_missing_shard_named_by_manifest(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    rec.unlink()
    # The manifest identifies the shard's files: the open touches neither,
    # the shard's first read names the missing one.
    ds = gpufeed.open_dataset(out)
    with pytest.raises(FileNotFoundError) as excinfo:
        ds[0]
    assert str(rec) in str(excinfo.value)
    assert "manifest" in str(excinfo.value)
    forget_index_checksums(out)  # an older manifest: at open, as before
    with pytest.raises(FileNotFoundError) as excinfo:
        gpufeed.open_dataset(out)
    assert str(rec) in str(excinfo.value)


def test_missing_lmdb_shard(packed_image_folder):
    import shutil
    out = packed_image_folder("lmdb", "lmdb")
    shutil.rmtree(out / "part-00000")
    with pytest.raises(FileNotFoundError, match="part-00000"):
        gpufeed.open_dataset(out)


def test_corrupt_manifest(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    (out / "gpufeed.json").write_text('{"format": "recordio", "format_version": 1, ')
    with pytest.raises(gpufeed.CorruptRecordError, match="gpufeed.json.*not valid JSON"):
        gpufeed.open_dataset(out)


@pytest.mark.parametrize("fmt", ["recordio", "lmdb"])
def test_flipped_payload_byte_is_caught_by_verify(packed_image_folder, image_folder, fmt):
    out = packed_image_folder(fmt, "p")
    target = out / ("part-00000.rec" if fmt == "recordio" else "part-00000/data.mdb")
    data = bytearray(target.read_bytes())
    at = data.find(b"moth-3-moth-3")
    assert at > 0
    data[at + 5] ^= 0x01
    target.write_bytes(bytes(data))
    # The framing is intact, so a plain read returns the (wrong) bytes...
    assert gpufeed.open_dataset(out)[8].data != gpufeed.open_dataset(image_folder)[8].data
    # ...and verify is what catches it, through the shard checksum.
    report = gpufeed.verify(out)
    assert report["problems"], report
    assert "xxh64" in report["problems"][0] and str(target) in report["problems"][0]


def test_verify_reports_framing_problems(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    data = bytearray(rec.read_bytes())
    data[offsets[2]] ^= 0xFF
    rec.write_bytes(bytes(data))
    report = gpufeed.verify(out)
    joined = "\n".join(report["problems"])
    assert f"byte offset {offsets[2]}" in joined and "bad magic" in joined
    assert "xxh64" in joined


def test_empty_datasets(tmp_path):
    (tmp_path / "empty.rec").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        gpufeed.open_dataset(tmp_path / "empty.rec")
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    with pytest.raises(ValueError, match="empty"):
        gpufeed.open_dataset(empty_dir)
    (tmp_path / "list.txt").write_text("# only a comment\n")
    with pytest.raises(ValueError, match="nothing to pack"):
        gpufeed.pack(tmp_path / "list.txt", tmp_path / "out", progress=False)


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="/no/such/dataset"):
        gpufeed.open_dataset("/no/such/dataset")


def test_unknown_file_type(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="cannot tell the dataset format"):
        gpufeed.open_dataset(tmp_path / "data.csv")


_UNREADABLE_CHECK = r"""
import sys, gpufeed
try:
    gpufeed.open_dataset(sys.argv[1])
except PermissionError as error:
    assert isinstance(error, gpufeed.Error), type(error)
    assert sys.argv[1] in str(error), str(error)
    print("PermissionError:", error)
    sys.exit(0)
print("no PermissionError raised")
sys.exit(1)
"""


def test_unreadable_file_raises_permission_error():
    # Root reads everything, so the check runs as "nobody" when we are root.
    base = tempfile.mkdtemp(prefix="gpufeed-perm-")
    try:
        os.chmod(base, 0o755)
        rec = os.path.join(base, "secret.rec")
        with open(rec, "wb") as f:
            f.write(frame(ir_payload(b"abc")))
        os.chmod(rec, 0)
        preexec = None
        if os.geteuid() == 0:
            def preexec():
                os.setgid(65534)
                os.setuid(65534)
        import gpufeed as package
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(package.__file__))
        result = subprocess.run([sys.executable, "-c", _UNREADABLE_CHECK, rec],
                                preexec_fn=preexec, capture_output=True, text=True, env=env,
                                timeout=60)
        if result.returncode != 0 and "Permission denied" in result.stderr and \
                "gpufeed" not in result.stderr:
            pytest.skip(f"cannot run the check as an unprivileged user: {result.stderr[-200:]}")
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


# ---- regressions from the code review of the format layer -----------------

def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "f.rec"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        gpufeed.open_dataset(fifo)
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    (folder / "x.jpg").write_bytes(b"x")
    os.mkfifo(folder / "y.jpg")
    ds = gpufeed.open_dataset(tmp_path / "folder")
    with pytest.raises(ValueError, match="y.jpg.*not a regular file"):
        ds[1]
    with pytest.raises(ValueError, match="not a regular file"):
        gpufeed.pack(tmp_path / "folder", tmp_path / "out", progress=False)


def test_overwrite_removes_only_pack_output(tmp_path, image_folder):
    out = tmp_path / "out"
    gpufeed.pack(image_folder, out, progress=False)
    (out / "part-notes.txt").write_text("mine")
    (out / "part-train").mkdir()
    gpufeed.pack(image_folder, out, progress=False, overwrite=True, format="lmdb")
    assert (out / "part-notes.txt").read_text() == "mine"
    assert (out / "part-train").is_dir()
    assert not (out / "part-00000.rec").exists()
    with pytest.raises(ValueError, match="inside the destination"):
        gpufeed.pack(out / "part-train", out, progress=False, overwrite=True)


def test_undecodable_bytes_in_messages_and_names(tmp_path):
    rec = tmp_path / "d.rec"
    rec.write_bytes(frame(ir_payload(b"abc")))
    (tmp_path / "d.idx").write_bytes(b"\xff\xfe\n")
    with pytest.raises(gpufeed.CorruptRecordError, match="line 1"):
        gpufeed.open_dataset(rec)
    root = tmp_path / "folder"
    (root / os.fsdecode(b"cl\xe9")).mkdir(parents=True)
    (root / os.fsdecode(b"cl\xe9") / "a.jpg").write_bytes(b"a")
    ds = gpufeed.open_dataset(root)
    assert ds.classes == ["cl\\xe9"]


def test_verify_finds_gaps_in_lmdb_keys(packed_image_folder):
    lmdb = pytest.importorskip("lmdb")
    out = packed_image_folder("lmdb", "l")
    env = lmdb.open(str(out / "part-00000"))
    with env.begin(write=True) as txn:
        value = txn.get(b"0000000002")
        txn.delete(b"0000000002")
        txn.put(b"0000000099", value)
    env.close()
    report = gpufeed.verify(out)
    assert any("not the consecutive sample index 2" in p for p in report["problems"]), report


@pytest.mark.parametrize("records", ['3.7', '"3"', '-1', '1e30'])
def test_manifest_counts_must_be_integers(rec_dataset, records):
    out, rec, idx, offsets = rec_dataset
    manifest = (out / "gpufeed.json").read_text()
    import re
    (out / "gpufeed.json").write_text(re.sub(r'"records": 3,', f'"records": {records},', manifest, 1))
    with pytest.raises(gpufeed.CorruptRecordError, match="records"):
        gpufeed.open_dataset(out)


def test_manifest_json_error_names_byte_offset(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    (out / "gpufeed.json").write_text('{"format": "recordio",, }')
    with pytest.raises(gpufeed.CorruptRecordError, match="byte offset 23"):
        gpufeed.open_dataset(out)


def test_idx_with_extra_columns_and_blanks_reads_like_mxnet(rec_dataset):
    out, rec, idx, offsets = rec_dataset
    forget_index_checksums(out)
    idx.write_text("".join(f" {i}\t{o} \textra\n" for i, o in enumerate(offsets)))
    ds = gpufeed.open_dataset(out)
    assert [ds[i].data for i in range(3)] == [b"first-record", b"second-record", b"third-record"]
    assert ds[0].key == "0"


def test_non_finite_labels_are_refused(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"a")
    for label in ["nan", "inf", "1e39"]:
        (tmp_path / "l.txt").write_text(f"a.bin\t{label}\n")
        with pytest.raises(ValueError, match="finite"):
            gpufeed.pack(tmp_path / "l.txt", tmp_path / f"out-{label}", progress=False)
