#!/usr/bin/python3
"""High-resolution photographs: the exact transform vs the opt-in fast path.

    highres_compare.py --bench build/release/benchmarks/gpufeed_transform_bench \\
        --out benchmarks/data/highres-photos [--rounds 5] [--samples 4] [--json out.json]

Makes (once; reused while its .complete matches) an ImageFolder of 20
photographs of 2-12 megapixels from Debian's plasma-workspace-wallpapers
(benchmarks/run.sh installs it): the package's 11 photographs of 2560x1600
as shipped (4.1 MP); 1920x1080 windows of three of them (2.1 MP); windows of
6.2, 8.0 and 11.5 MP of its 5120x2880 photograph (Volna); three of the
2560x1600 photographs enlarged 1.5x with Lanczos (9.2 MP; smoother than a
camera's photograph of that size, labelled as such). The windows and
enlargements are saved at quality 90, 4:2:0, as cameras write them. A
second set holds the same 20 re-encoded at quality 75: the speed-up depends
on the bits per pixel (below).

Then, on one thread:
- speed: gpufeed_transform_bench --highres (the full decode, the train
  transform RandomResizedCrop 224 + flip and the eval transform Resize(256) +
  CenterCrop(224), uint8, each with exact=True and exact=False, interleaved
  in rounds after an untimed one; thread CPU time), the fast path's
  images/s over the exact path's (target >= 2.5x): all timed rounds' time
  of the one over the other's, every round timing both paths on the same
  crops (round r draws epoch r's). The JSON keeps two more readings beside
  it: the median of the rounds' ratios (*_speedup_median_of_rounds) and the
  ratio of the two medians (*_speedup_of_medians, the figure until
  2026-12-06, which takes each median from whichever round it falls in:
  different crops, 20 a round). Then libjpeg's full decode at 1/8 scale:
  libjpeg's entropy (Huffman) decoding of every block and little else, the
  floor of a DCT-domain shortcut built on libjpeg (exact=False decodes
  baseline and progressive JPEGs with gpufeed's own entropy decoder, which
  goes below it; a crop still needs the rows down to its bottom);
- the same bench again with GPUFEED_LIBJPEG_ENTROPY=1 (as-shipped set):
  the exact path as libjpeg alone decodes, as PIL does and as when the
  target was set (the exact path reads baseline JPEGs with gpufeed's
  entropy decoder since 2026-12-06: the same pixels, less time, which
  lowers the ratio above): exact=False's ratio to that path and the exact
  path's own gain;
- quality: the PSNR of the fast path's output against the exact output, per
  image (the eval output, or the train outputs of --samples sample ids,
  pooled), then the mean over images (target >= 35 dB);
- exactness: how many exact outputs equal torchvision's
  (Resize(256) + CenterCrop(224) on PIL) byte for byte, when torchvision
  is importable;
- restart markers: the set's baseline photographs as they are and as
  gpufeed.pack(jpeg_restart_interval=16) writes them (the same
  coefficients, a restart marker every 16 MCUs, which lets both paths pass
  over the intervals a crop does not touch): both paths' time, the bytes,
  and whether every output stays the same.
"""

import argparse
import glob
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys

import numpy as np
from PIL import Image

from gpufeed import _core

GENERATOR_VERSION = 1
COMPLETE_MARKER = ".complete"
SOURCE = "/usr/share/wallpapers"
# The photographs of plasma-workspace-wallpapers 5.27 at 2560x1600.
PHOTOGRAPHS = ("BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow",
               "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path", "summer_1am")
LARGE = "Volna"  # 5120x2880
LARGE_WINDOWS = ((2880, 2160), (3456, 2304), (4000, 2880))
TARGET_SPEEDUP = 2.5
TARGET_PSNR_DB = 35.0
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def largest_version(name):
    files = [path for path in glob.glob(os.path.join(SOURCE, name, "contents", "images", "*.jpg"))
             if not os.path.islink(path)]
    return max(files, key=os.path.getsize) if files else None


def save(image, path):
    image.save(path, format="JPEG", quality=90, subsampling="4:2:0")


