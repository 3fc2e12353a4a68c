"""The Python side of the device stage on the CUDA stand-in (tests/cuda_standin):
DLPack capsules of device batches, the stream the consumer names, the keywords
torch 2.x passes, capsule ownership, and pin_memory under asynchronous copies.

Collected only when tests/run.sh runs the stand-in build of gpufeed._core
(GPUFEED_CUDA_STANDIN_LIBRARY names the stand-in library; see conftest.py).
torch here has no CUDA, so the tests play the consumer through ctypes: they
call the stand-in's cudaMemcpyAsync on their own streams, as torch would, and
read the capsules' DLManagedTensor as torch.from_dlpack does."""

import copy
import ctypes
import os
import time

import numpy as np
import pytest

import gpufeed
from conftest import pack_random_jpegs
from gpufeed import _core

STANDIN = os.environ["GPUFEED_CUDA_STANDIN_LIBRARY"]
cuda = ctypes.CDLL(STANDIN)
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
cuda.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
cuda.cudaStreamDestroy.argtypes = [ctypes.c_void_p]
cuda.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
cuda.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_void_p]
cuda.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cuda.cudaFree.argtypes = [ctypes.c_void_p]
cuda.cudaLaunchHostFunc.argtypes = [ctypes.c_void_p, HOST_FN, ctypes.c_void_p]
cuda.gpufeed_standin_is_device_pointer.argtypes = [ctypes.c_void_p]
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2
NON_BLOCKING = 1
KDL_CPU, KDL_CUDA = 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]
ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
USED_NAME = ctypes.c_char_p(b"used_dltensor")  # must outlive the capsules renamed to it


class Consumed:
    """What torch.from_dlpack does with a capsule: takes the DLManagedTensor
    (renaming the capsule) and calls its deleter when done."""

    def __init__(self, capsule):
        address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor")
        ctypes.pythonapi.PyCapsule_SetName(capsule, USED_NAME)
        self.managed = DLManagedTensor.from_address(address)
        tensor = self.managed.dl_tensor
        self.data = tensor.data
        self.device = (tensor.device.device_type, tensor.device.device_id)
        self.shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
        self.dtype = (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
        self.nbytes = int(np.prod(self.shape)) * tensor.dtype.bits // 8

    def delete(self):
        self.managed.deleter(ctypes.pointer(self.managed))


def new_stream():
    stream = ctypes.c_void_p()
    assert cuda.cudaStreamCreateWithFlags(ctypes.byref(stream), NON_BLOCKING) == 0
    return stream.value


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_random_jpegs(tmp_path_factory.mktemp("standin"), 24, seed=7, height=30, width=40)


def native_loaders(packed, dtype="float32", prefetch=2, **device):
    """(host loader, device loader): the same options, the second on device 0."""
    transform = gpufeed.ImageTransform(16, train=False, dtype=dtype)
    base = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform,
                              prefetch=prefetch)
    return base, device_loader(base, packed, **device)


def device_loader(base, path, **device):
    """A native loader with `base`'s options on CUDA device 0."""
    options = copy.copy(base._options)
    options.device.kind, options.device.device_id = _core.DeviceKind.CUDA, 0
    for name, value in device.items():
        setattr(options.device, name, value)
    return _core.Loader(str(path), options)


def host_bytes(tensor):
    consumed = Consumed(tensor.__dlpack__())
    data = ctypes.string_at(consumed.data, consumed.nbytes)
    consumed.delete()
    return data


def test_the_stand_in_build_is_the_one_imported():
    assert not _core.cuda_status(0)
    assert "standin_python" in _core.__file__


@pytest.mark.parametrize("dtype,on_device", [("uint8", False), ("float32", False),
                                             ("float32", True), ("float16", True)])
