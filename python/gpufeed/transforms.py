"""What the decode threads make of a sample: ``ImageTransform`` (torchvision
semantics), ``RawTransform`` (record bytes as a vector), ``TokenWindows``
(windows of a token corpus) and ``Tabular`` (rows of CTR datasets). Each writes itself into the native
``LoaderOptions`` (``_apply``); ``gpufeed.DataLoader(transform=...)`` takes one."""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple, Union

from . import _core
from .tokens import check_token_dtype

__all__ = ["ImageTransform", "RawTransform", "TokenWindows", "Tabular"]

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class ImageTransform:
    """torchvision semantics, run in C++ on the decode threads.

    train=True: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip.
    train=False: Resize(round(size / 0.875)) + CenterCrop(size).
    Float outputs are x / 255 normalized by mean/std (ToTensor + Normalize);
    uint8 outputs are the pixels (4x fewer bytes; normalize on the GPU).

    exact=True (default): PIL / torchvision's bytes at every image size.
    exact=False: crops at least twice the output are decoded at 1/2, 1/4 or
    1/8 in the DCT domain first (baseline and progressive JPEGs by gpufeed's
    own entropy decoders, others by libjpeg-turbo), then resampled; of a
    progressive JPEG's AC coefficients the last bit is not read (at most one
    quantization step each). About 2-2.4x the exact rate on baseline
    multi-megapixel photographs (2.6-3x packed with
    ``pack(jpeg_restart_interval=16)``), about 8x on progressive ones (one
    thread, a 2-vCPU AMD EPYC); close to but not equal to PIL's output
    (docs/tuning.md states by how much).
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
    exact: bool = True

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

    def _apply(self, options: _core.LoaderOptions) -> None:
        options.transform = _core.TransformKind.IMAGE
        image = options.image  # a view: its fields are set in `options`
        image.size, image.train, image.flip = int(self.size), bool(self.train), bool(self.flip)
        image.scale_min, image.scale_max = float(self.scale[0]), float(self.scale[1])
        image.ratio_min, image.ratio_max = float(self.ratio[0]), float(self.ratio[1])
        image.mean, image.std = list(self.mean), list(self.std)
        image.dtype = _core.TensorDtype(self.dtype)
        image.layout = _core.OutputLayout(self.layout)
        image.max_pixels = int(self.max_pixels)
        image.exact = bool(self.exact)


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

    def _apply(self, options: _core.LoaderOptions) -> None:
        options.transform = _core.TransformKind.RAW
        options.raw.element = _core.RawElement(self.dtype)
        options.raw.length, options.raw.pad = int(self.shape[0]), int(self.pad)


@dataclasses.dataclass(frozen=True)
class TokenWindows:
    """Fixed-length windows of a token corpus (Megatron .bin/.idx, llm.c
    shards, headerless token files): batches are ``(x, y)`` of shape
    (batch, seq_len), window i being ``stream[i*seq_len : i*seq_len+seq_len+1]``
    of the corpus's token stream, x its first seq_len tokens and y its last.

    ``dtype``: "int64" (default) or "int32". ``token_dtype``: the dtype of a
    headerless file (needed there; checked against the header elsewhere), as
    ``gpufeed.TokenOptions(token_dtype=)`` also gives it.
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
        check_token_dtype(self.token_dtype)
        if not 0 < self.block_bytes < 2 ** 32:
            raise ValueError("block_bytes must be between 1 and 2**32 - 1")

    def _apply(self, options: _core.LoaderOptions) -> None:
        options.transform = _core.TransformKind.TOKEN_WINDOWS
        tokens = options.tokens  # a view: its fields are set in `options`
        tokens.seq_len, tokens.block_bytes = int(self.seq_len), int(self.block_bytes)
        tokens.dtype = _core.TensorDtype(self.dtype)


@dataclasses.dataclass(frozen=True)
class Tabular:
    """Rows of a tabular (CTR) dataset (``criteo_npy``, ``criteo_tsv``,
    ``records``): batches are ``(dense, sparse, labels)``, dense float32
    (batch, dense columns), sparse (batch, sparse columns) of
    ``sparse_dtype``, labels float32 (batch,).

    ``dense_log1p``: dense values become ``log(max(x, 0) + 1)`` (DLRM's
    preprocessing); missing TSV values are 0 either way. ``hash_sizes``: an
    int h (every sparse column modulo h) or one int per sparse column
    (column i modulo ``hash_sizes[i]``); floor modulo, as numpy's ``%``.
    ``sparse_dtype``: "int64" (default) or "int32" (ids narrowed as numpy's
    astype)."""
    dense_log1p: bool = False
    hash_sizes: Union[int, Sequence[int], None] = None
    sparse_dtype: str = "int64"

    def __post_init__(self):
        if self.sparse_dtype not in ("int64", "int32"):
            raise ValueError(f'sparse_dtype must be "int64" or "int32", not {self.sparse_dtype!r}')
        for size in self._sizes():
            if not 0 < size < 2 ** 64:
                raise ValueError(f"hash_sizes must be positive, not {size}")

    def _sizes(self) -> List[int]:
        if self.hash_sizes is None:
            return []
        if isinstance(self.hash_sizes, int):
            return [int(self.hash_sizes)]
        return [int(size) for size in self.hash_sizes]

    def _apply(self, options: _core.LoaderOptions) -> None:
        options.transform = _core.TransformKind.TABULAR
        tabular = options.tabular  # a view: its fields are set in `options`
        tabular.dense_log1p = bool(self.dense_log1p)
        tabular.hash_sizes = self._sizes()
        tabular.sparse_dtype = _core.TensorDtype(self.sparse_dtype)
