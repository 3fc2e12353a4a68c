"""Tabular (CTR) datasets: the options of their formats. ``format="records"``
reads fixed-size binary records laid out as a :class:`RecordSchema` (a
label, then dense values, then sparse ids, packed little-endian: MLPerf
DLRM's 160-byte records by default); :class:`TabularOptions` holds the
schema and how rows are read (docs/formats.md, "Fixed-size binary records").

    >>> schema = gpufeed.RecordSchema(label="int32", dense=("int32", 13), sparse=("int32", 26))
    >>> ds = gpufeed.open_dataset("/data/criteo-records", format="records", record_schema=schema)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Dict, Optional, Tuple, Union

from . import _core

__all__ = ["RecordSchema", "TabularOptions", "FIELD_TYPES", "tabular_options"]

#: Names a field's type may take (numpy's names).
FIELD_TYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "uint64", "float16", "float32", "float64")

_NUMPY_CODES = {"bool": "?", "int8": "i1", "uint8": "u1", "int16": "<i2", "uint16": "<u2",
                "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
                "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def _type_name(value, what: str) -> str:
    """A field type's name: a string of FIELD_TYPES, or a numpy dtype or
    scalar type (np.int32, np.dtype("float16")) naming one."""
    name = value if isinstance(value, str) else None
    if name is None:
        try:
            import numpy
            name = numpy.dtype(value).name
        except (ImportError, TypeError):
            name = None
    if name not in FIELD_TYPES:
        raise ValueError(f"{what} type must be one of {', '.join(FIELD_TYPES)}, not {value!r}")
    return name


def _field(value, what: str) -> Tuple[str, int]:
    """A dense or sparse field given as (type, count)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{what} must be a (type, count) pair such as (\"int32\", 13), "
                         f"not {value!r}")
    count = value[1]
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**32:
        raise ValueError(f"{what} count must be an integer from 0 to 2**32 - 1, not {count!r}")
    return _type_name(value[0], what), int(count)


@dataclasses.dataclass(frozen=True)
class RecordSchema:
    """The layout of one fixed-size binary record (``format="records"``): the
    label, then ``dense[1]`` values of type ``dense[0]``, then ``sparse[1]``
    ids of type ``sparse[0]``, packed little-endian with no padding. Types
    are names of :data:`FIELD_TYPES` or numpy dtypes. The default is MLPerf
    DLRM's 160-byte record."""

    label: str = "int32"
    dense: Tuple[str, int] = ("int32", 13)
    sparse: Tuple[str, int] = ("int32", 26)

    def __post_init__(self):
        object.__setattr__(self, "label", _type_name(self.label, "label"))
        object.__setattr__(self, "dense", _field(self.dense, "dense"))
        object.__setattr__(self, "sparse", _field(self.sparse, "sparse"))

    @property
    def record_bytes(self) -> int:
        """Bytes of one record."""
        return self._native().record_bytes

    def numpy_dtype(self):
        """The record as a numpy structured dtype (fields ``label``, ``dense``,
        ``sparse``): ``np.fromfile(path, schema.numpy_dtype())`` reads a file."""
        import numpy
        return numpy.dtype([("label", _NUMPY_CODES[self.label]),
                            ("dense", _NUMPY_CODES[self.dense[0]], (self.dense[1],)),
                            ("sparse", _NUMPY_CODES[self.sparse[0]], (self.sparse[1],))])

    def _native(self) -> _core.RecordSchema:
        native = _core.RecordSchema()
        native.label = _core.FieldType(self.label)
        native.dense, native.dense_count = _core.FieldType(self.dense[0]), self.dense[1]
        native.sparse, native.sparse_count = _core.FieldType(self.sparse[0]), self.sparse[1]
        return native


@dataclasses.dataclass(frozen=True)
class TabularOptions:
    """How a tabular dataset is opened (``format_options=``).

    ``record_schema``: the layout of a record (``format="records"``; None:
    :class:`RecordSchema`'s default). ``block_bytes``: consecutive rows are
    read together in blocks of about this many bytes (the units of
    ``shuffle="block"``; None: 8 MiB). ``index_dir``: where a text file's
    line index is kept when its directory is read-only (``criteo_tsv``).
    A field left None keeps the native default."""

    #: The formats these options are for.
    formats: ClassVar[Tuple[str, ...]] = ("records", "criteo_npy", "criteo_tsv")

    record_schema: Optional[RecordSchema] = None
    block_bytes: Optional[int] = None
    index_dir: Union[str, os.PathLike, None] = None

    def __post_init__(self):
        if self.record_schema is not None and not isinstance(self.record_schema, RecordSchema):
            raise TypeError("record_schema must be a gpufeed.RecordSchema, not "
                            f"{type(self.record_schema).__name__}")
        if self.block_bytes is not None and (isinstance(self.block_bytes, bool) or
                                             not isinstance(self.block_bytes, int) or
                                             not 1 <= self.block_bytes < 2**32):
            raise ValueError(f"block_bytes must be an integer from 1 to 2**32 - 1, "
                             f"not {self.block_bytes!r}")

    def _native(self) -> Dict[str, Any]:
        """The fields that are set, as the native layer takes them."""
        options: Dict[str, Any] = {}
        if self.record_schema is not None:
            options["record_schema"] = self.record_schema._native()
        if self.block_bytes is not None:
            options["block_bytes"] = int(self.block_bytes)
        if self.index_dir is not None:
            options["index_dir"] = os.path.abspath(os.fspath(self.index_dir))
        return options


def tabular_options(format: str, format_options: Optional[TabularOptions],
                    record_schema: Optional[RecordSchema]) -> Optional[TabularOptions]:
    """The tabular options of a call: ``format_options`` (a TabularOptions),
    or ``record_schema=`` (its shorthand), else None. ``record_schema`` is
    for ``format="records"`` only: raw records are never detected."""
    if record_schema is None:
        return format_options
    if not isinstance(record_schema, RecordSchema):
        raise TypeError("record_schema must be a gpufeed.RecordSchema, not "
                        f"{type(record_schema).__name__}")
    if format != "records":
        raise ValueError(f'record_schema= is for format="records" (raw records are never '
                         f'detected), not format={format!r}')
    if format_options is not None:
        raise TypeError("give record_schema or format_options=, not both "
                        "(gpufeed.TabularOptions has a record_schema field)")
    return TabularOptions(record_schema=record_schema)
