"""Random access to the samples of a dataset: :func:`open_dataset`."""

from __future__ import annotations

import os
from typing import Iterator, List, Optional, Tuple, Union

from . import _core
from ._errors import OutOfRangeError
from ._native import native_dataset_options, struct_dict
from .tabular import RecordSchema, TabularOptions, tabular_options

__all__ = ["Dataset", "Record", "open_dataset", "FORMATS", "TOKEN_FORMATS"]

#: Names accepted by ``format=``: "auto", then the formats of the C++
#: registry (src/format/registry.cc) in the order ``format="auto"`` tries them.
FORMATS = tuple(_core.format_names())
#: The token corpus formats of the registry: samples are token windows,
#: ``gpufeed index`` describes them in a gpufeed.json, verify counts tokens.
TOKEN_FORMATS = tuple(_core.token_format_names())


class Record:
    """One stored sample.

    Attributes:
        data: the sample bytes (an encoded image, or raw CHW uint8 pixels for
            raw Caffe Datum records).
        label: a float for RecordIO/LMDB records with one label, an int for
            Caffe LMDB and ImageFolder (and packs made from an ImageFolder),
            None for multi-label records.
        labels: all labels as floats, always a list.
        key: the ``.idx`` key, LMDB key or path relative to the ImageFolder root.
        id: the IRHeader id (RecordIO/LMDB), else the sample index.
        shape: ``(channels, height, width)`` for raw Caffe records, ``(seq_len + 1,)``
            for token windows (``data`` is then the window's raw tokens), else None.
    """

    __slots__ = ("data", "label", "labels", "key", "id", "shape")

    def __init__(self, data: bytes, label, labels: List[float], key: str, id: int,
                 shape: Optional[Tuple[int, int, int]]):
        self.data = data
        self.label = label
        self.labels = labels
        self.key = key
        self.id = id
        self.shape = shape

    @property
    def encoded(self) -> bool:
        """False only for raw (pixel) Caffe Datum records."""
        return self.shape is None

    def __repr__(self) -> str:
        return (f"Record(key={self.key!r}, label={self.label!r}, bytes={len(self.data)}"
                + (f", shape={self.shape}" if self.shape is not None else "") + ")")

    def __eq__(self, other) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)


class Dataset:
    """A dataset opened by :func:`open_dataset`: ``len(ds)``, ``ds[i]``.

    Reads are thread-safe and release the GIL, so a thread pool reading one
    Dataset scales with the storage.
    """

    def __init__(self, path: Union[str, os.PathLike], format: str = "auto",
                 allow_external_paths: bool = False, webdataset: Optional[dict] = None,
                 token_dtype: Optional[str] = None, seq_len: int = 1024,
                 tabular: Optional[TabularOptions] = None, **cache):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
        from .cache import cache_options
        from .webdataset import webdataset_options
        path, tar_options = webdataset_options(path, **(webdataset or {}))
        options = native_dataset_options(format, allow_external_paths,
                                         cache_options(**cache) if cache else {}, token_dtype,
                                         int(seq_len), tar_options,
                                         tabular._native() if tabular is not None else None)
        self._native = _core.Dataset(path, options)
        self._tar_options = tar_options  # a DataLoader made from this Dataset reads the same tars
        self._tabular_options = tabular  # ... and the same record schema
        self._integer_labels = self._native.integer_labels

    def __len__(self) -> int:
        return len(self._native)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        try:
            index = int(index.__index__())
        except AttributeError:
            raise TypeError(f"dataset indices must be integers or slices, not "
                            f"{type(index).__name__}") from None
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise OutOfRangeError(f"dataset index out of range (size {size})")
        record = self._native.read(index)
        labels = record.labels
        if len(labels) != 1:
            label = None
        elif self._integer_labels:
            label = int(labels[0])
        else:
            label = labels[0]
        return Record(record.data, label, labels, record.key, record.id, record.shape)

    def __iter__(self) -> Iterator[Record]:
        for index in range(len(self)):
            yield self[index]

    @property
    def format(self) -> str:
        """The format's name, one of :data:`FORMATS` (never "auto")."""
        return self._native.format

    @property
    def path(self) -> str:
        return self._native.path

    @property
    def classes(self) -> Optional[List[str]]:
        """Class names in label order, or None when the dataset has none."""
        classes = self._native.classes
        return list(classes) if classes else None

    @property
    def tokens(self) -> Optional[dict]:
        """Token corpora: token_dtype, tokens (the stream's length), documents
        and sequences (Megatron; else 0), seq_len and windows (== len(self):
        sample i is window i, ``seq_len + 1`` tokens as bytes). None otherwise."""
        info = self._native.tokens
        return None if info is None else struct_dict(info)

    @property
    def tabular(self) -> Optional[dict]:
        """Tabular datasets (criteo_npy, criteo_tsv, records): each field's
        type (label, dense, sparse) and count (dense_count, sparse_count), text
        (TSV), rows, blocks (read units) and row_bytes. None otherwise."""
        info = self._native.tabular
        return None if info is None else struct_dict(info)

    @property
    def shards(self) -> List[dict]:
        """Per shard: path, first_record, records, bytes, xxh64 (or None)."""
        return [struct_dict(shard) for shard in self._native.shards]

    def storage_stats(self) -> dict:
        """What the storage layer did since the dataset was opened: source_opens,
        source_stats (metadata operations), source_reads, source_bytes (reads and
        node-cache fills), cache_reads (served from node-cache copies), open_files."""
        return struct_dict(self._native.storage_stats())

    def __repr__(self) -> str:
        return (f"gpufeed.Dataset({self.path!r}, format={self.format!r}, records={len(self)}, "
                f"shards={len(self.shards)})")


