"""`gpufeed bench PATH`: the loader on a real dataset, throughput, per-stage
shares, the verdict, the timeline plot and the JSON."""

import json

import pytest

import gpufeed
from conftest import run_cli, write_random_jpegs
from gpufeed import cli

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def packed_jpegs(tmp_path_factory):
    """40 real JPEGs (2 classes) packed into RecordIO."""
    root = tmp_path_factory.mktemp("bench")
    folder = write_random_jpegs(root / "folder", 40, 2, lambda index: (48 + index, 64), seed=0,
                                quality=85, class_prefix="class_")
    packed = root / "packed"
    gpufeed.pack(folder, packed, shard_size=64 * 1024, progress=False)
    return packed


def run_in_process(capsys, *args):
    """The CLI in this process (one torch import for the module, not one
    per call); returns (exit status, stdout, stderr)."""
    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _check_shares(stages):
    for name, value in stages.items():
        assert 0.0 <= value <= 1.0 + 1e-9, (name, value)
    workers = sum(stages[k] for k in ("workers_read", "workers_decode", "workers_blocked",
                                      "workers_starved"))
    assert workers == pytest.approx(1.0, abs=1e-6)
    assert stages["consumer_busy"] + stages["consumer_starved"] == pytest.approx(1.0)


def test_bench_json_has_throughput_stages_and_verdict(packed_jpegs, capsys):
    status, out, _ = run_in_process(capsys, "bench", packed_jpegs, "--batches", "12", "--warmup",
                                    "2", "--batch-size", "8", "--threads", "2", "--size", "32",
                                    "--dtype", "uint8", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["batches"] == 12 and report["warmup_batches"] == 2
    # 40 samples / 8 = 5 batches per epoch: 14 batches wrap around into a third epoch.
    assert report["batches_per_epoch"] == 5 and report["epochs_touched"] == 3
    assert report["samples"] == 12 * 8
    assert report["samples_per_s"] > 0 and report["mb_per_s"] > 0
    assert report["options"]["num_threads"] == 2
    _check_shares(report["stages"])
    assert report["verdict"].split(":")[0] in ("read-bound", "decode-bound", "consumer-bound", "cpu-contention-bound")
    # The loader's own judgement, carried as values.
    assert report["bottleneck"] in ("consumer", "read", "decode", "cpu-contention")
    assert report["verdict"].startswith(report["bottleneck"] + "-bound")
    assert set(report["loader_shares"]) == {"read", "decode", "decode_cpu", "cpu_wait", "blocked", "other", "consumer_wait", "copy"}
    for name, value in report["loader_shares"].items():
        assert 0.0 <= value <= 1.0 + 1e-6, (name, value)
    for row in report["timeline"]:
        _check_shares({k: v for k, v in row.items() if k.startswith(("workers", "consumer"))})


def test_bench_text_report_and_plot(packed_jpegs, tmp_path):
    plot = tmp_path / "stages.png"
    result = run_cli("bench", packed_jpegs, "--batches", "20", "--batch-size", "4", "--size", "32",
                     "--transform", "eval", "--interval", "0.02", "--plot", plot)
    for label in ("throughput:", "workers", "consumer", "bottleneck:", "verdict:", "plot:"):
        assert label in result.stdout
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_bench_raw_transform_and_pread_backend(packed_jpegs, capsys):
    status, out, _ = run_in_process(capsys, "bench", packed_jpegs, "--transform", "raw",
                                    "--raw-length", "8", "--io-backend", "pread", "--batches", "5",
                                    "--batch-size", "8", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["io_backend"] in ("pread", "")
    assert report["samples"] == 40


def test_bench_errors_are_clean(packed_jpegs, tmp_path, capsys):
    status, _, err = run_in_process(capsys, "bench", tmp_path / "missing")
    assert status == 1 and "gpufeed bench: error:" in err and "missing" in err
    status, _, err = run_in_process(capsys, "bench", packed_jpegs, "--batches", "0")
    assert status == 1 and "batches must be at least 1" in err
    # No GPU here (or a build without CUDA): a clean refusal, not a crash.
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        status, _, err = run_in_process(capsys, "bench", packed_jpegs, "--device", "cuda")
        assert status == 1 and "cuda" in err.lower()


def test_stage_shares_arithmetic():
    from gpufeed.bench import stage_shares
    before = dict(threads=2, read_seconds=0, decode_seconds=0, blocked_seconds=0,
                  consumer_wait_seconds=0)
    after = dict(threads=2, read_seconds=0.5, decode_seconds=2.0, blocked_seconds=0.5,
                 consumer_wait_seconds=0.25)
    shares = stage_shares(before, after, 2.0)  # capacity: 2 threads x 2 s
    assert shares["workers_read"] == pytest.approx(0.125)
    assert shares["workers_decode"] == pytest.approx(0.5)
    assert shares["workers_blocked"] == pytest.approx(0.125)
    assert shares["workers_starved"] == pytest.approx(0.25)
    assert shares["consumer_starved"] == pytest.approx(0.125)


def test_bench_step_time_reports_accelerator_utilization(packed_jpegs, capsys):
    # A 40 ms emulated step per batch of 4 tiny images. How near AU comes to 1
    # depends on the machine's load (a speed, not a property): the test holds
    # the arithmetic and the search's consistency with it, not a level.
    status, out, _ = run_in_process(capsys, "bench", packed_jpegs, "--batches", "10", "--warmup",
                                    "2", "--batch-size", "4", "--size", "32", "--threads", "2",
                                    "--transform", "eval", "--step-time", "0.04", "--au-search",
                                    "--json")
    assert status == 0
    report = json.loads(out)
    au = report["au"]
    assert au["step_time"] == 0.04 and 0.0 < au["au"] <= 1.0
    # 10 x 40 ms of sleep over the measured wall time.
    assert au["au"] == pytest.approx(min(1.0, 10 * 0.04 / report["seconds"])), au
    # One GPU counts as fed exactly when the first measurement reached the target.
    assert (au["gpus_at_target"] >= 1) == (au["au"] >= au["target"]), au
    assert au["estimated_gpus"] >= 0
    assert au["measured"]["1"] == au["au"]
    assert report["bottleneck"] in ("consumer", "read", "decode", "cpu-contention")


def test_step_time_profiles_and_gpu_arithmetic(tmp_path):
    from gpufeed.au import accelerator_utilization, gpus_at_target, step_time_for
    seconds, label = step_time_for(256, step_time_from="a100-resnet50")
    assert abs(seconds - 256 / 2600) < 1e-12 and "a100-resnet50" in label
    table = tmp_path / "steps.csv"
    table.write_text("name,samples_per_second\n# mine\nmy-gpu,500\n")
    assert step_time_for(100, step_time_from=f"my-gpu@{table}")[0] == pytest.approx(0.2)
    assert step_time_for(100, step_time_from=str(table))[0] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="unknown step-time profile"):
        step_time_for(100, step_time_from="no-such-gpu")
    with pytest.raises(ValueError, match="not both"):
        step_time_for(100, step_time=0.1, step_time_from="a100-resnet50")
    assert step_time_for(100) == (None, "")
    # 10 batches x 0.1 s in 2 s: the accelerator computed half the time.
    assert accelerator_utilization(10, 0.1, 2.0) == pytest.approx(0.5)
    # A loader at 9,000 samples/s feeds GPUs wanting 1,000 each at AU >= 90%: 10 of them.
    assert gpus_at_target(9000, 100, 0.1, 0.9) == 10
    assert gpus_at_target(800, 100, 0.1, 0.9) == 0


def test_bench_node_shuffle_opens_only_its_nodes_shards(packed_jpegs, capsys):
    shards = json.loads((packed_jpegs / "gpufeed.json").read_text())["shards"]
    assert len(shards) >= 2
    status, out, _ = run_in_process(capsys, "bench", packed_jpegs, "--shuffle", "node",
                                    "--num-nodes", "2", "--node-rank", "1", "--rank", "1",
                                    "--world-size", "2", "--transform", "raw", "--raw-length",
                                    "8", "--batches", "4", "--warmup", "0", "--batch-size", "2",
                                    "--json")
    assert status == 0
    report = json.loads(out)
    assert report["options"]["shuffle"] == "node" and report["options"]["num_nodes"] == 2
    # The manifest identifies every .rec and .idx (lazy opens): this rank
    # opens the files of its node's shards only, never the whole dataset's.
    storage = report["storage"]
    assert 0 < storage["source_opens"] < 2 * len(shards)
    assert storage["source_stats"] == storage["source_opens"]
    status, out, _ = run_in_process(capsys, "bench", packed_jpegs, "--shuffle", "node",
                                    "--num-nodes", "2", "--node-rank", "1", "--rank", "1",
                                    "--world-size", "2", "--transform", "raw", "--raw-length",
                                    "8", "--batches", "2", "--batch-size", "2")
    assert status == 0 and "source:" in out and "opens" in out
