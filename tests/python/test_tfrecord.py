"""TFRecord files of tf.train.Example written by an independent Python
writer here (the framing and the protobuf wire bytes by hand, CRC32C
bitwise), and by Debian's protobuf from the Example schema when protoc is
installed, read by gpufeed: every sample's image bytes and label exact, the
eval-transform images bit-identical to the same JPEGs read from a RecordIO
pack; int64 and float labels; bad CRCs, cut and compressed files."""

import gzip
import importlib
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import gpufeed
from conftest import pack_random_jpegs, run_cli

torch = pytest.importorskip("torch")

COUNT = 12


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked(crc32c(length))) + data
            + struct.pack("<I", masked(crc32c(data))))


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def feature(key: str, kind: int, values) -> bytes:
    if kind == 1:
        body = b"".join(field(1, v) for v in values)
    elif kind == 2:
        body = field(1, b"".join(struct.pack("<f", v) for v in values))
    else:
        body = field(1, b"".join(varint(v) for v in values))
    return field(1, field(1, key.encode()) + field(2, field(kind, body)))


def example(image: bytes, labels, float_labels=False, label_key="image/class/label") -> bytes:
    features = (feature("image/format", 1, [b"JPEG"]) + feature("image/encoded", 1, [image])
                + feature(label_key, 2 if float_labels else 3, labels))
    return field(1, features)


def _samples(folder):
    out = []
    for class_index, class_dir in enumerate(sorted(p for p in folder.iterdir() if p.is_dir())):
        for image in sorted(class_dir.iterdir()):
            out.append((image.read_bytes(), class_index))
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfr")
    packed = pack_random_jpegs(root, COUNT, seed=5, height=40, width=50)
    samples = _samples(root / "folder")
    files = []
    for part in range(2):
        path = root / "records" / f"train-{part}.tfrecord"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"".join(frame(example(jpeg, [label]))
                                  for jpeg, label in samples[part * 6:(part + 1) * 6]))
        files.append(path)
    return root, packed, samples, files


def epoch(source, **kwargs):
    options = dict(batch_size=4, shuffle=False, transform=gpufeed.ImageTransform(32, train=False),
                   num_threads=2)
    options.update(kwargs)
    images, labels = [], []
    for x, y in gpufeed.DataLoader(source, **options):
        images.append(x.clone())
        labels.append(y.clone())
    return torch.cat(images), torch.cat(labels)


def test_every_sample_exact_and_index_saved(data):
    root, _, samples, files = data
    dataset = gpufeed.open_dataset(root / "records")
    assert dataset.format == "tfrecord"
    assert len(dataset) == COUNT
    for i, (jpeg, label) in enumerate(samples):
        record = dataset[i]
        assert record.data == jpeg
        assert record.label == label
    lines = Path(str(files[0]) + ".idx").read_text().split()
    assert lines[0] == "0" and int(lines[1]) == len(frame(example(samples[0][0], [samples[0][1]])))


def test_dataloader_images_match_recordio(data):
    root, packed, _, files = data
    expected_x, expected_y = epoch(packed)
    for source in (root / "records", [str(f) for f in files], str(root / "records" / "train-*.tfrecord")):
        x, y = epoch(source)
        assert torch.equal(x, expected_x)
        assert torch.equal(y, expected_y)
    x, y = epoch(root / "records", shuffle=True, seed=3)
    assert sorted(y.tolist()) == sorted(expected_y.tolist())


def test_float_labels_and_keys(tmp_path):
    path = tmp_path / "f.tfrec"
    path.write_bytes(frame(example(b"a", [0.25, -1.5], float_labels=True, label_key="score"))
                     + frame(example(b"bb", [2.0, 4.0], float_labels=True, label_key="score")))
    dataset = gpufeed.open_dataset(path, label_key="score")
    assert dataset[1].data == b"bb"
    assert list(dataset[0].labels) == [0.25, -1.5]
    with pytest.raises(gpufeed.CorruptRecordError, match="no label feature"):
        gpufeed.open_dataset(path)
    renamed = tmp_path / "g.tfrecord"
    renamed.write_bytes(frame(field(1, feature("jpeg", 1, [b"xyz"]) + feature("y", 3, [-4]))))
    record = gpufeed.open_dataset(renamed, image_key="jpeg", label_key="y")[0]
    assert record.data == b"xyz" and record.label == -4


