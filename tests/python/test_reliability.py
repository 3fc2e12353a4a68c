"""Reliability of gpufeed.DataLoader (docs/reliability.md): faults in the
middle of an epoch end in a clear exception or a counted skip and leave the
process usable; 50 shuffled epochs keep RSS, descriptors and threads flat
with every sample exactly once. Real files, real JPEGs, real PyTorch, real
signals and a real memory limit (RLIMIT_AS) in subprocesses."""

import gc
import io
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib

import pytest

import conftest
import gpufeed

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")

# A hang guard, not a speed assertion: only a stuck process comes near it.
HANG_GUARD_SECONDS = 120


def jpeg_bytes(i, size=(48, 40)):
    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PIL.fromarray(pixels).save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def png_claiming(width, height):
    """A PNG with a correct IHDR claiming width x height and almost no data."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def pack_list(root, samples):
    """Packs [(bytes, label)] through a list file; returns the dataset path."""
    return conftest.pack_list(root, samples, shard_size=4000)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """90 records whose 4 int32 tokens start with their own index."""
    return pack_list(tmp_path_factory.mktemp("tokens"),
                     [(struct.pack("<4i", i, i, i, i), i % 3) for i in range(90)])


def tokens_loader(path, **kwargs):
    kwargs.setdefault("batch_size", 8)
    return gpufeed.DataLoader(path, transform=gpufeed.RawTransform("int32", (4,)),
                              label_dtype="int64", **kwargs)


def ids_of(batch):
    tokens, _ = batch
    return [int(t) for t in tokens[:, 0]]


def counts():
    fds = len(os.listdir("/proc/self/fd"))
    threads = len(os.listdir("/proc/self/task"))
    with open("/proc/self/statm") as statm:
        rss_kib = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return fds, threads, rss_kib


def test_corrupt_jpeg_in_the_middle_of_a_batch(tmp_path):
    samples = [(jpeg_bytes(i), i % 2) for i in range(20)]
    good = samples[9][0]
    samples[9] = (good[: len(good) // 2], 1)  # truncated mid-scan: a real broken download
    packed = pack_list(tmp_path, samples)
    transform = gpufeed.ImageTransform(size=16, train=False)
    loader = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform)
    batches = iter(loader)
    next(batches), next(batches)  # samples 0..7
    with pytest.raises(gpufeed.CorruptRecordError) as info:
        next(batches)  # samples 8..11
    message = str(info.value)
    assert "sample 9" in message and ".rec at byte offset" in message and "truncated" in message
    # The loader stays usable: the next loop (a new epoch) delivers the
    # batches before the bad one again, and raises at it again.
    delivered = 0
    with pytest.raises(gpufeed.CorruptRecordError, match="sample 9"):
        for images, _ in loader:
            delivered += len(images)
    assert delivered == 8
    skipping = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform,
                                  on_error="skip", max_skipped=1)
    shapes, labels = [], []
    for images, batch_labels in skipping:
        shapes.append(tuple(images.shape))
        labels.extend(int(label) for label in batch_labels)
    # No substitute: the batch holding sample 9 comes one row short.
    assert shapes == [(4, 3, 16, 16)] * 2 + [(3, 3, 16, 16)] + [(4, 3, 16, 16)] * 2
    assert labels == [i % 2 for i in range(20) if i != 9]
    assert skipping.stats()["skipped"] == 1
    (skipped,) = skipping.skipped_samples()
    assert skipped["sample"] == 9 and skipped["path"].endswith(".rec")
    assert isinstance(skipped["offset"], int) and skipped["offset"] > 0
    assert "truncated" in skipped["reason"], skipped
    # max_skipped: the default (1% of 20 samples) is passed by that one skip.
    strict = gpufeed.DataLoader(packed, batch_size=4, shuffle=False, transform=transform,
                                on_error="skip")
    with pytest.raises(gpufeed.CorruptRecordError,
                       match="1 samples skipped in epoch 0, more than max_skipped=0.01"):
        for _ in strict:
            pass
    with pytest.raises(ValueError, match="max_skipped"):
        gpufeed.DataLoader(packed, batch_size=4, on_error="skip", max_skipped=-1)


def test_skip_never_delivers_a_sample_twice(tmp_path):
    # Bad samples in one batch and across batches, a batch of only bad ones:
    # every good sample once, the batch count unchanged, the bad ones listed.
    bad = {2, 3, 6, 8, 9, 10, 11, 19}
    samples = [(jpeg_bytes(i)[:100] if i in bad else jpeg_bytes(i), i % 5) for i in range(20)]
    packed = pack_list(tmp_path, samples)
    transform = gpufeed.ImageTransform(size=16, train=False)
    for shuffle in (False, True):
        loader = gpufeed.DataLoader(packed, batch_size=4, shuffle=shuffle, seed=2,
                                    transform=transform, on_error="skip", max_skipped=0.5)
        sizes, labels = [], []
        for images, batch_labels in loader:
            sizes.append(len(images))
            labels.extend(int(label) for label in batch_labels)
        assert len(sizes) == len(loader) == 5
        if not shuffle:
            assert sizes == [2, 3, 0, 4, 3]
        assert sorted(labels) == sorted(i % 5 for i in range(20) if i not in bad)
        listed = loader.skipped_samples()
        assert sorted(s["sample"] for s in listed) == sorted(bad)
        assert all(s["path"].endswith(".rec") and s["offset"] is not None for s in listed)
        assert loader.stats()["skipped"] == len(bad)


def test_consumer_raising_mid_epoch_then_reuse_resume_and_close(tokens):
    gc.collect()  # loaders of earlier tests
    fds_before, threads_before, _ = counts()
    loader = tokens_loader(tokens, seed=3)
    taken = []
    with pytest.raises(RuntimeError, match="the training step failed"):
        for step, batch in enumerate(loader):
            taken.extend(ids_of(batch))
            if step == 3:
                raise RuntimeError("the training step failed")
    state = loader.state_dict()
    assert state["consumed"] == len(taken) == 32
    # A fresh loader resumed from the state delivers exactly the rest of
    # that epoch: nothing lost, nothing twice.
    resumed = tokens_loader(tokens, seed=3)
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in ids_of(batch)]
    assert sorted(taken + rest) == list(range(90))
    # The loader that saw the exception goes on with a whole next epoch.
    again = [i for batch in loader for i in ids_of(batch)]
    assert sorted(again) == list(range(90))
    loader.close()
    resumed.close()
    del loader, resumed
    gc.collect()
    fds_after, threads_after, _ = counts()
    assert (fds_after, threads_after) == (fds_before, threads_before)


def test_fifty_shuffled_epochs_exactly_once_with_flat_resources(tokens):
    loader = tokens_loader(tokens, seed=7, prefetch=3)
    orders = []
    for epoch in range(50):
        loader.set_epoch(epoch)
        ids = [i for batch in loader for i in ids_of(batch)]
        assert sorted(ids) == list(range(90)), f"epoch {epoch}"
        orders.append(ids)
        if epoch == 4:  # warm: buffers, thread stacks, allocator arenas
            fds_warm, threads_warm, rss_warm = counts()
    fds, threads, rss = counts()
    assert (fds, threads) == (fds_warm, threads_warm)
    assert rss <= rss_warm * 1.05 + 4096, (rss_warm, rss)
    assert len({tuple(order) for order in orders}) == 50  # every epoch reshuffled


def default_sigint():
    """The child starts with SIGINT at its default, whatever the test runner
    inherited: Python installs its KeyboardInterrupt handler only then, and a
    suite started in the background of a non-interactive shell (a CI step,
    `cmd &`) has SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_python(code, **kwargs):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
                            **kwargs)


