"""gpufeed: keeps GPUs fed during training.

Packed shards (MXNet-compatible RecordIO, LMDB; Caffe LMDB and ImageFolder
read as they are), read with many I/Os in flight and decoded on a C++ thread
pool. See docs/python.md.

    >>> import gpufeed
    >>> ds = gpufeed.open_dataset("/data/train-packed")
    >>> len(ds), ds[0].label
"""

from ._errors import (AlreadyExistsError, CancelledError, CorruptRecordError, Error,
                      InvalidArgumentError, NotFoundError, NotSupportedError, OutOfRangeError,
                      PermissionDeniedError, StorageIOError)
from ._core import build_info as _build_info
from .dataset import FORMATS, Dataset, Record, open_dataset
from .embedding import EmbeddingTable
from .loader import (DataLoader, ImageTransform, LoaderStats, RawTransform, Tabular,
                     TokenWindows)
from .pack import PackSummary, pack, parse_size
from .tabular import RecordSchema, TabularOptions
from .tokens import TokenOptions
from .webdataset import WebDatasetOptions
from . import cache  # gpufeed.cache: the node-local cache (stat, clear, warm, checkpoints)

__version__ = _build_info()["version"]


def build_info() -> dict:
    """The version and the features this build has (CUDA, io_uring, WebP)."""
    return dict(_build_info())


def verify(path, format: str = "auto", allow_external_paths: bool = False, image_key=None,
           label_key=None, label_field=None, token_dtype=None, record_schema=None) -> dict:
    """Checks the framing of every record and each shard's xxh64 against the
    manifest. Returns a dict with ``problems`` (empty when all is well),
    ``records_checked``, ``shards_checked`` and ``checksums_checked``.
    ``allow_external_paths``, and for WebDataset tars ``image_key``,
    ``label_key``, ``label_field``: see :func:`open_dataset`. Token corpora:
    the header or index, then every token byte read (``records_checked``
    counts tokens; ``token_dtype`` for headerless files). Records
    (``format="records"``, ``record_schema``): every file's size, and each
    xxh64 a gpufeed.json records."""
    from . import _core
    from ._native import native_dataset_options, struct_dict
    from .tabular import tabular_options
    from .webdataset import webdataset_options
    path, tar_options = webdataset_options(path, image_key, label_key, label_field)
    tabular = tabular_options(format, None, record_schema)
    options = native_dataset_options(format, allow_external_paths, token_dtype=token_dtype,
                                     webdataset=tar_options,
                                     tabular=tabular._native() if tabular is not None else None)
    return struct_dict(_core.verify(path, options))


def write_index(rec_path, idx_path=None) -> int:
    """Scans a ``.rec`` file and writes its ``.idx``, or the headers of a
    WebDataset ``.tar`` and writes its member index (``FILE.tar.gpufeed-index``
    beside it, where readers look); returns the record (sample) count."""
    import os
    from . import _core
    rec_path = os.fspath(rec_path)
    if not rec_path.endswith(".rec") and ".tar" in os.path.basename(rec_path):
        return _core.write_tar_index(rec_path, "" if idx_path is None else os.fspath(idx_path))
    if idx_path is None:
        idx_path = rec_path[:-4] + ".idx" if rec_path.endswith(".rec") else rec_path + ".idx"
    return _core.write_index(rec_path, os.fspath(idx_path))


def write_token_manifest(path, format="auto", token_dtype=None,
                         allow_external_paths=False) -> tuple[str, int]:
    """Describes the token corpus at ``path`` (a directory of llm.c shards or
    Megatron pairs, with ``format="tokens"`` and ``token_dtype`` one of
    headerless files, or one file or Megatron prefix of such a directory) in
    a ``gpufeed.json`` in its directory: each file's name, bytes, data offset,
    token count, dtype and xxh64. :func:`open_dataset` then opens the corpus
    without opening a file until a window is read. Beside it, from the same
    read of each file, ``gpufeed.heads``: the token at every 512-byte
    boundary of the token data, with which global shuffle reads a window
    whose last token starts a boundary one token short (seq_len 2048 of
    uint16: 4,096 bytes instead of 4,608; docs/tokens.md). Returns the
    manifest's path and the corpus's token count."""
    import os
    from . import _core
    from ._native import native_dataset_options
    options = native_dataset_options(format, allow_external_paths, token_dtype=token_dtype)
    manifest_path, tokens = _core.write_token_manifest(os.fspath(path), options)
    return manifest_path, tokens


__all__ = [
    "__version__",
    "build_info",
    "open_dataset",
    "DataLoader",
    "ImageTransform",
    "RawTransform",
    "TokenWindows",
    "Tabular",
    "LoaderStats",
    "EmbeddingTable",
    "WebDatasetOptions",
    "TokenOptions",
    "RecordSchema",
    "TabularOptions",
    "Dataset",
    "Record",
    "FORMATS",
    "pack",
    "PackSummary",
    "parse_size",
    "verify",
    "write_index",
    "write_token_manifest",
    "Error",
    "CorruptRecordError",
    "NotFoundError",
    "PermissionDeniedError",
    "InvalidArgumentError",
    "OutOfRangeError",
    "NotSupportedError",
    "AlreadyExistsError",
    "StorageIOError",
    "CancelledError",
]
