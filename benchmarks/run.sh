#!/usr/bin/env bash
# The main job: installs what is missing, builds gpufeed, makes the demo
# dataset, and runs the bundled benchmarks:
#   1. small files vs packed shards (pack, then read every record back),
#      cold (page cache dropped, when root) and warm; then WebDataset tar
#      shards vs RecordIO shards of the same images (read and loader, cold
#      and warm, same run; target: tar within 10 %); then (step formats) MDS
#      and TFRecord copies of the same images vs RecordIO, cold, through the
#      C++ loader and gpufeed.DataLoader (target: within 10 %; a format the
#      build lacks is skipped with the reason)
#   2. the transform's µs per image vs a plain full decode (one thread), the
#      loader end to end vs a decode-only ceiling, and gpufeed.DataLoader vs
#      torch's DataLoader on the same images and cores: on the demo set and
#      on a set of real photographs (make_photo_dataset.py, from Debian's
#      plasma-workspace-wallpapers)
#   3. the read engine vs fio
#   4. the node-local cache over a simulated busy filesystem, for RecordIO,
#      LMDB and Caffe LMDB: epoch 1 from a cold cache (with and without the
#      cache alternating, medians), epoch 2 in a new process; then epoch 1
#      over a physically throttled loop device (root only)
#   5. the GPU stage (benchmarks/gpu_check.sh) when nvidia-smi finds a GPU;
#      skipped with a note otherwise
#   tokens: a Megatron token corpus (1 GiB; 256 MiB with --quick) read by
#      DataLoader(TokenWindows) and the C++ loader vs fio's sequential read
#   tabular: MLPerf records and a TorchRec .npy day (1 GiB; 256 MiB with
#      --quick) vs fio's sequential read, a Criteo TSV file (300 MB; 50 MB)
#      on one thread vs pandas.read_csv + numpy, the first batch vs np.load
#   embedding: an embedding table (2,000,000 x 64 float32, 512 MB; 500,000
#      rows with --quick) behind a loop device throttled to 500 read IOPS:
#      cold vs warm lookups, the RAM tier's hit rate vs an ideal cache,
#      vs torch.index_select, fio, numpy memmap; RSS over a long run
#   highres: 20 photographs of 2-12 megapixels (plasma-workspace-wallpapers):
#      ImageTransform exact=False (DCT-scaled decode) vs the exact default,
#      images/s on one thread and PSNR against the exact output
# then one results table on stdout, benchmarks/results/summary.json and the
# chart benchmarks/results/summary.png (per-step JSON files beside them).
#
#   ./benchmarks/run.sh            about 2,000 ImageNet-shaped JPEGs (and 2,000 photographs), a 1 GiB raw file
#   ./benchmarks/run.sh --quick    500 images, a 256 MiB raw file, fewer repeats (one run
#                                  per case; 4 pairs for the read engine's targets, 3 rounds
#                                  for the loader and the cache step; about 12 minutes on a
#                                  2-vCPU VM once built and the datasets exist)
#   ./benchmarks/run.sh --only=embedding,tabular   these steps only (any of read, formats,
#                                  transform, loader, torch, io, cache, verdict, tokens, tabular,
#                                  embedding, highres, gpu), then the report of this run's files
#
# GPUFEED_BENCH_BUILD_DIR (default build/release) and GPUFEED_BENCH_DATA
# (default benchmarks/data) move the build and the data.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/script_errors.sh
source "$ROOT/tests/script_errors.sh"
gpufeed_trap_errors benchmarks/run.sh
BUILD_DIR=${GPUFEED_BENCH_BUILD_DIR:-$ROOT/build/release}
VENV=$BUILD_DIR/venv
DATA=${GPUFEED_BENCH_DATA:-$ROOT/benchmarks/data}
RESULTS=$ROOT/benchmarks/results
images=2000
passes=3
raw_size=1GiB
quick=()
only=""
for arg in "$@"; do
  case "$arg" in
    --quick) images=500; passes=1; raw_size=256MiB; quick=(--quick) ;;
    --only=*) only=${arg#--only=} ;;
    *) echo "unknown argument: $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done

for step in ${only//,/ }; do
  case "$step" in
    read|formats|transform|loader|torch|io|cache|verdict|tokens|tabular|embedding|highres|gpu) ;;
    *) echo "--only: unknown step '$step' (see the header of $0)" >&2; exit 2 ;;
  esac
