"""The device stage from Python: device="cuda" batches, pin_memory, and the
clear errors where CUDA is missing. The GPU cases skip with the reason when
gpufeed has no usable CUDA device or torch has no CUDA (the C++
`gpu`-labelled tests cover the stage itself), and fail instead with
GPUFEED_REQUIRE_GPU=1 (benchmarks/gpu_check.sh): a GPU run must not pass by
skipping. Every other case runs in both worlds. test_device_standin.py
covers the DLPack path on the CUDA stand-in in every CI run."""

import os

import numpy as np
import pytest

import gpufeed
from conftest import pack_random_jpegs
from gpufeed import _core

CUDA_REASON = _core.cuda_status(0)
REQUIRE_GPU = os.environ.get("GPUFEED_REQUIRE_GPU") == "1"
STANDIN = os.environ.get("GPUFEED_CUDA_STANDIN_LIBRARY")


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_random_jpegs(tmp_path_factory.mktemp("device"), 12, seed=1, height=40, width=50)


def test_cuda_status_says_why_when_unusable():
    if REQUIRE_GPU:
        assert not CUDA_REASON, f"GPUFEED_REQUIRE_GPU=1 but CUDA is unusable: {CUDA_REASON}"
    if CUDA_REASON:
        assert "CUDA" in CUDA_REASON or "cuda" in CUDA_REASON
    else:
        assert gpufeed.build_info()["with_cuda"] or STANDIN
    assert "does not exist" in _core.cuda_status(99) or "CUDA" in _core.cuda_status(99)


def test_device_cuda_without_a_device_is_not_supported(packed):
    torch = _torch()
    if not CUDA_REASON:
        # A usable GPU: a device that does not exist is refused the same way.
        with pytest.raises(gpufeed.NotSupportedError, match="99"):
            gpufeed.DataLoader(packed, batch_size=4, device="cuda:99")
        return
    if torch is not None and torch.cuda.is_available():
        # gpufeed without CUDA, torch with it: the tensor.to() fallback.
        with pytest.warns(UserWarning, match="without CUDA"):
            loader = gpufeed.DataLoader(packed, batch_size=4, device="cuda",
                                        transform=gpufeed.ImageTransform(16, train=False))
        x, _ = next(iter(loader))
        assert x.is_cuda
        return
    with pytest.raises(gpufeed.NotSupportedError) as info:
        gpufeed.DataLoader(packed, batch_size=4, device="cuda")
    assert CUDA_REASON in str(info.value) or "torch" in str(info.value)
    with pytest.raises(gpufeed.NotSupportedError):
        gpufeed.DataLoader(packed, batch_size=4, device="cuda:1")


def test_bad_device_strings_are_value_errors(packed):
    for device in ("gpu", "cuda:x", "tpu:0"):
        with pytest.raises(ValueError):
            gpufeed.DataLoader(packed, batch_size=4, device=device)


def test_pin_memory_works_and_warns_only_without_cuda(packed):
    transform = gpufeed.ImageTransform(16, train=False)
    if CUDA_REASON:
        with pytest.warns(UserWarning, match="pin_memory"):
            loader = gpufeed.DataLoader(packed, batch_size=4, pin_memory=True, shuffle=False,
                                        transform=transform)
    else:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = gpufeed.DataLoader(packed, batch_size=4, pin_memory=True, shuffle=False,
                                        transform=transform)
    plain = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform)
    batches = 0
    for (images, labels), (want, want_labels) in zip(loader, plain):
        assert tuple(images.shape) == (4, 3, 16, 16)
        assert np.array_equal(np.asarray(images), np.asarray(want))
        assert np.array_equal(np.asarray(labels), np.asarray(want_labels))
        torch = _torch()
        if not CUDA_REASON and torch is not None and torch.cuda.is_available():
            assert images.is_pinned()
        batches += 1
    assert batches == len(plain)