def open_dataset(path: Union[str, os.PathLike], format: str = "auto",
                 allow_external_paths: bool = False, cache_dir=None, cache_capacity=None,
                 cache_policy: str = "train", cache_prefetch: int = 2, cache_wait: bool = True,
                 cache_group: Optional[str] = None, image_key=None,
                 label_key: Optional[str] = None, label_field: Optional[str] = None,
                 token_dtype: Optional[str] = None, seq_len: int = 1024,
                 record_schema: Optional[RecordSchema] = None,
                 format_options: Optional[TabularOptions] = None) -> Dataset:
    """Opens a dataset: a ``.rec`` file, a directory of shards (with or without
    ``gpufeed.json``), an LMDB or Caffe LMDB environment, an ImageFolder,
    WebDataset tar shards (a ``.tar``, a directory of them, a list of paths, a
    brace pattern ``"shards-{000000..000099}.tar"``, or a list file with
    ``format="webdataset"``), or a token corpus: a Megatron ``PREFIX``
    (``PREFIX.bin`` + ``PREFIX.idx``), an llm.c shard or a directory of them,
    or with ``format="tokens"`` and ``token_dtype`` a headerless token file. A
    token corpus's samples are windows of ``seq_len + 1`` tokens (see
    ``Dataset.tokens``). With ``format="records"``, fixed-size binary
    records: a file or a directory of files (natural name order), each
    record laid out as ``record_schema`` (a :class:`gpufeed.RecordSchema`;
    None: MLPerf DLRM's 160 bytes); a sample's ``data`` is the record's
    bytes, its label the record's label.

    ``format_options``: a :class:`gpufeed.TabularOptions` (record_schema,
    block_bytes, index_dir) for the tabular formats; ``record_schema=`` is
    its shorthand. WebDataset and token corpora take their keywords here.

    ``image_key``, ``label_key``, ``label_field``: which members of a
    WebDataset sample are the image and the label (see
    :func:`gpufeed.webdataset.webdataset_options`).

    ``allow_external_paths``: by default every shard and index must lie
    inside the dataset directory, symlinks followed; a manifest naming an
    absolute path, a ``..`` path or a symlink leading out is refused with
    PermissionError (datasets come from the internet). True trusts them.

    ``cache_dir``, ``cache_capacity`` (bytes or "800GiB"): serve RecordIO
    shards from whole-shard copies on node-local disk, shared by every process
    of the node (see :mod:`gpufeed.cache` for the other ``cache_*`` options).
    Reads go to the source until a shard's copy is complete. A cache
    directory owned by another user or writable by others is refused with
    PermissionError; a read-only or full one is logged once and the source
    is read.

    Raises:
        FileNotFoundError (gpufeed.NotFoundError): no such path, or a shard or
            index named by the manifest is missing.
        PermissionError (gpufeed.PermissionDeniedError): unreadable files, or
            shard paths leading outside the dataset directory.
        gpufeed.CorruptRecordError: malformed framing, index or manifest.
        ValueError (gpufeed.InvalidArgumentError): empty or undetectable dataset.
    """
    cache = {}
    if cache_dir is not None or cache_capacity is not None:
        cache = dict(cache_dir=cache_dir, cache_capacity=cache_capacity,
                     cache_policy=cache_policy, cache_prefetch=cache_prefetch,
                     cache_wait=cache_wait, cache_group=cache_group)
    if format_options is not None and not isinstance(format_options, TabularOptions):
        raise TypeError("open_dataset's format_options must be a gpufeed.TabularOptions (give "
                        "WebDataset and token options as keywords), not "
                        f"{type(format_options).__name__}")
    if (format_options is not None and format != "auto"
            and format not in TabularOptions.formats):
        raise ValueError(f"format_options=TabularOptions(...) is for "
                         f"{', '.join(TabularOptions.formats)}, not format={format!r}")
    tabular = tabular_options(format, format_options, record_schema)
    webdataset = dict(image_key=image_key, label_key=label_key, label_field=label_field)
    return Dataset(path, format, allow_external_paths, webdataset, token_dtype, seq_len,
                   tabular, **cache)