def test_sigint_during_iteration_interrupts_and_the_process_recovers(tmp_path):
    packed = pack_list(tmp_path, [(jpeg_bytes(i, (160, 120)), i % 2) for i in range(24)])
    process = run_python(f"""
        import gpufeed, sys
        transform = gpufeed.ImageTransform(size=64)
        loader = gpufeed.DataLoader({str(packed)!r}, batch_size=4, transform=transform,
                                    num_threads=1, prefetch=1)
        try:
            # "ready" only inside the try, once batches flow: a SIGINT sent
            # when the parent reads it always lands in the iteration.
            ready = False
            while True:
                for images, labels in loader:
                    if not ready:
                        print("ready", flush=True)
                        ready = True
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        # The process is usable afterwards: a new loader runs a whole epoch.
        loader.close()
        again = gpufeed.DataLoader({str(packed)!r}, batch_size=4, transform=transform)
        print("recovered", sum(len(labels) for _, labels in again), flush=True)
    """)
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=HANG_GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()  # a hung child must not outlive the test
        raise
    assert process.returncode == 0, err
    assert "interrupted" in out and "recovered 24" in out, (out, err)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_decode_thread_out_of_memory_is_an_error_not_a_crash(tmp_path, on_error):
    # Sample 5 is a PNG whose header (13000 x 13000, under the pixel limit)
    # makes the eval crop 11555 x 11555, 400 MB of RGB pixels; the child runs
    # with 320 MiB of address space to spare, so that allocation fails inside
    # a decode thread.
    samples = [(jpeg_bytes(i), 0) for i in range(12)]
    samples[5] = (png_claiming(13000, 13000), 0)
    packed = pack_list(tmp_path, samples)
    process = run_python(f"""
        import resource, gpufeed
        try:
            import torch  # imported before the limit: its libraries are large
        except ImportError:
            pass
        transform = gpufeed.ImageTransform(size=16, train=False)
        loader = gpufeed.DataLoader({str(packed)!r}, batch_size=4, shuffle=False,
                                    transform=transform, num_threads=1, prefetch=1,
                                    on_error={on_error!r}, max_skipped=1)
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
        spare = 320 << 20
        resource.setrlimit(resource.RLIMIT_AS, (size + spare, size + spare))
        delivered = 0
        try:
            for images, labels in loader:
                delivered += len(labels)
        except gpufeed.Error as error:
            print("raised:", error, flush=True)
        print("delivered", delivered, "skipped", loader.stats()["skipped"], flush=True)
    """, env=dict(os.environ, MALLOC_ARENA_MAX="2"))
    try:
        out, err = process.communicate(timeout=HANG_GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()  # a hung child must not outlive the test
        raise
    assert process.returncode == 0, (out, err)
    if on_error == "raise":
        assert "raised:" in out and "out of memory" in out and "sample 5" in out, (out, err)
        assert "delivered 4" in out, out
    else:
        assert "delivered 11 skipped 1" in out, (out, err)


def test_cache_directory_removed_underneath_a_running_loader(tmp_path, capfd):
    # Many small shards, read in order and copied only when reached
    # (cache_prefetch=0): shards not yet copied remain when the directory goes,
    # so the fill thread is sure to try again and say what happened. (With a
    # few shards all copied before the removal there is nothing left to copy,
    # rightly no message, and the test raced.)
    small = tmp_path / "small"
    small.mkdir()
    lines = []
    for i in range(90):
        (small / f"{i:03d}.bin").write_bytes(struct.pack("<4i", i, i, i, i))
        lines.append(f"{i:03d}.bin\t{i % 3}")
    (small / "list.txt").write_text("\n".join(lines) + "\n")
    gpufeed.pack(small / "list.txt", small / "packed", progress=False, shard_size=300)
    shards = list((small / "packed").glob("*.rec"))
    assert len(shards) >= 10, shards
    cache = tmp_path / "cache"
    loader = tokens_loader(small / "packed", cache_dir=str(cache), shuffle=False,
                           cache_prefetch=0)
    batches = iter(loader)
    taken = ids_of(next(batches))
    assert (cache / "entries").is_dir()
    import shutil
    # `rm -rf` while the cache's fill thread may still be writing into it:
    # repeat until the tree is gone, as a user's rm -rf loop would.
    # Python 3.11's rmtree raises FileNotFoundError when the fill thread
    # renames a temporary file into place during the walk, and ENOTEMPTY when
    # a file appears: both mean "not gone yet", so go round again.
    for _ in range(100):
        if not cache.exists():
            break
        try:
            shutil.rmtree(cache)
        except OSError:
            continue
    assert not (cache / "entries").exists()
    # The epoch goes on from the source: nothing lost, nothing twice.
    taken += [i for batch in batches for i in ids_of(batch)]
    assert sorted(taken) == list(range(90))
    # And so does the next one; the loader said what happened, once.
    assert sorted(i for batch in loader for i in ids_of(batch)) == list(range(90))
    assert loader.stats()["skipped"] == 0
    # The cache's fill thread says it when it next tries a copy, which may
    # come after the epochs (a fast loader): wait for it, up to 60 s (the
    # loop ends at the line; a loaded machine may take its time to print it).
    said = ""
    for _ in range(1200):
        said += capfd.readouterr().err
        if "read from the source" in said:
            break
        time.sleep(0.05)
    assert "read from the source" in said
