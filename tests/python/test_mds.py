"""MosaicML Streaming MDS datasets written by an independent writer
(mds_writer.py, from the format's description) read by gpufeed: every
encoding Streaming writes, every sample's image bytes and label exact, the
image and label columns chosen by image_key/label_key, a DataLoader, zstd
shards (the zstd CLI), verify's sizes and xxh64, and corrupt or truncated
shards named by file and offset."""

import json
import shutil
import struct
from decimal import Decimal

import numpy as np
import pytest

import gpufeed
from conftest import run_cli
from mds_writer import jpeg_bytes, png_bytes, write_mds

torch = pytest.importorskip("torch")

COUNT = 10
# Every encoding MDS writes, in the writer's (sorted) column order.
COLUMNS = [("b", "bytes"), ("cls", "int"), ("f16", "float16"), ("f32", "float32"),
           ("f64", "float64"), ("i16", "int16"), ("i32", "int32"), ("i64", "int64"),
           ("i8", "int8"), ("image", "jpeg:90"), ("j", "json"), ("nd", "ndarray"),
           ("nd_fixed", "ndarray:uint8:2,3"), ("pic", "pil"), ("pkl", "pkl"), ("png", "png"),
           ("s", "str"), ("sd", "str_decimal"), ("sf", "str_float"), ("si", "str_int"),
           ("u16", "uint16"), ("u32", "uint32"), ("u64", "uint64"), ("u8", "uint8")]


def _samples():
    out = []
    for i in range(COUNT):
        rgb = bytes((i * 7 + k) % 256 for k in range(4 * 3 * 3))
        out.append({"b": bytes([i]) * i, "cls": i % 3, "f16": 0.5, "f32": 1.5, "f64": 2.5,
                    "i16": -i, "i32": -2 * i, "i64": -3 * i, "i8": -i, "image": jpeg_bytes(i),
                    "j": {"i": i}, "nd": np.arange(i + 1, dtype=np.float32),
                    "nd_fixed": np.full((2, 3), i, np.uint8), "pic": ("RGB", 4, 3, rgb),
                    "pkl": b"\x80\x04K\x01.", "png": png_bytes(i), "s": "x" * i,
                    "sd": Decimal("1.25"), "sf": 0.25, "si": 100 + i, "u16": i, "u32": 7 * i,
                    "u64": 2 ** 40 + i, "u8": i})
    return out


@pytest.fixture
def mds_dir(tmp_path):
    write_mds(tmp_path / "mds", COLUMNS, _samples(), per_shard=4)
    return tmp_path / "mds"


def test_every_sample_exact(mds_dir):
    dataset = gpufeed.open_dataset(str(mds_dir))
    assert dataset.format == "mds"
    assert len(dataset) == COUNT
    assert len(dataset.shards) == 3
    for i, sample in enumerate(_samples()):
        record = dataset[i]
        assert bytes(record.data) == sample["image"]
        assert record.label == sample["cls"]


@pytest.mark.parametrize("image_key,label_key,label_of", [
    ("png", "si", lambda s: s["si"]), ("png", "u64", None), ("image", "i8", lambda s: s["i8"]),
    ("png", "u16", lambda s: s["u16"]), ("image", "i64", lambda s: s["i64"])])
def test_image_and_label_keys(mds_dir, image_key, label_key, label_of):
    if label_of is None:  # 2**40 + i: beyond what a float label holds exactly
        with pytest.raises(gpufeed.CorruptRecordError, match="beyond"):
            gpufeed.open_dataset(str(mds_dir), image_key=image_key, label_key=label_key)[0]
        return
    dataset = gpufeed.open_dataset(str(mds_dir), image_key=image_key, label_key=label_key)
    for i, sample in enumerate(_samples()):
        assert bytes(dataset[i].data) == sample[image_key]
        assert dataset[i].label == label_of(sample)


def test_pil_raw_pixels(mds_dir):
    dataset = gpufeed.open_dataset(str(mds_dir), image_key="pic")
    for i, sample in enumerate(_samples()):
        record = dataset[i]
        assert tuple(record.shape) == (3, 4, 3)
        assert bytes(record.data) == sample["pic"][3]
    loader = gpufeed.DataLoader(str(mds_dir), batch_size=5, image_key="pic", shuffle=False,
                                transform=gpufeed.ImageTransform(4, train=False))
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == COUNT


def test_bad_keys(mds_dir):
    with pytest.raises(ValueError, match="no label column"):
        gpufeed.open_dataset(str(mds_dir), label_key="nope")
    with pytest.raises(ValueError, match="not an integer encoding"):
        gpufeed.open_dataset(str(mds_dir), label_key="f32")
    with pytest.raises(ValueError, match="no image column"):
        gpufeed.open_dataset(str(mds_dir), image_key="nope")