done
# want STEP: the step runs (no --only, or --only names it).
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
# The demo and photo image sets: only for the steps that read them.
needs_images() { want read || want formats || want transform || want loader || want torch || want io \
  || want cache || want verdict; }

run_started=$EPOCHREALTIME
# A step heading with the seconds since the start, to see where the time goes.
heading() { echo "== $* [at $(( ${EPOCHREALTIME%.*} - ${run_started%.*} )) s]"; }
# shellcheck source=tests/deps.sh
source "$ROOT/tests/deps.sh"
# fio for steps 3, tokens, tabular and embedding; the photographs of plasma-workspace-wallpapers for the photo
# set; pandas, the reference of the tabular step's TSV comparison.
gpufeed_install_packages fio plasma-workspace-wallpapers python3-pandas
heading "build ($BUILD_DIR)"
mkdir -p "$BUILD_DIR"
# A child bash: errexit holds inside it although its exit status is tested here.
if ! bash -euo pipefail -c 'source "$1/tests/deps.sh"; gpufeed_build_and_install "$1" "$2" "$3"' \
    _ "$ROOT" "$BUILD_DIR" "$VENV" 2>&1 \
    | "$GPUFEED_PYTHON" "$ROOT/benchmarks/build_progress.py" "$BUILD_DIR/bench-build.log"; then
  tail -40 "$BUILD_DIR/bench-build.log" >&2
  echo "build failed; the full log is $BUILD_DIR/bench-build.log" >&2
  exit 1
fi
PY=$VENV/bin/python
BENCH=$BUILD_DIR/benchmarks/gpufeed_read_bench
THREADS=$(nproc)
mkdir -p "$DATA" "$RESULTS"

if needs_images; then
  heading "demo dataset ($images JPEGs)"
  FOLDER=$DATA/demo-imagefolder-$images
  "$PY" "$ROOT/benchmarks/make_demo_dataset.py" "$FOLDER" --images "$images" --classes 10 --seed 0

  heading "pack"
  declare -A PACK_SECONDS
  for fmt in recordio lmdb webdataset; do
    out=$DATA/demo-$fmt-$images
    start=$EPOCHREALTIME
    "$VENV/bin/gpufeed" pack "$FOLDER" "$out" --format "$fmt" --shard-size 64MiB --overwrite
    PACK_SECONDS[$fmt]=$("$PY" -c "print(round($EPOCHREALTIME - $start, 3))")
    "$VENV/bin/gpufeed" verify "$out" | tail -1
  done
  heading "photo dataset ($images JPEGs cut from real photographs)"
  PHOTOS=$DATA/photo-imagefolder-$images
  "$PY" "$ROOT/benchmarks/make_photo_dataset.py" "$PHOTOS" --images "$images" --classes 10 --seed 0
  "$VENV/bin/gpufeed" pack "$PHOTOS" "$DATA/photo-recordio-$images" --format recordio \
    --shard-size 64MiB --overwrite
  # The same images as Caffe's convert_imageset --encoded writes them (one LMDB
  # of caffe.Datum values), for steps 1 and 4.
  "$PY" "$ROOT/benchmarks/make_caffe_lmdb.py" "$FOLDER" "$DATA/demo-caffe_lmdb-$images"
fi

# A step's stderr without the library's info lines. grep -v exits 1 when it
# dropped every line, which is no failure: || true keeps the ERR trap (set -E
# reaches into the process substitution) from reporting one.
drop_info_logs() { grep -v '\[gpufeed\] \[info\]' >&2 || true; }

# Drops the page cache when allowed (root, not in a locked-down container).
drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    return 0
  fi
  return 1
}

