"""The `gpufeed` command line: pack, inspect, verify, index."""

import json

import pytest

import gpufeed
from conftest import run_cli


def test_pack_inspect_verify(tmp_path, image_folder):
    out = tmp_path / "packed"
    result = run_cli("pack", image_folder, out, "--shard-size", "1KiB", "--workers", "2")
    assert "packed 15 records" in result.stdout
    result = run_cli("inspect", out)
    assert "format:   recordio" in result.stdout
    assert "records:  15" in result.stdout
    assert "ant, moth, zebra" in result.stdout
    info = json.loads(run_cli("inspect", out, "--json").stdout)
    assert info["records"] == 15 and info["shards"] > 1 and info["classes"][0] == "ant"
    result = run_cli("verify", out)
    assert result.stdout.strip().endswith("OK")


def test_pack_refuses_then_overwrites(tmp_path, image_folder):
    out = tmp_path / "packed"
    run_cli("pack", image_folder, out, "--quiet")
    result = run_cli("pack", image_folder, out, "--quiet", check=False)
    assert result.returncode == 1
    assert "not empty" in result.stderr and "--overwrite" in result.stderr
    run_cli("pack", image_folder, out, "--quiet", "--overwrite", "--format", "lmdb")
    assert gpufeed.open_dataset(out).format == "lmdb"


def test_verify_exits_1_listing_problems(tmp_path, image_folder):
    out = tmp_path / "packed"
    run_cli("pack", image_folder, out, "--quiet")
    rec = out / "part-00000.rec"
    data = bytearray(rec.read_bytes())
    data[len(data) // 2] ^= 0x40
    rec.write_bytes(bytes(data))
    result = run_cli("verify", out, check=False)
    assert result.returncode == 1
    assert "PROBLEM" in result.stdout and str(rec) in result.stdout
    report = json.loads(run_cli("verify", out, "--json", check=False).stdout)
    assert report["problems"]


def test_index_writes_idx(tmp_path, image_folder):
    out = tmp_path / "packed"
    run_cli("pack", image_folder, out, "--quiet")
    idx = out / "part-00000.idx"
    original = idx.read_text()
    idx.unlink()
    result = run_cli("index", out / "part-00000.rec")
    assert "indexed 15 records" in result.stdout
    # Pack keys records by their global index, which for one shard is the position.
    assert idx.read_text() == original


def test_errors_are_one_clean_line(tmp_path):
    result = run_cli("inspect", tmp_path / "missing", check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "missing" in result.stderr
    result = run_cli("pack", check=False)
    assert result.returncode == 2  # usage error from argparse


def test_verify_reads_the_manifest_as_open_does(tmp_path, image_folder):
    # The same dataset open would read: the manifest's path stands for its
    # directory (shards, counts and checksums checked), a format the manifest
    # does not name is refused, and ImageFolder looks past a manifest.
    out = tmp_path / "packed"
    run_cli("pack", image_folder, out, "--quiet")
    whole = gpufeed.verify(out)
    assert not whole["problems"] and whole["checksums_checked"] > 0
    assert gpufeed.verify(out / "gpufeed.json") == whole
    with pytest.raises(ValueError, match='describes a recordio dataset, but format="lmdb"'):
        gpufeed.verify(out, format="lmdb")
    folder = gpufeed.verify(image_folder, format="imagefolder")
    assert folder["format"] == "imagefolder" and not folder["problems"]
    (image_folder / "gpufeed.json").write_text((out / "gpufeed.json").read_text())
    try:
        assert gpufeed.verify(image_folder, format="imagefolder") == folder
    finally:
        (image_folder / "gpufeed.json").unlink()