def test_device_batches_reach_the_consumers_stream_intact(packed, dtype, on_device):
    base, device = native_loaders(packed, dtype, normalize_on_device=on_device)
    host = base._native
    stream = new_stream()
    batches = 0
    try:
        while True:
            want, got = host.next(), device.next()
            assert (want is None) == (got is None)
            if got is None:
                break
            for expected, tensor in zip((want.data, want.labels), (got.data, got.labels)):
                assert tensor.__dlpack_device__() == (KDL_CUDA, 0)
                # As torch 2.x calls it: its current stream, max_version first.
                capsule = tensor.__dlpack__(stream=stream, max_version=(1, 0),
                                            dl_device=(KDL_CUDA, 0), copy=False)
                consumed = Consumed(capsule)
                assert consumed.device == (KDL_CUDA, 0)
                assert cuda.gpufeed_standin_is_device_pointer(consumed.data) == 1
                assert list(consumed.shape) == list(tensor.shape)
                out = ctypes.create_string_buffer(consumed.nbytes)
                # On the named stream, right away: correct only if that stream
                # was made to wait for the batch's copy (and kernel).
                assert cuda.cudaMemcpyAsync(out, consumed.data, consumed.nbytes, DEVICE_TO_HOST,
                                            stream) == 0
                assert cuda.cudaStreamSynchronize(stream) == 0
                consumed.delete()
                assert out.raw == host_bytes(expected)
            batches += 1
        assert batches == len(base)
        stats = device.stats()
        assert stats.device == "cuda:0"
        # The device stage's figures enter the judgement (the copy stream's share).
        assert str(stats.bottleneck) in ("consumer", "read", "decode", "copy", "cpu-contention")
        assert stats.verdict.startswith(str(stats.bottleneck) + "-bound")
        assert 0.0 < stats.copy_share <= 1.0 + 1e-6
    finally:
        device.close()
        cuda.cudaStreamDestroy(stream)


def test_dlpack_keywords_torch_passes_and_what_is_refused(packed):
    base, device = native_loaders(packed)
    batch = device.next()
    data, labels = batch.data, batch.labels
    with pytest.raises(BufferError, match="copy=True"):
        data.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not copied"):
        data.__dlpack__(dl_device=(KDL_CPU, 0))
    with pytest.raises(ValueError, match="ambiguous"):
        data.__dlpack__(stream=0)
    for kwargs in (dict(), dict(stream=None), dict(stream=1), dict(stream=2), dict(stream=-1),
                   dict(max_version=(1, 0)), dict(max_version=(0, 8), dl_device=(KDL_CUDA, 0))):
        Consumed(data.__dlpack__(**kwargs)).delete()
    host_data = base._native.next().data
    assert host_data.__dlpack_device__() == (KDL_CPU, 0)
    Consumed(host_data.__dlpack__(max_version=(1, 0), dl_device=(KDL_CPU, 0), copy=False)).delete()
    with pytest.raises(BufferError):
        host_data.__dlpack__(dl_device=(KDL_CUDA, 0))
    device.close()


def test_capsules_dropped_or_deleted_give_the_buffers_back(packed):
    # prefetch=1: 3 device buffers; 3 epochs of 6 batches reuse each many
    # times. Capsules never consumed, consumed and deleted, and batch tensors
    # simply dropped all release their buffer (else: "every device batch
    # buffer is held").
    _, device = native_loaders(packed, prefetch=1)
    taken = 0
    for epoch in range(3):
        device.set_epoch(epoch)
        while True:
            item = device.next()
            if item is None:
                break
            data, labels = item.data, item.labels
            if taken % 3 == 0:
                data.__dlpack__()  # never consumed: the capsule's destructor frees it
            elif taken % 3 == 1:
                Consumed(data.__dlpack__()).delete()
                Consumed(labels.__dlpack__()).delete()
            del data, labels, item
            taken += 1
    assert taken == 18
    device.close()


def test_pin_memory_buffers_are_not_refilled_under_an_async_copy(packed):
    """torch's x.cuda(non_blocking=True) on its default stream, played with the
    stand-in: a cudaMemcpyAsync from the pinned batch behind 20 ms of other work
    on the legacy default stream, the tensor dropped, the next batch taken."""
    transform = gpufeed.ImageTransform(16, train=False, dtype="float32")
    want = [x.clone() for x, _ in gpufeed.DataLoader(packed, batch_size=4, shuffle=False,
                                                      transform=transform)]

    @HOST_FN
    def busy(_):
        time.sleep(0.02)

    loader = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform,
                                pin_memory=True, prefetch=1)
    copies = []
    for x, y in loader:
        pointer = ctypes.c_void_p()
        assert cuda.cudaMalloc(ctypes.byref(pointer), x.numel() * 4) == 0
        assert cuda.cudaLaunchHostFunc(None, busy, None) == 0
        assert cuda.cudaMemcpyAsync(pointer, x.data_ptr(), x.numel() * 4, HOST_TO_DEVICE,
                                    None) == 0
        copies.append(pointer.value)
        del x, y
    assert cuda.cudaStreamSynchronize(None) == 0
    assert len(copies) == len(want)
    for pointer, expected in zip(copies, want):
        out = ctypes.create_string_buffer(expected.numel() * 4)
        assert cuda.cudaMemcpyAsync(out, pointer, len(out.raw), DEVICE_TO_HOST, None) == 0
        assert cuda.cudaStreamSynchronize(None) == 0
        assert out.raw == expected.numpy().tobytes()
        cuda.cudaFree(pointer)


