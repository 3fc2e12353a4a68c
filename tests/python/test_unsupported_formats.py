"""Datasets gpufeed recognises but does not read: open_dataset and DataLoader
raise NotSupportedError naming the format seen and what to do instead
(src/format/unread_formats.cc). The files are written here byte by byte, as
their own writers lay them out (no pyarrow, ffcv or litdata on this machine)."""
import json
import struct

import pytest

import gpufeed

ADVICE = ("ImageFolder", "WebDataset tars")


def parquet_bytes():
    """A Parquet file's framing: "PAR1", column data, the footer, its u32
    length, "PAR1"."""
    footer = b"\x15\x00\x15\x1c" * 6
    return b"PAR1" + b"\x01" * 40 + footer + struct.pack("<I", len(footer)) + b"PAR1"


def arrow_file_bytes():
    """An Arrow IPC file (Feather v2): "ARROW1" and padding, a stream, the
    footer, its u32 length, "ARROW1"."""
    stream = b"\xff\xff\xff\xff" + struct.pack("<i", 120) + b"\x10" * 120
    footer = b"\x0c" * 24
    return b"ARROW1\x00\x00" + stream + footer + struct.pack("<i", len(footer)) + b"ARROW1"


def beton_bytes(samples=50000):
    """FFCV's header (version u16, fields u16, page size u32, samples u64,
    allocation table offset u64) and field descriptors."""
    return struct.pack("<HHIQQ", 1, 2, 1 << 21, samples, 4096) + b"\x00" * 2048


def write_litdata(root):
    """litdata.optimize's output: index.json of chunks and its config."""
    root.mkdir()
    index = {"chunks": [{"chunk_bytes": 4096, "chunk_size": 8, "dim": None,
                         "filename": "chunk-0-0.bin"}],
             "config": {"chunk_bytes": 1 << 26, "chunk_size": None, "compression": None,
                        "data_format": ["int", "jpeg"], "data_spec": "[1, {}]",
                        "encryption": None, "item_loader": "PyTreeLoader"},
             "updated_at": "1700000000.0"}
    (root / "index.json").write_text(json.dumps(index))
    (root / "chunk-0-0.bin").write_bytes(b"\x08\x00\x00\x00" + b"\x00" * 4092)
    return root


def write_streaming_text(root, fmt):
    """Mosaic Streaming's index.json with shards of a text format."""
    root.mkdir()
    shard = {"format": fmt, "version": 2, "samples": 2, "compression": None, "hashes": [],
             "raw_data": {"basename": f"shard.00000.{fmt}", "bytes": 20, "hashes": {}},
             "column_names": ["text"], "column_encodings": ["str"], "size_limit": 1 << 26,
             "zip_data": None}
    (root / "index.json").write_text(json.dumps({"version": 2, "shards": [shard]}))
    (root / f"shard.00000.{fmt}").write_bytes(b"a,1\nb,2\n")
    return root


def write_hf_dataset(root):
    """datasets' save_to_disk: dataset_info.json, state.json, Arrow streams."""
    root.mkdir()
    (root / "dataset_info.json").write_text(json.dumps({"features": {"label": {}}}))
    name = "data-00000-of-00001.arrow"
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    (root / name).write_bytes(b"\xff\xff\xff\xff" + struct.pack("<i", 8) + b"\x00" * 8)
    return root


def refusal(path):
    with pytest.raises(gpufeed.NotSupportedError) as error:
        gpufeed.open_dataset(path)
    message = str(error.value)
    assert "recognises but does not read" in message
    for advice in ADVICE:
        assert advice in message
    return message


@pytest.mark.parametrize("name, data, seen", [
    ("cifar_train.beton", beton_bytes(), "FFCV .beton"),
    ("train-00000-of-00004.parquet", parquet_bytes(), "Parquet file"),
    ("table.feather", arrow_file_bytes(), "Arrow IPC file"),
    ("table.arrow", arrow_file_bytes(), "Arrow IPC file"),
    ("old.feather", b"FEA1" + b"\x00" * 60 + b"FEA1", "Feather v1"),
    ("data-00000-of-00001.arrow", b"\xff\xff\xff\xff" + struct.pack("<i", 8) + b"\x00" * 8,
     "Arrow IPC stream"),
])
def test_files_are_refused_naming_the_format(tmp_path, name, data, seen):
    path = tmp_path / name
    path.write_bytes(data)
    message = refusal(path)
    assert seen in message and str(path) in message


def test_litdata_directory_is_refused_by_open_dataset_and_dataloader(tmp_path):
    root = write_litdata(tmp_path / "optimized")
    assert "LitData optimized dataset" in refusal(root)
    assert "LitData" in refusal(root / "index.json")
    with pytest.raises(gpufeed.NotSupportedError, match="LitData"):
        gpufeed.DataLoader(root, batch_size=2)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "xsv"])
def test_streaming_text_shards_are_refused(tmp_path, fmt):
    message = refusal(write_streaming_text(tmp_path / "streaming", fmt))
    assert "Mosaic Streaming" in message and "MDSWriter" in message


def test_huggingface_directory_is_refused(tmp_path):
    assert "HuggingFace datasets directory" in refusal(write_hf_dataset(tmp_path / "hf"))


def test_flat_directory_of_parquet_files_is_refused(tmp_path):
    root = tmp_path / "table"
    root.mkdir()
    for i in range(2):
        (root / f"part-{i:05d}.parquet").write_bytes(parquet_bytes())
    (root / "_SUCCESS").write_bytes(b"")
    assert "Parquet file" in refusal(root)


def test_image_folder_still_opens(image_folder):
    # A stray Parquet file and an unrelated index.json beside the class folders.
    (image_folder / "labels.parquet").write_bytes(parquet_bytes())
    (image_folder / "index.json").write_text(json.dumps({"cat": 0}))
    dataset = gpufeed.open_dataset(image_folder)
    assert dataset.format == "imagefolder"
    assert len(dataset) == 15
