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
tar paths; image_key (default jpg, jpeg, png, webp) and label_key ("cls", or "json"
with label_field) choose the members (gpufeed.webdataset).

A format's own options come as one object, format_options=: a
gpufeed.WebDatasetOptions (the keywords image_key, label_key, label_field are
its shorthand), a gpufeed.TokenOptions (token_dtype of headerless files) or
a gpufeed.TabularOptions (record_schema, with record_schema= its shorthand,
block_bytes, index_dir).

Tabular rows (transform=gpufeed.Tabular(...)) come as (dense, sparse,
labels); with embeddings={column: gpufeed.EmbeddingTable} as (dense, sparse,
labels, emb), emb[column] the table's rows of sparse[:, column] (after
hashing), looked up by the loader's threads ahead of the training loop and
on the GPU with the batch under device="cuda" (docs/tabular.md).

After fork(), an inherited loader raises at once in the child (its threads
do not exist there); create a new one in the child. The parent's goes on.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from . import _core
from ._native import native_dataset_options, struct_dict
from ._loader_options import (_check_keywords, _check_source, _choose_device, _dataset_arguments,
                              _default_nodes, _default_rank_world, _embedding_lookups,
                              _format_options, _io_fault_options, _label_count, _loader_options,
                              _map_torch_keywords, _refuse_torch_keywords, _torch)
from .tabular import RecordSchema, TabularOptions
from .tokens import TokenOptions
from .transforms import ImageTransform, RawTransform, Tabular, TokenWindows
from .webdataset import WebDatasetOptions

__all__ = ["DataLoader", "ImageTransform", "RawTransform", "Tabular", "TokenWindows",
           "LoaderStats"]


class LoaderStats(dict):
    """Per-stage figures and the bottleneck verdict; str() is a report.

    ``bottleneck`` names the stage that limits throughput: "none" (no batch
    yet), "consumer", "read", "decode", "copy", "cpu-contention" or
    "lookup" (embedding lookups), judged from saturation (docs/tuning.md).
    The workers' time splits into ``read_share``, ``decode_share`` (=
    ``decode_cpu_share`` + ``cpu_wait_share``), ``lookup_share``
    (``embeddings=``: ``lookup_seconds``, ``lookup_rows`` ids),
    ``blocked_share`` and ``other_share``;
    ``consumer_wait_share`` and ``copy_share`` are of the elapsed time;
    ``expected_gain`` is what the advice would bring (0.4: +40%).
    ``verdict`` is the same judgement as a sentence, for people: branch on
    ``bottleneck``, never on the sentence."""

    def __str__(self) -> str:
        return self.get("report", dict.__repr__(self))


