"""Untrusted datasets through the Python API and the CLI (docs/security.md):
manifests and list files that point outside the dataset are refused unless
the user opts in with allow_external_paths=True / --allow-external-paths."""

import json
import os
import struct

import pytest

import gpufeed

from conftest import run_cli


@pytest.fixture
def packed(tmp_path):
    """Four small records packed from a list file; returns (dataset dir, manifest)."""
    source = tmp_path / "source"
    source.mkdir()
    lines = []
    for i in range(4):
        (source / f"{i}.bin").write_bytes(f"sample-{i}".encode())
        lines.append(f"{i}.bin\t{i}")
    (source / "list.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "dataset"
    gpufeed.pack(source / "list.txt", out, progress=False)
    return out, json.loads((out / "gpufeed.json").read_text())


def rewrite_shard(out, manifest, file, index):
    manifest = json.loads(json.dumps(manifest))
    manifest["shards"][0]["file"] = file
    manifest["shards"][0]["index"] = index
    (out / "gpufeed.json").write_text(json.dumps(manifest))


def test_manifest_pointing_to_etc_passwd_is_refused(packed):
    out, manifest = packed
    rewrite_shard(out, manifest, "/etc/passwd", "part-00000.idx")
    with pytest.raises(PermissionError) as info:
        gpufeed.open_dataset(out)
    message = str(info.value)
    assert isinstance(info.value, gpufeed.Error)
    assert "/etc/passwd" in message and "absolute path" in message
    assert "allow_external_paths" in message
    # The DataLoader opens datasets the same way.
    with pytest.raises(PermissionError):
        gpufeed.DataLoader(out, batch_size=2, transform=gpufeed.RawTransform("uint8", (8,)))
    # And the CLI.
    result = run_cli("inspect", out, check=False)
    assert result.returncode != 0 and "absolute path" in result.stderr


def test_manifest_pointing_to_dotdot_outside_needs_the_opt_in(packed, tmp_path):
    out, manifest = packed
    for suffix in ("rec", "idx"):
        os.rename(out / f"part-00000.{suffix}", tmp_path / f"outside.{suffix}")
    rewrite_shard(out, manifest, "../outside.rec", "../outside.idx")
    with pytest.raises(PermissionError, match=r'"\.\." segment'):
        gpufeed.open_dataset(out)
    report = gpufeed.verify(out)
    assert report["problems"] and '".." segment' in report["problems"][0]
    dataset = gpufeed.open_dataset(out, allow_external_paths=True)
    assert [dataset[i].data for i in range(len(dataset))] == [
        f"sample-{i}".encode() for i in range(4)]
    assert gpufeed.verify(out, allow_external_paths=True)["problems"] == []
    result = run_cli("inspect", out, "--allow-external-paths", "--json")
    assert json.loads(result.stdout)["records"] == 4


def test_symlinked_shard_leading_outside_is_refused(packed, tmp_path):
    out, _ = packed
    os.rename(out / "part-00000.rec", tmp_path / "elsewhere.rec")
    os.symlink(tmp_path / "elsewhere.rec", out / "part-00000.rec")
    with pytest.raises(PermissionError, match="symlink"):
        gpufeed.open_dataset(out)
    assert len(gpufeed.open_dataset(out, allow_external_paths=True)) == 4


def test_list_file_paths_outside_its_directory(tmp_path):
    inside = tmp_path / "lists"
    inside.mkdir()
    (inside / "a.bin").write_bytes(b"inside")
    (tmp_path / "secret.bin").write_bytes(b"outside")
    for line, reason in [("/etc/passwd\t0", "absolute path"), ("../secret.bin\t0", '".." segment')]:
        (inside / "list.txt").write_text("a.bin\t1\n" + line + "\n")
        with pytest.raises(PermissionError) as info:
            gpufeed.pack(inside / "list.txt", tmp_path / "out", progress=False, overwrite=True)
        assert "list.txt line 2" in str(info.value) and reason in str(info.value)
        assert not (tmp_path / "out" / "gpufeed.json").exists()
    result = run_cli("pack", inside / "list.txt", tmp_path / "out", "--quiet", check=False)
    assert result.returncode != 0 and ".." in result.stderr
    result = run_cli("pack", inside / "list.txt", tmp_path / "out", "--quiet",
                     "--allow-external-paths")
    dataset = gpufeed.open_dataset(tmp_path / "out")
    assert [dataset[i].data for i in range(len(dataset))] == [b"inside", b"outside"]


def test_recordio_length_of_500_mib_in_a_1_kib_file(tmp_path):
    rec = tmp_path / "bomb.rec"
    rec.write_bytes((struct.pack("<II", 0xCED7230A, 500 << 20) + b"x" * 1016))
    with pytest.raises(gpufeed.CorruptRecordError) as info:
        gpufeed.open_dataset(rec)
    assert "length 524288000 runs past the end of the file" in str(info.value)
    assert str(rec) in str(info.value) and "byte offset 0" in str(info.value)
