"""open_dataset / pack round trips for every writable format, ImageFolder
reading, and the Record/Dataset Python semantics."""

import struct

import pytest

import gpufeed
from conftest import MAGIC, tricky_payloads


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.mark.parametrize("fmt", ["recordio", "lmdb"])
def test_round_trip_tricky_payloads(tmp_path, write_list, fmt):
    payloads = tricky_payloads()
    samples = [(data, [index * 0.5]) for index, data in enumerate(payloads)]
    samples.append((b"multi" + MAGIC, [0.1, 2.0, -3.5]))
    samples.append((b"", [1.0, 2.0]))  # multi-label with empty data
    list_path = write_list(samples)
    out = tmp_path / "packed"
    summary = gpufeed.pack(list_path, out, format=fmt, shard_size=64 * 1024, progress=False)
    assert summary.records == len(samples)
    assert summary.shards >= 2  # the 200 KB payload alone exceeds one shard
    ds = gpufeed.open_dataset(out)
    assert ds.format == fmt
    assert len(ds) == len(samples)
    assert ds.classes is None
    for index, (data, labels) in enumerate(samples):
        record = ds[index]
        assert record.data == data, index
        assert record.labels == [f32(x) for x in labels]
        assert record.id == index
        assert record.shape is None and record.encoded
        if len(labels) == 1:
            assert isinstance(record.label, float) and record.label == f32(labels[0])
        else:
            assert record.label is None
    assert ds[-1] == ds[len(ds) - 1]
    assert [r.id for r in ds[2:5]] == [2, 3, 4]
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds[-len(ds) - 1]
    with pytest.raises(TypeError):
        ds["0"]
    assert gpufeed.verify(out)["problems"] == []


@pytest.mark.parametrize("fmt", ["recordio", "lmdb"])
def test_pack_image_folder_keeps_order_classes_and_int_labels(tmp_path, image_folder, fmt):
    out = tmp_path / "packed"
    summary = gpufeed.pack(image_folder, out, format=fmt, workers=3, progress=False)
    folder = gpufeed.open_dataset(image_folder)
    packed = gpufeed.open_dataset(out)
    assert folder.format == "imagefolder"
    assert folder.classes == ["ant", "moth", "zebra"] == packed.classes
    assert summary.records == len(folder) == len(packed) == 15
    for i in range(len(folder)):
        assert packed[i].data == folder[i].data
        assert packed[i].label == folder[i].label
        assert isinstance(packed[i].label, int)
    assert folder[0].key == "ant/img_000.jpg"
    assert [folder[i].label for i in range(len(folder))] == [0] * 5 + [1] * 5 + [2] * 5


def test_image_folder_matches_torchvision_order(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    root = tmp_path / "tv"
    for cls in ["b", "a", "C"]:
        (root / cls / "sub").mkdir(parents=True)
        for name in ["z.jpg", "A.JPEG", "m.png", "skip.txt", "sub/q.webp"]:
            (root / cls / name).write_bytes(name.encode())
    reference = torchvision.datasets.ImageFolder(str(root), loader=lambda p: p)
    ds = gpufeed.open_dataset(root)
    assert ds.classes == reference.classes
    assert len(ds) == len(reference.samples)
    for i, (path, target) in enumerate(reference.samples):
        assert ds[i].label == target
        assert str(root / ds[i].key) == path


def test_format_override_and_unknown_format(image_folder, image_folder_packs):
    ds = gpufeed.open_dataset(image_folder, format="imagefolder")
    assert ds.format == "imagefolder"
    with pytest.raises(ValueError):
        gpufeed.open_dataset(image_folder, format="no-such-format")
    out = image_folder_packs["recordio"]
    with pytest.raises(ValueError, match="describes a recordio dataset"):
        gpufeed.open_dataset(out, format="lmdb")
    # A single .rec file and the manifest path itself also open.
    assert len(gpufeed.open_dataset(out / "part-00000.rec")) == 15
    assert len(gpufeed.open_dataset(out / "gpufeed.json")) == 15


def test_directory_of_lmdb_shards_without_manifest(tmp_path, image_folder):
    out = tmp_path / "packed"
    gpufeed.pack(image_folder, out, format="lmdb", shard_size=500, progress=False)
    (out / "gpufeed.json").unlink()
    ds = gpufeed.open_dataset(out)
    assert ds.format == "lmdb"
    assert len(ds) == 15
    assert ds[14].data == gpufeed.open_dataset(image_folder)[14].data
    # Without the manifest the labels are plain floats.
    assert isinstance(ds[0].label, float)


def test_pack_refuses_non_empty_destination(tmp_path, image_folder):
    out = tmp_path / "packed"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError, match="overwrite"):
        gpufeed.pack(image_folder, out, progress=False)
    summary = gpufeed.pack(image_folder, out, progress=False, overwrite=True)
    assert summary.records == 15
    assert (out / "keep.txt").read_text() == "user data"  # only our files are replaced


