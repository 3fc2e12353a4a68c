"""The typed surface between gpufeed.DataLoader and gpufeed._core: enums that
refuse unknown names, the LoaderOptions struct, Loader.next()'s Batch, the
stats dict made from the LoaderStats struct, and the per-format options
objects (gpufeed.WebDatasetOptions, gpufeed.TokenOptions)."""

import copy
import io
import json
import struct
import tarfile

import pytest

import gpufeed
from gpufeed import _core

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")

# DataLoader.stats() keys, in order, as the binding copied them by hand
# before LoaderStats was bound: the dict must not lose or reorder one.
STATS_KEYS = [
    "span", "batches", "samples", "bytes_read", "skipped", "threads", "elapsed_seconds",
    "read_seconds", "decode_seconds", "decode_cpu_seconds", "blocked_seconds", "other_seconds",
    "lookup_seconds", "lookup_cpu_seconds", "lookup_rows", "lookup_ram_hit_rate",
    "consumer_wait_seconds", "mean_ready_batches", "io_backend", "sample_kind", "io_requests",
    "io_bytes",
    "io_queue_depth", "io_mean_inflight", "io_busy_share", "source_opens", "source_stats",
    "source_bytes", "cache_reads", "open_files", "cores", "process_cpu_cores",
    "external_cpu_cores", "steal_share", "disk", "disk_note", "disk_util",
    "disk_read_bytes_per_second", "device", "device_batches", "device_bytes",
    "device_copy_seconds", "device_wait_buffer_seconds", "bottleneck", "read_share",
    "decode_share", "decode_cpu_share", "cpu_wait_share", "lookup_share", "blocked_share",
    "other_share",
    "consumer_wait_share", "copy_share", "expected_gain", "verdict", "report",
]