def make_set(out):
    """The ImageFolder described above; returns [(path, label)]."""
    parameters = {"version": GENERATOR_VERSION, "source": SOURCE}
    marker = os.path.join(out, COMPLETE_MARKER)
    if os.path.exists(marker):
        with open(marker) as source:
            if json.load(source) == parameters:
                return sorted(glob.glob(os.path.join(out, "*", "*.jpg")))
    sources = {name: largest_version(name) for name in PHOTOGRAPHS + (LARGE,)}
    missing = [name for name, path in sources.items() if path is None]
    if missing:
        raise SystemExit(f"{SOURCE} lacks {', '.join(missing)}: install plasma-workspace-wallpapers")
    folder = os.path.join(out, "n00000_photos")
    os.makedirs(folder, exist_ok=True)
    for name in PHOTOGRAPHS:  # as shipped
        with open(sources[name], "rb") as source, \
                open(os.path.join(folder, f"{name}_shipped.jpg"), "wb") as target:
            target.write(source.read())
    for index, name in enumerate(PHOTOGRAPHS[:3]):  # 2.1 MP windows
        image = Image.open(sources[name]).convert("RGB")
        left, top = 160 * index, 100 * (index + 1)
        save(image.crop((left, top, left + 1920, top + 1080)),
             os.path.join(folder, f"{name}_1920x1080.jpg"))
    large = Image.open(sources[LARGE]).convert("RGB")
    for width, height in LARGE_WINDOWS:  # 6.2, 8.0, 11.5 MP windows of a real photograph
        left, top = (large.width - width) // 2, (large.height - height) // 2
        save(large.crop((left, top, left + width, top + height)),
             os.path.join(folder, f"{LARGE}_{width}x{height}.jpg"))
    for name in PHOTOGRAPHS[3:6]:  # 9.2 MP, enlarged
        image = Image.open(sources[name]).convert("RGB")
        save(image.resize((3840, 2400), Image.LANCZOS),
             os.path.join(folder, f"{name}_enlarged_3840x2400.jpg"))
    with open(marker, "w") as target:
        json.dump(parameters, target)
    return sorted(glob.glob(os.path.join(out, "*", "*.jpg")))


def speed(bench, folder, rounds, libjpeg_entropy=False):
    """({case: median us per image}, {case: [us per image of each round]});
    libjpeg_entropy: the exact path with libjpeg's entropy decoder
    (GPUFEED_LIBJPEG_ENTROPY=1), not gpufeed's."""
    env = dict(os.environ)
    env.pop("GPUFEED_LIBJPEG_ENTROPY", None)
    if libjpeg_entropy:
        env["GPUFEED_LIBJPEG_ENTROPY"] = "1"
    output = subprocess.run([bench, folder, "--highres", "--rounds", str(rounds)],
                            capture_output=True, text=True, check=True, env=env).stdout
    cases, per_round = {}, {}
    for line in output.splitlines():
        if line.startswith("RESULT"):
            values = dict(re.findall(r"(\w+)=(\S+)", line))
            cases[values["case"]] = float(values["us_per_image"])
            # An older bench prints no rounds: its median stands for them.
            rounds_us = values.get("rounds_us", values["us_per_image"])
            per_round[values["case"]] = [float(v) for v in rounds_us.split(",")]
    return cases, per_round


def transform(data, train, sample, exact):
    out, _ = _core._transform_image(data, 224, train, 0, 0, sample, "uint8", "NHWC", True,
                                    [0.08, 1.0], [3 / 4, 4 / 3], MEAN, STD, exact)
    return np.frombuffer(out, np.uint8).reshape(224, 224, 3)


