"""Embedding tables served by id: :class:`EmbeddingTable`.

A 2-D table (a ``.npy``, or a raw row-major file with ``dim=`` and
``dtype=``) whose rows are looked up by id with memory latency: a RAM tier
of the hot rows within ``cache_bytes``, the node NVMe cache below it when
``cache_dir`` is given (one local copy per node, shared by its processes),
and the file itself below that (docs/embeddings.md).

    >>> import gpufeed, torch
    >>> table = gpufeed.EmbeddingTable("/lustre/emb.npy", cache_bytes="8GiB",
    ...                                cache_dir="/nvme/cache")
    >>> rows = table.lookup(torch.tensor([3, 17, 3]))   # (3, table.dim), table.dtype
    >>> table.stats()["hit_rate"]
"""

from __future__ import annotations

import operator
import os
from typing import Any, Dict, Optional, Union

from . import _core
from ._loader_options import _io_fault_options
from ._native import native_cache_options, struct_dict
from .cache import cache_options
from .pack import human_bytes, parse_size

__all__ = ["EmbeddingTable", "DTYPES"]

#: The dtypes a table can have. bfloat16 tables are stored as uint16 (numpy
#: has no bfloat16): open them with ``dtype="bfloat16"``.
DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8")


def _dtype_name(dtype) -> Optional[str]:
    """``dtype=`` as one of DTYPES (None: the .npy header's): a name, a
    torch dtype or a numpy dtype. Anything else is a ValueError naming it."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__ == "torch":  # torch.float32 -> "float32"
        name = str(dtype).rpartition(".")[2]
    else:
        import numpy
        try:
            name = numpy.dtype(dtype).name
        except TypeError:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}") from None
        if name == "uint16":
            raise ValueError("dtype uint16: a bfloat16 table stored as uint16 opens with "
                             "dtype=\"bfloat16\"")
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return name


def _budget(cache_bytes: Union[int, str]) -> int:
    """cache_bytes: bytes (int) or a size such as "8GiB"; 0: no RAM tier."""
    if isinstance(cache_bytes, str):
        return 0 if cache_bytes.strip() == "0" else parse_size(cache_bytes)
    count = operator.index(cache_bytes)  # ints, numpy integers; TypeError otherwise
    return 0 if count == 0 else parse_size(count)


class EmbeddingTable:
    """Rows of the table at ``path`` by id.

    Args:
        path: a 2-D C-order ``.npy`` (rows, dim) of float32, float16, int8 or
            uint8, or uint16 with ``dtype="bfloat16"``; or a raw row-major
            file (any other name) with ``dim`` and ``dtype``.
        cache_bytes: the RAM tier's budget (int or "8GiB"; 0: none): the hot
            rows, not the file, so a table larger than the budget keeps the
            rows that are asked for most.
        cache_dir: the node NVMe cache directory (None: none). The table is
            copied there once per node in the background; misses read the
            copy when it has their rows, else the file.
        dim, dtype: a raw file's shape (given for a .npy, they must agree
            with its header). dtype: one of :data:`DTYPES`, a torch or a
            numpy dtype.
        preload: read the whole table at open into the RAM tier (it must fit
            in ``cache_bytes``): every lookup is then a RAM hit.
        direct_io, io_backend ("auto", "io_uring", "pread"), queue_depth:
            how misses are read (O_DIRECT, the read engine, reads in flight).
        coalesce_gap_bytes: missed rows this close together are read as
            one request.
        cache_capacity: the node cache's budget (None: 90% of what its
            filesystem can hold for it).
        io_retries, io_timeout: storage faults, as for :class:`DataLoader`:
            transient read errors tried again that many times (backoff from
            50 ms), and a lookup whose reads do not complete in io_timeout
            seconds fails with an OSError (errno ETIMEDOUT) instead of hanging.

    Errors name the file: FileNotFoundError, ValueError (a bad header, a
    raw file whose size is not a multiple of the row, options that
    disagree with the header, a preload that does not fit).

    Thread safety: :meth:`lookup` and :meth:`stats` may be called from many
    threads at once (the lookup itself runs without the GIL). Make a table
    per process: it must not cross a fork; the node cache is what processes
    share.
    """

    def __init__(self, path: Union[str, os.PathLike], cache_bytes: Union[int, str] = "8GiB",
                 cache_dir: Optional[Union[str, os.PathLike]] = None, *,
                 dim: Optional[int] = None, dtype=None, preload: bool = False,
                 direct_io: bool = False, io_backend: str = "auto", queue_depth: int = 64,
                 coalesce_gap_bytes: int = 4096,
                 cache_capacity: Optional[Union[int, str]] = None, io_retries: int = 3,
                 io_timeout: float = 60.0) -> None:
        options = _core.EmbeddingTableOptions()
        if dim is not None:
            if int(dim) <= 0:
                raise ValueError(f"dim must be positive, not {dim!r}")
            options.dim = int(dim)
        options.dtype = _dtype_name(dtype)
        options.cache_bytes = _budget(cache_bytes)
        options.cache = native_cache_options(cache_options(cache_dir, cache_capacity))
        options.preload = bool(preload)
        options.io.backend = _core.IoBackend(io_backend)
        if int(queue_depth) <= 0:
            raise ValueError(f"queue_depth must be positive, not {queue_depth!r}")
        options.io.queue_depth = int(queue_depth)
        options.io.direct_io = bool(direct_io)
        _io_fault_options(options.io, io_retries, io_timeout)
        if int(coalesce_gap_bytes) < 0:
            raise ValueError(f"coalesce_gap_bytes must be >= 0, not {coalesce_gap_bytes!r}")
        options.coalesce_gap_bytes = int(coalesce_gap_bytes)
        self._cache_bytes = options.cache_bytes
        self._cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        #: The native table (gpufeed._core.EmbeddingTable); the DataLoader's
        #: ``embeddings=`` hands it to the pipeline.
        self._native = _core.EmbeddingTable(os.fspath(path), options)
        import torch
        self._dtype = getattr(torch, str(self._native.dtype))

    @property
    def path(self) -> str:
        return self._native.path

    @property
    def rows(self) -> int:
        return self._native.rows

    @property
    def dim(self) -> int:
        return self._native.dim

    @property
    def dtype(self):
        """The rows' torch.dtype (torch.bfloat16 for a bfloat16 table)."""
        return self._dtype

    @property
    def row_bytes(self) -> int:
        return self._native.row_bytes

    def lookup(self, ids):
        """Rows ``ids`` as a new torch tensor (len(ids), dim) of :attr:`dtype`,
        bit-identical to ``numpy_table[ids]``.

        ``ids``: a 1-D torch tensor, numpy array or list of integers (int64;
        other integer dtypes are converted); duplicates and any order are
        fine. An id < 0 or >= rows raises :class:`gpufeed.OutOfRangeError`
        (an IndexError) naming the id and the table; a non-1-D ``ids`` is a
        ValueError, non-integer ids a TypeError."""
        import torch
        flat = self._ids_array(ids)
        out = torch.empty((flat.shape[0], self.dim), dtype=self._dtype)
        # numpy has no bfloat16: the same bytes through an int16 view.
        target = out.view(torch.int16) if self._dtype == torch.bfloat16 else out
        self._native.lookup(flat, target.numpy())
        return out

    def _ids_array(self, ids):
        """``ids`` as a 1-D C-contiguous numpy int64 array (sharing a CPU
        int64 tensor's memory)."""
        import numpy
        if type(ids).__module__.startswith("torch"):
            import torch
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise TypeError(f"EmbeddingTable.lookup: ids must be integers, not {ids.dtype}")
            ids = ids.detach().to(device="cpu", dtype=torch.int64).numpy()
        array = numpy.asarray(ids)
        if array.ndim != 1:
            raise ValueError(f"EmbeddingTable.lookup: ids must be 1-D (N,), not shape "
                             f"{tuple(array.shape)}")
        if array.size == 0:
            return numpy.empty(0, dtype=numpy.int64)
        if array.dtype.kind not in "iu":
            raise TypeError(f"EmbeddingTable.lookup: ids must be integers, not {array.dtype}")
        if array.dtype.kind == "u" and array.dtype.itemsize == 8:
            too_large = numpy.flatnonzero(array > numpy.iinfo(numpy.int64).max)
            if too_large.size:
                from ._errors import OutOfRangeError
                position = int(too_large[0])
                raise OutOfRangeError(f"embedding table {self.path}: id {int(array[position])} "
                                      f"at position {position} is out of range (the table has "
                                      f"{self.rows} rows)")
        return numpy.ascontiguousarray(array, dtype=numpy.int64)

    def stats(self) -> Dict[str, Any]:
        """Counters since open (or :meth:`reset_stats`): ``lookups`` (calls),
        ``rows`` (ids), ``ram_hits``, ``nvme_rows`` and ``source_rows``
        (distinct missed rows read from the node-cache copy / the file),
        ``nvme_reads``, ``nvme_bytes``, ``source_reads``, ``source_bytes``,
        ``admitted``, ``rejected``, ``evicted`` (the RAM tier's admission),
        ``resident_rows``, ``resident_bytes``, ``capacity_rows``,
        ``preload_bytes``, the latency of a lookup call ``p50_us``,
        ``p99_us``, ``mean_us``, the total ``lookup_seconds``, and
        ``hit_rate`` (ram_hits / rows; 0 before any row)."""
        figures = struct_dict(self._native.stats())
        figures["hit_rate"] = figures["ram_hits"] / figures["rows"] if figures["rows"] else 0.0
        return figures

    def reset_stats(self) -> None:
        """Starts the counters and latencies again from zero (the tiers'
        contents stay)."""
        self._native.reset_stats()

    def __repr__(self) -> str:
        where = f", cache_dir={self._cache_dir!r}" if self._cache_dir else ""
        return (f"EmbeddingTable({self.path!r}, rows={self.rows}, dim={self.dim}, "
                f"dtype={self._dtype}, cache_bytes={human_bytes(self._cache_bytes)!r}{where})")