def test_token_windows_through_the_device_stage(tmp_path):
    # An llm.c shard (written here): x and y reach device memory as the host
    # loader makes them, (B, seq_len) int64 each.
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, 3000)
    tokens = np.random.default_rng(3).integers(0, 50257, size=3000).astype(np.uint16)
    (tmp_path / "shard.bin").write_bytes(header.tobytes() + tokens.tobytes())
    base = gpufeed.DataLoader(tmp_path / "shard.bin", batch_size=5, shuffle="block",
                              transform=gpufeed.TokenWindows(seq_len=64, block_bytes=1024))
    device = device_loader(base, tmp_path / "shard.bin")
    host = base._native
    stream = new_stream()
    batches = 0
    try:
        while True:
            want, got = host.next(), device.next()
            assert (want is None) == (got is None)
            if got is None:
                break
            for expected, tensor in zip((want.data, want.labels), (got.data, got.labels)):
                consumed = Consumed(tensor.__dlpack__(stream=stream))
                assert consumed.device == (KDL_CUDA, 0)
                assert consumed.shape[1] == 64 and consumed.dtype == (0, 64, 1)  # int64
                out = ctypes.create_string_buffer(consumed.nbytes)
                assert cuda.cudaMemcpyAsync(out, consumed.data, consumed.nbytes, DEVICE_TO_HOST,
                                            stream) == 0
                assert cuda.cudaStreamSynchronize(stream) == 0
                consumed.delete()
                assert out.raw == host_bytes(expected)
            batches += 1
        assert batches == len(base)
        assert device.stats().device == "cuda:0"
    finally:
        device.close()
        cuda.cudaStreamDestroy(stream)


def test_webdataset_tars_through_the_device_stage(packed, tmp_path):
    # The same JPEGs as WebDataset tar shards: the device batches equal the
    # RecordIO host batches byte for byte.
    tars = tmp_path / "wds"
    gpufeed.pack(packed.parent / "folder", tars, format="webdataset", progress=False)
    reference_loader = native_loaders(packed)[0]  # kept alive: its __del__ closes it
    reference = reference_loader._native
    _, device = native_loaders(tars)
    batches = 0
    try:
        while True:
            want, got = reference.next(), device.next()
            assert (want is None) == (got is None)
            if got is None:
                break
            for expected, tensor in zip((want.data, want.labels), (got.data, got.labels)):
                assert tensor.__dlpack_device__() == (KDL_CUDA, 0)
                consumed = Consumed(tensor.__dlpack__())
                out = ctypes.create_string_buffer(consumed.nbytes)
                assert cuda.cudaMemcpy(out, consumed.data, consumed.nbytes, DEVICE_TO_HOST) == 0
                consumed.delete()
                assert out.raw == host_bytes(expected)
            batches += 1
        assert batches == 6
    finally:
        device.close()


def test_tabular_rows_through_the_device_stage(tmp_path):
    # TorchRec .npy triplets (np.save): dense, sparse ids and labels reach
    # device memory as the host loader makes them, one extra tensor (the ids)
    # beside data and labels; batches of 1000 with a short last one.
    rng = np.random.default_rng(5)
    for stem, n in (("day_0", 1700), ("day_1", 900)):
        np.save(tmp_path / f"{stem}_dense.npy", rng.integers(-5, 9000, (n, 13)).astype(np.int32))
        np.save(tmp_path / f"{stem}_sparse.npy",
                rng.integers(-2**31, 2**31, (n, 26)).astype(np.int32))
        np.save(tmp_path / f"{stem}_labels.npy", rng.integers(0, 2, n).astype(np.int32))
    for shuffle, sparse_dtype in ((False, "int64"), ("block", "int32")):
        base = gpufeed.DataLoader(tmp_path, batch_size=1000, shuffle=shuffle, seed=3,
                                  transform=gpufeed.Tabular(dense_log1p=True, hash_sizes=100003,
                                                            sparse_dtype=sparse_dtype))
        device = device_loader(base, tmp_path)
        host = base._native
        stream = new_stream()
        sizes = []
        try:
            while True:
                want, got = host.next(), device.next()
                assert (want is None) == (got is None)
                if got is None:
                    break
                assert len(got.extras) == len(want.extras) == 1
                pairs = zip((want.data, want.extras[0], want.labels),
                            (got.data, got.extras[0], got.labels))
                for expected, tensor in pairs:
                    assert tensor.__dlpack_device__() == (KDL_CUDA, 0)
                    consumed = Consumed(tensor.__dlpack__(stream=stream))
                    assert consumed.device == (KDL_CUDA, 0)
                    assert cuda.gpufeed_standin_is_device_pointer(consumed.data) == 1
                    assert list(consumed.shape) == list(tensor.shape) == list(expected.shape)
                    out = ctypes.create_string_buffer(consumed.nbytes)
                    assert cuda.cudaMemcpyAsync(out, consumed.data, consumed.nbytes,
                                                DEVICE_TO_HOST, stream) == 0
                    assert cuda.cudaStreamSynchronize(stream) == 0
                    consumed.delete()
                    assert out.raw == host_bytes(expected)
                assert got.data.shape[1] == 13 and got.extras[0].shape[1] == 26
                sizes.append(got.data.shape[0])
            assert sizes == [1000, 1000, 600]
            assert device.stats().device == "cuda:0"
        finally:
            device.close()
            cuda.cudaStreamDestroy(stream)


