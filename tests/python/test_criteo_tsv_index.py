"""`gpufeed index --format criteo_tsv`: the line index of raw Criteo TSV files
(docs/formats.md section 12.3), and verify/open of such files by format name."""

import random
import struct

import gpufeed
from conftest import run_cli


def write_tsv(path, lines, seed, bad=()):
    """Criteo lines as plain text (missing dense values and categoricals)."""
    rng = random.Random(seed)
    out = []
    for number in range(1, lines + 1):
        dense = ["" if rng.random() < 0.2 else str(rng.randint(-3, 999)) for _ in range(13)]
        sparse = ["" if rng.random() < 0.1 else "%08x" % rng.getrandbits(32) for _ in range(26)]
        if number in bad:
            sparse[3] = "nothex"
        out.append("\t".join([str(rng.randint(0, 1))] + dense + sparse) + "\n")
    path.write_text("".join(out))
    return out


def read_index(path):
    data = path.read_bytes()
    assert data[:8] == b"GFLINIX1"
    size, _mtime, lines = struct.unpack_from("<QqQ", data, 8)
    offsets = struct.unpack_from(f"<{lines + 1}Q", data, 32)
    assert len(data) == 32 + 8 * (lines + 1) + 8
    return size, list(offsets)


def test_index_builds_the_line_index_of_a_file_and_a_directory(tmp_path):
    days = tmp_path / "days"
    days.mkdir()
    written = {name: write_tsv(days / name, count, seed)
               for name, count, seed in (("day_10", 4, 1), ("day_2", 6, 2))}
    result = run_cli("index", days / "day_2", "--format", "criteo_tsv")
    index = days / "day_2.gpufeed-lines"
    assert result.stdout.strip() == f"indexed 6 lines of {days / 'day_2'} -> {index}"
    size, offsets = read_index(index)
    lengths = [len(line) for line in written["day_2"]]
    assert size == sum(lengths) and offsets == [sum(lengths[:i]) for i in range(7)]
    # A directory: every file in natural order, the index files passed over;
    # an index already there is written again.
    before = index.stat().st_ino
    result = run_cli("index", days, "--format", "criteo_tsv")
    assert result.stdout.splitlines() == [
        f"indexed 6 lines of {days / 'day_2'} -> {index}",
        f"indexed 4 lines of {days / 'day_10'} -> {days / 'day_10.gpufeed-lines'}",
    ]
    rebuilt = index.stat().st_ino
    assert rebuilt != before
    dataset = gpufeed.open_dataset(days, format="criteo_tsv")
    assert dataset.format == "criteo_tsv" and len(dataset) == 10
    assert index.stat().st_ino == rebuilt  # found, not built again by the open
    record = dataset[6]
    assert record.data == written["day_10"][0].rstrip("\n").encode()
    assert record.labels[0] == float(written["day_10"][0].split("\t")[0])


def test_index_refuses_output_and_verify_names_bad_lines(tmp_path):
    tsv = tmp_path / "train.txt"
    write_tsv(tsv, 12, 3, bad={5})
    result = run_cli("index", tsv, "--format", "criteo_tsv", "--output", tmp_path / "x",
                     check=False)
    assert result.returncode != 0 and "no --output" in result.stderr
    result = run_cli("verify", tsv, "--format", "criteo_tsv", check=False)
    assert result.returncode == 1
    assert f"{tsv} line 5" in result.stdout and "not hexadecimal" in result.stdout
    result = run_cli("index", tmp_path / "missing.txt", "--format", "criteo_tsv", check=False)
    assert result.returncode == 1 and "missing.txt" in result.stderr
