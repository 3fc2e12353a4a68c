#!/usr/bin/python3
"""The closing step of benchmarks/run.sh: one results table on stdout, one
JSON (summary.json) and one chart (summary.png) from the per-step JSON files.

    report.py --results benchmarks/results [--since EPOCH_SECONDS] [--seconds RUN_SECONDS]
              [--quick]

Reads read.json (small files vs packed shards), webdataset.json and
formats.json (WebDataset tars, MDS and TFRecord vs RecordIO), transform.json (the
transform's µs per image vs a plain full decode, photos and demo),
loader.json and loader_photos.json (the C++ loader vs a decode-only
ceiling, demo and photo sets), torch.json and torch_photos.json
(gpufeed.DataLoader vs torch's, demo and photos), io.json (read engine vs fio), tokens.json
and tabular.json (token corpora and tabular rows vs fio, pandas and np.load), embedding.json
(embedding tables behind a throttled disk vs memmap, index_select and fio), highres.json
(ImageTransform exact=False vs exact on 2-12 MP photographs), and, when their
steps ran, cache.json and gpu.json. With --since, a file older than that moment is left out (it is
from an earlier run, not this one) and the table says so.

cache.json and gpu.json are written by their own steps; any flat numbers in
them are listed, and a `chart` entry draws a panel:
    "chart": {"title": "...", "unit": "GB/s", "labels": ["cold", "warm"], "values": [1.2, 9.8]}
"""

import argparse
import json
import os
import platform
import sys
import time