def test_tabular_embeddings_through_the_device_stage(tmp_path):
    # embeddings= adds one plane per table after the ids in the same host
    # buffer: the one copy moves them, and every extra is a CUDA tensor with
    # the host batch's bytes (float32 and int8 tables, a short last batch).
    rng = np.random.default_rng(6)
    for stem, n in (("day_0", 1300), ("day_1", 900)):
        np.save(tmp_path / f"{stem}_dense.npy", rng.integers(0, 9000, (n, 13)).astype(np.int32))
        np.save(tmp_path / f"{stem}_sparse.npy",
                rng.integers(-2**31, 2**31, (n, 26)).astype(np.int32))
        np.save(tmp_path / f"{stem}_labels.npy", rng.integers(0, 2, n).astype(np.int32))
    np.save(tmp_path / "f32.table", rng.standard_normal((1009, 16)).astype(np.float32))
    np.save(tmp_path / "i8.table", rng.integers(-128, 128, (503, 40)).astype(np.int8))
    tables = {3: gpufeed.EmbeddingTable(tmp_path / "f32.table.npy", cache_bytes=8192),
              7: gpufeed.EmbeddingTable(tmp_path / "i8.table.npy", cache_bytes=8192)}
    hash_sizes = [1009 if c == 3 else 503 for c in range(26)]
    data = tmp_path / "data"
    data.mkdir()
    for path in tmp_path.glob("day_*"):
        path.rename(data / path.name)
    base = gpufeed.DataLoader(data, batch_size=1000, shuffle="block", seed=2,
                              transform=gpufeed.Tabular(hash_sizes=hash_sizes),
                              embeddings=tables)
    device = device_loader(base, data)
    host = base._native
    stream = new_stream()
    sizes = []
    try:
        while True:
            want, got = host.next(), device.next()
            assert (want is None) == (got is None)
            if got is None:
                break
            assert len(got.extras) == len(want.extras) == 3
            assert got.extras[1].shape[1] == 16 and got.extras[2].shape[1] == 40
            for expected, tensor in zip(want.extras, got.extras):
                assert tensor.__dlpack_device__() == (KDL_CUDA, 0)
                consumed = Consumed(tensor.__dlpack__(stream=stream))
                assert consumed.device == (KDL_CUDA, 0)
                assert cuda.gpufeed_standin_is_device_pointer(consumed.data) == 1
                assert list(consumed.shape) == list(expected.shape)
                out = ctypes.create_string_buffer(consumed.nbytes)
                assert cuda.cudaMemcpyAsync(out, consumed.data, consumed.nbytes,
                                            DEVICE_TO_HOST, stream) == 0
                assert cuda.cudaStreamSynchronize(stream) == 0
                consumed.delete()
                assert out.raw == host_bytes(expected)
            # The host batch's rows are the tables' rows of its ids.
            ids = np.frombuffer(host_bytes(want.extras[0]), np.int64).reshape(-1, 26)
            for plane, (column, table) in zip(want.extras[1:], sorted(tables.items())):
                rows = table.lookup(ids[:, column]).numpy().view(np.uint8)
                assert host_bytes(plane) == rows.tobytes()
            sizes.append(got.data.shape[0])
        assert sizes == [1000, 1000, 200]
    finally:
        device.close()
        cuda.cudaStreamDestroy(stream)
