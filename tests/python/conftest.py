"""Shared pytest fixtures: real files in real temporary directories."""

import os
import shutil
import subprocess
import sys

import pytest

import gpufeed

MAGIC = b"\x0a\x23\xd7\xce"  # 0xCED7230A little-endian

# test_device_standin.py runs only against the CUDA stand-in build of
# gpufeed._core (tests/run.sh sets GPUFEED_CUDA_STANDIN_LIBRARY and puts that
# build first on PYTHONPATH); elsewhere it is not collected at all.
collect_ignore = [] if os.environ.get("GPUFEED_CUDA_STANDIN_LIBRARY") else ["test_device_standin.py"]


def tricky_payloads():
    """Sample bytes that stress RecordIO framing: magic words at every
    position, empty and 1..7-byte payloads (padding), one large payload."""
    payloads = [b"", MAGIC, MAGIC + b"start", b"abcd" + MAGIC + b"middle", b"wxyz" + MAGIC,
                MAGIC * 3 + b"12" + MAGIC, b"\xce" * 1001, os.urandom(200_000)]
    payloads += [bytes(range(65, 65 + n)) for n in range(1, 8)]
    return payloads


@pytest.fixture
def write_list(tmp_path):
    """Writes sample files and a list file "path<TAB>labels"; returns
    (list_path, [(bytes, labels)])."""

    def _write(samples, name="list.txt"):
        folder = tmp_path / "files"
        folder.mkdir(exist_ok=True)
        lines = []
        for index, (data, labels) in enumerate(samples):
            (folder / f"{index:05d}.bin").write_bytes(data)
            lines.append(f"files/{index:05d}.bin\t" + ",".join(repr(float(x)) for x in labels))
        list_path = tmp_path / name
        list_path.write_text("\n".join(lines) + "\n")
        return list_path

    return _write


def write_image_folder(root):
    """The ImageFolder of the image_folder fixture at root: 15 files in 3
    classes with deterministic bytes (not JPEGs: not decoded by its users)."""
    for class_index, name in enumerate(["zebra", "ant", "moth"]):
        (root / name).mkdir(parents=True)
        for i in range(5):
            data = f"{name}-{i}-".encode() * (50 * (i + 1)) + MAGIC
            (root / name / f"img_{i:03d}.jpg").write_bytes(data)
    return root


@pytest.fixture
def image_folder(tmp_path):
    """A small ImageFolder with deterministic bytes (not decoded in these tests)."""
    return write_image_folder(tmp_path / "folder")


@pytest.fixture(scope="session")
def image_folder_packs(tmp_path_factory):
    """The image_folder content packed once per session with pack's defaults,
    by format: {"recordio": path, "lmdb": path}. Shared: a test only reads
    these; one that changes a pack takes a copy (packed_image_folder)."""
    root = tmp_path_factory.mktemp("image_folder_packs")
    folder = write_image_folder(root / "folder")
    packs = {}
    for fmt in ("recordio", "lmdb"):
        gpufeed.pack(folder, root / fmt, format=fmt, progress=False)
        packs[fmt] = root / fmt
    return packs


@pytest.fixture
def packed_image_folder(tmp_path, image_folder_packs):
    """copy(fmt, name): this test's own copy, at tmp_path / name, of the
    session's pack of image_folder in format fmt (as gpufeed.pack(image_folder,
    tmp_path / name, format=fmt) makes it)."""

    def _copy(fmt, name):
        return shutil.copytree(image_folder_packs[fmt], tmp_path / name)

    return _copy


def write_random_jpegs(folder, count, classes, shape, seed, quality=90, class_prefix="c",
                       high=256):
    """`count` JPEGs of random pixels under folder: image i is
    <class_prefix><i % classes>/<iii>.jpg of shape(i) = (height, width),
    its pixels numpy's default_rng(seed).integers(0, high) drawn in order;
    quality=None: PIL's default."""
    import io
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for i in range(count):
        cls = folder / f"{class_prefix}{i % classes}"
        cls.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, high, (*shape(i), 3), dtype=np.uint8)
        buffer = io.BytesIO()
        options = {} if quality is None else {"quality": quality}
        Image.fromarray(img).save(buffer, format="JPEG", **options)
        (cls / f"{i:03d}.jpg").write_bytes(buffer.getvalue())
    return folder


@pytest.fixture(scope="session")
def jpeg_folder(tmp_path_factory):
    """24 photograph-like JPEGs (smooth gradients and noise, 120 + i by
    160 + 2i pixels) in 3 classes, written once per session. Shared: read only."""
    import io
    import numpy as np
    from PIL import Image
    root = tmp_path_factory.mktemp("jpegs") / "folder"
    rng = np.random.default_rng(0)
    for i in range(24):
        cls = root / f"c{i % 3}"
        cls.mkdir(parents=True, exist_ok=True)
        h, w = 120 + i, 160 + 2 * i
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([128 + 80 * np.sin(x / (9 + c) + y / 13) for c in range(3)], -1)
        img = np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(img).save(buffer, format="JPEG", quality=90)
        (cls / f"{i:03d}.jpg").write_bytes(buffer.getvalue())
    return root


def pack_random_jpegs(root, count, seed, height, width):
    """An ImageFolder of `count` random JPEGs in 3 classes under root/folder
    (image i is (height + i) x (width + 2i)), packed into root/packed."""
    write_random_jpegs(root / "folder", count, 3, lambda i: (height + i, width + 2 * i), seed)
    gpufeed.pack(root / "folder", root / "packed", progress=False)
    return root / "packed"


def pack_list(root, samples, shard_size, name=lambda i: f"{i:03d}.bin"):
    """Packs [(bytes, label)] through a list file root/list.txt into
    root/packed (RecordIO shards of about shard_size bytes); returns that path."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (data, label) in enumerate(samples):
        (root / name(i)).write_bytes(data)
        lines.append(f"{name(i)}\t{label}")
    (root / "list.txt").write_text("\n".join(lines) + "\n")
    gpufeed.pack(root / "list.txt", root / "packed", progress=False, shard_size=shard_size)
    return root / "packed"


def run_cli(*args, check=True):
    """Runs the installed `gpufeed` console script (falls back to -m)."""
    script = shutil.which("gpufeed", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "gpufeed"]
    result = subprocess.run(command + [str(a) for a in args], capture_output=True, text=True,
                            timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"gpufeed {args} failed ({result.returncode}):\n{result.stdout}\n"
                             f"{result.stderr}")
    return result
