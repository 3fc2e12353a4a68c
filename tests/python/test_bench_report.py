"""benchmarks/report.py: the closing table, summary.json and summary.png of
benchmarks/run.sh, from the per-step JSON files the steps write."""

import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.environ.get("GPUFEED_REPO_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REPORT = os.path.join(REPO, "benchmarks", "report.py")


def write(path, value):
    path.write_text(json.dumps(value))


@pytest.fixture
def results(tmp_path):
    """Step files shaped exactly as run.sh's steps write them."""
    write(tmp_path / "read.json", {
        "machine": {"cpus": 2}, "images": 500, "pack_seconds": {"recordio": 0.5, "lmdb": 0.7},
        "read": [{"dataset": d, "cache": c, "records": 500, "bytes": 1, "threads": 2,
                  "passes": 1, "records_per_s": r, "mb_per_s": 1.0}
                 for d, c, r in (("imagefolder", "cold", 4000.0), ("imagefolder", "warm", 9000.0),
                                 ("recordio", "cold", 12000.0), ("recordio", "warm", 20000.0))]})
    write(tmp_path / "torch.json", {"cores": 2, "batch": 128, "torch_images_per_s": 150.0,
                                    "gpufeed_images_per_s": 1000.0, "ratio": 6.67,
                                    "verdict": "decode-bound: ..."})
    write(tmp_path / "io.json", {"cases": [
        {"name": "rand 4K qd64 O_DIRECT", "file": "raw.bin", "cache": "cold", "bs": 4096,
         "target": ["iops", 0.85], "ours_mb_per_s": 300.0, "fio_mb_per_s": 200.0,
         "ours_iops": 75000.0, "fio_iops": 50000.0},
        {"name": "seq 64K qd32 O_DIRECT", "file": "raw.bin", "cache": "cold", "bs": 65536,
         "target": None, "ours_mb_per_s": 2300.0, "fio_mb_per_s": 1600.0,
         "ours_iops": 35000.0, "fio_iops": 24000.0}]})
    return tmp_path


def run_report(results, *extra):
    return subprocess.run([sys.executable, REPORT, "--results", str(results), *extra],
                          capture_output=True, text=True, check=True).stdout


def test_table_json_and_chart(results):
    pytest.importorskip("matplotlib")
    out = run_report(results, "--seconds", "95", "--quick")
    assert "== results (--quick, 1.6 min)" in out
    assert "gpufeed.DataLoader, RecordIO, 2 threads" in out and "6.67 x" in out
    # 4 KiB cases in IOPS, larger blocks in MB/s.
    assert any("rand 4K" in line and line.endswith("IOPS") for line in out.splitlines())
    assert any("seq 64K" in line and line.endswith("MB/s") for line in out.splitlines())
    assert "-- loader: not run" in out and "-- gpu: not run" in out
    summary = json.loads((results / "summary.json").read_text())
    assert summary["steps_run"] == ["io", "read", "torch"]
    assert summary["machine"]["cores"] >= 1 and summary["run_seconds"] == 95
    assert {"section", "what", "value", "unit"} <= set(summary["table"][0])
    png = (results / "summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_files_from_an_earlier_run_are_left_out(results):
    old = time.time() - 3600
    os.utime(results / "io.json", (old, old))
    out = run_report(results, "--since", str(int(time.time()) - 60))
    assert "-- io: an earlier run's file, not this run's" in out
    assert "io" not in json.loads((results / "summary.json").read_text())["steps_run"]


def test_gpu_and_cache_files_are_reported(results):
    write(results / "gpu.json", {"gpu": "NVIDIA H200", "batch": 256, "size": 224, "threads": 16,
                                 "raw_uint8_gbps": 50.0, "raw_float32_gbps": 52.0,
                                 "stage_uint8_gbps": 48.0, "stage_normalize_gbps": 45.0,
                                 "pipeline_images_per_s": 9000.0, "consumer_ms": 3.0,
                                 "images_per_s": 8000.0, "stall_percent": 0.5})
    write(results / "cache.json", {"cold_mb_per_s": 500.0, "warm_mb_per_s": 3000.0,
                                   "chart": {"title": "cache", "unit": "MB/s",
                                             "labels": ["cold", "warm"], "values": [500, 3000]}})
    out = run_report(results)
    assert "device stage, uint8" in out and "consumer stall at 3.00 ms/batch" in out
    assert "cold_mb_per_s" in out and "warm_mb_per_s" in out
    assert json.loads((results / "summary.json").read_text())["results"]["cache"]["warm_mb_per_s"] == 3000


def test_tokens_file_is_reported(results):
    write(results / "tokens.json", {
        "corpus_bytes": 2 ** 30, "cache": "cold", "seq_len": 2048, "dtype": "int64",
        "batch_size": 32, "fio_median_mb_per_s": 1500.0, "python_median_mb_per_s": 800.0,
        "python_ratio": 0.533, "cpp_median_mb_per_s": 900.0, "cpp_ratio": 0.6,
        "global_windows_per_s": 38000, "global_fio_iops": 65000, "global_ratio": 0.585,
        "global_whole_windows_per_s": 33000, "global_read_bytes": 4608,
        "global_cpp_windows_per_s": 60000, "global_cpp_ratio": 0.92,
        "global_fio_same_iops": 34000, "global_same_ratio": 0.97,
        "global_queue_depth": 128, "global_fio_deep_iops": 66000, "global_deep_ratio": 0.576,
        "warm_gpufeed_mb_per_s": 570.0, "warm_reference_mb_per_s": 15.0,
        "warm_get_batch_mb_per_s": 100.0, "warm_ratio": 38.0,
        "memory_epochs": 10, "rss_first_mb": 95.0, "rss_last_mb": 103.0})
    out = run_report(results)
    assert "-- tokens" in out and "gpufeed.DataLoader / fio (target >= 0.9x)" in out
    assert "without the heads" in out and "4,608-byte reads" in out
    assert "C++ Loader global windows/s / fio IOPS (target >= 0.9x)" in out
    assert "global windows/s / fio IOPS at the loader's depth [qd128 66,000 IOPS]" in out
    assert any("C++ Loader RSS after epoch 10" in line and line.endswith("MB")
               for line in out.splitlines())
    assert "tokens" in json.loads((results / "summary.json").read_text())["steps_run"]


def test_tabular_file_is_reported(results):
    write(results / "tabular.json", {
        "cpu": "AMD EPYC", "cores": 2, "repeats": 1, "cache": "cold",
        "binary": [{"format": "records", "batch": 65536, "bytes": 2 ** 30, "fio_mb_per_s": 600.0,
                    "python_mb_per_s": 540.0, "python_ratio": 0.9, "cpp_mb_per_s": 570.0,
                    "cpp_ratio": 0.95, "python_shares": {}, "cpp_shares": {},
                    "python_verdict": "read", "cpp_verdict": "read"}],
        "tsv": {"bytes": 300_000_000, "rows": 1_200_000, "gpufeed_rows_per_s": 1_000_000,
                "pandas_rows_per_s": 100_000, "gpufeed_mb_per_core_s": 270.0,
                "pandas_mb_per_core_s": 27.0, "ratio": 10.0},
        "startup": {"days": [{"bytes": 2 ** 30, "gpufeed_first_batch_s": 0.2, "np_load_s": 1.8,
                              "rss_start_mb": 230.0, "rss_epochs_mb": [500.0, 501.0, 501.0],
                              "rss_np_load_mb": 1300.0}]}})
    out = run_report(results)
    assert "-- tabular" in out and "records 1.00 GiB, batch 65536: C++ Loader / fio" in out
    assert any("gpufeed / pandas (target >= 5x)" in line and line.endswith("x")
               for line in out.splitlines())
    assert any("RSS after epoch 3" in line and line.endswith("MB") for line in out.splitlines())
    assert "tabular" in json.loads((results / "summary.json").read_text())["steps_run"]


def test_embedding_file_is_reported(results):
    write(results / "embedding.json", {
        "cpu": "AMD EPYC", "cores": 2, "rows": 2_000_000, "dim": 64, "batch": 4096,
        "cache_bytes": 128 * 2 ** 20, "iops": 500,
        "cold_warm": {"lookups": 20, "warm_epochs": 5, "ratio": 4000.0,
                      "gpufeed_cold_p50_us": 2_700_000.0, "gpufeed_cold_p99_us": 4_000_000.0,
                      "gpufeed_warm_p50_us": 672.0, "gpufeed_warm_p99_us": 1500.0,
                      "memmap_cold_p50_us": 5000.0, "memmap_cold_p99_us": 1_600_000.0,
                      "memmap_warm_p50_us": 800.0, "memmap_warm_p99_us": 2000.0},
        "fresh": {"hit_rate": 0.9, "ideal_hit_rate": 0.93, "ratio": 0.968, "p50_us": 800_000.0,
                  "p99_us": 900_000.0, "capacity_rows": 450_496},
        "bandwidth": {"threads": 2, "gpufeed_rows_per_s": 9_000_000,
                      "index_select_rows_per_s": 15_000_000, "ratio": 0.6},
        "cold_misses": {"queue_depth": 64, "gpufeed_rows_per_s": 42_000, "fio_iops": 47_000,
                        "ratio": 0.92},
        "memory": {"lookups": 2000, "max_growth_mb": 114.4, "bound_mb": 158.8,
                   "overhead_mb": 18.0, "second_quarter_peak_mb": 114.3,
                   "last_quarter_peak_mb": 114.4}})
    out = run_report(results)
    lines = out.splitlines()
    assert "-- embedding (2,000,000 x 64 float32, cache 128 MiB, 500 IOPS)" in out
    for label in ("cold p50 / warm p50 (target >= 20x)",
                  "hit rate / ideal static cache's (target >= 0.9x)",
                  "warm rows/s / index_select's (target >= 0.5x)",
                  "cold miss rows/s / fio IOPS (target >= 0.9x)"):
        assert any(label in line and line.endswith(" x") for line in lines), label
    assert any("memmap + fancy indexing, cold: p99" in line and line.endswith("us")
               for line in lines)
    assert any("RSS growth over 2000 lookups" in line and line.endswith("MB") for line in lines)
    assert "embedding" in json.loads((results / "summary.json").read_text())["steps_run"]
    if "chart:" in out:  # with matplotlib: the latency and hit-rate panels drawn
        assert (results / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_highres_file_is_reported(results):
    entry = {"images": 20, "megapixels_min": 2.1, "megapixels_max": 11.5, "bits_per_pixel": 1.18,
             "us_per_image": {"train_uint8": 10000.0, "eval_uint8": 11700.0},
             "train_floor_share": 0.98, "eval_floor_share": 0.85,
             "train_speedup": 2.68, "eval_speedup": 2.88,
             "train_mean_psnr_db": 48.6, "eval_mean_psnr_db": 48.1,
             "exact_equals_torchvision": 20}
    restart = {"interval_mcus": 16, "images": 18, "same_outputs": 18,
               "as_is": {"bytes": 1000, "train_speedup": 2.12, "eval_speedup": 2.34},
               "restart": {"bytes": 980, "train_speedup": 2.60, "eval_speedup": 2.79}}
    write(results / "highres.json", dict(entry, targets={"speedup": 2.5, "psnr_db": 35.0},
                                          quality75=dict(entry, train_speedup=2.27),
                                          restart=restart))
    out = run_report(results)
    lines = out.splitlines()
    assert "-- high-res photos, as shipped (20, 2.1-11.5 MP, 1.18 bits/pixel), 1 thread" in out
    assert ("-- high-res baseline photos (18), as they are and packed with "
            "jpeg_restart_interval=16, 1 thread") in out
    for label, value in (("train uint8, exact=False / exact, as they are", "2.12 x"),
                         ("train uint8, exact=False / exact, with restart markers", "2.60 x"),
                         ("eval uint8, exact=False / exact, with restart markers", "2.79 x"),
                         ("bytes with restart markers / as they are", "0.98 x"),
                         ("outputs unchanged by the rewrite, images", "18 images")):
        assert any(label in line and line.endswith(value) for line in lines), label
    assert "highres" in json.loads((results / "summary.json").read_text())["steps_run"]


def test_loader_ratios_are_the_rounds_medians(results):
    """loader_compare.py's rounds: the table shows the medians it judged
    the targets by; a file written before the rounds shows images/s only."""
    row = {"dtype": "uint8", "images_per_s": 1400.0, "peak_rss_mb": 90.0, "batch_mb": 9.0,
           "rss_per_epoch_mb": [90.0], "verdict": "decode-bound"}
    write(results / "loader.json", {
        "ceiling_one_thread": 1300.0, "rounds": 5, "scaling": {"uint8": 1.87, "float32": 1.91},
        "rows": [dict(row, threads=1, of_ceiling=1.08), dict(row, threads=2, of_ceiling=0.97)]})
    write(results / "loader_photos.json", {"ceiling_one_thread": 1300.0,
                                           "rows": [dict(row, threads=1)]})
    out = run_report(results)
    assert "1 -> 2 threads, uint8, median of 5 rounds (target >= 1.8x)" in out
    assert "uint8, 2 thread(s), of the decode-only ceiling, median of 5 rounds" in out
    photos = out[out.index("-- loader (C++) (photos)"):]
    photos = photos[:photos.index("\n--")] if "\n--" in photos else photos
    assert "RandomResizedCrop 224, uint8, 1 thread(s)" in photos and "median" not in photos