def test_dataloader_labels_and_resume(mds_dir):
    expected = sorted(s["cls"] for s in _samples())
    loader = gpufeed.DataLoader(str(mds_dir), batch_size=4, seed=3,
                                transform=gpufeed.ImageTransform(16))
    labels = torch.cat([y.clone() for _, y in loader])
    assert sorted(labels.tolist()) == expected
    split = [torch.cat([y.clone() for _, y in gpufeed.DataLoader(
        str(mds_dir), batch_size=2, seed=3, rank=r, world_size=2,
        transform=gpufeed.ImageTransform(16))]) for r in range(2)]
    assert sorted(torch.cat(split).tolist()) == expected


def test_zstd_shards(tmp_path):
    if shutil.which("zstd") is None:
        pytest.skip("no zstd CLI")
    write_mds(tmp_path / "z", COLUMNS, _samples(), per_shard=4, zstd=True)
    try:
        dataset = gpufeed.open_dataset(str(tmp_path / "z"), cache_dir=str(tmp_path / "cache"))
        first = dataset[0]
    except gpufeed.NotSupportedError as error:
        assert "without libzstd" in str(error)
        return
    assert bytes(first.data) == _samples()[0]["image"]
    for i, sample in enumerate(_samples()):
        assert dataset[i].label == sample["cls"]
    assert not list((tmp_path / "z").glob("*.mds"))  # decompressed elsewhere
    report = gpufeed.verify(str(tmp_path / "z"))
    assert report["problems"] == [] and report["checksums_checked"] == 3


def test_verify_sizes_and_hashes(mds_dir):
    report = gpufeed.verify(str(mds_dir))
    assert report["problems"] == []
    assert report["records_checked"] == COUNT
    assert report["checksums_checked"] == 3
    shard = mds_dir / "shard.00001.mds"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = gpufeed.verify(str(mds_dir))
    assert any("xxh64" in p and "shard.00001.mds" in p for p in report["problems"])


def test_truncated_and_corrupt_shards(mds_dir):
    shard = mds_dir / "shard.00000.mds"
    data = shard.read_bytes()
    shard.write_bytes(data[:-7])
    with pytest.raises(gpufeed.CorruptRecordError, match=r"shard\.00000\.mds.*byte offset"):
        gpufeed.open_dataset(str(mds_dir))[0]
    # A sample whose first column size runs past its end.
    bad = bytearray(data)
    first = struct.unpack_from("<I", data, 4)[0]
    struct.pack_into("<I", bad, first, 1 << 20)
    shard.write_bytes(bytes(bad))
    with pytest.raises(gpufeed.CorruptRecordError,
                       match=r"shard\.00000\.mds: sample 0 at byte offset 24.*column \"b\""):
        gpufeed.open_dataset(str(mds_dir))[0]


def test_index_json_errors(tmp_path, mds_dir):
    index = json.loads((mds_dir / "index.json").read_text())
    index["shards"][0]["column_encodings"][0] = "mystery"
    (mds_dir / "index.json").write_text(json.dumps(index))
    with pytest.raises(gpufeed.NotSupportedError, match="mystery"):
        gpufeed.open_dataset(str(mds_dir))
    index["shards"][0]["column_encodings"][0] = "bytes"
    index["shards"][0]["raw_data"]["basename"] = "../escape.mds"
    (mds_dir / "index.json").write_text(json.dumps(index))
    with pytest.raises(Exception, match="escape"):
        gpufeed.open_dataset(str(mds_dir))


def test_cli_inspect_shows_columns(mds_dir):
    out = run_cli("inspect", str(mds_dir)).stdout
    assert "mds" in out and "image (jpeg:90)" in out and "nd_fixed (ndarray:uint8:2,3)" in out


def test_resume_node_cache_and_node_shuffle(mds_dir, tmp_path):
    """What the framework gives every format, on MDS: a resumed loader goes
    on with the same batches, a node cache serves the same images, and a
    node-partitioned shuffle over 2 nodes gives every sample once."""
    def loader(**extra):
        options = dict(batch_size=2, seed=9, transform=gpufeed.ImageTransform(16, train=False))
        options.update(extra)
        return gpufeed.DataLoader(str(mds_dir), **options)

    expected = [(x.clone(), y.clone()) for x, y in loader()]
    first = loader()
    got = []
    for n, (x, y) in enumerate(first):
        got.append((x.clone(), y.clone()))
        if n == 1:
            break
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    got.extend((x.clone(), y.clone()) for x, y in resumed)
    assert len(got) == len(expected)
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, expected))
    for _ in range(2):  # filling the copies, then reading them
        cached = [(x.clone(), y.clone()) for x, y in loader(cache_dir=str(tmp_path / "cache"),
                                                            cache_capacity="1GiB")]
        assert all(torch.equal(a, c) and torch.equal(b, d)
                   for (a, b), (c, d) in zip(cached, expected))
    labels = []
    for rank in range(2):
        labels += [int(v) for _, y in loader(shuffle="node", num_nodes=2, node_rank=rank,
                                             rank=rank, world_size=2) for v in y]
    assert sorted(labels) == sorted(s["cls"] for s in _samples())
