"""WebDataset tar shards: the options that choose the image and the label
members (:class:`WebDatasetOptions`), and the sources a tar dataset may be
given as (see docs/formats.md, "WebDataset")."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple, Union

__all__ = ["WebDatasetOptions", "webdataset_options", "tar_source", "is_tar_list"]


def is_tar_list(source) -> bool:
    """True for a list or tuple of ``.tar`` paths (a WebDataset source)."""
    return (isinstance(source, (list, tuple)) and len(source) > 0
            and all(isinstance(item, (str, os.PathLike)) for item in source))


def tar_source(source) -> Tuple[str, Dict[str, Any]]:
    """``(path, options)`` for a source: a list of ``.tar`` paths gives their
    common directory and ``{"tars": [absolute paths]}``; anything else is a
    path, with no options."""
    if is_tar_list(source):
        tars = [os.path.abspath(os.fspath(item)) for item in source]
        return os.path.commonpath([os.path.dirname(tar) for tar in tars]), {"tars": tars}
    return os.fspath(source), {}


@dataclasses.dataclass(frozen=True)
class WebDatasetOptions:
    """Which members of a WebDataset sample are the image and the label.

    ``image_key``: the image member's extension(s), the first present wins,
    as ``"jpg;png"`` or a list (None: ``jpg``, ``jpeg``, ``png``, ``webp``).
    ``label_key``: ``"cls"`` (None's meaning: an integer as text) or
    ``"json"``, whose ``label_field`` (None: ``"label"``) is the label.
    ``index_dir``: where a tar's member index is kept when the tar's
    directory is read-only. For ``format="tfrecord"``, ``image_key`` names the
    bytes_list feature(s) of the image (None: ``"image/encoded"``) and
    ``label_key`` the int64_list or float_list feature of the label(s)
    (None: ``"image/class/label"``). A field left None keeps the native default (or,
    for a DataLoader made from a gpufeed Dataset, that Dataset's choice)."""

    #: The formats these options are for.
    formats: ClassVar[Tuple[str, ...]] = ("webdataset", "tfrecord")

    image_key: Union[str, Sequence[str], None] = None
    label_key: Optional[str] = None
    label_field: Optional[str] = None
    index_dir: Union[str, os.PathLike, None] = None

    def __post_init__(self):
        self._native()  # raises for a key naming no extension

    def _native(self) -> Dict[str, Any]:
        """The fields that are set, as the native layer takes them."""
        options = {}
        if self.image_key is not None:
            keys = (self.image_key.split(";") if isinstance(self.image_key, str)
                    else list(self.image_key))
            keys = [key.strip().lstrip(".") for key in keys if key.strip()]
            if not keys:
                raise ValueError("image_key names no extension")
            options["image_key"] = keys
        if self.label_key is not None:
            if not self.label_key.strip("."):
                raise ValueError("label_key must name an extension such as \"cls\" or \"json\"")
            options["label_key"] = self.label_key.lstrip(".")
        if self.label_field is not None:
            options["label_field"] = str(self.label_field)
        if self.index_dir is not None:
            options["index_dir"] = os.path.abspath(os.fspath(self.index_dir))
        return options


def webdataset_options(source, image_key: Union[str, Sequence[str], None] = None,
                       label_key: Optional[str] = None, label_field: Optional[str] = None,
                       index_dir=None) -> Tuple[str, dict]:
    """Returns ``(path, options)`` for the native layer.

    ``source``: a path (a ``.tar``, a directory of them, a brace pattern such
    as ``"shards-{000000..000099}.tar"``, a list file) or a list of ``.tar``
    paths. The other arguments are :class:`WebDatasetOptions`' fields.
    """
    path, options = tar_source(source)
    options.update(WebDatasetOptions(image_key, label_key, label_field, index_dir)._native())
    return path, options
