"""WebDataset tar shards written by Python's tarfile (GNU long names, pax and
ustar headers) read by gpufeed: every sample's eval-transform image is
bit-identical to the same JPEG read from a RecordIO pack, with the same
label; shuffle, rank split, resume, node cache; bad tars; pack and the CLI."""

import io
import json
import tarfile

import pytest

import gpufeed
from conftest import pack_random_jpegs, run_cli

torch = pytest.importorskip("torch")

COUNT = 24
LONG_DIR = "a-directory-name-long-enough-to-need-a-gnu-long-name-or-a-pax-path-record/" * 2


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def _samples(folder):
    """(key stem, jpeg bytes, class index) in ImageFolder order."""
    out = []
    for class_index, class_dir in enumerate(sorted(p for p in folder.iterdir() if p.is_dir())):
        for image in sorted(class_dir.iterdir()):
            out.append((f"{class_dir.name}_{image.stem}", image.read_bytes(), class_index))
    return out


def write_tars(folder, out_dir, per_tar=8, json_labels=False):
    """Tars of `per_tar` samples: shard 0 GNU format with long names, shard 1
    pax (long names as pax path records, plus a pax comment), shard 2+ ustar.
    Each sample also has a .txt member that is not read."""
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = _samples(folder)
    formats = [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]
    paths = []
    for shard in range((len(samples) + per_tar - 1) // per_tar):
        path = out_dir / f"shards-{shard:06d}.tar"
        fmt = formats[min(shard, 2)]
        with tarfile.open(path, "w", format=fmt,
                          pax_headers={"comment": "written by tarfile"} if fmt == tarfile.PAX_FORMAT
                          else None) as tar:
            for key, jpeg, label in samples[shard * per_tar:(shard + 1) * per_tar]:
                stem = (LONG_DIR if fmt != tarfile.USTAR_FORMAT else "short/") + key
                _add(tar, stem + ".jpg", jpeg)
                if json_labels:
                    _add(tar, stem + ".json", json.dumps({"label": label, "id": key}).encode())
                else:
                    _add(tar, stem + ".cls", str(label).encode())
                _add(tar, stem + ".txt", b"a caption that is not read")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    packed = pack_random_jpegs(root, COUNT, seed=7, height=40, width=50)
    tars = write_tars(root / "folder", root / "tars")
    return root, packed, tars


def epoch(source, **kwargs):
    options = dict(batch_size=5, shuffle=False, transform=gpufeed.ImageTransform(32, train=False),
                   num_threads=2)
    options.update(kwargs)
    loader = gpufeed.DataLoader(source, **options)
    images, labels = [], []
    for x, y in loader:
        images.append(x.clone())
        labels.append(y.clone())
    return torch.cat(images), torch.cat(labels), loader


def test_tar_images_bit_identical_to_recordio(data):
    root, packed, tars = data
    reference_images, reference_labels, _ = epoch(packed)
    assert reference_images.shape[0] == COUNT
    for source in (root / "tars", str(root / "tars" / "shards-{000000..000002}.tar"),
                   [str(t) for t in tars]):
        images, labels, loader = epoch(source)
        assert torch.equal(images, reference_images), source
        assert torch.equal(labels, reference_labels), source
    # Global shuffle depends on (seed, epoch, size) only: the same order.
    shuffled, shuffled_labels, _ = epoch(root / "tars", shuffle=True, seed=5)
    reference, reference_shuffled, _ = epoch(packed, shuffle=True, seed=5)
    assert torch.equal(shuffled, reference) and torch.equal(shuffled_labels, reference_shuffled)
    dataset = gpufeed.open_dataset(tars[1])
    assert dataset.format == "webdataset" and len(dataset) == 8
    assert dataset[0].key.startswith(LONG_DIR) and dataset[0].label == 1  # class c1
    assert (tars[0].parent / (tars[0].name + ".gpufeed-index")).exists()


def test_json_labels_and_image_key(tmp_path, data):
    root, packed, _ = data
    tars = write_tars(root / "folder", tmp_path / "json", json_labels=True)
    _, reference_labels, _ = epoch(packed)
    _, labels, _ = epoch(tars[0].parent, label_key="json", label_field="label")
    assert torch.equal(labels, reference_labels)
    with pytest.raises(gpufeed.CorruptRecordError, match="no label member"):
        epoch(tars[0].parent)  # default label_key "cls": absent
    with pytest.raises(gpufeed.CorruptRecordError, match="no image member"):
        epoch(tars[0].parent, label_key="json", image_key="png")


def test_webp_members_are_images_by_default(tmp_path, data):
    """Samples whose image is a .webp member (lossless, the JPEGs' own
    pixels as PIL decodes them): the default image_key finds it, and the
    exact transform's output equals the JPEGs'."""
    if not gpufeed.build_info()["with_webp"]:
        pytest.skip("this gpufeed build has no libwebp")
    PIL = pytest.importorskip("PIL.Image")
    root, packed, _ = data
    reference_images, reference_labels, _ = epoch(packed)
    path = tmp_path / "webp-000000.tar"
    with tarfile.open(path, "w") as tar:
        for key, jpeg, label in _samples(root / "folder"):
            webp = io.BytesIO()
            PIL.open(io.BytesIO(jpeg)).convert("RGB").save(webp, format="WEBP", lossless=True)
            _add(tar, key + ".webp", webp.getvalue())
            _add(tar, key + ".cls", str(label).encode())
    images, labels, _ = epoch(path)
    assert torch.equal(images, reference_images) and torch.equal(labels, reference_labels)


def test_block_shuffle_rank_split_and_exact_resume(data):
    root, _, _ = data
    source = root / "tars"
    for shuffle in ("block", "global", "none"):
        seen = []
        for rank in range(2):
            _, labels, _ = epoch(source, shuffle=shuffle, rank=rank, world_size=2, seed=1,
                                 transform=gpufeed.ImageTransform(16, train=False))
            seen.append(labels)
        assert sum(len(x) for x in seen) == COUNT
    full = gpufeed.DataLoader(source, batch_size=4, seed=9, transform=gpufeed.ImageTransform(16))
    expected = [y.clone() for _, y in full]
    first = gpufeed.DataLoader(source, batch_size=4, seed=9, transform=gpufeed.ImageTransform(16))
    got = []
    for n, (_, y) in enumerate(first):
        got.append(y.clone())
        if n == 2:
            break
    state = first.state_dict()
    resumed = gpufeed.DataLoader(source, batch_size=4, seed=9, transform=gpufeed.ImageTransform(16))
    resumed.load_state_dict(state)
    got.extend(y.clone() for _, y in resumed)
    assert len(got) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_node_cache_serves_tars(tmp_path, data):
    root, _, _ = data
    reference, _, _ = epoch(root / "tars")
    cache = tmp_path / "cache"
    for _ in range(2):
        images, _, loader = epoch(root / "tars", cache_dir=cache, cache_capacity="1GiB")
        assert torch.equal(images, reference)
    assert loader.stats()["cache_reads"] > 0


def _good_tar_bytes(data):
    return data[2][2].read_bytes()  # the ustar shard: no long-name headers


@pytest.mark.parametrize("damage, expected", [
    (lambda b: b[:100], "ends inside a header"),
    (lambda b: b[:512 + 600], "runs past the end"),
    (lambda b: b[:600] + bytes([b[600] ^ 1]) + b[601:], None),  # inside the first JPEG: no error
    (lambda b: b[:10] + bytes([b[10] ^ 1]) + b[11:], "checksum mismatch"),
])
def test_bad_tars_name_tar_member_offset(tmp_path, data, damage, expected):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(damage(_good_tar_bytes(data)))
    if expected is None:
        assert len(gpufeed.open_dataset(bad)) == 8
        return
    with pytest.raises(gpufeed.CorruptRecordError) as info:
        gpufeed.open_dataset(bad)
    message = str(info.value)
    assert expected in message and str(bad) in message and "byte offset" in message, message


def test_skip_counts_a_sample_without_label(tmp_path, data):
    root, _, _ = data
    samples = _samples(root / "folder")
    path = tmp_path / "missing.tar"
    with tarfile.open(path, "w") as tar:
        for n, (key, jpeg, label) in enumerate(samples[:10]):
            _add(tar, key + ".jpg", jpeg)
            if n != 4:
                _add(tar, key + ".cls", str(label).encode())
    with pytest.raises(gpufeed.CorruptRecordError, match=f"{samples[4][0]}.jpg"):
        epoch(path)
    images, _, loader = epoch(path, on_error="skip", batch_size=2, max_skipped=1)
    assert loader.stats()["skipped"] == 1 and images.shape[0] == 9
    (skipped,) = loader.skipped_samples()
    assert skipped["sample"] == 4 and skipped["path"].endswith("missing.tar"), skipped


def test_compressed_tar_is_refused_with_advice(tmp_path, data):
    gz = tmp_path / "shard.tar.gz"
    with tarfile.open(gz, "w:gz") as tar:
        _add(tar, "a.jpg", b"x")
    with pytest.raises(gpufeed.NotSupportedError, match="decompress"):
        gpufeed.open_dataset(gz)


def test_pack_webdataset_readable_by_tarfile_and_loader(tmp_path, data):
    root, packed, _ = data
    out = tmp_path / "wds"
    summary = gpufeed.pack(root / "folder", out, format="webdataset", progress=False,
                           shard_size="100KiB")
    assert summary.shards >= 2
    manifest = json.loads((out / "gpufeed.json").read_text())
    assert manifest["format"] == "webdataset"
    names = []
    for shard in manifest["shards"]:
        with tarfile.open(out / shard["file"]) as tar:
            names += tar.getnames()
    assert names[:4] == ["000000000.jpg", "000000000.cls", "000000001.jpg", "000000001.cls"]
    assert len(names) == 2 * COUNT
    reference, reference_labels, _ = epoch(packed)
    images, labels, _ = epoch(out)
    assert torch.equal(images, reference) and torch.equal(labels, reference_labels)
    assert gpufeed.verify(out)["problems"] == []


def test_cli_index_inspect_verify(tmp_path, data):
    root, _, tars = data
    import shutil
    copy = tmp_path / "one.tar"
    shutil.copy(tars[0], copy)
    result = run_cli("index", copy)
    assert "indexed 8 samples" in result.stdout
    assert (tmp_path / "one.tar.gpufeed-index").exists()
    info = json.loads(run_cli("inspect", copy, "--json").stdout)
    assert info["format"] == "webdataset" and info["records"] == 8
    assert "OK" in run_cli("verify", root / "tars").stdout
    # A read-only directory: the index goes to the cache location.
    readonly = tmp_path / "ro"
    readonly.mkdir()
    shutil.copy(tars[1], readonly / "x.tar")
    readonly.chmod(0o555)
    try:
        index_dir = tmp_path / "indexes"
        dataset = gpufeed.Dataset(readonly / "x.tar", webdataset=dict(index_dir=index_dir))
        assert len(dataset) == 8
        import os
        if os.geteuid() != 0:  # root writes anyway
            assert len(list(index_dir.iterdir())) == 1
    finally:
        readonly.chmod(0o755)
