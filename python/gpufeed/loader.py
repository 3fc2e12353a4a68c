"""gpufeed.DataLoader: a drop-in for torch.utils.data.DataLoader.

    loader = gpufeed.DataLoader("/data/train-packed", batch_size=256,
                                transform=gpufeed.ImageTransform(224, train=True))
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            ...

Batches are torch tensors when torch is importable, numpy arrays otherwise,
viewing the loader's batch buffers through DLPack (zero copy). A buffer
returns to the loader when the last tensor viewing it is gone. Batches you
keep (list(loader), a few kept for evaluation) stay valid for as long as you
keep them: when every buffer is held the loader adds one, and frees it again
when its batch is released; max_held_bytes (default: a quarter of the memory,
or of the GPU's free memory) bounds that, with a ValueError naming it.

device="cuda" gives CUDA tensors from gpufeed's device stage (pinned buffers,
a copy stream, GPU normalize): torch's current stream waits for each batch on
the GPU, and a device buffer is reused only after that stream passed the
point where the tensor was freed. pin_memory=True gives pinned CPU tensors
for x.cuda(non_blocking=True): a pinned buffer is refilled only after the
copies queued from it (on torch's current stream) have read it.

WebDataset tar shards are read as they are: the source may be a .tar, a
directory of them, a brace pattern "shards-{000000..000099}.tar" or a list of
tar paths; image_key (default jpg, jpeg, png) and label_key ("cls", or "json"
with label_field) choose the members (gpufeed.webdataset).

After fork(), an inherited loader raises at once in the child (its threads
do not exist there); create a new one in the child. The parent's goes on.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _core
from ._errors import NotSupportedError

__all__ = ["DataLoader", "ImageTransform", "RawTransform", "TokenWindows", "LoaderStats"]

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class ImageTransform:
    """torchvision semantics, run in C++ on the decode threads.

    train=True: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip.
    train=False: Resize(round(size / 0.875)) + CenterCrop(size).
    Float outputs are x / 255 normalized by mean/std (ToTensor + Normalize);
    uint8 outputs are the pixels (4x fewer bytes; normalize on the GPU).
    """
    size: int = 224
    train: bool = True
    scale: Tuple[float, float] = (0.08, 1.0)
    ratio: Tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    mean: Sequence[float] = _IMAGENET_MEAN
    std: Sequence[float] = _IMAGENET_STD
    dtype: str = "float32"
    layout: str = "NCHW"
    normalize_on_device: Optional[bool] = None
    # Images whose header declares more pixels are refused before decoding
    # (a decompression bomb): PIL's default limit.
    max_pixels: int = 178_956_970

    def __post_init__(self):
        if self.dtype not in ("uint8", "float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be uint8, float32, float16 or bfloat16, not {self.dtype!r}")
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be NCHW or NHWC, not {self.layout!r}")
        if not 0 < self.size <= 8192:
            raise ValueError("size must be between 1 and 8192")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std take 3 values")
        if self.max_pixels < 1:
            raise ValueError("max_pixels must be positive")

    def _options(self) -> Dict[str, Any]:
        return dict(kind="image", size=self.size, train=self.train, scale=list(self.scale),
                    ratio=list(self.ratio), flip=self.flip, mean=list(self.mean),
                    std=list(self.std), dtype=self.dtype, layout=self.layout,
                    max_pixels=int(self.max_pixels))


@dataclasses.dataclass(frozen=True)
class RawTransform:
    """Record bytes as a fixed-length vector (e.g. int32 tokens), padded with
    `pad` or truncated: shape (batch, length)."""
    dtype: str = "uint8"
    shape: Tuple[int] = (0,)
    pad: int = 0

    def __post_init__(self):
        if self.dtype not in ("uint8", "int32", "int64", "float32"):
            raise ValueError(f"dtype must be uint8, int32, int64 or float32, not {self.dtype!r}")
        if len(self.shape) != 1 or self.shape[0] <= 0:
            raise ValueError("shape must be (length,) with a positive length")

    def _options(self) -> Dict[str, Any]:
        return dict(kind="raw", dtype=self.dtype, length=int(self.shape[0]), pad=int(self.pad))


_TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")


@dataclasses.dataclass(frozen=True)
class TokenWindows:
    """Fixed-length windows of a token corpus (Megatron .bin/.idx, llm.c
    shards, headerless token files): batches are ``(x, y)`` of shape
    (batch, seq_len), window i being ``stream[i*seq_len : i*seq_len+seq_len+1]``
    of the corpus's token stream, x its first seq_len tokens and y its last.

    ``dtype``: "int64" (default) or "int32". ``token_dtype``: the dtype of a
    headerless file (needed there; checked against the header elsewhere).
    ``block_bytes``: with shuffle="block" or False, windows are read in
    blocks of about this many bytes, one large read each."""
    seq_len: int = 1024
    dtype: str = "int64"
    token_dtype: Optional[str] = None
    block_bytes: int = 4 << 20

    def __post_init__(self):
        if not 0 < self.seq_len < 2 ** 31:
            raise ValueError("seq_len must be a positive int32")
        if self.dtype not in ("int64", "int32"):
            raise ValueError(f'dtype must be "int64" or "int32", not {self.dtype!r}')
        if self.token_dtype is not None and self.token_dtype not in _TOKEN_DTYPES:
            raise ValueError(f"token_dtype must be one of {', '.join(_TOKEN_DTYPES)}, "
                             f"not {self.token_dtype!r}")
        if not 0 < self.block_bytes < 2 ** 32:
            raise ValueError("block_bytes must be between 1 and 2**32 - 1")

    def _options(self) -> Dict[str, Any]:
        return dict(kind="tokens", seq_len=int(self.seq_len), dtype=self.dtype,
                    token_dtype=self.token_dtype or "auto", block_bytes=int(self.block_bytes))


class LoaderStats(dict):
    """Per-stage figures and the bottleneck verdict; str() is a report.

    ``bottleneck`` names the stage that limits throughput: "none" (no batch
    yet), "consumer", "read", "decode", "copy" or "cpu-contention", judged
    from saturation (docs/tuning.md). The workers' time splits into
    ``read_share``, ``decode_share`` (= ``decode_cpu_share`` +
    ``cpu_wait_share``), ``blocked_share`` and ``other_share``;
    ``consumer_wait_share`` and ``copy_share`` are of the elapsed time;
    ``expected_gain`` is what the advice would bring (0.4: +40%).
    ``verdict`` is the same judgement as a sentence, for people: branch on
    ``bottleneck``, never on the sentence."""

    def __str__(self) -> str:
        return self.get("report", dict.__repr__(self))


def _default_rank_world(rank, world_size):
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
    from .webdataset import is_tar_list
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


class DataLoader:
    """Iterable of (images, labels) batches; see the module docstring.

    torch's keywords are understood where their meaning carries over:
    num_workers (decode threads), prefetch_factor (batches per worker, so
    prefetch = prefetch_factor x num_workers, capped at 8), persistent_workers
    (accepted: the threads persist anyway), pin_memory, drop_last, shuffle,
    batch_size, generator (its initial_seed() is the seed), timeout (seconds a
    batch may take: RuntimeError after it, as torch). sampler, batch_sampler,
    collate_fn, worker_init_fn and multiprocessing_context raise a TypeError
    saying what to do instead.

    shuffle="node" (multi-node jobs): shards are partitioned over the nodes
    once (by seed and num_nodes), each node's ranks shuffle within its
    shards, every sample is still seen once per epoch across the job, and a
    node cache (cache_dir) holds only its node's share. num_nodes and
    node_rank default from torchrun's environment (WORLD_SIZE /
    LOCAL_WORLD_SIZE, GROUP_RANK or NODE_RANK); see docs/scaling.md.
    """

    def __init__(self, source, batch_size: int = 1, shuffle: Union[bool, str] = True,
                 seed: Optional[int] = None, drop_last: bool = False,
                 transform: Union[ImageTransform, RawTransform, TokenWindows, None] = None,
                 device: str = "cpu", num_threads: Optional[int] = None,
                 prefetch: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 num_nodes: Optional[int] = None, node_rank: Optional[int] = None,
                 io_backend: str = "auto", direct_io: bool = False, on_error: str = "raise",
                 label_dtype: str = "int64", cache_dir=None, cache_capacity=None,
                 shuffle_window_shards: int = 4, format: str = "auto",
                 pin_memory: bool = False, cache_policy: str = "train", cache_prefetch: int = 2,
                 cache_wait: bool = True, cache_group: Optional[str] = None,
                 num_workers: Optional[int] = None, prefetch_factor: Optional[int] = None,
                 persistent_workers: bool = False, generator=None, timeout: float = 0,
                 pin_memory_device: str = "", max_held_bytes: Optional[int] = None,
                 label_count: Optional[int] = None, label_lengths: bool = False,
                 label_pad: float = -1.0, stats_window_seconds: float = 10.0, image_key=None,
                 label_key: Optional[str] = None, label_field: Optional[str] = None,
                 **torch_keywords):
        for name in torch_keywords:
            if name in _TORCH_REFUSED:
                if name == "in_order" and torch_keywords[name]:
                    continue
                if torch_keywords[name] is None:
                    continue  # torch's own default: nothing asked
                raise TypeError(f"DataLoader({name}=...) is not supported: {_TORCH_REFUSED[name]}")
            raise TypeError(f"DataLoader() got an unexpected keyword argument {name!r}")
        _check_source(source)
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
            # Token windows: a batch of 32 x 2048 takes about 80 us to make,
            # so 2 batches ahead absorb no jitter at all (the decode threads
            # idled on a full window 35% of the time and a cold 1 GiB epoch
            # ran at 1.0 GB/s; with 8, 1.5 GB/s, at 1 MiB per batch).
            prefetch = 8 if isinstance(transform, TokenWindows) else 2
        if generator is not None:
            if seed is not None:
                raise TypeError("give generator or seed, not both")
            seed = int(generator.initial_seed()) & 0xFFFFFFFFFFFFFFFF
        if seed is None:
            seed = 0
        if max_held_bytes is not None and max_held_bytes < 1:
            raise ValueError("max_held_bytes must be positive (None: a quarter of the memory)")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if pin_memory_device not in ("", "cuda") and not str(pin_memory_device).startswith("cuda"):
            raise ValueError(f"pin_memory_device must be a CUDA device, not {pin_memory_device!r}")
        self.timeout = float(timeout)
        self.persistent_workers = bool(persistent_workers)
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
        from .cache import cache_options
        # The node-local cache (gpufeed.cache): checked here, opened in C++.
        cache = cache_options(cache_dir, cache_capacity, cache_policy, cache_prefetch, cache_wait,
                              cache_group)
        self.device, device_id = _parse_device(device)
        # "native": gpufeed's device stage (pinned buffers, copy stream, GPU
        # normalize); "torch": gpufeed was built without CUDA but torch has
        # it, so batches are moved with tensor.to() (a plain, synchronous copy).
        self._device_path = None
        native_device = {}
        if self.device == "cuda":
            reason = _core.cuda_status(device_id)
            torch = _torch()
            if torch is None:
                raise NotSupportedError('device="cuda" hands out torch tensors: torch is not '
                                        'importable here; use device="cpu"')
            if not reason:
                self._device_path = "native"
                native_device = dict(device="cuda", device_id=device_id)
                if isinstance(transform, ImageTransform):
                    on_device = transform.normalize_on_device
                    native_device["normalize_on_device"] = True if on_device is None else bool(on_device)
            elif torch.cuda.is_available() and not _core.build_info()["with_cuda"]:
                import warnings
                warnings.warn("gpufeed was built without CUDA: batches are copied to the GPU "
                              "with tensor.to() (no pinned double buffering, no GPU normalize)")
                self._device_path = "torch"
                self._torch_device = f"cuda:{device_id}"
            else:
                raise NotSupportedError(f'device="{device}": {reason}')
        if pin_memory and self.device == "cpu":
            reason = _core.cuda_status(0)
            if reason:
                import warnings
                warnings.warn(f"pin_memory=True ignored: {reason}")
            else:
                native_device["pin_memory"] = True
                self._pinned = True
        transform = transform if transform is not None else ImageTransform()
        from .webdataset import webdataset_options
        # WebDataset tars: which members are the image and the label, and a
        # list of tar paths as a source.
        if hasattr(source, "path"):  # a gpufeed Dataset: its tars and keys, then the keywords'
            path, tar_options = source.path, dict(getattr(source, "_tar_options", {}))
            tar_options.update(webdataset_options(path, image_key, label_key, label_field)[1])
        else:
            path, tar_options = webdataset_options(source, image_key, label_key, label_field)
        if label_lengths:
            # Variable-length labels (MXNet detection .rec): (images, labels,
            # lengths) with labels (B, label_count) padded with label_pad.
            if label_count is None or label_count < 1:
                raise ValueError("label_lengths=True needs label_count: the most labels a record "
                                 "has (a longer record raises naming it; nothing is truncated)")
            if label_dtype != "float32":
                raise ValueError('label_lengths=True needs label_dtype="float32"')
        elif label_count is None:
            label_count = 1
            if label_dtype == "float32":
                from .dataset import open_dataset
                label_count = max(1, len(open_dataset(
                    source if not hasattr(source, "path") else source.path, format=format,
                    image_key=image_key, label_key=label_key, label_field=label_field)[0].labels))
        elif label_count < 1:
            raise ValueError("label_count must be at least 1")
        rank, world_size = _default_rank_world(rank, world_size)
        num_nodes, node_rank = (_default_nodes(num_nodes, node_rank, rank, world_size)
                                if shuffle == "node" else (1, 0))
        self.batch_size = batch_size
        self._options = dict(
            batch_size=int(batch_size), shuffle=shuffle, seed=int(seed),
            shuffle_window_shards=int(shuffle_window_shards), drop_last=bool(drop_last),
            rank=rank, world_size=world_size, num_nodes=num_nodes, node_rank=node_rank,
            num_threads=int(num_threads or 0), prefetch=int(prefetch), on_error=on_error,
            label_dtype=label_dtype, label_count=int(label_count), io_backend=io_backend,
            label_lengths=bool(label_lengths), label_pad=float(label_pad),
            direct_io=bool(direct_io), transform=transform._options(), cache=cache,
            webdataset=tar_options,
            max_held_bytes=None if max_held_bytes is None else int(max_held_bytes),
            stats_window_seconds=float(stats_window_seconds),
            **native_device)
        self._native = _core.Loader(path, format, self._options)
        self._epoch = 0
        self._epoch_set = False
        self._torch = _torch()

    # -- iteration ----------------------------------------------------------

    def __len__(self) -> int:
        return int(self._native.batches_per_epoch())

    def set_epoch(self, epoch: int) -> None:
        """Restarts at the beginning of `epoch` (its order comes from seed and epoch)."""
        self._epoch = int(epoch)
        self._native.set_epoch(self._epoch)
        self._epoch_set = True

    def __iter__(self):
        if not self._epoch_set and self._started:
            # A second loop without set_epoch goes on to the next epoch, as
            # torch's DataLoader reshuffles on every iteration.
            self._epoch += 1
            self._native.set_epoch(self._epoch)
        self._epoch_set = False
        self._started = True
        while True:
            item = self._native.next(self.timeout)
            if item is None:
                return
            data, labels, lengths = item[0], item[1], item[5]
            if lengths is None:
                yield self._convert(data), self._convert(labels)
            else:
                yield self._convert(data), self._convert(labels), self._convert(lengths)

    _started = False
    _pinned = False

    def _convert(self, tensor):
        if self._device_path == "native":
            # torch passes its current stream to __dlpack__: that stream waits
            # for the copy on the GPU, and the buffer is reused only after it
            # passed the point where the tensor was freed.
            return self._torch.utils.dlpack.from_dlpack(tensor)
        if self._torch is not None:
            if self._pinned and self._torch.cuda.is_available():
                # x.cuda(non_blocking=True) copies on torch's current stream:
                # the pinned buffer is refilled only after that stream passed
                # the point where the tensor was freed (the legacy default
                # stream is always covered).
                tensor.record_stream(self._torch.cuda.current_stream().cuda_stream)
            out = self._torch.utils.dlpack.from_dlpack(tensor.__dlpack__())
            if self._device_path == "torch":
                out = out.to(self._torch_device, non_blocking=False)
            return out
        import numpy as np
        return np.from_dlpack(tensor)

    # -- state ----------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Where this loader stands: {seed, epoch, consumed, ...}; load it in a new
        process (also with another world size) to continue exactly there."""
        state = dict(self._native.state())
        state["batch_size"] = self.batch_size
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        native = {k: state[k] for k in ("seed", "epoch", "consumed", "shuffle",
                                        "shuffle_window_shards")}
        # shuffle="node": the split the state was drawn under (absent from
        # older states: this loader's own is assumed).
        native.update({k: state[k] for k in ("num_nodes", "world_size", "split_batch_size",
                                             "drop_last", "earlier_splits", "samples",
                                             "seq_len", "token_block_bytes") if k in state})
        self._native.restore(native)
        self._epoch = int(state["epoch"])
        self._epoch_set = True

    def stats(self, span: str = "open") -> LoaderStats:
        """The figures and the verdict over ``span``: "open" (since the loader
        opened), "recent" (the last ``stats_window_seconds``, 10 by default)
        or "epoch" (the epoch in progress, or the one just ended). Judge a
        loader on "recent" or "epoch": "open" mixes in start-up."""
        return LoaderStats(self._native.stats(span))

    def close(self) -> None:
        """Stops the loader's threads now (also done when it is garbage collected)."""
        self._native.close()

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()
