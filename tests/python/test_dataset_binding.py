"""The typed surface between the dataset side of gpufeed and gpufeed._core:
the option structs (DatasetOptions with CacheOptions, TokenCorpusOptions and
WebDatasetOptions; PackOptions), the TokenDtype and CachePolicy enums that
refuse unknown names, the result structs (Record, TokenCorpusInfo,
ShardInfo, StorageStats, VerifyReport, PackSummary, CacheReport,
CacheWarmSummary), and the public dicts made from them unchanged."""

import copy
import re
import shutil
import struct
import subprocess
import sys

import pytest

import gpufeed
from gpufeed import _core
from gpufeed._native import (native_cache_options, native_dataset_options,
                             native_webdataset_options, struct_dict)

TOKEN_DTYPES = ("auto", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")
CACHE_POLICIES = ("train", "pinned", "checkpoint")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """30 records of 4 int32 values (their index first), labels i % 3, in
    shards of about 200 bytes."""
    root = tmp_path_factory.mktemp("dsbind")
    lines = []
    for i in range(30):
        (root / f"{i}.bin").write_bytes(struct.pack("<4i", i, i + 1, i + 2, i + 3))
        lines.append(f"{i}.bin\t{i % 3}")
    (root / "list.txt").write_text("\n".join(lines) + "\n")
    gpufeed.pack(root / "list.txt", root / "packed", progress=False, shard_size=200)
    return root / "packed"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A headerless uint16 token file of 400 tokens 0..399."""
    path = tmp_path_factory.mktemp("dsbind_tokens") / "train.bin"
    path.write_bytes(b"".join(struct.pack("<H", i) for i in range(400)))
    return path


@pytest.mark.parametrize("enum,names", [(_core.TokenDtype, TOKEN_DTYPES),
                                        (_core.CachePolicy, CACHE_POLICIES)],
                         ids=["TokenDtype", "CachePolicy"])
def test_dataset_enums_parse_their_names_and_refuse_unknown_ones(enum, names):
    assert sorted(str(member) for member in enum.__members__.values()) == sorted(names)
    for name in names:
        assert str(enum(name)) == name and enum(name) == getattr(enum, name.upper())
    with pytest.raises(ValueError) as error:
        enum("bogus")
    # The library's own InvalidArgumentError, as the public functions raised.
    assert isinstance(error.value, gpufeed.InvalidArgumentError)
    message = str(error.value)
    assert '"bogus"' in message and all(name in message for name in names if name != "auto")


def test_dataset_options_defaults_views_and_copies():
    options = _core.DatasetOptions()
    assert options.format == "auto" and not options.allow_external_paths
    cache = options.cache
    assert (cache.cache_dir, cache.capacity, cache.prefetch_shards, cache.wait_for_fill,
            cache.max_leased_shards, cache.cache_group) == ("", 0, 2, True, 8, "")
    assert cache.policy == _core.CachePolicy.TRAIN
    assert (cache.high_watermark, cache.low_watermark) == pytest.approx((1.0, 0.9))
    assert options.tokens.token_dtype == _core.TokenDtype.AUTO and options.tokens.seq_len == 1024
    web = options.webdataset
    assert (web.image_keys, web.label_key, web.label_field, web.tars, web.index_dir) == (
        ["jpg", "jpeg", "png", "webp"], "cls", "label", [], "")
    options.cache.capacity = 1 << 30  # nested structs are views
    options.tokens.seq_len = 64
    options.webdataset.image_keys = ["png"]  # list fields: assign a whole list
    assert options.cache.capacity == 1 << 30 and options.tokens.seq_len == 64
    assert options.webdataset.image_keys == ["png"]
    duplicate = copy.deepcopy(options)
    duplicate.cache.capacity = 5
    assert options.cache.capacity == 1 << 30 and duplicate.cache.capacity == 5
    for name in gpufeed.FORMATS:
        options.format = name
        assert options.format == name
    with pytest.raises(TypeError):
        options.cache.policy = "pinned"  # an enum field takes the enum, never a string
    with pytest.raises(TypeError):
        options.tokens.token_dtype = "uint16"


def test_unknown_format_names_are_errors_listing_the_registered_ones():
    options = _core.DatasetOptions()
    with pytest.raises(gpufeed.InvalidArgumentError) as error:
        options.format = "bogus"
    assert '"bogus"' in str(error.value)
    assert all(name in str(error.value) for name in gpufeed.FORMATS)
    assert options.format == "auto"  # unchanged by the refused name
    pack = _core.PackOptions()
    assert (pack.format, pack.shard_size, pack.workers, pack.overwrite,
            pack.allow_external_paths) == ("recordio", 256 << 20, 0, False, False)
    for name in _core.pack_format_names():
        pack.format = name
        assert pack.format == name
    with pytest.raises(ValueError, match='pack format must be .*not "megatron"'):
        pack.format = "megatron"  # a format without a writer


def test_native_options_are_built_from_the_checked_keywords():
    cache = gpufeed.cache.cache_options("/nvme/c", "1GiB", "pinned", 3, False, "team")
    native = native_cache_options(cache)
    assert (native.cache_dir, native.capacity, native.policy, native.prefetch_shards,
            native.wait_for_fill, native.cache_group) == (
        "/nvme/c", 1 << 30, _core.CachePolicy.PINNED, 3, False, "team")
    assert native_cache_options({}).cache_dir == ""
    assert native_cache_options(dict(cache_dir="/c", cache_capacity=None)).capacity == 0
    web = native_webdataset_options(dict(image_key=["png"], label_key="json", label_field="y",
                                         tars=["/a.tar", "/b.tar"], index_dir="/idx"))
    assert (web.image_keys, web.label_key, web.label_field, web.tars, web.index_dir) == (
        ["png"], "json", "y", ["/a.tar", "/b.tar"], "/idx")
    with pytest.raises(TypeError, match="image_keys"):
        native_webdataset_options(dict(image_keys=["png"]))  # the dict's key is image_key
    options = native_dataset_options("tokens", True, cache, "uint16", 16, dict(label_key="json"))
    assert options.format == "tokens" and options.allow_external_paths
    assert options.tokens.token_dtype == _core.TokenDtype.UINT16 and options.tokens.seq_len == 16
    assert options.cache.capacity == 1 << 30 and options.webdataset.label_key == "json"
    with pytest.raises(gpufeed.InvalidArgumentError, match='unknown token dtype "float8"'):
        native_dataset_options(token_dtype="float8")


def test_dataset_results_are_read_only_structs(packed):
    options = _core.DatasetOptions()
    options.format = "recordio"
    native = _core.Dataset(str(packed), options)
    record = native.read(7)
    assert isinstance(record, _core.Record)
    assert record.data == struct.pack("<4i", 7, 8, 9, 10) and record.labels == [1.0]
    assert record.id == 7 and record.shape is None and record.encoded
    assert isinstance(record.key, str)
    shards = native.shards
    assert len(shards) > 1 and all(isinstance(shard, _core.ShardInfo) for shard in shards)
    assert sum(shard.records for shard in shards) == 30 and shards[0].first_record == 0
    stats = native.storage_stats()
    assert isinstance(stats, _core.StorageStats) and stats.source_reads >= 1
    assert native.tokens is None
    with pytest.raises(AttributeError):
        shards[0].records = 1
    with pytest.raises(AttributeError):
        record.id = 1
    with pytest.raises(TypeError):
        _core.Dataset(str(packed), format="recordio")  # no keyword stand-ins for the struct


def test_public_dicts_are_the_structs_fields_unchanged(packed):
    dataset = gpufeed.open_dataset(packed)
    assert dataset[7].data == struct.pack("<4i", 7, 8, 9, 10) and dataset[7].label == 1.0
    for shard in dataset.shards:
        assert list(shard) == ["path", "first_record", "records", "bytes", "xxh64"]
        assert shard["path"].startswith(str(packed)) and isinstance(shard["xxh64"], str)
    assert list(dataset.storage_stats()) == ["source_opens", "source_stats", "source_reads",
                                             "source_bytes", "cache_reads", "open_files"]
    report = gpufeed.verify(packed)
    assert report == dict(format="recordio", records_checked=30,
                          shards_checked=len(dataset.shards),
                          checksums_checked=2 * len(dataset.shards),  # each .rec and its .idx
                          problems=[])
    assert list(report) == ["format", "records_checked", "shards_checked", "checksums_checked",
                            "problems"]
    native = _core.verify(str(packed))
    assert isinstance(native, _core.VerifyReport) and native.ok() and struct_dict(native) == report


def test_token_info_is_a_struct_and_the_dict_names_the_dtype(corpus):
    dataset = gpufeed.open_dataset(corpus, format="tokens", token_dtype="uint16", seq_len=8)
    assert dataset.tokens == dict(token_dtype="uint16", tokens=400, documents=0, sequences=0,
                                  seq_len=8, windows=49)
    assert list(dataset.tokens) == ["token_dtype", "tokens", "documents", "sequences", "seq_len",
                                    "windows"]
    native = _core.Dataset(str(corpus), native_dataset_options("tokens", token_dtype="uint16",
                                                               seq_len=8))
    info = native.tokens
    assert isinstance(info, _core.TokenCorpusInfo)
    assert info.token_dtype == _core.TokenDtype.UINT16 and info.windows == len(native) == 49
    assert native.read(1).shape == (9,)
    # The public functions' errors are the ones they always raised.
    with pytest.raises(gpufeed.InvalidArgumentError, match='unknown token dtype "float8"'):
        gpufeed.open_dataset(corpus, format="tokens", token_dtype="float8")
    with pytest.raises(gpufeed.InvalidArgumentError, match='unknown format "bogus"'):
        gpufeed.verify(corpus, format="bogus")


def test_pack_and_cache_results_are_structs(packed, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abcd")
    (tmp_path / "list.txt").write_text("a.bin\t2\n")
    options = _core.PackOptions()
    options.format = "lmdb"
    options.shard_size = 1 << 20
    summary = _core.pack(str(tmp_path / "list.txt"), str(tmp_path / "out"), options)
    assert isinstance(summary, _core.PackSummary)
    assert (summary.records, summary.shards) == (1, 1) and summary.bytes > 0
    cache_dir = tmp_path / "cache"
    cache = native_cache_options(gpufeed.cache.cache_options(cache_dir, "16MiB"))
    warm = _core.cache_warm(str(packed), cache)
    assert isinstance(warm, _core.CacheWarmSummary) and warm.shards == warm.filled > 1
    report = _core.cache_stat(str(cache_dir))
    assert isinstance(report, _core.CacheReport) and report.entries == 2 * warm.shards
    assert isinstance(report.datasets[0], _core.CacheDatasetReport)
    assert report.datasets[0].policy == "train"
    public = gpufeed.cache.stat(cache_dir)
    assert list(public) == ["cache_dir", "entries", "bytes", "fills_in_progress",
                            "fill_bytes_in_progress", "leased_entries", "datasets"]
    assert list(public["datasets"][0]) == ["dataset", "policy", "entries", "bytes", "hits",
                                           "misses", "fills", "fill_bytes", "evictions"]
    assert public["datasets"][0]["dataset"] == str(packed) and public["entries"] == report.entries
    again = gpufeed.cache.warm(packed, cache_dir)
    assert again == dict(shards=warm.shards, filled=0, already_cached=warm.shards, skipped=0,
                         bytes_copied=0)


def test_the_loader_takes_a_dataset_options_struct(corpus):
    options = _core.LoaderOptions()
    gpufeed.TokenWindows(seq_len=8)._apply(options)
    options.batch_size, options.shuffle = 4, _core.ShuffleMode.NONE
    dataset = native_dataset_options("tokens", token_dtype="uint16")
    assert dataset.tokens.seq_len == 1024  # token windows give the corpus their seq_len
    native = _core.Loader(str(corpus), options, dataset)
    batch = native.next()
    assert batch.data.shape == [4, 8] and batch.sample_ids == [0, 1, 2, 3]
    native.close()


def test_core_exports_its_entry_point_only():
    """gpufeed._core binds every other symbol inside itself (its version
    script): nothing of it interposes on, or is interposed by, a library of
    the same process (torch and its CUDA libraries)."""
    if not sys.platform.startswith("linux") or shutil.which("nm") is None:
        pytest.skip("needs Linux and binutils' nm")
    out = subprocess.run(["nm", "-D", "--defined-only", _core.__file__], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == {"PyInit__core"}, sorted(names)[:20]


def test_core_keeps_its_own_pybind11_internals():
    """gpufeed._core's pybind11 state is its own (PYBIND11_INTERNALS_KIND):
    another module built with the same pybind11 ABI, torch's included, never
    shares it."""
    with open(_core.__file__, "rb") as module:
        data = module.read()
    ids = set(re.findall(rb"__pybind11_(?:internals|module_local)_v[0-9A-Za-z_]*", data))
    assert ids, "no pybind11 internals id in the module"
    assert all(b"_gpufeed" in found for found in ids), sorted(ids)