def test_pin_memory_copies_with_non_blocking_never_see_a_refilled_buffer(packed):
    """x.cuda(non_blocking=True) on torch's current stream, x dropped, the
    next batch taken at once: what lands on the GPU is x's bytes (the pinned
    slot is refilled only after the copy has read it)."""
    torch = _cuda_torch_or_skip()
    transform = gpufeed.ImageTransform(24, train=False, dtype="float32")
    want = [x.clone() for x, _ in gpufeed.DataLoader(packed, batch_size=2, shuffle=False,
                                                      transform=transform)]
    loader = gpufeed.DataLoader(packed, batch_size=2, shuffle=False, transform=transform,
                                pin_memory=True, prefetch=1)
    for stream in (torch.cuda.current_stream(), torch.cuda.Stream()):
        got = []
        with torch.cuda.stream(stream):
            for x, _ in loader:
                torch.cuda._sleep(20_000_000)  # the stream is busy before it reads x
                got.append(x.cuda(non_blocking=True))
                del x
        torch.cuda.synchronize()
        assert len(got) == len(want)
        for have, expected in zip(got, want):
            assert torch.equal(have.cpu(), expected)


def _cuda_torch_or_skip():
    skip = pytest.fail if REQUIRE_GPU else pytest.skip
    if CUDA_REASON:
        skip(f"no usable CUDA device: {CUDA_REASON}")
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        skip("torch has no CUDA here (CPU build)")
    return torch


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_batches_equal_the_cpu_ones(packed, dtype, layout):
    torch = _cuda_torch_or_skip()
    transform = gpufeed.ImageTransform(24, train=False, dtype=dtype, layout=layout)
    cpu = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform)
    gpu = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform,
                             device="cuda")
    batches = 0
    for (x, y), (gx, gy) in zip(cpu, gpu):
        assert gx.is_cuda and gy.is_cuda
        assert gx.dtype == x.dtype and gx.shape == x.shape
        assert torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)
        batches += 1
    assert batches == len(cpu)
    stats = gpu.stats()
    assert stats["device"] == "cuda:0"
    # The device stage's copy stream enters the judgement.
    assert stats["bottleneck"] in ("consumer", "read", "decode", "copy", "cpu-contention")
    assert 0.0 <= stats["copy_share"] <= 1.0 + 1e-6
    assert stats["verdict"].startswith(stats["bottleneck"] + "-bound")


def test_cuda_batches_survive_a_slow_stream(packed):
    torch = _cuda_torch_or_skip()
    transform = gpufeed.ImageTransform(24, train=False, dtype="float32")
    cpu = [x.clone() for x, _ in gpufeed.DataLoader(packed, batch_size=2, shuffle=False,
                                                     transform=transform)]
    gpu = gpufeed.DataLoader(packed, batch_size=2, shuffle=False, transform=transform,
                             device="cuda", prefetch=1)
    stream = torch.cuda.Stream()
    kept = []
    with torch.cuda.stream(stream):
        for x, _ in gpu:
            torch.cuda._sleep(20_000_000)  # keeps the stream busy before it reads x
            kept.append(x * 1.0)           # read on the stream; x is dropped right after
            del x
    torch.cuda.synchronize()
    assert len(kept) == len(cpu)
    for got, want in zip(kept, cpu):
        assert torch.equal(got.cpu(), want)


def test_a_closed_loader_raises_instead_of_crashing(packed):
    loader = gpufeed.DataLoader(packed, batch_size=4, transform=gpufeed.ImageTransform(16))
    next(iter(loader))
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        next(iter(loader))
    with pytest.raises(ValueError, match="closed"):
        loader.stats()


def test_image_transform_max_pixels_refuses_larger_images(packed):
    # The fixture's images are at least 40 x 50 pixels: a limit of 100 refuses
    # each one before decoding, naming the limit and the sample.
    loader = gpufeed.DataLoader(packed, batch_size=4, shuffle=False,
                                transform=gpufeed.ImageTransform(16, max_pixels=100))
    with pytest.raises(gpufeed.CorruptRecordError, match="limit of 100") as info:
        next(iter(loader))
    assert "sample" in str(info.value)
    with pytest.raises(ValueError):
        gpufeed.ImageTransform(16, max_pixels=0)