def psnr(exact, fast):
    mse = np.mean((np.stack(exact).astype(np.float64) - np.stack(fast)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)


def quality(files, samples):
    """Per image: PSNR of eval and of train (pooled samples); torchvision equality."""
    try:
        import torchvision.transforms.functional as TF
    except ImportError:
        TF = None
    rows = []
    for path in files:
        with open(path, "rb") as source:
            data = source.read()
        row = {"image": os.path.basename(path)}
        with Image.open(io.BytesIO(data)) as image:
            row["megapixels"] = round(image.width * image.height / 1e6, 1)
            exact_eval = transform(data, False, 0, True)
            if TF is not None:
                reference = np.asarray(TF.center_crop(TF.resize(image.convert("RGB"), 256), 224))
                row["exact_equals_torchvision"] = bool(np.array_equal(exact_eval, reference))
        row["eval_psnr_db"] = psnr([exact_eval], [transform(data, False, 0, False)])
        row["train_psnr_db"] = psnr([transform(data, True, s, True) for s in range(samples)],
                                    [transform(data, True, s, False) for s in range(samples)])
        rows.append(row)
    return rows


def cpu_model():
    try:
        with open("/proc/cpuinfo") as source:
            return next((line.split(":", 1)[1].strip() for line in source
                         if line.startswith("model name")), "unknown CPU")
    except OSError:
        return "unknown CPU"


def make_quality75(out, files):
    """The same photographs re-encoded at quality 75 (4:2:0): fewer bits per
    pixel, so entropy decoding is a smaller share of the decode."""
    parameters = {"version": GENERATOR_VERSION, "from": [os.path.basename(f) for f in files]}
    marker = os.path.join(out, COMPLETE_MARKER)
    if os.path.exists(marker):
        with open(marker) as source:
            if json.load(source) == parameters:
                return sorted(glob.glob(os.path.join(out, "*", "*.jpg")))
    folder = os.path.join(out, "n00000_photos")
    os.makedirs(folder, exist_ok=True)
    for path in files:
        with Image.open(path) as image:
            image.convert("RGB").save(os.path.join(folder, os.path.basename(path)), format="JPEG",
                                      quality=75, subsampling="4:2:0")
    with open(marker, "w") as target:
        json.dump(parameters, target)
    return sorted(glob.glob(os.path.join(out, "*", "*.jpg")))


def libjpeg_entropy_reading(bench, root, rounds, summary):
    """The exact path as libjpeg alone decodes (GPUFEED_LIBJPEG_ENTROPY=1,
    as when the 2.5x target was set, and as PIL decodes) in a run of its
    own: exact=False's pooled ratio to it, and the exact path's own gain
    from gpufeed's entropy decoder (that run's exact time over the main
    run's)."""
    us, per_round = speed(bench, root, rounds, libjpeg_entropy=True)
    for kind in ("train", "eval"):
        summary[f"{kind}_speedup_vs_libjpeg_entropy"] = (
            sum(per_round[f"{kind}_uint8"]) / sum(per_round[f"{kind}_uint8_fast"]))
        summary[f"{kind}_exact_gain_own_entropy"] = (
            us[f"{kind}_uint8"] / summary["us_per_image"][f"{kind}_uint8"])
    summary["libjpeg_entropy_us_per_image"] = us


def make_restart_sets(out, files, interval):
    """The set's baseline photographs twice: as they are, and as gpufeed.pack
    writes them with jpeg_restart_interval=`interval` (a restart marker
    every `interval` MCUs, the same coefficients), each an ImageFolder;
    returns the two roots and the two file lists."""
    import gpufeed  # the installed package (pack), beside _core

    baseline = []
    for path in files:
        with Image.open(path) as image:
            if not image.info.get("progressive"):
                baseline.append(path)
    parameters = {"version": GENERATOR_VERSION, "interval": interval,
                  "from": [os.path.basename(f) for f in baseline]}
    roots = (os.path.join(out, "baseline"), os.path.join(out, f"baseline-restart{interval}"))
    marker = os.path.join(roots[1], COMPLETE_MARKER)
    if os.path.exists(marker):
        with open(marker) as source:
            if json.load(source) == parameters:
                return roots, [sorted(glob.glob(os.path.join(r, "*", "*.jpg"))) for r in roots]
    for root in roots:
        os.makedirs(os.path.join(root, "n00000_photos"), exist_ok=True)
    for path in baseline:
        with open(path, "rb") as source, open(os.path.join(roots[0], "n00000_photos",
                                                            os.path.basename(path)), "wb") as target:
            target.write(source.read())
    packed = os.path.join(out, f"baseline-restart{interval}-packed")
    gpufeed.pack(roots[0], packed, progress=False, overwrite=True, jpeg_restart_interval=interval)
    dataset = gpufeed.open_dataset(packed)
    for index, path in enumerate(sorted(glob.glob(os.path.join(roots[0], "*", "*.jpg")))):
        with open(os.path.join(roots[1], "n00000_photos", os.path.basename(path)), "wb") as target:
            target.write(dataset[index].data)
    with open(marker, "w") as target:
        json.dump(parameters, target)
    return roots, [sorted(glob.glob(os.path.join(r, "*", "*.jpg"))) for r in roots]


def restart_reading(bench, out, files, rounds, samples, interval=16):
    """The baseline photographs as they are and with restart markers (pack's
    jpeg_restart_interval): both paths' time per image, exact=False's ratio,
    the bytes, and whether every output is the same (it must be: the same
    coefficients)."""
    roots, (plain_files, restart_files) = make_restart_sets(out, files, interval)
    reading = {"interval_mcus": interval, "images": len(plain_files)}
    for label, root, listed in (("as_is", roots[0], plain_files),
                                ("restart", roots[1], restart_files)):
        us, per_round = speed(bench, root, rounds)
        reading[label] = {"us_per_image": us, "bytes": sum(os.path.getsize(f) for f in listed)}
        for kind in ("train", "eval"):
            reading[label][f"{kind}_speedup"] = (sum(per_round[f"{kind}_uint8"]) /
                                                 sum(per_round[f"{kind}_uint8_fast"]))
    same = 0
    for plain, restarted in zip(plain_files, restart_files):
        with open(plain, "rb") as a, open(restarted, "rb") as b:
            before, after = a.read(), b.read()
        same += all(np.array_equal(transform(before, train, sample, exact),
                                   transform(after, train, sample, exact))
                    for exact in (True, False) for train in (False, True)
                    for sample in range(samples if train else 1))
    reading["same_outputs"] = same
    return reading


def print_restart(reading):
    plain, restart = reading["as_is"], reading["restart"]
    print(f"the {reading['images']} baseline photographs as they are and rewritten with a restart "
          f"marker every {reading['interval_mcus']} MCUs (gpufeed.pack(jpeg_restart_interval="
          f"{reading['interval_mcus']})): bytes {restart['bytes'] / plain['bytes']:.3f}x; "
          f"outputs the same (exact and exact=False, train and eval) for "
          f"{reading['same_outputs']} of {reading['images']}")
    print(f"  {'case':<22} {'as is us':>9} {'restart us':>11} {'speed-up':>9}")
    for case in ("train_uint8", "train_uint8_fast", "eval_uint8", "eval_uint8_fast"):
        a, b = plain["us_per_image"][case], restart["us_per_image"][case]
        print(f"  {case:<22} {a:>9.0f} {b:>11.0f} {a / b:>8.2f}x")
    for kind in ("train", "eval"):
        print(f"  {kind}: exact=False {plain[kind + '_speedup']:.2f}x the exact path as they are, "
              f"{restart[kind + '_speedup']:.2f}x with restart markers; with markers against "
              f"the exact path on the files as they are: "
              f"{plain['us_per_image'][kind + '_uint8'] / restart['us_per_image'][kind + '_uint8_fast']:.2f}x")


def measure(bench, root, files, rounds, samples):
    """One set's figures: speed, PSNR per kind, bits per pixel."""
    pixels = 0
    for path in files:
        with Image.open(path) as image:
            pixels += image.width * image.height
    megapixels = []
    for path in files:
        with Image.open(path) as image:
            megapixels.append(image.width * image.height / 1e6)
    us, per_round = speed(bench, root, rounds)
    rows = quality(files, samples)
    summary = {"images": len(files), "rounds": rounds,
               "megapixels_min": round(min(megapixels), 1),
               "megapixels_max": round(max(megapixels), 1),
               "bits_per_pixel": round(8 * sum(os.path.getsize(f) for f in files) / pixels, 2),
               "us_per_image": us, "rounds_us_per_image": per_round, "rows": rows}
    floor = us["full_decode_1_8"]
    for kind in ("train", "eval"):
        exact_us, fast_us = us[f"{kind}_uint8"], us[f"{kind}_uint8_fast"]
        finite = [row[f"{kind}_psnr_db"] for row in rows if math.isfinite(row[f"{kind}_psnr_db"])]
        exact_rounds, fast_rounds = per_round[f"{kind}_uint8"], per_round[f"{kind}_uint8_fast"]
        if len(exact_rounds) != len(fast_rounds):
            raise RuntimeError(f"{kind}: {len(exact_rounds)} exact rounds, {len(fast_rounds)} fast")
        # All rounds' time: images/s over images/s on the same crops.
        summary[f"{kind}_speedup"] = sum(exact_rounds) / sum(fast_rounds)
        summary[f"{kind}_speedup_median_of_rounds"] = statistics.median(
            [e / f for e, f in zip(exact_rounds, fast_rounds)])
        summary[f"{kind}_speedup_of_medians"] = exact_us / fast_us
        summary[f"{kind}_floor_share"] = floor / exact_us
        summary[f"{kind}_mean_psnr_db"] = sum(finite) / len(finite) if finite else math.inf
        summary[f"{kind}_min_psnr_db"] = min(finite) if finite else math.inf
    equal = [row["exact_equals_torchvision"] for row in rows if "exact_equals_torchvision" in row]
    if equal:
        summary["exact_equals_torchvision"] = sum(equal)
    return summary


def print_set(label, summary):
    us = summary["us_per_image"]
    print(f"{label}: {summary['images']} photographs of {summary['megapixels_min']}-"
          f"{summary['megapixels_max']} MP, {summary['bits_per_pixel']} bits per pixel")
    print(f"  {'case':<22} {'us/image':>9} {'images/s':>9} {'fast/exact':>11} {'mean PSNR':>10}")
    print(f"  {'full decode':<22} {us['full_decode']:>9.0f} {1e6 / us['full_decode']:>9.1f}")
    floor = us["full_decode_1_8"]
    print(f"  {'full decode at 1/8':<22} {floor:>9.0f} {1e6 / floor:>9.1f}   (libjpeg's; about "
          f"its entropy decoding alone)")
    for kind in ("train", "eval"):
        exact_us, fast_us = us[f"{kind}_uint8"], us[f"{kind}_uint8_fast"]
        print(f"  {kind + ' exact':<22} {exact_us:>9.0f} {1e6 / exact_us:>9.1f}")
        print(f"  {kind + ' exact=False':<22} {fast_us:>9.0f} {1e6 / fast_us:>9.1f} "
              f"{summary[kind + '_speedup']:>10.2f}x {summary[kind + '_mean_psnr_db']:>7.1f} dB")
    if "exact_equals_torchvision" in summary:
        print(f"  exact eval output == torchvision Resize(256)+CenterCrop(224): "
              f"{summary['exact_equals_torchvision']} of {summary['images']} images")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True)
    parser.add_argument("--out", required=True, help="directory of the high-resolution set")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4, help="train sample ids per image")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    files = make_set(os.path.join(args.out, "as-shipped"))
    summary = measure(args.bench, os.path.join(args.out, "as-shipped"), files, args.rounds,
                      args.samples)
    libjpeg_entropy_reading(args.bench, os.path.join(args.out, "as-shipped"), args.rounds,
                            summary)
    q75_root = os.path.join(args.out, "quality75")
    summary["quality75"] = measure(args.bench, q75_root, make_quality75(q75_root, files),
                                   args.rounds, args.samples)
    summary["restart"] = restart_reading(args.bench, args.out, files, args.rounds, args.samples)
    summary["cpu"] = cpu_model()
    summary["targets"] = {"speedup": TARGET_SPEEDUP, "psnr_db": TARGET_PSNR_DB}
    print(f"one thread, {cpu_model()}; medians over {args.rounds} rounds of thread CPU time; "
          f"fast/exact: all rounds' time, each round both paths on the same crops")
    print_set("as shipped / quality 90", summary)
    print_set("the same at quality 75", summary["quality75"])
    print("targets (as shipped / quality 90; quality 75 in brackets):")
    q75 = summary["quality75"]
    for kind in ("train", "eval"):
        speedup, mean_psnr = summary[f"{kind}_speedup"], summary[f"{kind}_mean_psnr_db"]
        print(f"  {kind}: exact=False >= {TARGET_SPEEDUP}x the exact images/s: {speedup:.2f}x "
              f"[{q75[kind + '_speedup']:.2f}x] -> {'met' if speedup >= TARGET_SPEEDUP else 'MISSED'}"
              f" (median of the rounds' ratios {summary[kind + '_speedup_median_of_rounds']:.2f}x, "
              f"ratio of the medians {summary[kind + '_speedup_of_medians']:.2f}x;"
              f" libjpeg's decode at 1/8, about its entropy decoding alone, takes "
              f"{summary[kind + '_floor_share']:.0%} [{q75[kind + '_floor_share']:.0%}] of the exact "
              f"time); "
              f"mean PSNR >= {TARGET_PSNR_DB:g} dB: {mean_psnr:.1f} dB "
              f"[{q75[kind + '_mean_psnr_db']:.1f}] (lowest {summary[kind + '_min_psnr_db']:.1f})"
              f" -> {'met' if mean_psnr >= TARGET_PSNR_DB else 'MISSED'}")
    print("the exact path reads baseline JPEGs with gpufeed's entropy decoder (same pixels); "
          "with libjpeg's alone (GPUFEED_LIBJPEG_ENTROPY=1, as PIL decodes; a run of its own):")
    for kind in ("train", "eval"):
        print(f"  {kind}: exact=False {summary[kind + '_speedup_vs_libjpeg_entropy']:.2f}x that "
              f"exact path; gpufeed's entropy decoder makes the exact path "
              f"{summary[kind + '_exact_gain_own_entropy']:.2f}x faster")
    print_restart(summary["restart"])
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
