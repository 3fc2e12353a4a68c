# Type stubs of the private native module (the public API is gpufeed.*).
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, overload

def build_info() -> Dict[str, Any]: ...
def pack(source: str, destination: str, options: PackOptions,
         progress: Optional[Callable[[int, int], None]] = ...) -> PackSummary: ...
def verify(path: str, options: DatasetOptions = ...) -> VerifyReport: ...
def format_names() -> List[str]: ...
def pack_format_names() -> List[str]: ...
def token_format_names() -> List[str]: ...
def write_index(rec_path: str, idx_path: str) -> int: ...
def write_tar_index(tar_path: str, index_path: str = ...) -> int: ...
# Criteo TSV: (file, lines, index path) per file; reads options.tabular.index_dir,
# options.cache.cache_dir, options.allow_external_paths.
def write_line_index(path: str, options: DatasetOptions = ...) -> List[Tuple[str, int, str]]: ...
# Reads options.format, options.tokens.token_dtype, options.allow_external_paths.
def write_token_manifest(path: str, options: DatasetOptions = ...) -> Tuple[str, int]: ...
def cuda_status(device_id: int = ...) -> str: ...
def cache_stat(cache_dir: str) -> CacheReport: ...
def cache_clear(cache_dir: str, dataset: str = ...) -> Tuple[int, int]: ...
def cache_warm(source: str, options: CacheOptions,
               progress: Optional[Callable[[int, int], None]] = ...,
               dataset: Optional[DatasetOptions] = ...) -> CacheWarmSummary: ...
def cache_put_checkpoint(path: str, cache_dir: str, keep: int, cache_group: str = ...) -> str: ...
def cache_latest_checkpoint(directory: str, cache_dir: str) -> Optional[Tuple[str, str]]: ...
def _transform_image(data: bytes, size: int, train: bool, seed: int, epoch: int, sample_id: int,
                     dtype: str, layout: str, flip: bool, scale: List[float], ratio: List[float],
                     mean: List[float], std: List[float], exact: bool = ...) -> Tuple[bytes, Dict[str, Any]]: ...