def _stats_dict(native: _core.LoaderStats) -> Dict[str, Any]:
    """Every property of the native stats, in the order the binding declares
    them (LoaderStats' fields, then ``report``); enum values as their names
    ("open", "cpu-contention")."""
    return struct_dict(native)


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

    on_error="skip": a bad sample's row is left out of its batch (no sample
    is delivered twice; a batch whose every sample failed has 0 rows, and
    the number of batches per epoch is unchanged); skipped_samples() lists
    the epoch's skipped samples. max_skipped (0.01): below 1 a fraction of
    the rank's epoch, from 1 a count; the batch whose skips pass it raises.

    embeddings: {sparse column: gpufeed.EmbeddingTable}, with
    transform=gpufeed.Tabular only: batches become (dense, sparse, labels,
    emb) with emb a dict in column order, emb[c] (B, table.dim) of
    table.dtype equal to table.lookup(sparse[:, c]).

    format_options: the options of the dataset's format, one object
    (gpufeed.WebDatasetOptions, gpufeed.TokenOptions or
    gpufeed.TabularOptions); image_key, label_key and label_field are
    WebDatasetOptions' fields as keywords, record_schema (format="records")
    TabularOptions' record_schema.
    """

    def __init__(self, source, batch_size: int = 1, shuffle: Union[bool, str] = True,
                 seed: Optional[int] = None, drop_last: bool = False,
                 transform: Union[ImageTransform, RawTransform, TokenWindows, Tabular, None] = None,
                 device: str = "cpu", num_threads: Optional[int] = None,
                 prefetch: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 num_nodes: Optional[int] = None, node_rank: Optional[int] = None,
                 io_backend: str = "auto", direct_io: bool = False, on_error: str = "raise",
                 max_skipped: float = 0.01,
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
                 format_options: Union[WebDatasetOptions, TokenOptions, TabularOptions,
                                       None] = None,
                 record_schema: Optional[RecordSchema] = None,
                 embeddings: Optional[Dict[int, Any]] = None,
                 io_retries: int = 3, io_timeout: float = 60.0, **torch_keywords):
        _refuse_torch_keywords(torch_keywords)
        _check_source(source)
        num_threads, prefetch, seed = _map_torch_keywords(
            num_workers, num_threads, prefetch_factor, prefetch, generator, seed, transform)
        shuffle = _check_keywords(batch_size, shuffle, on_error, label_dtype, io_backend,
                                  max_held_bytes, timeout, pin_memory_device)
        if not max_skipped >= 0:
            raise ValueError("max_skipped must be a count (>= 1) or a fraction (0 to 1), "
                             f"not {max_skipped!r}")
        self.timeout = float(timeout)
        self.persistent_workers = bool(persistent_workers)
        from .cache import cache_options
        # The node-local cache (gpufeed.cache): checked here, opened in C++.
        cache = cache_options(cache_dir, cache_capacity, cache_policy, cache_prefetch, cache_wait,
                              cache_group)
        lookups = _embedding_lookups(embeddings, transform)
        self._embedding_columns = [column for column, _ in lookups]
        placement = _choose_device(device, pin_memory, transform)
        self.device, self._device_path = placement.device, placement.path
        self._torch_device, self._pinned = placement.torch_device, placement.pinned
        transform = transform if transform is not None else ImageTransform()
        webdataset, tokens, tabular = _format_options(format, format_options, image_key,
                                                      label_key, label_field, record_schema)
        path, dataset = _dataset_arguments(source, format, webdataset, tokens, transform, cache,
                                           tabular)
        label_count, count_labels = _label_count(label_count, label_dtype, label_lengths)
        rank, world_size = _default_rank_world(rank, world_size)
        num_nodes, node_rank = (_default_nodes(num_nodes, node_rank, rank, world_size)
                                if shuffle == "node" else (1, 0))
        self.batch_size = batch_size
        self._options = _loader_options(
            transform, placement.options, shuffle, on_error, label_dtype, io_backend, direct_io,
            max_held_bytes, batch_size=int(batch_size), seed=seed,
            shuffle_window_shards=int(shuffle_window_shards), drop_last=bool(drop_last),
            rank=rank, world_size=world_size, num_nodes=num_nodes, node_rank=node_rank,
            num_threads=num_threads, prefetch=prefetch, label_count=label_count,
            label_lengths=bool(label_lengths), label_pad=float(label_pad),
            stats_window_seconds=float(stats_window_seconds), embeddings=lookups,
            max_skipped=float(max_skipped))
        _io_fault_options(self._options.io, io_retries, io_timeout)
        self._native = _core.Loader(path, self._options, native_dataset_options(**dataset),
                                    count_labels=count_labels)
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
        return _EpochIterator(self)

    def _begin_epoch(self):
        """At an iterator's first next(), as torch's generator would."""
        if not self._epoch_set and self._started:
            # A second loop without set_epoch goes on to the next epoch, as
            # torch's DataLoader reshuffles on every iteration.
            self._epoch += 1
            self._native.set_epoch(self._epoch)
        self._epoch_set = False
        self._started = True

    def _rows(self, batch):
        """The tuple a batch is delivered as."""
        if batch.extras:
            # Tabular rows: (dense, sparse, labels), and the embedding
            # rows after the ids.
            rows = (self._convert(batch.data), self._convert(batch.extras[0]),
                    self._convert(batch.labels))
            if self._embedding_columns:
                rows += ({column: self._convert(tensor) for column, tensor
                          in zip(self._embedding_columns, batch.extras[1:])},)
            return rows
        if batch.label_lengths is None:
            return self._convert(batch.data), self._convert(batch.labels)
        return (self._convert(batch.data), self._convert(batch.labels),
                self._convert(batch.label_lengths))

    _started = False

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

    def skipped_samples(self) -> List[Dict[str, Any]]:
        """on_error="skip": the samples left out of the batches delivered so far
        in the epoch in progress, as dicts {"sample", "path", "offset",
        "reason"} ("offset" None where the format knows no byte range)."""
        return list(self._native.skipped_samples())

    def stats(self, span: str = "open") -> LoaderStats:
        """The figures and the verdict over ``span``: "open" (since the loader
        opened), "recent" (the last ``stats_window_seconds``, 10 by default)
        or "epoch" (the epoch in progress, or the one just ended). Judge a
        loader on "recent" or "epoch": "open" mixes in start-up."""
        return LoaderStats(_stats_dict(self._native.stats(_core.StatsSpan(span))))

    def close(self) -> None:
        """Stops the loader's threads now (also done when it is garbage collected)."""
        self._native.close()

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()


class _EpochIterator:
    """The batches of one epoch, from ``iter(loader)``. Unlike a generator
    it outlives an exception: after a batch raised (``on_error="raise"``: a
    bad record, a storage fault), ``next()`` goes on with the following
    batch; a ``for`` loop the exception ended is simply left."""

    def __init__(self, loader):
        self._loader = loader
        self._begun = False
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if not self._begun:
            self._begun = True
            self._loader._begin_epoch()
        batch = self._loader._native.next(self._loader.timeout)
        if batch is None:
            self._done = True
            raise StopIteration
        return self._loader._rows(batch)