ENUMS = {
    _core.ShuffleMode: ("none", "global", "block", "node"),
    _core.OnError: ("raise", "skip"),
    _core.TransformKind: ("image", "raw", "tokens", "tabular"),
    _core.LabelType: ("auto", "int64", "float32"),
    _core.IoBackend: ("auto", "io_uring", "pread"),
    _core.DeviceKind: ("cpu", "cuda"),
    _core.TensorDtype: ("uint8", "int32", "int64", "float16", "bfloat16", "float32", "int8"),
    _core.OutputLayout: ("NCHW", "NHWC"),
    _core.RawElement: ("uint8", "int32", "int64", "float32"),
    _core.Bottleneck: ("none", "consumer", "read", "decode", "copy", "cpu-contention", "lookup"),
    _core.StatsSpan: ("open", "recent", "epoch"),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """40 records of 4 int32 tokens (their index first), labels i % 5."""
    root = tmp_path_factory.mktemp("records")
    lines = []
    for i in range(40):
        (root / f"{i}.bin").write_bytes(struct.pack("<4i", i, i + 1, i + 2, i + 3))
        lines.append(f"{i}.bin\t{i % 5}")
    (root / "list.txt").write_text("\n".join(lines) + "\n")
    gpufeed.pack(root / "list.txt", root / "packed", progress=False, shard_size=400)
    return root / "packed"


def raw_loader(path, **kwargs):
    kwargs.setdefault("batch_size", 8)
    kwargs.setdefault("shuffle", False)
    return gpufeed.DataLoader(path, transform=gpufeed.RawTransform("int32", (4,)), **kwargs)


@pytest.mark.parametrize("enum", list(ENUMS), ids=lambda enum: enum.__name__)
def test_enums_parse_their_names_and_refuse_unknown_ones(enum):
    names = ENUMS[enum]
    assert sorted(str(member) for member in enum.__members__.values()) == sorted(names)
    for name in names:
        assert str(enum(name)) == name
    with pytest.raises(ValueError) as error:
        enum("bogus")
    message = str(error.value)
    assert '"bogus"' in message and all(f'"{name}"' in message for name in names), message


def test_unknown_strings_are_value_errors_at_every_layer(records):
    loader = raw_loader(records)
    with pytest.raises(ValueError, match='span must be one of "open", "recent", "epoch", not "x"'):
        loader.stats("x")
    options = copy.copy(loader._options)
    with pytest.raises(TypeError):
        options.shuffle = "global"  # an enum field takes the enum, never a string
    with pytest.raises(ValueError, match="mean takes 3 values"):
        options.image.mean = [0.5, 0.5]
    # How the dataset opens is a _core.DatasetOptions (test_dataset_binding.py):
    # its format and token dtype refuse unknown names, and the loader takes
    # no string-keyed stand-ins for it.
    dataset = _core.DatasetOptions()
    with pytest.raises(ValueError, match="bogus"):
        dataset.format = "bogus"
    with pytest.raises(ValueError, match="bogus"):
        dataset.tokens.token_dtype = _core.TokenDtype("bogus")
    with pytest.raises(TypeError):
        _core.Loader(str(records), options, format="bogus")
    with pytest.raises(TypeError):
        _core.Loader(str(records), options, dict(format="recordio"))
    for keyword in ("on_error", "label_dtype", "io_backend", "shuffle"):
        with pytest.raises(ValueError, match=keyword):
            raw_loader(records, **{keyword: "bogus"})
    with pytest.raises(ValueError, match="dtype"):
        gpufeed.ImageTransform(dtype="float64")


def test_loader_options_struct_defaults_views_and_copies(records):
    options = _core.LoaderOptions()
    assert (options.batch_size, options.prefetch, options.label_count) == (32, 2, 1)
    assert options.shuffle == _core.ShuffleMode.GLOBAL and options.device.kind == _core.DeviceKind.CPU
    assert options.image.mean == pytest.approx([0.485, 0.456, 0.406])
    options.image.size = 160  # nested structs are views
    options.io.direct_io = True
    assert options.image.size == 160 and options.io.direct_io
    duplicate = copy.copy(options)
    duplicate.image.size = 96
    assert options.image.size == 160 and duplicate.image.size == 96
    loader = raw_loader(records, shuffle="block", on_error="skip", io_backend="pread", seed=3)
    built = loader._options
    assert built.shuffle == _core.ShuffleMode.BLOCK and built.on_error == _core.OnError.SKIP
    assert built.io.backend == _core.IoBackend.PREAD and built.seed == 3
    assert built.transform == _core.TransformKind.RAW and built.raw.length == 4
    assert built.raw.element == _core.RawElement.INT32
    assert built.label_type == _core.LabelType.INT64


def test_next_returns_a_batch_with_named_fields(records):
    loader = raw_loader(records, batch_size=16)
    native = loader._native
    seen = []
    for index in range(3):
        batch = native.next()
        assert isinstance(batch, _core.Batch)
        assert batch.index == index and batch.epoch == 0 and batch.label_lengths is None
        rows = 16 if index < 2 else 8
        assert batch.data.shape == [rows, 4] and batch.data.dtype == "int32"
        assert batch.labels.shape == [rows] and batch.labels.dtype == "int64"
        tokens = np.from_dlpack(batch.data)
        assert list(tokens[:, 0]) == batch.sample_ids  # record i starts with token i
        seen.extend(batch.sample_ids)
    assert native.next() is None and sorted(seen) == list(range(40))
    with pytest.raises(AttributeError):
        batch.index = 5  # read-only


def test_label_lengths_come_as_a_named_field(tmp_path):
    lines = []
    for i in range(6):
        (tmp_path / f"{i}.bin").write_bytes(bytes(4))
        lines.append(f"{i}.bin\t" + ",".join(str(float(j)) for j in range(1 + i % 3)))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    gpufeed.pack(tmp_path / "list.txt", tmp_path / "packed", progress=False)
    loader = gpufeed.DataLoader(tmp_path / "packed", batch_size=6, shuffle=False,
                                transform=gpufeed.RawTransform("uint8", (4,)),
                                label_dtype="float32", label_lengths=True, label_count=3)
    batch = loader._native.next()
    assert batch.label_lengths is not None and batch.label_lengths.shape == [6]
    assert list(np.from_dlpack(batch.label_lengths)) == [1, 2, 3, 1, 2, 3]
    loader.set_epoch(0)
    _, labels, lengths = next(iter(loader))
    assert labels.shape == (6, 3) and lengths.tolist() == [1, 2, 3, 1, 2, 3]


def test_stats_keys_are_unchanged_and_built_from_the_struct(records):
    loader = raw_loader(records)
    for _ in loader:
        pass
    for span in ("open", "recent", "epoch"):
        stats = loader.stats(span)
        assert isinstance(stats, gpufeed.LoaderStats) and list(stats) == STATS_KEYS
        assert stats["span"] == span and stats["bottleneck"] in ENUMS[_core.Bottleneck]
        assert str(stats) == stats["report"] and isinstance(stats["verdict"], str)
    assert loader.stats()["batches"] == 5 and loader.stats()["samples"] == 40
    native = loader._native.stats(_core.StatsSpan.SINCE_OPEN)
    assert isinstance(native, _core.LoaderStats) and native.samples == 40
    with pytest.raises(AttributeError):
        native.samples = 1


def test_float_label_count_comes_from_the_one_open(tmp_path, monkeypatch):
    (tmp_path / "f.bin").write_bytes(b"abcd")
    (tmp_path / "l.txt").write_text("f.bin\t1.5,2.5\n")
    gpufeed.pack(tmp_path / "l.txt", tmp_path / "p", progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the dataset was opened a second time")
    monkeypatch.setattr(gpufeed.dataset, "open_dataset", refuse)
    monkeypatch.setattr(_core, "Dataset", refuse)
    loader = gpufeed.DataLoader(tmp_path / "p", batch_size=1, label_dtype="float32",
                                transform=gpufeed.RawTransform("uint8", (4,)))
    _, labels = next(iter(loader))
    assert labels.tolist() == [[1.5, 2.5]]


def _jpeg(value):
    buffer = io.BytesIO()
    PIL.fromarray(np.full((12, 16, 3), value, dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


def _write_json_tar(path, count=6):
    with tarfile.open(path, "w") as tar:
        for i in range(count):
            for name, data in ((f"s{i:03d}.png", _jpeg(20 * i)),
                               (f"s{i:03d}.json", json.dumps({"y": i % 4}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_webdataset_options_object_equals_the_keywords(tmp_path):
    tar = _write_json_tar(tmp_path / "shard-000000.tar")
    transform = gpufeed.ImageTransform(8, train=False)
    options = gpufeed.WebDatasetOptions(image_key="png", label_key="json", label_field="y")
    assert options._native() == dict(image_key=["png"], label_key="json", label_field="y")
    by_object = gpufeed.DataLoader(tar, batch_size=6, shuffle=False, transform=transform,
                                   format_options=options)
    by_keywords = gpufeed.DataLoader(tar, batch_size=6, shuffle=False, transform=transform,
                                     image_key="png", label_key="json", label_field="y")
    (x1, y1), (x2, y2) = next(iter(by_object)), next(iter(by_keywords))
    assert y1.tolist() == [0, 1, 2, 3, 0, 1] and y1.tolist() == y2.tolist()
    assert bool((x1 == x2).all())
    with pytest.raises(TypeError, match="not both"):
        gpufeed.DataLoader(tar, format_options=options, label_key="json")
    with pytest.raises(TypeError, match="format_options must be"):
        gpufeed.DataLoader(tar, format_options=dict(label_key="json"))
    with pytest.raises(ValueError, match="is for webdataset"):
        gpufeed.DataLoader(tar, format="recordio", format_options=options)
    with pytest.raises(ValueError, match="names no extension"):
        gpufeed.WebDatasetOptions(image_key=";")
    # gpufeed.webdataset.webdataset_options keeps its contract.
    path, native = gpufeed.webdataset.webdataset_options([tar], label_key=".json")
    assert path == str(tmp_path) and native == dict(tars=[str(tar)], label_key="json")


def test_token_options_object_gives_the_headerless_dtype(tmp_path):
    tokens = np.arange(400, dtype=np.uint16)
    (tmp_path / "train.bin").write_bytes(tokens.tobytes())

    def first_batch(**kwargs):
        loader = gpufeed.DataLoader(tmp_path / "train.bin", batch_size=4, shuffle=False,
                                    format="tokens", **kwargs)
        x, y = next(iter(loader))
        return x.tolist(), y.tolist()
    by_object = first_batch(transform=gpufeed.TokenWindows(seq_len=8),
                            format_options=gpufeed.TokenOptions(token_dtype="uint16"))
    by_transform = first_batch(transform=gpufeed.TokenWindows(seq_len=8, token_dtype="uint16"))
    assert by_object == by_transform and by_object[0][1] == list(range(8, 16))
    with pytest.raises(ValueError, match="differ"):
        first_batch(transform=gpufeed.TokenWindows(seq_len=8, token_dtype="int32"),
                    format_options=gpufeed.TokenOptions(token_dtype="uint16"))
    with pytest.raises(ValueError, match="token_dtype must be one of"):
        gpufeed.TokenOptions(token_dtype="float8")
    with pytest.raises(ValueError, match="is for megatron, llmc, tokens"):
        gpufeed.DataLoader(tmp_path / "train.bin", format="webdataset",
                           format_options=gpufeed.TokenOptions("uint16"))