def test_errors_name_file_and_offset(tmp_path):
    records = [frame(example(b"img%d" % i, [i])) for i in range(3)]
    good = b"".join(records)
    path = tmp_path / "e.tfrecord"
    bad = bytearray(good)
    bad[len(records[0]) + 20] ^= 1
    path.write_bytes(bytes(bad))
    with pytest.raises(gpufeed.CorruptRecordError,
                       match=f"e.tfrecord: the record at byte offset {len(records[0])} has a bad "
                             "data CRC"):
        gpufeed.open_dataset(path)
    path.write_bytes(good[:-5])
    with pytest.raises(gpufeed.CorruptRecordError, match="cut short"):
        gpufeed.open_dataset(path)
    compressed = tmp_path / "z.tfrecord"
    compressed.write_bytes(gzip.compress(good))
    with pytest.raises(gpufeed.NotSupportedError, match="gzip.open"):
        gpufeed.open_dataset(compressed)
    # The one-line way the error gives works.
    out = tmp_path / "out.tfrecord"
    subprocess.run([sys.executable, "-c", "import gzip,shutil,sys; shutil.copyfileobj("
                    "gzip.open(sys.argv[1]), open(sys.argv[2],'wb'))", str(compressed), str(out)],
                   check=True)
    assert gpufeed.open_dataset(out)[2].data == b"img2"


def test_protobuf_writer(tmp_path, data):
    if shutil.which("protoc") is None:
        pytest.skip("protoc is not installed (apt-get install protobuf-compiler)")
    pytest.importorskip("google.protobuf")
    proto_dir = Path(__file__).parent
    subprocess.run(["protoc", f"-I{proto_dir}", f"--python_out={tmp_path}",
                    str(proto_dir / "tf_example.proto")], check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        tf_example = importlib.import_module("tf_example_pb2")
    finally:
        sys.path.remove(str(tmp_path))
    _, packed, samples, _ = data
    blob = b""
    for jpeg, label in samples:
        message = tf_example.Example()
        feature_map = message.features.feature
        feature_map["image/encoded"].bytes_list.value.append(jpeg)
        feature_map["image/class/label"].int64_list.value.append(label)
        feature_map["image/height"].int64_list.value.append(40)
        feature_map["weights"].float_list.value.extend([0.5, 1.5])
        blob += frame(message.SerializeToString())
    path = tmp_path / "proto.tfrecord"
    path.write_bytes(blob)
    dataset = gpufeed.open_dataset(path)
    assert [(r.data, r.label) for r in dataset] == samples
    assert list(gpufeed.open_dataset(path, label_key="weights")[0].labels) == [0.5, 1.5]
    x, y = epoch(path)
    expected_x, expected_y = epoch(packed)
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y)


def test_inspect_lists_feature_keys(data):
    root, _, _, files = data
    out = run_cli("inspect", str(files[0])).stdout
    assert "format:   tfrecord" in out
    assert "image/encoded: bytes_list" in out
    assert "image/class/label: int64_list" in out


def test_node_cache_rank_split_and_verify(data, tmp_path):
    root, packed, _, _ = data
    expected_x, _ = epoch(packed)
    x, _ = epoch(root / "records", cache_dir=tmp_path / "cache", cache_capacity="1GiB")
    assert torch.equal(x, expected_x)
    halves = [epoch(root / "records", rank=r, world_size=2, shuffle=True, seed=1)[1].tolist()
              for r in range(2)]
    assert len(halves[0]) == len(halves[1]) == COUNT // 2
    assert "OK" in run_cli("verify", root / "records").stdout