if want read; then
  heading "[1/5] small files vs packed shards: read every record back ($THREADS threads)"
  results_file=$(mktemp)
  datasets=(imagefolder recordio lmdb caffe_lmdb)
  dataset_path() { if [ "$1" = imagefolder ]; then echo "$FOLDER"; else echo "$DATA/demo-$1-$images"; fi; }
  # Cold: one pass after each drop, $passes rounds over the formats in turn (a
  # busy shared disk varies from one second to the next; the table takes the
  # median, and the formats see the same conditions).
  if drop_caches; then
    for ((round = 1; round <= passes; round++)); do
      for name in "${datasets[@]}"; do
        drop_caches || true
        line=$("$BENCH" "$(dataset_path "$name")" --threads "$THREADS" --passes 1 | grep '^RESULT')
        echo "$name cold $line" | tee -a "$results_file"
      done
    done
  else
    echo "cold: skipped (cannot drop the page cache here: not root or /proc/sys read-only)"
  fi
  for name in "${datasets[@]}"; do
    line=$("$BENCH" "$(dataset_path "$name")" --threads "$THREADS" --passes "$passes" | grep '^RESULT')
    echo "$name warm $line" | tee -a "$results_file"
  done

  "$PY" - "$results_file" "$RESULTS/read.json" "$images" "${PACK_SECONDS[recordio]}" "${PACK_SECONDS[lmdb]}" <<'PYEOF'
import json, platform, os, sys
import statistics
runs = {}
for line in open(sys.argv[1]):
    name, cache, _, *fields = line.split()
    runs.setdefault((name, cache), []).append(dict(field.split("=") for field in fields))
rows = []
for (name, cache), values in runs.items():
    # Cold runs come one pass per line: their median, and the passes summed.
    rows.append({"dataset": name, "cache": cache,
                 "records": int(values[0]["records"]), "bytes": int(values[0]["bytes"]),
                 "threads": int(values[0]["threads"]),
                 "passes": sum(int(v["passes"]) for v in values),
                 "records_per_s": statistics.median(float(v["median_records_per_s"]) for v in values),
                 "mb_per_s": statistics.median(float(v["median_mb_per_s"]) for v in values)})
result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
          "images": int(sys.argv[3]),
          "pack_seconds": {"recordio": float(sys.argv[4] or 0), "lmdb": float(sys.argv[5] or 0)},
          "read": rows}
json.dump(result, open(sys.argv[2], "w"), indent=2)
print()
print(f"{'dataset':<12} {'cache':<6} {'records':>8} {'records/s':>11} {'MB/s':>9}")
for row in rows:
    print(f"{row['dataset']:<12} {row['cache']:<6} {row['records']:>8} "
          f"{row['records_per_s']:>11.0f} {row['mb_per_s']:>9.1f}")
# The issue's target: a cold scan of LMDB at least half as fast as RecordIO's.
cold = {row["dataset"]: row["records_per_s"] for row in rows if row["cache"] == "cold"}
if "recordio" in cold:
    for name in ("lmdb", "caffe_lmdb"):
        if name in cold:
            ratio = cold[name] / cold["recordio"]
            result.setdefault("cold_vs_recordio", {})[name] = round(ratio, 3)
            print(f"cold scan {name} / recordio: {ratio:.2f}x "
                  f"({'meets' if ratio >= 0.5 else 'BELOW'} the 0.5x target)")
    json.dump(result, open(sys.argv[2], "w"), indent=2)
print(f"pack: recordio {result['pack_seconds']['recordio']:.1f} s, "
      f"lmdb {result['pack_seconds']['lmdb']:.1f} s for {result['images']} images")
print(f"(medians over the passes; JSON in {sys.argv[2]})")
PYEOF
  rm -f "$results_file"

  echo
  heading "[1/5] WebDataset tar shards vs RecordIO shards of the same images (cold and warm)"
  "$PY" "$ROOT/benchmarks/webdataset_compare.py" \
    --loader-bench "$BUILD_DIR/benchmarks/gpufeed_loader_bench" --read-bench "$BENCH" \
    --recordio "$DATA/demo-recordio-$images" --tar "$DATA/demo-webdataset-$images" \
    --rounds "$((passes * 3))" --json "$RESULTS/webdataset.json" 2> >(drop_info_logs)
fi

if want formats; then
  echo
  heading "[1/5] MDS and TFRecord copies vs RecordIO shards of the same images (cold)"
  "$PY" "$ROOT/benchmarks/formats_compare.py" \
    --loader-bench "$BUILD_DIR/benchmarks/gpufeed_loader_bench" --read-bench "$BENCH" \
    --folder "$FOLDER" --recordio "$DATA/demo-recordio-$images" --out "$DATA" \
    --rounds "$((passes * 3))" --json "$RESULTS/formats.json" 2> >(drop_info_logs)
fi

