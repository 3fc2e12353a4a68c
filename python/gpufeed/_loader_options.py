"""DataLoader's keywords turned into the native loader's arguments, one step
per function (private: gpufeed.DataLoader is the interface): torch's
keywords, the checks, the device, the formats' options, the label count,
the LoaderOptions struct."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Dict, List, Optional, Tuple

from . import _core
from ._errors import NotSupportedError
from .tabular import TabularOptions, tabular_options
from .tokens import TokenOptions
from .transforms import ImageTransform, Tabular, TokenWindows
from .webdataset import WebDatasetOptions, is_tar_list, tar_source


def _default_rank_world(rank, world_size):
    """(rank, world_size): the arguments, else torch.distributed when it is
    initialized, else RANK / WORLD_SIZE, else (0, 1)."""
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return (dist.get_rank() if rank is None else int(rank),
                    dist.get_world_size() if world_size is None else int(world_size))
    except ImportError:
        pass
    env_rank = int(os.environ.get("RANK", "0"))
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    return (env_rank if rank is None else int(rank),
            env_world if world_size is None else int(world_size))


def _default_nodes(num_nodes, node_rank, rank, world_size):
    """shuffle="node"'s node count and node: the arguments, else torchrun's
    environment (WORLD_SIZE / LOCAL_WORLD_SIZE nodes; GROUP_RANK or
    NODE_RANK), else one node. The ranks of a node are contiguous, so a
    missing node_rank is rank // (world_size // num_nodes)."""
    if num_nodes is None:
        local_world = os.environ.get("LOCAL_WORLD_SIZE")
        env_world = os.environ.get("WORLD_SIZE")
        num_nodes = 1
        if local_world and env_world and int(local_world) > 0:
            num_nodes = max(1, int(env_world) // int(local_world))
    num_nodes = int(num_nodes)
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be at least 1, not {num_nodes}")
    if world_size % num_nodes != 0:
        raise ValueError(f"world_size {world_size} is not a multiple of num_nodes {num_nodes}: "
                         "every node must run the same number of ranks")
    if node_rank is None:
        env_node = os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK"))
        node_rank = int(env_node) if env_node is not None else rank // (world_size // num_nodes)
    return num_nodes, int(node_rank)


def _parse_device(device) -> Tuple[str, int]:
    """"cpu", "cuda", "cuda:1" or a torch.device -> ("cpu" | "cuda", index)."""
    text = str(device)
    if text == "cpu":
        return "cpu", 0
    kind, _, index = text.partition(":")
    if kind != "cuda":
        raise ValueError(f'device must be "cpu", "cuda" or "cuda:N", not {text!r}')
    if index and not index.isdigit():
        raise ValueError(f"bad CUDA device index in {text!r}")
    device_index = None if isinstance(device, str) else getattr(device, "index", None)
    if not index and isinstance(device_index, int):  # torch.device("cuda", 1)
        return "cuda", device_index
    if not index:
        torch = _torch()
        if torch is not None and torch.cuda.is_available():
            return "cuda", int(torch.cuda.current_device())
        return "cuda", 0
    return "cuda", int(index)


def _torch():
    try:
        import torch
        import torch.utils.dlpack  # noqa: F401
        return torch
    except ImportError:
        return None


# torch.utils.data.DataLoader keywords whose meaning cannot carry over, and
# what to do instead (docs/python.md has the whole table).
_TORCH_REFUSED = {
    "sampler": "gpufeed samples from the packed dataset itself: use shuffle=, seed= and "
               "rank=/world_size= (or set_epoch) instead of a sampler",
    "batch_sampler": "gpufeed makes fixed-size batches itself: use batch_size= and drop_last=",
    "collate_fn": "gpufeed hands out stacked (data, labels) tensors: do extra per-batch work on "
                  "the batch in the training loop, or use RawTransform for non-image records",
    "worker_init_fn": "gpufeed's workers are C++ threads that run no Python: seed them with "
                      "seed= and do per-process setup before creating the loader",
    "multiprocessing_context": "gpufeed uses threads, not worker processes: nothing to choose",
    "in_order": "gpufeed always delivers batches in order (deterministic by seed and epoch)",
}


def _check_source(source):
    if isinstance(source, (str, bytes, os.PathLike)) or hasattr(source, "path"):
        return
    if is_tar_list(source):
        return  # WebDataset shards
    if hasattr(source, "__getitem__") or hasattr(source, "__iter__"):
        raise TypeError(
            f"gpufeed.DataLoader reads packed datasets, not a {type(source).__name__} object: "
            "pack the data once (gpufeed.pack(folder_or_list, out) or `gpufeed pack`) and pass "
            "the packed path; an ImageFolder directory or an LMDB path is read as is")
    raise TypeError(f"source must be a path or a gpufeed dataset, not {type(source).__name__}")


def _refuse_torch_keywords(keywords: Dict[str, Any]) -> None:
    """TypeError for a torch keyword whose meaning cannot carry over (unless
    left at torch's default) and for any other unknown keyword."""
    for name, value in keywords.items():
        if name in _TORCH_REFUSED:
            if name == "in_order" and value:
                continue
            if value is None:
                continue  # torch's own default: nothing asked
            raise TypeError(f"DataLoader({name}=...) is not supported: {_TORCH_REFUSED[name]}")
        raise TypeError(f"DataLoader() got an unexpected keyword argument {name!r}")


def _map_torch_keywords(num_workers, num_threads, prefetch_factor, prefetch, generator, seed,
                        transform) -> Tuple[int, int, int]:
    """(num_threads, prefetch, seed) from gpufeed's keywords or torch's
    (num_workers, prefetch_factor, generator); giving both names is a TypeError."""
    if num_workers is not None:
        if num_threads is not None:
            raise TypeError("give num_workers (torch's name) or num_threads, not both")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative")
        num_threads = int(num_workers)  # 0: all cores (gpufeed never loads on the caller)
    if prefetch_factor is not None:
        if prefetch is not None:
            raise TypeError("give prefetch_factor (torch's name) or prefetch, not both")
        if prefetch_factor < 1:
            raise ValueError("prefetch_factor must be positive")
        workers = num_threads if num_threads else (os.cpu_count() or 1)
        prefetch = max(1, min(8, int(prefetch_factor) * int(workers)))
    if prefetch is None:
        # Token windows are made in microseconds: 2 batches ahead absorb no
        # jitter of the consumer, 8 keep the workers busy (docs/tokens.md).
        prefetch = 8 if isinstance(transform, TokenWindows) else 2
    if generator is not None:
        if seed is not None:
            raise TypeError("give generator or seed, not both")
        seed = int(generator.initial_seed()) & 0xFFFFFFFFFFFFFFFF
    return int(num_threads or 0), int(prefetch), 0 if seed is None else int(seed)


def _check_keywords(batch_size, shuffle, on_error, label_dtype, io_backend, max_held_bytes,
                    timeout, pin_memory_device) -> str:
    """ValueError for a keyword outside its range or names; returns the
    shuffle mode's name (True: "global", False: "none")."""
    if max_held_bytes is not None and max_held_bytes < 1:
        raise ValueError("max_held_bytes must be positive (None: a quarter of the memory)")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if pin_memory_device not in ("", "cuda") and not str(pin_memory_device).startswith("cuda"):
        raise ValueError(f"pin_memory_device must be a CUDA device, not {pin_memory_device!r}")
    if isinstance(shuffle, bool):
        shuffle = "global" if shuffle else "none"
    if shuffle not in ("global", "block", "node", "none"):
        raise ValueError('shuffle must be True, False, "global", "block", "node" or "none", '
                         f'not {shuffle!r}')
    if on_error not in ("raise", "skip"):
        raise ValueError(f'on_error must be "raise" or "skip", not {on_error!r}')
    if label_dtype not in ("int64", "float32"):
        raise ValueError(f'label_dtype must be "int64" or "float32", not {label_dtype!r}')
    if io_backend not in ("auto", "io_uring", "pread"):
        raise ValueError(f'io_backend must be "auto", "io_uring" or "pread", not {io_backend!r}')
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    return shuffle


def _io_fault_options(io, io_retries, io_timeout) -> None:
    """Sets the storage-fault keywords on `io` (a _core.IoOptions):
    io_retries transient read errors tried again (backoff from 50 ms,
    doubling), io_timeout seconds before a read that never completes fails
    (None or 0: no limit)."""
    if isinstance(io_retries, bool) or not isinstance(io_retries, int) or not 0 <= io_retries <= 100:
        raise ValueError(f"io_retries must be an integer from 0 to 100, not {io_retries!r}")
    timeout = 0.0 if io_timeout is None else float(io_timeout)
    if not timeout >= 0 or timeout == float("inf"):
        raise ValueError(f"io_timeout must be a finite number of seconds >= 0 (0 or None: no "
                         f"limit), not {io_timeout!r}")
    io.retries = io_retries
    io.timeout_seconds = timeout


@dataclasses.dataclass
class _Placement:
    """Where batches go. path: None (host batches), "native" (gpufeed's
    device stage: pinned buffers, copy stream, GPU normalize) or "torch"
    (gpufeed was built without CUDA but torch has it: tensor.to(), a plain
    synchronous copy, to torch_device)."""
    device: str
    options: _core.DeviceOptions
    path: Optional[str] = None
    torch_device: Optional[str] = None
    pinned: bool = False


def _choose_device(device, pin_memory: bool, transform) -> _Placement:
    """device= and pin_memory= as a placement; NotSupportedError when CUDA
    is asked for and neither gpufeed nor torch can give it."""
    kind, device_id = _parse_device(device)
    placement = _Placement(kind, _core.DeviceOptions())
    if kind == "cuda":
        reason = _core.cuda_status(device_id)
        torch = _torch()
        if torch is None:
            raise NotSupportedError('device="cuda" hands out torch tensors: torch is not '
                                    'importable here; use device="cpu"')
        if not reason:
            placement.path = "native"
            placement.options.kind = _core.DeviceKind.CUDA
            placement.options.device_id = device_id
            if isinstance(transform, ImageTransform) and transform.normalize_on_device is not None:
                placement.options.normalize_on_device = bool(transform.normalize_on_device)
        elif torch.cuda.is_available() and not _core.build_info()["with_cuda"]:
            warnings.warn("gpufeed was built without CUDA: batches are copied to the GPU "
                          "with tensor.to() (no pinned double buffering, no GPU normalize)")
            placement.path, placement.torch_device = "torch", f"cuda:{device_id}"
        else:
            raise NotSupportedError(f'device="{device}": {reason}')
    if pin_memory and kind == "cpu":
        reason = _core.cuda_status(0)
        if reason:
            warnings.warn(f"pin_memory=True ignored: {reason}")
        else:
            placement.options.pin_memory = placement.pinned = True
    return placement


def _format_options(format: str, format_options, image_key, label_key, label_field,
                    record_schema=None
                    ) -> Tuple[WebDatasetOptions, TokenOptions, Optional[TabularOptions]]:
    """The options of each format: format_options= (one object), or the
    WebDataset keywords or record_schema= (their shorthands), else the
    defaults (tabular: None)."""
    keywords = dict(image_key=image_key, label_key=label_key, label_field=label_field)
    keywords = {name: value for name, value in keywords.items() if value is not None}
    if format_options is None:
        return (WebDatasetOptions(**keywords), TokenOptions(),
                tabular_options(format, None, record_schema))
    if keywords:
        raise TypeError(f"give {', '.join(keywords)} or format_options=, not both "
                        "(gpufeed.WebDatasetOptions has the same fields)")
    if not isinstance(format_options, (WebDatasetOptions, TokenOptions, TabularOptions)):
        raise TypeError("format_options must be a gpufeed.WebDatasetOptions, a "
                        "gpufeed.TokenOptions or a gpufeed.TabularOptions, not "
                        f"{type(format_options).__name__}")
    if format != "auto" and format not in format_options.formats:
        raise ValueError(f"format_options={type(format_options).__name__}(...) is for "
                         f"{', '.join(format_options.formats)}, not format={format!r}")
    if isinstance(format_options, TabularOptions):
        return (WebDatasetOptions(), TokenOptions(),
                tabular_options(format, format_options, record_schema))
    tabular = tabular_options(format, None, record_schema)
    if isinstance(format_options, WebDatasetOptions):
        return format_options, TokenOptions(), tabular
    return WebDatasetOptions(), format_options, tabular


def _dataset_arguments(source, format: str, webdataset: WebDatasetOptions,
                       tokens: TokenOptions, transform, cache,
                       tabular: Optional[TabularOptions] = None) -> Tuple[Any, Dict[str, Any]]:
    """(path, how the dataset is opened there: the keywords of
    gpufeed._native.native_dataset_options, which makes the
    _core.DatasetOptions of _core.Loader from them)."""
    if hasattr(source, "path"):  # a gpufeed Dataset: its tars and keys, then these options'
        path, tar_options = source.path, dict(getattr(source, "_tar_options", {}))
        if tabular is None and getattr(source, "_tabular_options", None) is not None:
            tabular = source._tabular_options  # its record schema, and its format
            format = source.format if format == "auto" else format
    else:
        path, tar_options = tar_source(source)
    tar_options.update(webdataset._native())
    token_dtype = tokens.token_dtype
    if isinstance(transform, TokenWindows) and transform.token_dtype is not None:
        if token_dtype is not None and token_dtype != transform.token_dtype:
            raise ValueError(f"TokenWindows(token_dtype={transform.token_dtype!r}) and "
                             f"TokenOptions(token_dtype={token_dtype!r}) differ: give it once")
        token_dtype = transform.token_dtype
    return path, dict(format=format, cache=cache, webdataset=tar_options,
                      token_dtype=token_dtype or "auto",
                      tabular=tabular._native() if tabular is not None else None)


def _embedding_lookups(embeddings, transform) -> List[Tuple[int, Any]]:
    """``embeddings=`` ({sparse column: gpufeed.EmbeddingTable}) as the
    native (column, table) pairs, in column order (the order of the batch's
    ``emb`` dict). Tabular rows only; the columns are checked against the
    dataset by the native loader."""
    if embeddings is None or (isinstance(embeddings, dict) and not embeddings):
        return []
    if not isinstance(transform, Tabular):
        raise ValueError("embeddings= looks up the sparse ids of tabular rows: it needs "
                         "transform=gpufeed.Tabular(...), not "
                         f"{type(transform).__name__ if transform is not None else 'None'}")
    if not isinstance(embeddings, dict):
        raise TypeError("embeddings must be a dict {sparse column: gpufeed.EmbeddingTable}, "
                        f"not {type(embeddings).__name__}")
    for column in embeddings:
        if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < 2**32:
            raise ValueError(f"embeddings: keys are sparse column indices (ints from 0), "
                             f"not {column!r}")
    pairs = []
    for column in sorted(embeddings):
        table = embeddings[column]
        native = getattr(table, "_native", table)
        if not isinstance(native, _core.EmbeddingTable):
            raise TypeError(f"embeddings[{column}] must be a gpufeed.EmbeddingTable, not "
                            f"{type(table).__name__}")
        pairs.append((int(column), native))
    return pairs


def _label_count(label_count, label_dtype: str, label_lengths: bool) -> Tuple[int, bool]:
    """(label_count, count_labels): count_labels asks the native loader to
    take the count from the dataset's first record (float labels, no count
    given)."""
    if label_lengths:
        # Variable-length labels (MXNet detection .rec): (images, labels,
        # lengths) with labels (B, label_count) padded with label_pad.
        if label_count is None or label_count < 1:
            raise ValueError("label_lengths=True needs label_count: the most labels a record "
                             "has (a longer record raises naming it; nothing is truncated)")
        if label_dtype != "float32":
            raise ValueError('label_lengths=True needs label_dtype="float32"')
        return int(label_count), False
    if label_count is None:
        return 1, label_dtype == "float32"
    if label_count < 1:
        raise ValueError("label_count must be at least 1")
    return int(label_count), False


def _loader_options(transform, device: _core.DeviceOptions, shuffle: str, on_error: str,
                    label_dtype: str, io_backend: str, direct_io: bool, max_held_bytes,
                    **fields) -> _core.LoaderOptions:
    """The native options: `fields` are LoaderOptions' own names (batch_size,
    seed, rank, ...); the strings become their enums (an unknown one is a
    ValueError naming it)."""
    options = _core.LoaderOptions()
    for name, value in fields.items():
        setattr(options, name, value)
    options.shuffle = _core.ShuffleMode(shuffle)
    options.on_error = _core.OnError(on_error)
    options.label_type = _core.LabelType(label_dtype)
    options.io.backend = _core.IoBackend(io_backend)
    options.io.direct_io = bool(direct_io)
    if max_held_bytes is not None:
        options.max_held_bytes = int(max_held_bytes)
    options.device = device
    transform._apply(options)
    return options