def test_pack_summary_and_sizes(tmp_path, image_folder):
    summary = gpufeed.pack(image_folder, tmp_path / "p", shard_size="1KiB", progress=False)
    assert summary.shards > 1
    assert summary.bytes == sum(p.stat().st_size for p in (tmp_path / "p").glob("*.rec"))
    assert summary.seconds >= 0
    assert "15 records" in str(summary)
    assert gpufeed.parse_size("256MiB") == 256 * 2**20
    assert gpufeed.parse_size("1GB") == 10**9
    with pytest.raises(ValueError):
        gpufeed.parse_size("lots")


def test_pack_with_progress_bar(tmp_path, image_folder, capsys):
    gpufeed.pack(image_folder, tmp_path / "p", progress=True)
    assert "15" in capsys.readouterr().err


def test_pack_failure_leaves_no_partial_dataset(tmp_path, write_list):
    list_path = write_list([(b"one", [1]), (b"two", [2])])
    (tmp_path / "files" / "00001.bin").unlink()
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="00001.bin"):
        gpufeed.pack(list_path, out, progress=False)
    assert list(out.iterdir()) == []


def test_mxnet_lst_lines_are_accepted(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"AAA")
    (tmp_path / "b.jpg").write_bytes(b"BBB")
    (tmp_path / "train.lst").write_text("0\t3.000000\ta.jpg\n1\t1.0\t2.0\tb.jpg\n")
    gpufeed.pack(tmp_path / "train.lst", tmp_path / "out", progress=False)
    ds = gpufeed.open_dataset(tmp_path / "out")
    assert ds[0].label == 3.0 and ds[0].data == b"AAA"
    assert ds[1].labels == [1.0, 2.0] and ds[1].label is None


def test_dataset_reads_from_many_threads(tmp_path, write_list):
    from concurrent.futures import ThreadPoolExecutor
    samples = [(bytes([i % 256]) * (i * 37 % 5000), [i]) for i in range(300)]
    gpufeed.pack(write_list(samples), tmp_path / "p", shard_size=100_000, progress=False)
    ds = gpufeed.open_dataset(tmp_path / "p")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: ds[i].data, range(len(ds))))
    assert results == [data for data, _ in samples]


def test_build_info_and_version():
    info = gpufeed.build_info()
    assert info["version"] == gpufeed.__version__
    assert isinstance(info["with_io_uring"], bool)
    assert isinstance(info["with_webp"], bool)
    assert set(gpufeed.__all__) <= set(dir(gpufeed))


def test_the_format_names_are_the_registry_s(tmp_path):
    # One list for C++ and Python: the registry's, in the order format="auto"
    # tries the formats; an unknown name is an error naming them, never a guess.
    assert gpufeed.FORMATS[0] == "auto"
    assert set(gpufeed.FORMATS) >= {"auto", "recordio", "lmdb", "caffe_lmdb", "imagefolder",
                                    "webdataset", "megatron", "llmc", "tokens", "criteo_npy"}
    assert len(set(gpufeed.FORMATS)) == len(gpufeed.FORMATS)
    assert gpufeed.FORMATS.index("recordio") < gpufeed.FORMATS.index("imagefolder")
    with pytest.raises(ValueError, match="format must be one of auto, recordio"):
        gpufeed.open_dataset(tmp_path, format="no-such-format")