if want transform; then
  echo
  heading "[2/5] transform: us per image on one thread vs a plain full decode (photos and demo)"
  "$PY" "$ROOT/benchmarks/transform_compare.py" --bench "$BUILD_DIR/benchmarks/gpufeed_transform_bench" \
    --dataset "photos=$DATA/photo-recordio-$images" --dataset "demo=$DATA/demo-recordio-$images" \
    --rounds "$([ ${#quick[@]} -gt 0 ] && echo 3 || echo 5)" --json "$RESULTS/transform.json"
fi

if want loader; then
  echo
  loader_epochs=$([ ${#quick[@]} -gt 0 ] && echo 2 || echo 3)
  # Alternating rounds, ratios taken within each (benchmarks/loader_compare.py).
  loader_rounds=$([ ${#quick[@]} -gt 0 ] && echo 3 || echo 5)
  heading "[2/5] loader: images/s end to end (RandomResizedCrop 224 + flip) vs a decode-only ceiling (demo)"
  "$PY" "$ROOT/benchmarks/loader_compare.py" --bench "$BUILD_DIR/benchmarks/gpufeed_loader_bench" \
    --dataset "$DATA/demo-recordio-$images" --epochs "$loader_epochs" --rounds "$loader_rounds" --json "$RESULTS/loader.json"
  echo
  heading "[2/5] loader: the same on the photo set"
  "$PY" "$ROOT/benchmarks/loader_compare.py" --bench "$BUILD_DIR/benchmarks/gpufeed_loader_bench" \
    --dataset "$DATA/photo-recordio-$images" --epochs "$loader_epochs" --rounds "$loader_rounds" --json "$RESULTS/loader_photos.json"
fi

if want torch; then
  torch_epochs=$([ ${#quick[@]} -gt 0 ] && echo 1 || echo 2)
  echo
  heading "[2/5] gpufeed.DataLoader vs torch.utils.data.DataLoader (same images, same cores): photos"
  "$PY" "$ROOT/benchmarks/compare_torch.py" --folder "$PHOTOS" --packed "$DATA/photo-recordio-$images" \
    --label photos --target 3 --epochs "$torch_epochs" --json "$RESULTS/torch_photos.json" \
    2> >(drop_info_logs)
  echo
  heading "[2/5] gpufeed.DataLoader vs torch.utils.data.DataLoader (same images, same cores): demo"
  "$PY" "$ROOT/benchmarks/compare_torch.py" --folder "$FOLDER" --packed "$DATA/demo-recordio-$images" \
    --label demo --target 4 --epochs "$torch_epochs" --json "$RESULTS/torch.json" \
    2> >(drop_info_logs)
fi

if want io; then
  echo
  heading "[3/5] read engine vs fio (io_uring and pread backends, buffered and O_DIRECT)"
  "$PY" "$ROOT/benchmarks/io_compare.py" --bench "$BUILD_DIR/benchmarks/gpufeed_io_bench" \
    --raw "$DATA/raw-$raw_size.bin" --raw-size "$raw_size" \
    --shard "$DATA/demo-recordio-$images/part-00000.rec" --json "$RESULTS/io.json" "${quick[@]}" \
    --repeats 2  # the target cases still get 5 runs (3 with --quick); the others 2 (1), to stay within 10 minutes
fi

# Step 4: the node-local cache, every format, each epoch in its own process
# (epoch 1 from an empty cache; epoch 2 in a new process finds the copies the
# first one left), and the same without the cache for reference. Writes
# $RESULTS/cache.json.
if want cache; then
  echo
  heading "[4/5] node-local cache over a simulated busy parallel filesystem (2 ms/request, 200 MB/s shared), epoch 2 in a new process"
  cache_runs=$(mktemp -d)
  # One run of gpufeed_cache_bench: FORMAT CACHE(cache|none) EPOCH OUTPUT.json.
  cache_bench() {
    local flags
    if [ "$2" = none ]; then flags=(--no-cache)
    elif [ "$3" = 1 ]; then flags=(--cold --keep-cache)
    else flags=()  # the copies epoch 1 left; removed at exit
    fi
    "$BUILD_DIR/benchmarks/gpufeed_cache_bench" "$DATA/demo-$1-$images" \
      --cache-dir "$DATA/cache-bench" --latency-ms 2 --mbps 200 --threads 8 \
      --epoch "$3" "${flags[@]}" --json "$4" \
      2> >(drop_info_logs) | grep -v '^RESULT' \
      || echo "cache benchmark failed: $1, $2, epoch $3"
  }
  # At least 3 rounds, --quick too: its epochs last 0.2 s, where one round
  # is mostly noise (a stall of the local disk, the throttle's burst).
  cache_rounds=$(( passes > 3 ? passes : 3 ))
  for fmt in recordio lmdb caffe_lmdb; do
    # Epoch 1, with and without the cache alternating, $cache_rounds rounds (the
    # table takes the median of the rounds' ratios); then epoch 2 of each in
    # a new process, the cache's from the copies the last round left.
    for round in $(seq "$cache_rounds"); do
      for cache in cache none; do
        cache_bench "$fmt" "$cache" 1 "$cache_runs/$fmt-$cache-1-r$round.json"
      done
    done
    for cache in cache none; do
      cache_bench "$fmt" "$cache" 2 "$cache_runs/$fmt-$cache-2.json"
    done
  done
  # Epoch 1 again over a physically throttled source (a loop device and a
  # cgroup read limit; root only, else it says why and skips).
  # --quick's 25 MB datasets go through a slower throttle (50 MB/s, 700
  # IOPS): at 150 MB/s an epoch lasts 0.1-0.2 s, within the throttle's
  # burst (runs read at up to 2x its rate), so no run measured the limit.
  throttle=(--mbps 150 --iops 2000)
  [ ${#quick[@]} -gt 0 ] && throttle=(--mbps 50 --iops 700)
  echo "epoch 1 over a physically throttled disk (ext4 on a loop device, ${throttle[1]} MB/s and ${throttle[3]} read IOPS):"
  "$PY" "$ROOT/benchmarks/cache_physical.py" --bench "$BUILD_DIR/benchmarks/gpufeed_cache_bench" \
    --data "$DATA" --images "$images" --work "$DATA/cache-physical" --rounds "$cache_rounds" "${throttle[@]}" \
    --json "$cache_runs/physical.json" 2> >(drop_info_logs) \
    || echo "cache over a throttled disk failed (exit $?)"
  "$PY" "$ROOT/benchmarks/cache_table.py" "$cache_runs" "$RESULTS/cache.json" || echo "cache table failed (exit $?)"
  rm -rf "$cache_runs"
fi

# The bottleneck verdict against bottlenecks made physically (a throttled
# loop device; root only, else it says why and skips). Writes verdict.json.
if want verdict; then
  echo
  heading "[verdict] the bottleneck verdict against physically throttled storage, large JPEGs and a slow consumer"
  "$PY" "$ROOT/benchmarks/verdict_check.py" --source "$FOLDER" --work "$DATA/verdict" \
    --json "$RESULTS/verdict.json" 2> >(drop_info_logs) \
    || echo "verdict bench failed (exit $?)"
fi

# Token corpora (issue 19): a Megatron corpus of raw_size, cold page cache,
# shuffle="block", O_DIRECT, against fio's sequential 1 MiB qd32 read of
# its .bin; then warm epochs of the C++ loader for the memory check.
if want tokens; then
  echo
  heading "[tokens] Megatron token corpus: DataLoader(TokenWindows) and the C++ loader vs fio sequential 1 MiB qd32 O_DIRECT"
  # The corpus in a directory of its own (its gpufeed.json and heads describe
  # it alone); one written by an older run beside the other data moves there.
  mkdir -p "$DATA/tokens-$raw_size"
  for ext in bin idx; do
    if [ -f "$DATA/tokens-$raw_size.$ext" ] && [ ! -f "$DATA/tokens-$raw_size/tokens.$ext" ]; then
      mv "$DATA/tokens-$raw_size.$ext" "$DATA/tokens-$raw_size/tokens.$ext"
    fi
  done
  "$PY" "$ROOT/benchmarks/token_compare.py" --prefix "$DATA/tokens-$raw_size/tokens" --size "$raw_size" \
    --bench "$BUILD_DIR/benchmarks/gpufeed_token_bench" --repeats "$passes" \
    --memory-epochs "$([ ${#quick[@]} -gt 0 ] && echo 3 || echo 10)" --json "$RESULTS/tokens.json" \
    2> >(drop_info_logs) || echo "token benchmark failed (exit $?)"
fi

# Tabular rows (issue 29): MLPerf DLRM records and a TorchRec .npy day of
# raw_size, cold, shuffle="block", O_DIRECT, against fio's sequential 1 MiB
# qd32 read of the same files; a Criteo-like TSV file on one thread against
# pandas.read_csv + the same conversions in numpy; the time to the first
# batch against np.load, and the RSS over 3 epochs.
if want tabular; then
  echo
  heading "[tabular] records and .npy vs fio, TSV vs pandas (1 thread), first batch vs np.load"
  "$PY" "$ROOT/benchmarks/tabular_compare.py" --data "$DATA/tabular" --size "$raw_size" \
    --small-size "$([ ${#quick[@]} -gt 0 ] && echo 64MiB || echo 256MiB)" \
    --tsv-size "$([ ${#quick[@]} -gt 0 ] && echo 50MB || echo 300MB)" \
    --bench "$BUILD_DIR/benchmarks/gpufeed_tabular_bench" --repeats "$passes" \
    --json "$RESULTS/tabular.json" 2> >(drop_info_logs) || echo "tabular benchmark failed (exit $?)"
fi

# Embedding tables (issue 30): a table np.save'd onto a loop-mounted ext4
# throttled to 500 read IOPS by the cgroup (root only, else it says why and
# skips; fio for the cold-miss reference). Writes embedding.json.
if want embedding; then
  echo
  heading "[embedding] a table behind 500 IOPS: cold vs warm, hit rate vs ideal, vs index_select, fio, memmap"
  "$PY" "$ROOT/benchmarks/embedding_compare.py" --work "$DATA/embedding" \
    --json "$RESULTS/embedding.json" "${quick[@]}" 2> >(drop_info_logs) \
    || echo "embedding benchmark failed (exit $?)"
fi

# High-resolution photographs (issue 33): the opt-in fast path
# (ImageTransform exact=False) vs the exact default on one thread.
if want highres; then
  echo
  heading "[highres] 2-12 MP photographs: exact=False (DCT-scaled decode) vs exact, 1 thread, and its PSNR"
  "$PY" "$ROOT/benchmarks/highres_compare.py" --bench "$BUILD_DIR/benchmarks/gpufeed_transform_bench" \
    --out "$DATA/highres-photos" --rounds "$([ ${#quick[@]} -gt 0 ] && echo 3 || echo 9)" \
    --json "$RESULTS/highres.json" 2> >(drop_info_logs) || echo "highres benchmark failed (exit $?)"
  # gpufeed's own entropy decoders (exact=False's for baseline and progressive
  # JPEGs; the baseline one also inside libjpeg for the exact path): checked
  # against libjpeg on files other tools wrote.
  echo "gpufeed's own JPEG decoders vs libjpeg (exact bytes, whole image and two crops; coefficients; scaled pixels at 1/2, 1/4, 1/8):"
  check_rc=0
  check_out=$("$BUILD_DIR/benchmarks/gpufeed_jpeg_check" "$DATA/highres-photos" \
    "${PHOTOS:-$DATA/none}" /usr/share/wallpapers 2> >(drop_info_logs)) || check_rc=$?
  grep -E '^(MISMATCH|EXACT-MISMATCH|LIBJPEG-ERROR|GEOMETRY|RESULT)' <<<"$check_out" || true
  [ "$check_rc" -eq 0 ] || echo "  gpufeed_jpeg_check failed (exit $check_rc)"
fi

if want gpu; then
  echo
  heading "[5/5] GPU stage"
  # nvidia-smi's list is read whole (no early reader behind it under pipefail).
  gpu_list=$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null || true)
  if grep -q '^GPU' <<<"$gpu_list"; then
    if [ -x "$ROOT/benchmarks/gpu_check.sh" ]; then
      # Its own CUDA build (build/gpu), tests and measurements; a failure is
      # reported here and leaves the CPU results standing.
      GPU_CHECK_BATCHES=$([ ${#quick[@]} -gt 0 ] && echo 60 || echo 200) \
        "$ROOT/benchmarks/gpu_check.sh" || echo "gpu_check.sh failed (exit $?): see its output above"
    else
      echo "skipped: a GPU is present but benchmarks/gpu_check.sh is missing"
    fi
  else
    echo "skipped: no NVIDIA GPU here (nvidia-smi missing or lists none); the CPU figures above stand"
  fi
fi

"$PY" "$ROOT/benchmarks/report.py" --results "$RESULTS" --since "${run_started%.*}" \
  --seconds "$("$PY" -c "print(round($EPOCHREALTIME - $run_started))")" "${quick[@]}"
