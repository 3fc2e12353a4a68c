"""benchmarks/foreign_writers.py, the MDS and TFRecord writers of the
benchmark's formats step: the CRC32C against its published check value and
a bytewise run, and the copies read back by gpufeed sample for sample when
this build has the format (skipped with the reason otherwise)."""
import os
import subprocess
import sys

import pytest

import gpufeed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import foreign_writers  # noqa: E402


def bytewise_crc32c(data):
    state = 0xFFFFFFFF
    for byte in data:
        state ^= byte
        for _ in range(8):
            state = (state >> 1) ^ 0x82F63B78 if state & 1 else state >> 1
    return state ^ 0xFFFFFFFF


def test_crc32c_matches_the_check_value_and_a_bytewise_run():
    assert foreign_writers.crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value
    datas = [os.urandom(n) for n in (0, 1, 3, 4, 5, 255, 256, 257, 1000, 4099)]
    assert foreign_writers.crc32c_many(datas) == [bytewise_crc32c(d) for d in datas]


@pytest.mark.parametrize("kind", ["mds", "tfrecord"])
def test_copies_read_back_sample_for_sample(tmp_path, image_folder, kind):
    if kind not in gpufeed.FORMATS:
        pytest.skip(f'this build has no "{kind}" format')
    out = tmp_path / kind
    writer = os.path.join(REPO, "benchmarks", "foreign_writers.py")
    subprocess.run([sys.executable, writer, kind, str(image_folder), str(out),
                    "--shard-size", "2KiB"], check=True)
    items = foreign_writers.image_folder(str(image_folder))
    dataset = gpufeed.open_dataset(out)
    assert dataset.format == kind
    assert len(dataset) == len(items) and len(dataset.shards) > 1
    for index, (path, label) in enumerate(items):
        record = dataset[index]
        with open(path, "rb") as source:
            assert bytes(record.data) == source.read()
        assert record.label == label