def test_pack_rewrites_progressive_jpegs_as_baseline_with_the_same_pixels(tmp_path):
    """baseline_jpeg=True (and `gpufeed pack --baseline-jpeg`): a progressive
    JPEG is packed as a baseline one of the same pixels, its EXIF kept; a
    baseline JPEG, a PNG and a damaged JPEG are packed byte for byte."""
    import io

    import numpy as np
    from PIL import Image

    from conftest import run_cli

    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
    smooth = np.cumsum(pixels, axis=1, dtype=np.uint16).astype(np.uint8)
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    exif = Image.Exif()
    exif[0x010F] = "gpufeed test camera"  # Make
    Image.fromarray(smooth).save(folder / "0_progressive.jpg", quality=90, progressive=True,
                                 exif=exif.tobytes())
    Image.fromarray(smooth).save(folder / "1_baseline.jpg", quality=90)
    Image.fromarray(pixels).save(folder / "2_image.png")
    whole = (folder / "0_progressive.jpg").read_bytes()
    (folder / "3_cut.jpg").write_bytes(whole[: len(whole) * 2 // 3])
    sources = [p.read_bytes() for p in sorted(folder.iterdir())]

    summary = gpufeed.pack(tmp_path / "folder", tmp_path / "packed", progress=False,
                           baseline_jpeg=True)
    assert summary.rewritten == 1
    assert "1 progressive JPEG(s) rewritten as baseline" in str(summary)
    packed = gpufeed.open_dataset(tmp_path / "packed")
    data = [packed[i].data for i in range(len(packed))]
    assert b"\xff\xc2" in sources[0] and b"\xff\xc2" not in data[0]  # SOF2 -> SOF0/1
    assert data[1:] == sources[1:]
    with Image.open(io.BytesIO(data[0])) as rewritten:
        with Image.open(io.BytesIO(sources[0])) as original:
            assert np.array_equal(np.asarray(rewritten), np.asarray(original))
        assert rewritten.getexif()[0x010F] == "gpufeed test camera"
    # Without the option, the bytes as read.
    plain = gpufeed.pack(tmp_path / "folder", tmp_path / "plain", progress=False)
    assert plain.rewritten == 0
    assert gpufeed.open_dataset(tmp_path / "plain")[0].data == sources[0]
    # The command line.
    result = run_cli("pack", tmp_path / "folder", tmp_path / "cli", "--quiet", "--baseline-jpeg")
    assert "rewritten as baseline" in result.stdout
    assert gpufeed.open_dataset(tmp_path / "cli")[0].data == data[0]


def test_pack_adds_restart_markers_to_every_jpeg_with_the_same_pixels(tmp_path):
    """jpeg_restart_interval=N (and `gpufeed pack --jpeg-restart-interval N`):
    baseline and progressive JPEGs of at least 1 megapixel are packed as
    baseline ones with a restart marker every N MCUs, decoding to the same
    pixels (PIL), and the transforms give the same outputs, exact and
    exact=False (the crops pass over the intervals outside them); smaller
    JPEGs get no markers (a progressive one still becomes baseline); a PNG
    and a damaged JPEG are packed byte for byte; a bad interval is refused."""
    import io

    import numpy as np
    from PIL import Image

    from conftest import run_cli
    from gpufeed.diagnose import jpeg_header

    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (800, 1280, 3), dtype=np.uint8)
    smooth = np.cumsum(pixels, axis=1, dtype=np.uint16).astype(np.uint8)
    folder = tmp_path / "folder" / "a"
    folder.mkdir(parents=True)
    Image.fromarray(smooth).save(folder / "0_baseline.jpg", quality=90)
    Image.fromarray(smooth).save(folder / "1_progressive.jpg", quality=85, progressive=True)
    Image.fromarray(smooth[:240, :400]).save(folder / "2_small_baseline.jpg", quality=90)
    Image.fromarray(smooth[:240, :400]).save(folder / "3_small_progressive.jpg", quality=90,
                                            progressive=True)
    Image.fromarray(pixels[:64, :64]).save(folder / "4_image.png")
    whole = (folder / "0_baseline.jpg").read_bytes()
    (folder / "5_cut.jpg").write_bytes(whole[: len(whole) // 2])
    sources = [p.read_bytes() for p in sorted(folder.iterdir())]

    summary = gpufeed.pack(tmp_path / "folder", tmp_path / "packed", progress=False,
                           jpeg_restart_interval=4)
    assert summary.rewritten == 3 and summary.restart_interval == 4
    assert "3 JPEG(s) rewritten as baseline with a restart marker every 4 MCUs" in str(summary)
    packed = gpufeed.open_dataset(tmp_path / "packed")
    data = [packed[i].data for i in range(len(packed))]
    assert data[2] == sources[2] and data[4:] == sources[4:]
    for index, interval in ((0, 4), (1, 4), (3, 0)):
        before, after = sources[index], data[index]
        assert jpeg_header(before)["restart_interval"] == 0
        assert jpeg_header(after)["restart_interval"] == interval
        assert b"\xff\xc2" not in after  # baseline
        with Image.open(io.BytesIO(after)) as rewritten, Image.open(io.BytesIO(before)) as original:
            assert np.array_equal(np.asarray(rewritten), np.asarray(original))
    # The transforms on the packed records equal those on the baseline
    # source (exact=False's on a progressive file leave out its last bit: not
    # compared); eval and train crops of the same epoch and index.
    from gpufeed import _core

    def transformed(jpeg, train, exact, sample):
        out, _ = _core._transform_image(jpeg, 48, train, 0, 3, sample, "uint8", "NHWC", True,
                                        [0.08, 1.0], [3 / 4, 4 / 3], [0.0] * 3, [1.0] * 3, exact)
        return bytes(out)

    for exact in (True, False):
        for train in (False, True):
            for sample in range(4):
                assert transformed(data[0], train, exact, sample) == \
                    transformed(sources[0], train, exact, sample)
                if exact:
                    assert transformed(data[1], train, exact, sample) == \
                        transformed(sources[1], train, exact, sample)
    # Packing the packed records again with the same interval changes nothing.
    again_folder = tmp_path / "again" / "a"
    again_folder.mkdir(parents=True)
    for i, record in enumerate(data[:4]):
        (again_folder / f"{i}.jpg").write_bytes(record)
    again = gpufeed.pack(tmp_path / "again", tmp_path / "again-packed", progress=False,
                         jpeg_restart_interval=4)
    assert again.rewritten == 0
    with pytest.raises(ValueError, match="jpeg_restart_interval must be 0"):
        gpufeed.pack(tmp_path / "folder", tmp_path / "bad", progress=False,
                     jpeg_restart_interval=-1)
    result = run_cli("pack", tmp_path / "folder", tmp_path / "cli", "--quiet",
                     "--jpeg-restart-interval", "4")
    assert "with a restart marker every 4 MCUs" in result.stdout
    assert gpufeed.open_dataset(tmp_path / "cli")[0].data == data[0]
