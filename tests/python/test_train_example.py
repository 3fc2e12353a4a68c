"""examples/train_pytorch.py trains for real, alone and as 2 processes of a
distributed job (gloo on the CPU), where each rank reads its half of the data."""

import json
import os
import subprocess
import sys

import pytest

import gpufeed
from conftest import write_random_jpegs

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")

ROOT = os.environ.get("GPUFEED_REPO_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "train_pytorch.py")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    write_random_jpegs(root / "folder", 64, 4, lambda i: (48, 64), seed=1, quality=None, high=255)
    gpufeed.pack(root / "folder", root / "packed", progress=False)
    return root


def test_single_process_training_steps(packed, tmp_path):
    result = subprocess.run([sys.executable, EXAMPLE, "--data", str(packed / "packed"),
                             "--size", "32", "--batch-size", "16", "--steps", "3",
                             "--report", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "step 3: loss" in result.stdout
    report = json.loads((tmp_path / "r.0").read_text())
    assert len(report["labels"]) == 48


def test_two_processes_as_torchrun_starts_them_split_the_data(packed, tmp_path):
    # Debian 12's torch 1.13 launcher (torchrun / torch.distributed.run)
    # fails on Python 3.11 before starting any worker (an enum change breaks
    # its redirect parsing), so the test starts the two processes itself with
    # exactly the environment torchrun gives them.
    base = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29517",
                WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    processes = []
    for rank in (0, 1):
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        processes.append(subprocess.Popen(
            [sys.executable, EXAMPLE, "--data", str(packed / "packed"), "--size", "32",
             "--batch-size", "8", "--steps", "4", "--report", str(tmp_path / "r")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for process in processes:
        out, err = process.communicate(timeout=900)
        assert process.returncode == 0, out[-2000:] + err[-3000:]
    reports = [json.loads((tmp_path / f"r.{rank}").read_text()) for rank in (0, 1)]
    # 64 samples over 2 ranks: 4 batches of 8 each, one epoch, exactly half each.
    assert reports[0]["batches"] == reports[1]["batches"] == 4
    assert len(reports[0]["labels"]) == len(reports[1]["labels"]) == 32
