"""WebDataset tar shards: the keyword arguments that choose the image and the
label members, and the sources a tar dataset may be given as (see
docs/formats.md, "WebDataset")."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple, Union

__all__ = ["webdataset_options", "is_tar_list"]


def is_tar_list(source) -> bool:
    """True for a list or tuple of ``.tar`` paths (a WebDataset source)."""
    return (isinstance(source, (list, tuple)) and len(source) > 0
            and all(isinstance(item, (str, os.PathLike)) for item in source))


def webdataset_options(source, image_key: Union[str, Sequence[str], None] = None,
                       label_key: Optional[str] = None, label_field: Optional[str] = None,
                       index_dir=None) -> Tuple[str, dict]:
    """Returns ``(path, options)`` for the native layer.

    ``source``: a path (a ``.tar``, a directory of them, a brace pattern such
    as ``"shards-{000000..000099}.tar"``, a list file) or a list of ``.tar``
    paths. ``image_key``: the image member's extension(s), the first present
    wins, as ``"jpg;png"`` or a list (default ``jpg``, ``jpeg``, ``png``).
    ``label_key``: ``"cls"`` (default; an integer as text) or ``"json"``, whose
    ``label_field`` (default ``"label"``) is the label. ``index_dir``: where a
    tar's member index is kept when the tar's directory is read-only.
    """
    options = {}
    if is_tar_list(source):
        tars = [os.path.abspath(os.fspath(item)) for item in source]
        options["tars"] = tars
        path = os.path.commonpath([os.path.dirname(tar) for tar in tars])
    else:
        path = os.fspath(source)
    if image_key is not None:
        keys = image_key.split(";") if isinstance(image_key, str) else list(image_key)
        keys = [key.strip().lstrip(".") for key in keys if key.strip()]
        if not keys:
            raise ValueError("image_key names no extension")
        options["image_key"] = keys
    if label_key is not None:
        if not label_key.strip("."):
            raise ValueError("label_key must name an extension such as \"cls\" or \"json\"")
        options["label_key"] = label_key.lstrip(".")
    if label_field is not None:
        options["label_field"] = str(label_field)
    if index_dir is not None:
        options["index_dir"] = os.path.abspath(os.fspath(index_dir))
    return path, options
