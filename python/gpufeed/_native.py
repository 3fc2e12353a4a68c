"""Between the package's keywords and gpufeed._core's typed structs (private).

The public functions check their keywords and keep them as they always did
(``cache.cache_options`` and ``webdataset.webdataset_options`` return
dicts); these functions turn such checked values into the native option
structs (``_core.DatasetOptions``, ``CacheOptions``, ``WebDatasetOptions``,
``TabularDatasetOptions``)
just before a native call, and turn the native result structs
(``_core.VerifyReport``, ``ShardInfo``, ...) back into the dicts the public
functions return, generically: a field bound in C++ reaches the dict with
no change here."""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _core

__all__ = ["struct_dict", "native_cache_options", "native_webdataset_options",
           "native_tabular_options", "native_dataset_options"]

# cache_options()'s keys -> CacheOptions' fields.
_CACHE_FIELDS = {"cache_dir": "cache_dir", "cache_capacity": "capacity", "cache_policy": "policy",
                 "cache_prefetch": "prefetch_shards", "cache_wait": "wait_for_fill",
                 "cache_group": "cache_group"}
# webdataset_options()'s keys -> WebDatasetOptions' fields.
_WEBDATASET_FIELDS = {"image_key": "image_keys", "label_key": "label_key",
                      "label_field": "label_field", "tars": "tars", "index_dir": "index_dir"}
# TabularOptions._native()'s keys -> TabularDatasetOptions' fields.
_TABULAR_FIELDS = {"record_schema": "record_schema", "block_bytes": "block_bytes",
                   "index_dir": "index_dir"}


def struct_dict(native) -> Dict[str, Any]:
    """A bound struct of gpufeed._core as a dict: its properties in the order
    the binding declares them, enum values as their names ("uint16",
    "open"), nested structs as dicts and lists item by item."""
    return {name: _plain(getattr(native, name))
            for name, attribute in vars(type(native)).items() if isinstance(attribute, property)}


def _plain(value):
    if hasattr(type(value), "__members__"):  # a bound enum
        return str(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if type(value).__module__ == _core.__name__:  # a bound struct
        return struct_dict(value)
    return value


def _set_fields(native, fields: Dict[str, str], values: Dict[str, Any], what: str):
    """Sets native.<fields[key]> = value for each key of `values` whose value
    is not None (None keeps the struct's default); an unknown key is a bug
    of the caller: TypeError."""
    for key, value in values.items():
        if key not in fields:
            raise TypeError(f"unknown {what} option {key!r}")
        if value is not None:
            setattr(native, fields[key], value)
    return native


def native_cache_options(checked: Optional[Dict[str, Any]]) -> _core.CacheOptions:
    """gpufeed.cache.cache_options()'s dict (empty or None: no cache) as
    ``_core.CacheOptions``."""
    values = dict(checked or {})
    if values.get("cache_policy") is not None:
        values["cache_policy"] = _core.CachePolicy(values["cache_policy"])
    return _set_fields(_core.CacheOptions(), _CACHE_FIELDS, values, "cache")


def native_webdataset_options(options: Optional[Dict[str, Any]]) -> _core.WebDatasetOptions:
    """A WebDataset options dict (webdataset_options(), tar_source(),
    WebDatasetOptions._native()) as ``_core.WebDatasetOptions``."""
    return _set_fields(_core.WebDatasetOptions(), _WEBDATASET_FIELDS, dict(options or {}),
                       "webdataset")


def native_tabular_options(options: Optional[Dict[str, Any]]) -> _core.TabularDatasetOptions:
    """A tabular options dict (TabularOptions._native(): its record_schema
    already a ``_core.RecordSchema``) as ``_core.TabularDatasetOptions``."""
    return _set_fields(_core.TabularDatasetOptions(), _TABULAR_FIELDS, dict(options or {}),
                       "tabular")


def native_dataset_options(format: str = "auto", allow_external_paths: bool = False,
                           cache: Optional[Dict[str, Any]] = None,
                           token_dtype: Optional[str] = None, seq_len: Optional[int] = None,
                           webdataset: Optional[Dict[str, Any]] = None,
                           tabular: Optional[Dict[str, Any]] = None) -> _core.DatasetOptions:
    """How a dataset is opened, as ``_core.DatasetOptions``. An unknown
    ``format`` or ``token_dtype`` raises the library's InvalidArgumentError
    naming it (in this order, as the native calls always checked them);
    None keeps a field's default."""
    options = _core.DatasetOptions()
    options.format = format
    options.tokens.token_dtype = _core.TokenDtype(token_dtype or "auto")
    if seq_len is not None:
        options.tokens.seq_len = int(seq_len)
    options.allow_external_paths = bool(allow_external_paths)
    options.cache = native_cache_options(cache)
    options.webdataset = native_webdataset_options(webdataset)
    options.tabular = native_tabular_options(tabular)
    return options
