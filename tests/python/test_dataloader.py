"""gpufeed.DataLoader: torch and numpy batches through DLPack, epochs,
ranks in separate processes, resume in a new process, buffer lifetime."""

import io
import os
import struct
import subprocess
import sys
import textwrap

import pytest

import gpufeed
from conftest import pack_list

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def token_dataset(tmp_path_factory):
    """103 records whose bytes are their own index as int32 tokens."""
    samples = [(struct.pack("<4i", i, i + 1, i + 2, i + 3), i % 5) for i in range(103)]
    return pack_list(tmp_path_factory.mktemp("tokens"), samples, shard_size=1000,
                     name=lambda i: f"{i}.bin")


def tokens_loader(path, **kwargs):
    kwargs.setdefault("batch_size", 10)
    return gpufeed.DataLoader(path, transform=gpufeed.RawTransform("int32", (4,)),
                              label_dtype="int64", **kwargs)


def epoch_ids(loader):
    ids = []
    for tokens, labels in loader:
        ids.extend(int(t) for t in tokens[:, 0])
    return ids


def test_torch_batches_exactly_once_and_next_epoch(token_dataset):
    torch = pytest.importorskip("torch")
    loader = tokens_loader(token_dataset)
    assert len(loader) == 11
    first = []
    for tokens, labels in loader:
        assert isinstance(tokens, torch.Tensor) and tokens.dtype == torch.int32
        assert labels.dtype == torch.int64 and labels.shape == (tokens.shape[0],)
        assert torch.equal(tokens[:, 1], tokens[:, 0] + 1)
        assert torch.equal(labels, tokens[:, 0] % 5)
        first.extend(int(t) for t in tokens[:, 0])
    assert sorted(first) == list(range(103))
    second = epoch_ids(loader)  # iterating again is the next epoch
    assert sorted(second) == list(range(103)) and second != first
    loader.set_epoch(0)
    assert epoch_ids(loader) == first  # same seed and epoch, same order


def test_shuffle_modes_and_drop_last(token_dataset):
    ids = epoch_ids(tokens_loader(token_dataset, shuffle=False))
    assert ids == list(range(103))
    ids = epoch_ids(tokens_loader(token_dataset, shuffle="block", drop_last=True))
    assert len(ids) == 100 and len(set(ids)) == 100


def test_tensors_outlive_the_loader_and_held_batches_never_block(token_dataset):
    loader = tokens_loader(token_dataset, prefetch=2, shuffle=False)
    it = iter(loader)
    a, _ = next(it)
    b, _ = next(it)
    c, _ = next(it)
    d, _ = next(it)  # all prefetch + 1 buffers were held: the ring grew by one
    del it, loader
    assert [int(t) for t in a[:, 0]] == list(range(10))
    assert [int(t) for t in b[:, 0]] == list(range(10, 20))
    assert [int(t) for t in c[:, 0]] == list(range(20, 30))
    assert [int(t) for t in d[:, 0]] == list(range(30, 40))


def test_numpy_mode_without_torch(token_dataset):
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # hide torch
        import numpy as np, gpufeed
        loader = gpufeed.DataLoader({str(token_dataset)!r}, batch_size=10, shuffle=False,
                                    transform=gpufeed.RawTransform("int32", (4,)))
        tokens, labels = next(iter(loader))
        assert isinstance(tokens, np.ndarray) and tokens.dtype == np.int32, type(tokens)
        assert tokens.shape == (10, 4) and labels.dtype == np.int64
        assert tokens[3, 0] == 3 and labels[3] == 3
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


RANK_SCRIPT = textwrap.dedent("""
    import json, sys, gpufeed
    path, rank, world, take, state = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    loader = gpufeed.DataLoader(path, batch_size=10, rank=rank, world_size=world, seed=3,
                                transform=gpufeed.RawTransform("int32", (4,)))
    if state != "-":
        loader.load_state_dict(json.loads(state))
    ids = []
    for n, (tokens, _) in enumerate(loader):
        ids.extend(int(t) for t in tokens[:, 0])
        if take >= 0 and n + 1 == take:
            break
    print(json.dumps({"ids": ids, "state": loader.state_dict()}))
""")