class Dataset:
    def __init__(self, path: str, options: DatasetOptions = ...) -> None: ...
    @property
    def tokens(self) -> Optional[TokenCorpusInfo]: ...
    @property
    def tabular(self) -> Optional[TabularInfo]: ...
    def __len__(self) -> int: ...
    def read(self, index: int) -> Record: ...
    @property
    def format(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def integer_labels(self) -> bool: ...
    @property
    def shards(self) -> List[ShardInfo]: ...
    def storage_stats(self) -> StorageStats: ...

class _TextEnum:
    """A C++ enum: Enum.ATTRIBUTE; Enum("text") parses the keyword's string
    (ValueError naming it and listing the accepted ones); str() gives it."""
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    def __str__(self) -> str: ...

class ShuffleMode(_TextEnum):
    NONE: ShuffleMode  # "none"
    GLOBAL: ShuffleMode  # "global"
    BLOCK: ShuffleMode  # "block"
    NODE: ShuffleMode  # "node"
    def __init__(self, name: Union[str, int]) -> None: ...

class OnError(_TextEnum):
    RAISE: OnError  # "raise"
    SKIP: OnError  # "skip"
    def __init__(self, name: Union[str, int]) -> None: ...

class TransformKind(_TextEnum):
    IMAGE: TransformKind  # "image"
    RAW: TransformKind  # "raw"
    TOKEN_WINDOWS: TransformKind  # "tokens"
    TABULAR: TransformKind  # "tabular"
    def __init__(self, name: Union[str, int]) -> None: ...

class LabelType(_TextEnum):
    AUTO: LabelType  # "auto"
    INT64: LabelType  # "int64"
    FLOAT32: LabelType  # "float32"
    def __init__(self, name: Union[str, int]) -> None: ...

class IoBackend(_TextEnum):
    AUTO: IoBackend  # "auto"
    IO_URING: IoBackend  # "io_uring"
    PREAD: IoBackend  # "pread"
    def __init__(self, name: Union[str, int]) -> None: ...

class DeviceKind(_TextEnum):
    CPU: DeviceKind  # "cpu"
    CUDA: DeviceKind  # "cuda"
    def __init__(self, name: Union[str, int]) -> None: ...

class TensorDtype(_TextEnum):
    UINT8: TensorDtype
    INT32: TensorDtype
    INT64: TensorDtype
    FLOAT16: TensorDtype
    BFLOAT16: TensorDtype
    FLOAT32: TensorDtype
    INT8: TensorDtype
    def __init__(self, name: Union[str, int]) -> None: ...

class OutputLayout(_TextEnum):
    NCHW: OutputLayout
    NHWC: OutputLayout
    def __init__(self, name: Union[str, int]) -> None: ...

class RawElement(_TextEnum):
    UINT8: RawElement
    INT32: RawElement
    INT64: RawElement
    FLOAT32: RawElement
    def __init__(self, name: Union[str, int]) -> None: ...

class Bottleneck(_TextEnum):
    NONE: Bottleneck  # "none"
    CONSUMER: Bottleneck  # "consumer"
    READ: Bottleneck  # "read"
    DECODE: Bottleneck  # "decode"
    COPY: Bottleneck  # "copy"
    CPU_CONTENTION: Bottleneck  # "cpu-contention"
    LOOKUP: Bottleneck  # "lookup"
    def __init__(self, name: Union[str, int]) -> None: ...

class StatsSpan(_TextEnum):
    SINCE_OPEN: StatsSpan  # "open"
    RECENT: StatsSpan  # "recent"
    EPOCH: StatsSpan  # "epoch"
    def __init__(self, name: Union[str, int]) -> None: ...

# TokenDtype("x") and CachePolicy("x") raise the library's
# InvalidArgumentError (a ValueError) listing the accepted names.
class TokenDtype(_TextEnum):
    AUTO: TokenDtype  # "auto"
    UINT8: TokenDtype
    INT8: TokenDtype
    INT16: TokenDtype
    UINT16: TokenDtype
    INT32: TokenDtype
    UINT32: TokenDtype
    INT64: TokenDtype
    def __init__(self, name: Union[str, int]) -> None: ...

class CachePolicy(_TextEnum):
    TRAIN: CachePolicy  # "train"
    PINNED: CachePolicy  # "pinned"
    CHECKPOINT: CachePolicy  # "checkpoint"
    def __init__(self, name: Union[str, int]) -> None: ...

# FieldType("x") takes numpy's names ("int32", "float16", ...).
class FieldType(_TextEnum):
    BOOL: FieldType
    INT8: FieldType
    UINT8: FieldType
    INT16: FieldType
    UINT16: FieldType
    INT32: FieldType
    UINT32: FieldType
    INT64: FieldType
    UINT64: FieldType
    FLOAT16: FieldType
    FLOAT32: FieldType
    FLOAT64: FieldType
    def __init__(self, name: Union[str, int]) -> None: ...

# The option structs of include/gpufeed/options.h and loader.h, field for
# field; nested structs are views into their parent. copy.copy copies.
class ImageTransformOptions:
    size: int
    train: bool
    scale_min: float
    scale_max: float
    ratio_min: float
    ratio_max: float
    flip: bool
    crop_fraction: float
    mean: List[float]  # 3 values
    std: List[float]  # 3 values
    dtype: TensorDtype
    layout: OutputLayout
    max_pixels: int
    exact: bool
    def __init__(self) -> None: ...
    def __copy__(self) -> ImageTransformOptions: ...

class RawTransformOptions:
    element: RawElement
    length: int
    pad: int
    def __init__(self) -> None: ...
    def __copy__(self) -> RawTransformOptions: ...

class TabularTransformOptions:
    dense_log1p: bool
    hash_sizes: List[int]
    sparse_dtype: TensorDtype
    def __init__(self) -> None: ...
    def __copy__(self) -> TabularTransformOptions: ...

class TokenWindowOptions:
    seq_len: int
    dtype: TensorDtype
    block_bytes: int
    def __init__(self) -> None: ...
    def __copy__(self) -> TokenWindowOptions: ...

class IoOptions:
    backend: IoBackend
    queue_depth: int
    threads: int
    inflight_bytes: int
    direct_io: bool
    register_buffers: bool
    register_files: bool
    retries: int
    retry_backoff_ms: int
    timeout_seconds: float
    def __init__(self) -> None: ...
    def __copy__(self) -> IoOptions: ...

class DeviceOptions:
    kind: DeviceKind
    device_id: int
    normalize_on_device: bool
    pin_memory: bool
    def __init__(self) -> None: ...
    def __copy__(self) -> DeviceOptions: ...

class LoaderOptions:
    batch_size: int
    shuffle: ShuffleMode
    seed: int
    shuffle_window_shards: int
    drop_last: bool
    rank: int
    world_size: int
    num_nodes: int
    node_rank: int
    num_threads: int
    prefetch: int
    stats_window_seconds: float
    transform: TransformKind
    image: ImageTransformOptions
    raw: RawTransformOptions
    tokens: TokenWindowOptions
    tabular: TabularTransformOptions
    label_count: int
    label_lengths: bool
    label_pad: float
    label_type: LabelType
    on_error: OnError
    max_skipped: float
    max_held_bytes: int
    io: IoOptions
    device: DeviceOptions
    # (sparse column, table) pairs, a copy (assign a whole list); the
    # tables are EmbeddingTable objects.
    embeddings: List[Tuple[int, EmbeddingTable]]
    def __init__(self) -> None: ...
    def __copy__(self) -> LoaderOptions: ...

# The dataset-side option structs of include/gpufeed/dataset.h, cache.h and
# writer.h, field for field; nested structs are views into their parent,
# list fields are copies (assign a whole list). `format` is a registered
# name: setting an unknown one raises InvalidArgumentError (a ValueError).
class CacheOptions:
    cache_dir: str
    capacity: int
    policy: CachePolicy
    prefetch_shards: int
    high_watermark: float
    low_watermark: float
    wait_for_fill: bool
    max_leased_shards: int
    cache_group: str
    def __init__(self) -> None: ...
    def __copy__(self) -> CacheOptions: ...

class TokenCorpusOptions:
    token_dtype: TokenDtype
    seq_len: int
    def __init__(self) -> None: ...
    def __copy__(self) -> TokenCorpusOptions: ...

class WebDatasetOptions:
    image_keys: List[str]
    label_key: str
    label_field: str
    tars: List[str]
    index_dir: str
    def __init__(self) -> None: ...
    def __copy__(self) -> WebDatasetOptions: ...

class RecordSchema:
    label: FieldType
    dense: FieldType
    dense_count: int
    sparse: FieldType
    sparse_count: int
    @property
    def record_bytes(self) -> int: ...
    def __init__(self) -> None: ...
    def __copy__(self) -> RecordSchema: ...

class TabularDatasetOptions:
    record_schema: RecordSchema
    block_bytes: int
    index_dir: str
    def __init__(self) -> None: ...
    def __copy__(self) -> TabularDatasetOptions: ...

class DatasetOptions:
    format: str  # one of format_names()
    allow_external_paths: bool
    cache: CacheOptions
    tokens: TokenCorpusOptions
    webdataset: WebDatasetOptions
    tabular: TabularDatasetOptions
    def __init__(self) -> None: ...
    def __copy__(self) -> DatasetOptions: ...

MIN_RESTART_PIXELS: int  # gpufeed/writer.h kMinRestartPixels

class PackOptions:
    format: str  # one of pack_format_names()
    shard_size: int
    workers: int
    overwrite: bool
    allow_external_paths: bool
    def __init__(self) -> None: ...
    def __copy__(self) -> PackOptions: ...
    def set_jpeg_rewrite(self, baseline: bool, restart_interval: int) -> None: ...

# The dataset-side results (read-only). The package's dicts are made from
# their properties in this order (gpufeed._native.struct_dict).
class Record:
    @property
    def data(self) -> bytes: ...
    @property
    def labels(self) -> List[float]: ...
    @property
    def key(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def shape(self) -> Optional[Tuple[int, ...]]: ...
    @property
    def encoded(self) -> bool: ...

class TokenCorpusInfo:
    @property
    def token_dtype(self) -> TokenDtype: ...
    tokens: int
    documents: int
    sequences: int
    seq_len: int
    windows: int

class TabularInfo:
    @property
    def label(self) -> FieldType: ...
    @property
    def dense(self) -> FieldType: ...
    dense_count: int
    @property
    def sparse(self) -> FieldType: ...
    sparse_count: int
    text: bool
    rows: int
    blocks: int
    row_bytes: int

class ShardInfo:
    path: str
    first_record: int
    records: int
    bytes: int
    xxh64: Optional[str]

class StorageStats:
    source_opens: int
    source_stats: int
    source_reads: int
    source_bytes: int
    cache_reads: int
    open_files: int

class VerifyReport:
    format: str
    records_checked: int
    shards_checked: int
    checksums_checked: int
    problems: List[str]
    def ok(self) -> bool: ...

class PackSummary:
    records: int
    shards: int
    bytes: int
    rewritten: int
    seconds: float

class CacheDatasetReport:
    dataset: str
    policy: str
    entries: int
    bytes: int
    hits: int
    misses: int
    fills: int
    fill_bytes: int
    evictions: int

class CacheReport:
    cache_dir: str
    entries: int
    bytes: int
    fills_in_progress: int
    fill_bytes_in_progress: int
    leased_entries: int
    datasets: List[CacheDatasetReport]

class CacheWarmSummary:
    shards: int
    filled: int
    already_cached: int
    skipped: int
    bytes_copied: int

class LoaderStats:
    """Read-only; the properties in this order make DataLoader.stats()."""
    @property
    def span(self) -> StatsSpan: ...
    batches: int
    samples: int
    bytes_read: int
    skipped: int
    threads: int
    elapsed_seconds: float
    read_seconds: float
    decode_seconds: float
    decode_cpu_seconds: float
    blocked_seconds: float
    other_seconds: float
    lookup_seconds: float
    lookup_cpu_seconds: float
    lookup_rows: int
    lookup_ram_hit_rate: float
    consumer_wait_seconds: float
    mean_ready_batches: float
    io_backend: str
    sample_kind: str
    io_requests: int
    io_bytes: int
    io_queue_depth: int
    io_mean_inflight: float
    io_busy_share: float
    source_opens: int
    source_stats: int
    source_bytes: int
    cache_reads: int
    open_files: int
    cores: int
    process_cpu_cores: float
    external_cpu_cores: float
    steal_share: float
    disk: str
    disk_note: str
    disk_util: float
    disk_read_bytes_per_second: float
    device: str
    device_batches: int
    device_bytes: int
    device_copy_seconds: float
    device_wait_buffer_seconds: float
    bottleneck: Bottleneck
    read_share: float
    decode_share: float
    decode_cpu_share: float
    cpu_wait_share: float
    lookup_share: float
    blocked_share: float
    other_share: float
    consumer_wait_share: float
    copy_share: float
    expected_gain: float
    verdict: str
    report: str

class BatchTensor:
    def __dlpack__(self, *, stream: Any = ..., max_version: Any = ..., dl_device: Any = ...,
                   copy: Optional[bool] = ...) -> Any: ...
    def record_stream(self, stream: int) -> None: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> str: ...

class Batch:
    """A batch from Loader.next() (read-only)."""
    @property
    def data(self) -> BatchTensor: ...
    @property
    def labels(self) -> BatchTensor: ...
    @property
    def sample_ids(self) -> List[int]: ...
    @property
    def epoch(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def label_lengths(self) -> Optional[BatchTensor]: ...
    @property
    def extras(self) -> List[BatchTensor]: ...

class Loader:
    # Token windows (options.transform) open the corpus with options.tokens.seq_len.
    def __init__(self, path: Any, options: LoaderOptions, dataset: DatasetOptions = ...,
                 count_labels: bool = ...) -> None: ...
    def next(self, timeout: float = ...) -> Optional[Batch]: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state(self) -> Dict[str, Any]: ...
    def restore(self, state: Dict[str, Any]) -> None: ...
    def stats(self, span: StatsSpan = ...) -> LoaderStats: ...
    # {"sample": int, "path": str, "offset": Optional[int], "reason": str} each.
    def skipped_samples(self) -> List[Dict[str, Any]]: ...
    def batches_per_epoch(self) -> int: ...
    def epoch(self) -> int: ...
    def close(self) -> None: ...

# include/gpufeed/embedding.h, field for field; `cache` and `io` are views.
class EmbeddingTableOptions:
    dim: int
    # None (a .npy's own), a TensorDtype or its name ("float32", "bfloat16", ...).
    dtype: Optional[TensorDtype]
    cache_bytes: int
    cache: CacheOptions
    preload: bool
    io: IoOptions
    coalesce_gap_bytes: int
    def __init__(self) -> None: ...
    def __copy__(self) -> EmbeddingTableOptions: ...

class EmbeddingStats:
    lookups: int
    rows: int
    ram_hits: int
    nvme_rows: int
    source_rows: int
    nvme_reads: int
    nvme_bytes: int
    source_reads: int
    source_bytes: int
    admitted: int
    rejected: int
    evicted: int
    resident_rows: int
    resident_bytes: int
    capacity_rows: int
    preload_bytes: int
    p50_us: float
    p99_us: float
    mean_us: float
    lookup_seconds: float

class EmbeddingTable:
    def __init__(self, path: str, options: EmbeddingTableOptions = ...) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def dtype(self) -> TensorDtype: ...
    @property
    def row_bytes(self) -> int: ...
    # ids: a 1-D contiguous int64 buffer; out: a C-contiguous writable buffer of
    # len(ids) * row_bytes bytes, or out_address/out_bytes. The GIL is released.
    @overload
    def lookup(self, ids: Any, out: Any) -> None: ...
    @overload
    def lookup(self, ids: Any, out_address: int, out_bytes: int) -> None: ...
    def stats(self) -> EmbeddingStats: ...
    def reset_stats(self) -> None: ...