STEPS = ("read", "webdataset", "formats", "transform", "loader", "loader_photos", "torch",
         "torch_photos", "io", "cache", "verdict", "gpu", "tokens", "tabular", "embedding",
         "highres")


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as source:
            model = next((line.split(":", 1)[1].strip() for line in source
                          if line.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory_gb = 0.0
    try:
        with open("/proc/meminfo") as source:
            for line in source:
                if line.startswith("MemTotal:"):
                    memory_gb = int(line.split()[1]) / 1e6
    except OSError:
        pass
    os_name = platform.platform()
    try:
        with open("/etc/os-release") as source:
            values = dict(line.rstrip("\n").split("=", 1) for line in source if "=" in line)
            os_name = values.get("PRETTY_NAME", os_name).strip('"')
    except OSError:
        pass
    # Timings depend on what else runs: the load average goes with them.
    load = [round(value, 2) for value in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpu": model, "cores": cores, "memory_gb": round(memory_gb, 1), "os": os_name,
            "kernel": platform.release(), "load_average_1_5_15_min": load}


def load(results, since):
    loaded, stale = {}, []
    for step in STEPS:
        path = os.path.join(results, f"{step}.json")
        if not os.path.exists(path):
            continue
        if since and os.path.getmtime(path) < since:
            stale.append(step)
            continue
        with open(path) as source:
            loaded[step] = json.load(source)
    return loaded, stale


def flat_numbers(value, prefix=""):
    """(dotted key, number) pairs of a JSON value, lists of rows skipped."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "chart":
                continue
            yield from flat_numbers(item, f"{prefix}{key}.")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix.rstrip("."), value


def tabular_rows(tabular):
    """benchmarks/tabular_compare.py: records and .npy vs fio, TSV vs pandas,
    the first batch vs np.load, RSS over epochs."""
    rows = []
    if not tabular:
        return rows
    for row in tabular.get("binary", []):
        what = f"{row['format']} {row['bytes'] / 2**30:.2f} GiB, batch {row['batch']}"
        rows.append(("tabular", f"{what}: fio seq 1 MiB qd32 O_DIRECT"
                     + (f" [8 MiB qd4 {row['fio_8m_qd4_mb_per_s']:,.0f}]"
                        if "fio_8m_qd4_mb_per_s" in row else ""), row["fio_mb_per_s"], "MB/s"))
        for who, label in (("python", "gpufeed.DataLoader"), ("cpp", "C++ Loader")):
            if f"{who}_ratio" in row:
                rows.append(("tabular", f"{what}: {label}, bytes of records (cold, block "
                             "shuffle, O_DIRECT)", row[f"{who}_mb_per_s"], "MB/s"))
                rows.append(("tabular", f"{what}: {label} / fio (target >= 0.9x)",
                             row[f"{who}_ratio"], "x"))
    tsv = tabular.get("tsv")
    if tsv:
        what = f"criteo_tsv {tsv['bytes'] / 1e6:.0f} MB, 1 thread"
        rows.append(("tabular", f"{what}: gpufeed.DataLoader [{tsv['gpufeed_mb_per_core_s']:.0f} "
                     "MB/s of text per core]", tsv["gpufeed_rows_per_s"], "rows/s"))
        rows.append(("tabular", f"{what}: pandas.read_csv + numpy "
                     f"[{tsv['pandas_mb_per_core_s']:.0f} MB/s of text per core]",
                     tsv["pandas_rows_per_s"], "rows/s"))
        rows.append(("tabular", f"{what}: gpufeed / pandas (target >= 5x)", tsv["ratio"], "x"))
    for day in tabular.get("startup", {}).get("days", []):
        what = f".npy day {day['bytes'] / 2**30:.2f} GiB, cold"
        rows.append(("tabular", f"{what}: gpufeed first batch [np.load {day['np_load_s']:.2f} s]",
                     day["gpufeed_first_batch_s"], "s"))
        if day.get("rss_epochs_mb"):
            rows.append(("tabular", f"{what}: DataLoader RSS after epoch 1 [np.load "
                         f"{day['rss_np_load_mb']:.0f} MB]", day["rss_epochs_mb"][0], "MB"))
            rows.append(("tabular", f"{what}: DataLoader RSS after epoch "
                         f"{len(day['rss_epochs_mb'])}", day["rss_epochs_mb"][-1], "MB"))
    return rows


def highres_rows(highres):
    """benchmarks/highres_compare.py: exact=False vs exact on one thread."""
    if not highres:
        return []
    rows = []
    for label, entry in (("as shipped", highres), ("quality 75", highres.get("quality75"))):
        if not entry:
            continue
        section = (f"high-res photos, {label} ({entry['images']}, {entry['megapixels_min']:g}-"
                   f"{entry['megapixels_max']:g} MP, {entry['bits_per_pixel']:g} bits/pixel), 1 thread")
        for kind in ("train", "eval"):
            exact_us = entry["us_per_image"][f"{kind}_uint8"]
            rows.append((section, f"{kind} uint8, exact (PIL's bytes)", 1e6 / exact_us, "images/s"))
            rows.append((section, f"{kind} uint8, exact=False / exact (target >= "
                         f"{highres['targets']['speedup']:g}x; libjpeg's decode at 1/8 takes "
                         f"{entry[kind + '_floor_share']:.0%} of the exact time)",
                         entry[f"{kind}_speedup"], "x"))
            rows.append((section, f"{kind} uint8, exact=False mean PSNR vs exact (target >= "
                         f"{highres['targets']['psnr_db']:g} dB)", entry[f"{kind}_mean_psnr_db"],
                         "dB"))
        if "exact_equals_torchvision" in entry:
            rows.append((section, "exact eval output == torchvision's, images",
                         entry["exact_equals_torchvision"], "images"))
    rows += restart_rows(highres.get("restart"), highres["targets"]["speedup"])
    return rows


def restart_rows(restart, target):
    """highres_compare.py's baseline photographs as they are and packed with
    jpeg_restart_interval (restart markers): exact=False / exact for each."""
    if not restart:
        return []
    section = (f"high-res baseline photos ({restart['images']}), as they are and packed with "
               f"jpeg_restart_interval={restart['interval_mcus']}, 1 thread")
    rows = []
    for kind in ("train", "eval"):
        for label, key in (("as they are", "as_is"), ("with restart markers", "restart")):
            rows.append((section, f"{kind} uint8, exact=False / exact, {label} (target >= "
                         f"{target:g}x)", restart[key][f"{kind}_speedup"], "x"))
    rows.append((section, "bytes with restart markers / as they are",
                 restart["restart"]["bytes"] / restart["as_is"]["bytes"], "x"))
    rows.append((section, "outputs unchanged by the rewrite, images", restart["same_outputs"],
                 "images"))
    return rows


def embedding_rows(embedding):
    """benchmarks/embedding_compare.py: a table behind a throttled disk,
    cold vs warm, hit rate vs an ideal cache, vs index_select, fio, memmap."""
    rows = []
    if not embedding:
        return rows
    section = (f"embedding ({embedding['rows']:,} x {embedding['dim']} float32, cache "
               f"{embedding['cache_bytes'] / 2**20:.0f} MiB, {embedding['iops']} IOPS"
               + (f", {embedding['mbps']:g} MB/s" if embedding.get("mbps") else "") + ")")
    c = embedding.get("cold_warm")
    if c:
        rows += [(section, f"{c['lookups']} lookups of {embedding['batch']} Zipf ids, cold (first "
                  f"touch): p50 [p99 {c['gpufeed_cold_p99_us']:,.0f}]", c["gpufeed_cold_p50_us"],
                  "us"),
                 (section, f"the same replayed ({c['warm_epochs']} epochs, warm): p50 [p99 "
                  f"{c['gpufeed_warm_p99_us']:,.0f}]", c["gpufeed_warm_p50_us"], "us"),
                 (section, "cold p50 / warm p50 (target >= 20x)", c["ratio"], "x"),
                 (section, f"memmap + fancy indexing, cold: p99 [gpufeed "
                  f"{c['gpufeed_cold_p99_us']:,.0f}]", c["memmap_cold_p99_us"], "us"),
                 (section, f"memmap + fancy indexing, warm: p99 [gpufeed "
                  f"{c['gpufeed_warm_p99_us']:,.0f}]", c["memmap_warm_p99_us"], "us")]
    f = embedding.get("fresh")
    if f:
        rows += [(section, f"fresh draws: RAM tier hit rate [ideal static cache "
                  f"{f['ideal_hit_rate']:.3f}; p50 {f['p50_us']:,.0f} us, p99 "
                  f"{f['p99_us']:,.0f} us]",
                  f["hit_rate"], ""),
                 (section, "hit rate / ideal static cache's (target >= 0.9x)", f["ratio"], "x")]
    b = embedding.get("bandwidth")
    if b:
        rows += [(section, f"warm, {b['threads']} threads [torch.index_select "
                  f"{b['index_select_rows_per_s']:,} rows/s]", b["gpufeed_rows_per_s"], "rows/s"),
                 (section, "warm rows/s / index_select's (target >= 0.5x)", b["ratio"], "x")]
    m = embedding.get("cold_misses")
    if m:
        rows += [(section, f"cold misses, unthrottled, O_DIRECT [fio 4 KiB randread "
                  f"qd{m['queue_depth']} {m['fio_iops']:,} IOPS]", m["gpufeed_rows_per_s"],
                  "rows/s"),
                 (section, "cold miss rows/s / fio IOPS (target >= 0.9x)", m["ratio"], "x")]
    r = embedding.get("memory")
    if r:
        rows += [(section, f"RSS growth over {r['lookups']} lookups [bound {r['bound_mb']:.0f} MB "
                  f"= cache x 1.1 + {r['overhead_mb']:.0f} MB]", r["max_growth_mb"], "MB"),
                 (section, "RSS peak, last quarter - second quarter",
                  round(r["last_quarter_peak_mb"] - r["second_quarter_peak_mb"], 1), "MB")]
    return rows


def headline_rows(data):
    """(section, what, value, unit) rows of the results table."""
    rows = []
    read = data.get("read")
    if read:
        for row in read["read"]:
            rows.append(("read back", f"{row['dataset']} ({row['cache']} page cache)",
                         row["records_per_s"], "records/s"))
        for fmt, ratio in read.get("cold_vs_recordio", {}).items():
            rows.append(("read back", f"cold {fmt} / cold recordio (target >= 0.5x)", ratio, "x"))
        for fmt, seconds in read.get("pack_seconds", {}).items():
            rows.append(("pack", f"{read['images']} images -> {fmt}", seconds, "s"))
    webdataset = data.get("webdataset")
    if webdataset:
        for row in webdataset["rows"]:
            unit = "records/s" if row["figure"] == "read" else "images/s"
            rows.append(("tar vs rec", f"{row['figure']} {row['cache']}: webdataset tar",
                         row["tar_per_s"], unit))
            rows.append(("tar vs rec", f"{row['figure']} {row['cache']}: tar / recordio "
                         "(target >= 0.9x)", row["ratio"], "x"))
    formats = data.get("formats")
    if formats:
        for row in formats["rows"]:
            rows.append(("formats vs rec", f"{row['figure']} cold: {row['format']}",
                         row["per_s"], "images/s"))
            rows.append(("formats vs rec", f"{row['figure']} cold: {row['format']} / recordio "
                         "(target >= 0.9x)", row["ratio"], "x"))
        for name, reason in formats.get("skipped", {}).items():
            rows.append(("formats vs rec", f"{name}: skipped ({reason})", 0, "skipped"))
    transform = data.get("transform")
    if transform:
        # benchmarks/transform_compare.py: one thread, µs per image, vs a full decode.
        for entry in transform["sets"]:
            for row in entry["rows"]:
                section = f"transform, 1 thread ({entry['dataset']})"
                if row["case"] == "full_decode":
                    rows.append((section, "plain libjpeg-turbo full decode", row["us_per_image"],
                                 "us/image"))
                    continue
                target = transform.get("targets", {}).get(row["case"])
                rows.append((section, f"{row['case']} (decode {row['decode_us']:.0f} + resample "
                             f"{row['resample_us']:.0f} + write {row['write_us']:.0f} us)",
                             row["us_per_image"], "us/image"))
                rows.append((section, f"{row['case']} rate / full-decode rate"
                             + (f" (target >= {target:g}x)" if target else ""),
                             row["vs_full_decode"], "x"))
    for step, label in (("loader", ""), ("loader_photos", " (photos)")):
        loader = data.get(step)
        if not loader:
            continue
        rows.append((f"loader (C++){label}", "decode-only ceiling, 1 thread",
                     loader["ceiling_one_thread"], "images/s"))
        for row in loader["rows"]:
            rows.append((f"loader (C++){label}", f"RandomResizedCrop 224, {row['dtype']}, "
                         f"{row['threads']} thread(s)", row["images_per_s"], "images/s"))
        # Medians of the rounds' ratios (runs before the rounds have none).
        rounds = loader.get("rounds")
        rounds = f"{rounds} round{'' if rounds == 1 else 's'}"
        for row in loader["rows"]:
            if row["dtype"] == "uint8" and "of_ceiling" in row:
                rows.append((f"loader (C++){label}", f"uint8, {row['threads']} thread(s), of the "
                             f"decode-only ceiling, median of {rounds} (target >= 90%)",
                             100 * row["of_ceiling"], "%"))
        for dtype, scaling in loader.get("scaling", {}).items():
            rows.append((f"loader (C++){label}", f"1 -> 2 threads, {dtype}, median of {rounds} "
                         f"(target >= 1.8x)", scaling, "x"))
    for step in ("torch", "torch_photos"):
        torch = data.get(step)
        if not torch:
            continue
        section = "vs torch" + (f" ({torch['dataset']})" if "dataset" in torch else "")
        rows.append((section, f"torch DataLoader, ImageFolder, {torch['cores']} workers",
                     torch["torch_images_per_s"], "images/s"))
        rows.append((section, f"gpufeed.DataLoader, RecordIO, {torch['cores']} threads",
                     torch["gpufeed_images_per_s"], "images/s"))
        rows.append((section, "ratio gpufeed / torch"
                     + (f" (target >= {torch['target']:g}x)" if "target" in torch else ""),
                     torch["ratio"], "x"))
    io = data.get("io")
    if io:
        for case in io["cases"]:
            # IOPS where the case is about operations (its target says so, or 4 KiB reads).
            iops = (case["target"][0] == "iops") if case.get("target") else case["bs"] <= 4096
            ours = case["ours_iops"] if iops else case["ours_mb_per_s"]
            fio = case["fio_iops"] if iops else case["fio_mb_per_s"]
            rows.append(("read engine", f"{case['name']} ({case['file']}, {case['cache']}) "
                         f"[fio {fio:,.0f}]", ours, "IOPS" if iops else "MB/s"))
    tokens = data.get("tokens")
    if tokens:
        # benchmarks/token_compare.py: token bytes/s vs fio's sequential read.
        what = (f"{tokens['corpus_bytes'] / 2**30:.1f} GiB Megatron, {tokens['cache']}, "
                f"block shuffle, O_DIRECT, seq {tokens['seq_len']} {tokens['dtype']}")
        rows.append(("tokens", f"fio seq 1 MiB qd32 O_DIRECT ({what})",
                     tokens["fio_median_mb_per_s"], "MB/s"))
        for who, label in (("python", "gpufeed.DataLoader"), ("cpp", "C++ Loader")):
            if f"{who}_median_mb_per_s" in tokens:
                rows.append(("tokens", f"{label}, token bytes", tokens[f"{who}_median_mb_per_s"],
                             "MB/s"))
                rows.append(("tokens", f"{label} / fio (target >= 0.9x)", tokens[f"{who}_ratio"],
                             "x"))
        if "global_ratio" in tokens:
            rows.append(("tokens", f"cold global shuffle, windows/s [fio 4 KiB randread qd64 "
                         f"{tokens['global_fio_iops']:,} IOPS]", tokens["global_windows_per_s"],
                         "windows/s"))
            rows.append(("tokens", "global windows/s / fio IOPS (target >= 0.9x)",
                         tokens["global_ratio"], "x"))
        if "global_deep_ratio" in tokens:
            rows.append(("tokens", f"global windows/s / fio IOPS at the loader's depth "
                         f"[qd{tokens['global_queue_depth']} "
                         f"{tokens['global_fio_deep_iops']:,} IOPS]",
                         tokens["global_deep_ratio"], "x"))
        if "global_cpp_ratio" in tokens:
            rows.append(("tokens", "cold global shuffle, C++ Loader, windows/s",
                         tokens["global_cpp_windows_per_s"], "windows/s"))
            rows.append(("tokens", "C++ Loader global windows/s / fio IOPS (target >= 0.9x)",
                         tokens["global_cpp_ratio"], "x"))
        if "global_whole_windows_per_s" in tokens:
            rows.append(("tokens", "cold global shuffle without the heads (windows read whole)",
                         tokens["global_whole_windows_per_s"], "windows/s"))
        if "global_same_ratio" in tokens:
            rows.append(("tokens", f"windows read whole / fio reading their "
                         f"{tokens['global_read_bytes']:,}-byte reads "
                         f"[{tokens['global_fio_same_iops']:,} IOPS]",
                         tokens["global_same_ratio"], "x"))
        if "warm_ratio" in tokens:
            rows.append(("tokens", f"warm, global shuffle: gpufeed.DataLoader [memmap + torch "
                         f"{tokens['warm_reference_mb_per_s']:,.0f} MB/s]",
                         tokens["warm_gpufeed_mb_per_s"], "MB/s"))
            rows.append(("tokens", "warm gpufeed / memmap + torch DataLoader (target >= 3x)",
                         tokens["warm_ratio"], "x"))
            if "warm_get_batch_mb_per_s" in tokens:
                rows.append(("tokens", "warm: nanoGPT get_batch in the training process",
                             tokens["warm_get_batch_mb_per_s"], "MB/s"))
        if "rss_last_mb" in tokens:
            rows.append(("tokens", "C++ Loader RSS after epoch 1", tokens["rss_first_mb"], "MB"))
            rows.append(("tokens", f"C++ Loader RSS after epoch {tokens['memory_epochs']}",
                         tokens["rss_last_mb"], "MB"))
    rows += tabular_rows(data.get("tabular"))
    rows += embedding_rows(data.get("embedding"))
    rows += highres_rows(data.get("highres"))
    cache = data.get("cache")
    if isinstance(cache, dict) and "runs" in cache:
        # benchmarks/cache_bench (gpufeed_cache_bench --json): epoch by epoch.
        for run in cache["runs"]:
            for epoch in run["epochs"]:
                ratio = (f", {epoch['source_ratio']:.2f}x the dataset"
                         if "source_ratio" in epoch else "")
                rows.append(("cache", f"{run['config']}, epoch {epoch['epoch']} "
                             f"(source read {epoch['source_mb']:.1f} MB{ratio})",
                             epoch["records_per_s"], "records/s"))
            if "epoch1_ratio" in run and cache.get("physical"):
                measured = cache["physical"]["formats"].get(run["format"])
                if measured:
                    rows.append(("cache", f"{run['format']}: epoch 1 with the cache / without over "
                                 f"a throttled disk ({cache['physical']['mbps']:.0f} MB/s, "
                                 f"{cache['physical']['iops']} IOPS), median (target >= 0.9x)",
                                 measured["ratio"], "x"))
            if "epoch1_ratio" in run:
                rows.append(("cache", f"{run['format']}: epoch 1 with the cache / without, median "
                             f"of {len(run['epoch1_ratios'])} rounds (target >= 0.9x)",
                             run["epoch1_ratio"], "x"))
    elif cache:
        for key, value in flat_numbers(cache):
            rows.append(("cache", key, value, ""))
    verdict = data.get("verdict")
    if isinstance(verdict, dict) and "rows" in verdict:
        # benchmarks/verdict_check.py: physically created bottlenecks.
        for row in verdict["rows"]:
            rows.append(("verdict", f"{row['scenario']}: truth {row['truth']}, said "
                         f"{row['verdict']}", 1.0 if row["right"] else 0.0, "right"))
        rows.append(("verdict", f"scenarios right ({verdict['unproven']} unproven)",
                     verdict["right"], f"of {verdict['scenarios']}"))
    gpu = data.get("gpu")
    if isinstance(gpu, dict) and "raw_uint8_gbps" in gpu:
        # benchmarks/gpu_check.sh (gpufeed_gpu_bench --json).
        name = f"{gpu.get('gpu', 'GPU')}, batch {gpu.get('batch')} x {gpu.get('size')}px"
        rows += [("gpu", f"raw pinned H2D, uint8 ({name})", gpu["raw_uint8_gbps"], "GB/s"),
                 ("gpu", "raw pinned H2D, float32", gpu["raw_float32_gbps"], "GB/s"),
                 ("gpu", "device stage, uint8", gpu["stage_uint8_gbps"], "GB/s"),
                 ("gpu", "device stage, uint8 + GPU normalize", gpu["stage_normalize_gbps"], "GB/s"),
                 ("gpu", f"pipeline into GPU memory, {gpu.get('threads')} threads",
                  gpu["pipeline_images_per_s"], "images/s"),
                 ("gpu", f"consumer stall at {gpu['consumer_ms']:.2f} ms/batch",
                  gpu["stall_percent"], "%")]
    elif gpu is not None:
        for key, value in flat_numbers(gpu):
            rows.append(("gpu", key, value, ""))
    return rows


def print_table(rows, data, stale, info, seconds, quick):
    print()
    print(f"== results ({'--quick' if quick else 'full run'}"
          + (f", {seconds / 60:.1f} min" if seconds else "") + ")")
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']:.0f} GB RAM, "
          f"{info['os']}, Linux {info['kernel']}"
          + (f"; load average {info['load_average_1_5_15_min'][0]:.1f} (1 min), "
             f"{info['load_average_1_5_15_min'][2]:.1f} (15 min)"
             if info["load_average_1_5_15_min"] else ""))
    width = max([len(r[1]) for r in rows] + [20])
    section = None
    for name, what, value, unit in rows:
        if name != section:
            print(f"-- {name}")
            section = name
        small = unit in ("x", "s", "", "GB/s", "%") and isinstance(value, float) and abs(value) < 100
        number = f"{value:,.2f}" if small else f"{value:,.0f}"
        print(f"   {what:<{width}} {number:>12} {unit}")
    for step in STEPS:
        if step not in data:
            reason = "an earlier run's file, not this run's" if step in stale else "not run"
            print(f"-- {step}: {reason}")


def draw_embedding_latency(axis, embedding):
    """p50 and p99 per lookup, cold and warm, gpufeed beside memmap (log scale)."""
    timings = embedding["cold_warm"]
    groups = [(phase, q) for phase in ("cold", "warm") for q in ("p50", "p99")]
    for offset, who, label, color in (
            (-0.2, "gpufeed", "gpufeed.EmbeddingTable", "#55a868"),
            (0.2, "memmap", "np.load(mmap_mode='r')[ids]", "#8c8c8c")):
        axis.bar([i + offset for i in range(len(groups))],
                 [timings[f"{who}_{phase}_{q}_us"] for phase, q in groups], 0.4, label=label,
                 color=color)
    axis.set_yscale("log")
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels([f"{phase} {q}" for phase, q in groups])
    axis.set_ylabel("us per lookup of 4,096 ids")
    axis.set_title(f"embedding lookups behind {embedding['iops']} IOPS: cold p50 / warm p50 "
                   f"{timings['ratio']:,.0f}x (target >= 20x)")
    axis.legend(fontsize=8)


def draw(data, out_path, info, quick):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = []
    if "read" in data:
        panels.append("read")
    if "loader" in data or "torch" in data:
        panels.append("images")
    if "io" in data:
        panels.append("io")
    gpu = data.get("gpu")
    if isinstance(gpu, dict) and "raw_uint8_gbps" in gpu and "chart" not in gpu:
        gpu["chart"] = {"title": f"GPU stage ({gpu.get('gpu', 'GPU')}): consumer stall "
                                 f"{gpu['stall_percent']:.1f}%",
                        "unit": "GB/s host to device",
                        "labels": ["raw H2D\nuint8", "raw H2D\nfloat32", "stage\nuint8",
                                   "stage uint8\n+ normalize"],
                        "values": [gpu["raw_uint8_gbps"], gpu["raw_float32_gbps"],
                                   gpu["stage_uint8_gbps"], gpu["stage_normalize_gbps"]]}
    for step in ("cache", "gpu"):
        if isinstance(data.get(step), dict) and isinstance(data[step].get("chart"), dict):
            panels.append(step)
    embedding = data.get("embedding") or {}
    if "cold_warm" in embedding:
        panels.append("embedding latency")
    if "fresh" in embedding:
        panels.append("embedding hits")
    if not panels:
        return False
    columns = 2 if len(panels) > 1 else 1
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(7 * columns, 4.2 * rows), squeeze=False)
    missing = [step for step in STEPS if step not in data]
    for index, axis in enumerate(axes.flat[len(panels):]):
        axis.axis("off")
        if index == 0 and missing:
            axis.text(0.05, 0.5, "not in this run: " + ", ".join(missing) +
                      "\n(see the table on stdout for why)", fontsize=10, va="center")
    for axis, panel in zip(axes.flat, panels):
        if panel == "read":
            read = data["read"]["read"]
            names = sorted({r["dataset"] for r in read}, key=["imagefolder", "recordio", "lmdb"].index
                           if all(r["dataset"] in ("imagefolder", "recordio", "lmdb") for r in read)
                           else None)
            for offset, cache, color in ((-0.2, "cold", "#4c72b0"), (0.2, "warm", "#dd8452")):
                values = [next((r["records_per_s"] for r in read
                                if r["dataset"] == n and r["cache"] == cache), 0) for n in names]
                if any(values):
                    axis.bar([i + offset for i in range(len(names))], values, 0.4, label=cache,
                             color=color)
            axis.set_xticks(range(len(names)))
            axis.set_xticklabels(["small files\n(ImageFolder)" if n == "imagefolder" else
                                  f"packed\n({n})" for n in names])
            axis.set_ylabel("records/s")
            axis.set_title("read every record back: small files vs packed shards")
            axis.legend(title="page cache")
        elif panel == "images":
            labels, values, colors = [], [], []
            if "torch" in data:
                labels += ["torch\nDataLoader", "gpufeed\nDataLoader"]
                values += [data["torch"]["torch_images_per_s"], data["torch"]["gpufeed_images_per_s"]]
                colors += ["#8c8c8c", "#55a868"]
            if "loader" in data:
                for row in data["loader"]["rows"]:
                    labels.append(f"C++ loader\n{row['dtype']}, {row['threads']}t")
                    values.append(row["images_per_s"])
                    colors.append("#4c72b0")
            axis.bar(range(len(values)), values, color=colors)
            axis.set_xticks(range(len(values)))
            axis.set_xticklabels(labels, fontsize=8)
            axis.set_ylabel("images/s (RandomResizedCrop 224)")
            title = "end to end, same images, same cores"
            if "torch" in data:
                title += f" (gpufeed/torch {data['torch']['ratio']:.1f}x)"
            axis.set_title(title)
        elif panel == "io":
            cases = data["io"]["cases"]
            names = [f"{c['name']} ({c['cache']})" for c in cases]
            ours = [c["ours_mb_per_s"] for c in cases]
            fio = [c["fio_mb_per_s"] for c in cases]
            positions = range(len(cases))
            axis.barh([p + 0.2 for p in positions], ours, 0.4, label="gpufeed read engine",
                      color="#55a868")
            axis.barh([p - 0.2 for p in positions], fio, 0.4, label="fio", color="#8c8c8c")
            axis.set_yticks(list(positions))
            axis.set_yticklabels(names, fontsize=7)
            axis.invert_yaxis()
            axis.set_xlabel("MB/s")
            axis.set_title("read engine vs fio (same file, same run)")
            axis.legend(fontsize=8)
        elif panel == "embedding latency":
            draw_embedding_latency(axis, data["embedding"])
        elif panel == "embedding hits":
            fresh = data["embedding"]["fresh"]
            axis.bar([0, 1], [fresh["hit_rate"], fresh["ideal_hit_rate"]],
                     color=["#55a868", "#8c8c8c"])
            axis.set_xticks([0, 1])
            axis.set_xticklabels([f"gpufeed RAM tier\n(p50 {fresh['p50_us'] / 1e3:,.0f} ms, "
                                  f"p99 {fresh['p99_us'] / 1e3:,.0f} ms)",
                                  f"ideal static cache\n(top {fresh['capacity_rows']:,} rows)"],
                                 fontsize=8)
            axis.set_ylim(0, 1)
            axis.set_ylabel("hit rate")
            axis.set_title(f"fresh Zipf draws: hit rate {fresh['ratio']:.2f}x the ideal "
                           "(target >= 0.9x)")
        else:
            chart = data[panel]["chart"]
            axis.bar(range(len(chart["values"])), chart["values"], color="#4c72b0")
            axis.set_xticks(range(len(chart["values"])))
            labels = chart.get("labels", [])
            # Long labels side by side overlap: tilt them.
            tilt = max((len(line) for label in labels for line in str(label).split("\n")),
                       default=0) * len(labels) > 80
            axis.set_xticklabels(labels, fontsize=7 if tilt else 8, rotation=20 if tilt else 0,
                                 ha="right" if tilt else "center")
            axis.set_ylabel(chart.get("unit", ""))
            axis.set_title(chart.get("title", panel))
    figure.suptitle(f"gpufeed benchmarks/run.sh{' --quick' if quick else ''}: {info['cpu']}, "
                    f"{info['cores']} cores, {info['os']} ({time.strftime('%Y-%m-%d')})",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(out_path, dpi=100)
    plt.close(figure)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True)
    parser.add_argument("--since", type=float, default=None,
                        help="leave out step files older than this (seconds since the epoch)")
    parser.add_argument("--seconds", type=float, default=None, help="the run's duration")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    data, stale = load(args.results, args.since)
    info = machine()
    rows = headline_rows(data)
    print_table(rows, data, stale, info, args.seconds, args.quick)
    summary = {"machine": info, "quick": args.quick, "run_seconds": args.seconds,
               "when": time.strftime("%Y-%m-%d %H:%M:%S"),
               "steps_run": sorted(data), "steps_not_run": [s for s in STEPS if s not in data],
               "table": [dict(section=s, what=w, value=v, unit=u) for s, w, v, u in rows],
               "results": data}
    json_path = os.path.join(args.results, "summary.json")
    with open(json_path, "w") as out:
        json.dump(summary, out, indent=2)
    png_path = os.path.join(args.results, "summary.png")
    try:
        drawn = draw(data, png_path, info, args.quick)
    except ImportError as error:
        drawn = False
        print(f"no chart: matplotlib is not importable ({error}); apt-get install python3-matplotlib")
    print(f"JSON: {json_path}" + (f"\nchart: {png_path}" if drawn else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
