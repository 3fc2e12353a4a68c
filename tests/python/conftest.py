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


@pytest.fixture
def image_folder(tmp_path):
    """A small ImageFolder with deterministic bytes (not decoded in these tests)."""
    root = tmp_path / "folder"
    for class_index, name in enumerate(["zebra", "ant", "moth"]):
        (root / name).mkdir(parents=True)
        for i in range(5):
            data = f"{name}-{i}-".encode() * (50 * (i + 1)) + MAGIC
            (root / name / f"img_{i:03d}.jpg").write_bytes(data)
    return root


def pack_random_jpegs(root, count, seed, height, width):
    """An ImageFolder of `count` random JPEGs in 3 classes under root/folder
    (image i is (height + i) x (width + 2i)), packed into root/packed."""
    import io
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for i in range(count):
        cls = root / "folder" / f"c{i % 3}"
        cls.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 256, (height + i, width + 2 * i, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(img).save(buffer, format="JPEG", quality=90)
        (cls / f"{i:03d}.jpg").write_bytes(buffer.getvalue())
    gpufeed.pack(root / "folder", root / "packed", progress=False)
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