def run_rank(path, rank, world, take=-1, state="-", env=None):
    import json
    result = subprocess.run([sys.executable, "-c", RANK_SCRIPT, str(path), str(rank), str(world),
                             str(take), state], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_two_ranks_in_separate_processes_cover_the_epoch(token_dataset):
    a = run_rank(token_dataset, 0, 2)["ids"]
    b = run_rank(token_dataset, 1, 2)["ids"]
    assert len(a) == len(b) == 52  # 103 padded to 104
    assert set(a) | set(b) == set(range(103))
    # Ranks also come from the environment (torchrun sets RANK/WORLD_SIZE).
    env = dict(os.environ, RANK="1", WORLD_SIZE="2")
    code = ("import gpufeed; l = gpufeed.DataLoader(%r, batch_size=10, seed=3, "
            "transform=gpufeed.RawTransform('int32', (4,))); print(len(l))" % str(token_dataset))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.stdout.strip() == "6", out.stderr


def test_resume_in_a_new_process_with_another_world_size(token_dataset):
    import json
    first = [run_rank(token_dataset, r, 2, take=2) for r in range(2)]
    state = first[0]["state"]
    assert state["consumed"] == 40
    seen = set(first[0]["ids"]) | set(first[1]["ids"])
    rest = [run_rank(token_dataset, r, 3, state=json.dumps(state))["ids"] for r in range(3)]
    for ids in rest:
        seen |= set(ids)
    assert seen == set(range(103))
    assert sum(len(ids) for ids in rest) <= 63 + 3  # 63 left, padding at most 1 per rank


def test_image_batches_match_torchvision_eval(jpeg_folder, tmp_path):
    torch = pytest.importorskip("torch")
    TF = pytest.importorskip("torchvision.transforms.functional")
    packed = tmp_path / "packed"
    gpufeed.pack(jpeg_folder, packed, progress=False)
    loader = gpufeed.DataLoader(packed, batch_size=8, shuffle=False,
                                transform=gpufeed.ImageTransform(64, train=False))
    ds = gpufeed.open_dataset(jpeg_folder)
    images, labels = next(iter(loader))
    assert images.shape == (8, 3, 64, 64) and images.dtype == torch.float32
    for i in range(8):
        image = PIL.open(io.BytesIO(ds[i].data)).convert("RGB")
        reference = TF.normalize(TF.to_tensor(TF.center_crop(TF.resize(image, 73), 64)),
                                 [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        assert (images[i] - reference).abs().mean() < 0.02, i
        assert labels[i] == ds[i].label
    uint8 = gpufeed.DataLoader(packed, batch_size=4, transform=gpufeed.ImageTransform(
        32, dtype="uint8", layout="NHWC"))
    images, _ = next(iter(uint8))
    assert images.shape == (4, 32, 32, 3) and images.dtype == torch.uint8
    # The unpacked folder works too (read through the engine's small-file mode).
    folder = gpufeed.DataLoader(jpeg_folder, batch_size=8, shuffle=False,
                                transform=gpufeed.ImageTransform(64, train=False))
    images2, _ = next(iter(folder))
    assert torch.equal(next(iter(loader))[0], images2)


def test_stats_and_errors(token_dataset, tmp_path):
    loader = tokens_loader(token_dataset)
    for _ in loader:
        pass
    stats = loader.stats()
    assert stats["samples"] >= 103 and "verdict" in stats and "verdict" in str(stats)
    # The judgement as values: the bottleneck's name and the shares it rests on.
    assert stats["bottleneck"] in ("consumer", "read", "decode", "cpu-contention")  # host batches: never copy
    assert stats["verdict"].startswith(stats["bottleneck"] + "-bound")
    for share in ("read_share", "decode_share", "consumer_wait_share"):
        assert 0.0 <= stats[share] <= 1.0 + 1e-6, (share, stats[share])
    assert stats["read_share"] + stats["decode_share"] > 0
    assert stats["copy_share"] == 0.0
    # Every worker second in one share.
    total = sum(stats[s] for s in ("read_share", "decode_share", "blocked_share", "other_share"))
    assert abs(total - 1.0) < 0.05, stats
    assert stats["decode_cpu_share"] <= stats["decode_share"] + 1e-9
    assert stats["span"] == "open" and stats["cores"] >= 1
    # The spans: recent (since the first batch here, younger than the window)
    # and the epoch just ended cover no more than since-open.
    recent, epoch = loader.stats("recent"), loader.stats("epoch")
    assert recent["span"] == "recent" and epoch["span"] == "epoch"
    assert 0 < recent["samples"] <= stats["samples"]
    assert 0 < epoch["samples"] <= stats["samples"]
    assert recent["elapsed_seconds"] <= loader.stats()["elapsed_seconds"]
    assert epoch["bottleneck"] != "none"
    with pytest.raises(ValueError, match="span"):
        loader.stats("forever")
    fresh = tokens_loader(token_dataset)
    assert fresh.stats()["bottleneck"] == "none"
    assert fresh.stats()["verdict"] == "no batches delivered yet"
    fresh.close()
    with pytest.raises(ValueError):
        gpufeed.DataLoader(token_dataset, shuffle="sometimes")
    with pytest.raises(FileNotFoundError):
        gpufeed.DataLoader(tmp_path / "missing")
    # The node-local cache is built (tests/python/test_cache.py): accepted now.
    gpufeed.DataLoader(token_dataset, cache_dir=str(tmp_path / "cache"))
    (tmp_path / "f.bin").write_bytes(b"abcd")
    (tmp_path / "l.txt").write_text("f.bin\t1.5\n")
    gpufeed.pack(tmp_path / "l.txt", tmp_path / "p", progress=False)
    bad = gpufeed.DataLoader(tmp_path / "p", batch_size=1,
                             transform=gpufeed.RawTransform("uint8", (4,)))
    with pytest.raises(ValueError, match="not a class index"):
        next(iter(bad))
    floats = gpufeed.DataLoader(tmp_path / "p", batch_size=1, label_dtype="float32",
                                transform=gpufeed.RawTransform("uint8", (4,)))
    _, labels = next(iter(floats))
    assert float(labels[0][0]) == 1.5 if labels.ndim == 2 else float(labels[0]) == 1.5


def test_rss_stays_flat_over_20_epochs(token_dataset):
    def rss_kib():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    loader = tokens_loader(token_dataset)
    for _ in range(3):  # warm-up: buffers, thread stacks, allocator arenas
        epoch_ids(loader)
    before = rss_kib()
    for _ in range(20):
        assert len(epoch_ids(loader)) == 103
    after = rss_kib()
    assert after <= before * 1.05, (before, after)


def test_break_then_del_is_prompt_and_ctrl_c_interrupts(token_dataset):
    import time
    loader = tokens_loader(token_dataset, prefetch=8)
    for _ in loader:
        break
    started = time.perf_counter()
    del loader
    # Prompt: the workers stop without draining the 8 prefetched batches. The
    # bound catches a hang or a drain, with room for a loaded machine.
    assert time.perf_counter() - started < 5.0
    code = textwrap.dedent(f"""
        import gpufeed, sys
        loader = gpufeed.DataLoader({str(token_dataset)!r}, batch_size=10,
                                    transform=gpufeed.RawTransform("int32", (4,)))
        try:
            # "ready" only inside the try, once batches flow: the SIGINT the
            # parent sends on reading it always lands in the iteration.
            ready = False
            while True:
                for batch in loader:
                    if not ready:
                        print("ready", flush=True)
                        ready = True
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
    """)
    import signal
    # SIGINT at its default in the child whatever the runner inherited
    # (a background CI step has it ignored, and Python then never raises
    # KeyboardInterrupt).
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout.readline().strip() == "ready"
    sent = time.perf_counter()
    process.send_signal(signal.SIGINT)
    try:
        # The interruption, timed to the child's own line (not its exit,
        # which unloads torch): the binding checks for signals every 100 ms,
        # so 10 s is a hang, not a slow machine.
        interrupted = process.stdout.readline().strip()
        waited = time.perf_counter() - sent
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()  # a hung child must not outlive the test
        raise
    assert interrupted == "interrupted", (interrupted, out, err)
    assert waited < 10.0


def test_error_mapping_through_the_loader(token_dataset, tmp_path):
    # FileNotFoundError
    with pytest.raises(FileNotFoundError) as info:
        gpufeed.DataLoader(tmp_path / "nope", batch_size=2)
    assert isinstance(info.value, gpufeed.Error)
    # CorruptRecordError naming file, offset and sample, at the batch it hits
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(token_dataset, broken)
    rec = sorted(broken.glob("*.rec"))[0]
    data = bytearray(rec.read_bytes())
    data[0] ^= 0xFF  # the first record's magic
    rec.write_bytes(bytes(data))
    loader = tokens_loader(broken, shuffle=False)
    with pytest.raises(gpufeed.CorruptRecordError) as info:
        for _ in loader:
            pass
    message = str(info.value)
    assert str(rec) in message and "byte offset 0" in message and "sample 0" in message
    # on_error="skip" goes on, counting it
    skipping = tokens_loader(broken, shuffle=False, on_error="skip", max_skipped=10)
    ids = epoch_ids(skipping)
    skipped = skipping.stats()["skipped"]
    assert skipped >= 1 and len(ids) + skipped == 103 and len(set(ids)) == len(ids)
    # NotSupportedError
    (tmp_path / "folder" / "a").mkdir(parents=True)
    (tmp_path / "folder" / "a" / "x.jpg").write_bytes(b"not decoded here")
    with pytest.raises(gpufeed.NotSupportedError):
        if not _cuda():
            gpufeed.DataLoader(token_dataset, device="cuda:0")
        else:  # an image that is neither JPEG nor PNG
            for _ in gpufeed.DataLoader(tmp_path / "folder", batch_size=1, num_threads=1,
                                        transform=gpufeed.ImageTransform(size=8)):
                pass
    # ValueError for bad arguments
    with pytest.raises(ValueError):
        tokens_loader(token_dataset, batch_size=0)


def _cuda():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


# -- a drop-in for torch's DataLoader ---------------------------------------

def test_list_of_a_whole_epoch_equals_cloned_batches(token_dataset):
    want = [(x.clone(), y.clone()) for x, y in tokens_loader(token_dataset, shuffle=False)]
    loader = tokens_loader(token_dataset, shuffle=False, prefetch=1)
    got = list(loader)  # every batch held at once
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert np.array_equal(np.asarray(x), np.asarray(wx))
        assert np.array_equal(np.asarray(y), np.asarray(wy))
    # Two epochs held at once, and after the loader is gone.
    second = list(loader)
    del loader
    for (x, y), (wx, _) in zip(got + second, want + want):
        assert np.array_equal(np.asarray(x), np.asarray(wx))


def test_held_batches_past_max_held_bytes_raise_naming_the_knob(token_dataset):
    batch_bytes = 10 * 4 * 4 + 10 * 8  # int32 tokens (10, 4) and int64 labels (10,)
    loader = tokens_loader(token_dataset, shuffle=False, prefetch=1,
                           max_held_bytes=3 * batch_bytes)
    it = iter(loader)
    kept = [next(it), next(it), next(it)]
    with pytest.raises(ValueError, match="max_held_bytes"):
        next(it)
    del kept
    assert next(iter(loader)) is not None  # a new loop goes on


def test_a_forked_child_gets_an_error_from_the_inherited_loader(token_dataset):
    import os
    import time
    loader = tokens_loader(token_dataset, shuffle=False)
    it = iter(loader)
    first, _ = next(it)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 0
        try:
            started = time.perf_counter()
            try:
                next(iter(loader))
                code = 2
            except ValueError as error:
                # An error at once, not after a hang (10 s: the child of a large
                # process with torch loaded pays copy-on-write faults first).
                if "fork" not in str(error) or time.perf_counter() - started > 10.0:
                    code = 3
            fresh = tokens_loader(token_dataset, shuffle=False)
            tokens, _ = next(iter(fresh))
            if [int(t) for t in tokens[:, 0]] != list(range(10)):
                code = 4
            del first, it, loader  # inherited tensors and loader: dropped without a hang
        except BaseException:
            code = 5
        os.write(write, bytes([code]))
        os._exit(code)
    os.close(write)
    result = os.read(read, 1)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert result == b"\x00", f"child reported {result!r} (status {status})"
    second, _ = next(it)  # the parent's loader goes on
    assert [int(t) for t in second[:, 0]] == list(range(10, 20))


@pytest.mark.parametrize("keywords,expected", [
    (dict(num_workers=1), dict(num_threads=1)),
    (dict(num_workers=0), dict(num_threads=0)),
    (dict(num_workers=2, prefetch_factor=3), dict(num_threads=2, prefetch=6)),
    (dict(num_workers=4, prefetch_factor=4), dict(num_threads=4, prefetch=8)),
    (dict(persistent_workers=True), dict()),
    (dict(pin_memory=False), dict()),
    (dict(drop_last=True), dict(drop_last=True)),
    (dict(shuffle=False), dict(shuffle="none")),
    (dict(batch_size=7), dict(batch_size=7)),
    (dict(timeout=60), dict()),
    (dict(pin_memory_device=""), dict()),
    (dict(sampler=None, batch_sampler=None, collate_fn=None, worker_init_fn=None), dict()),
])
def test_torch_keywords_map_to_gpufeed_options(token_dataset, keywords, expected):
    loader = tokens_loader(token_dataset, **keywords)
    for name, value in expected.items():
        assert str(getattr(loader._options, name)) == str(value), name
    assert next(iter(loader)) is not None


def test_generator_gives_the_seed(token_dataset):
    import torch
    generator = torch.Generator()
    generator.manual_seed(1234)
    loader = tokens_loader(token_dataset, generator=generator)
    assert loader._options.seed == 1234
    assert epoch_ids(loader) == epoch_ids(tokens_loader(token_dataset, seed=1234))
    with pytest.raises(TypeError, match="generator or seed"):
        tokens_loader(token_dataset, generator=generator, seed=1)


@pytest.mark.parametrize("name,value,hint", [
    ("sampler", object(), "shuffle="),
    ("batch_sampler", object(), "batch_size="),
    ("collate_fn", lambda batch: batch, "training loop"),
    ("worker_init_fn", lambda worker: None, "seed="),
    ("multiprocessing_context", "spawn", "threads"),
    ("in_order", False, "in order"),
])
def test_torch_keywords_that_cannot_carry_over_say_what_to_do(token_dataset, name, value, hint):
    with pytest.raises(TypeError, match=hint):
        tokens_loader(token_dataset, **{name: value})


def test_unknown_keywords_and_conflicting_names_are_type_errors(token_dataset):
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_wokers'"):
        tokens_loader(token_dataset, num_wokers=2)
    with pytest.raises(TypeError, match="not both"):
        tokens_loader(token_dataset, num_workers=2, num_threads=2)
    with pytest.raises(TypeError, match="not both"):
        tokens_loader(token_dataset, prefetch_factor=2, prefetch=2)
    with pytest.raises(ValueError):
        tokens_loader(token_dataset, num_workers=-1)
    with pytest.raises(ValueError):
        tokens_loader(token_dataset, timeout=-1)


def test_a_map_style_dataset_object_is_a_type_error_that_says_pack(token_dataset):
    import torch

    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, index):
            return index * index

    with pytest.raises(TypeError, match="pack"):
        gpufeed.DataLoader(Squares(), batch_size=2)


def test_timeout_raises_like_torch_when_a_batch_takes_longer(tmp_path):
    import io
    from PIL import Image
    rng = np.random.default_rng(3)
    for i in range(32):
        folder = tmp_path / "folder" / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (400, 400, 3), dtype=np.uint8)).save(
            buffer, format="JPEG", quality=95)
        (folder / f"{i:03d}.jpg").write_bytes(buffer.getvalue())
    transform = gpufeed.ImageTransform(224, train=False)
    # 32 decodes of 400 x 400 JPEGs take far longer than a millisecond.
    loader = gpufeed.DataLoader(tmp_path / "folder", batch_size=32, timeout=0.001,
                                transform=transform, num_workers=1)
    with pytest.raises(RuntimeError, match="timed out after 0.001 seconds"):
        next(iter(loader))
    patient = gpufeed.DataLoader(tmp_path / "folder", batch_size=32, timeout=60,
                                 transform=transform)
    images, _ = next(iter(patient))
    assert tuple(images.shape) == (32, 3, 224, 224)
