#!/usr/bin/python3
"""Cut an ImageNet-like JPEG ImageFolder out of real photographs.

The demo dataset (make_demo_dataset.py) is procedural: its images are larger
than ImageNet's and smoother, so JPEG decoding dominates and the resampler
looks cheap. This script makes the benchmarks' second set from real
photographs: the photographic wallpapers of Debian's
``plasma-workspace-wallpapers`` package (benchmarks/run.sh installs it when
missing). The package's drawings and renderings (Altai, Cascade, Flow, ...)
are left out; only the photographs listed in PHOTOGRAPHS are used.

Each output image is a random window of one photograph (between 25% and 80%
of its width, so the detail varies from close-up texture to wide scenes),
resized with Lanczos to an ImageNet size (500x375, 500x333, 375x500, 500x400
or 400x500), randomly mirrored, and saved with 4:2:0 chroma subsampling at
a quality drawn from 75..92. The average file is about 33 KiB, as ImageNet's
training JPEGs are. Every image depends only on (seed, index).

Layout, as make_demo_dataset.py::

    OUT_DIR/.complete                         JSON of the parameters, written last
    OUT_DIR/n00000_class0/photo_00000.jpg     class = index % classes

Usage::

    /usr/bin/python3 benchmarks/make_photo_dataset.py OUT_DIR \\
        [--images 2000] [--classes 10] [--seed 0] [--source /usr/share/wallpapers]

A directory whose .complete records the same parameters is reused as is.
"""

import argparse
import glob
import io
import json
import os
import random
import statistics
import sys

from PIL import Image

GENERATOR_VERSION = 1
COMPLETE_MARKER = ".complete"
# The photographs of plasma-workspace-wallpapers 5.27 (Debian 12); the other
# wallpapers of the package are drawings or renderings.
PHOTOGRAPHS = ("BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow",
               "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path", "Volna", "summer_1am")
SIZES = ((500, 375), (500, 375), (500, 375), (500, 333), (375, 500), (500, 400), (400, 500))


def largest_version(source, name):
    """The largest image file of one wallpaper (the package ships several sizes)."""
    files = glob.glob(os.path.join(source, name, "contents", "images", "*.jpg"))
    files += glob.glob(os.path.join(source, name, "contents", "images", "*.png"))
    if not files:
        return None
    return max(files, key=lambda path: os.path.getsize(path))


def load_photographs(source):
    photos = []
    for name in PHOTOGRAPHS:
        path = largest_version(source, name)
        if path is None:
            continue
        photos.append((name, Image.open(path).convert("RGB")))
    if len(photos) < len(PHOTOGRAPHS) // 2:
        sys.exit(f"error: found {len(photos)} of the {len(PHOTOGRAPHS)} photographs under "
                 f"{source}; install plasma-workspace-wallpapers (apt-get install "
                 f"plasma-workspace-wallpapers)")
    return photos


def cut(photo, rng):
    """One ImageNet-like JPEG (bytes) from a random window of `photo`."""
    out_w, out_h = rng.choice(SIZES)
    width, height = photo.size
    window_w = rng.uniform(0.25, 0.8) * width
    window_h = window_w * out_h / out_w
    if window_h > height:
        window_h = height
        window_w = window_h * out_w / out_h
    x = rng.uniform(0, width - window_w)
    y = rng.uniform(0, height - window_h)
    image = photo.resize((out_w, out_h), Image.LANCZOS, box=(x, y, x + window_w, y + window_h))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=rng.randint(75, 92), subsampling=2)
    return buffer.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", metavar="OUT_DIR", help="ImageFolder root to write")
    parser.add_argument("--images", type=int, default=2000, help="number of images (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (default 0)")
    parser.add_argument("--source", default="/usr/share/wallpapers",
                        help="plasma-workspace-wallpapers' folder (default /usr/share/wallpapers)")
    parser.add_argument("--quiet", action="store_true", help="no summary line")
    args = parser.parse_args(argv)
    if args.images <= 0 or args.classes <= 0:
        parser.error("--images and --classes must be positive")
    parameters = {"generator_version": GENERATOR_VERSION, "images": args.images,
                  "classes": args.classes, "seed": args.seed}
    marker = os.path.join(args.out_dir, COMPLETE_MARKER)
    try:
        with open(marker) as existing:
            if json.load(existing).get("parameters") == parameters:
                if not args.quiet:
                    print(f"photo dataset: {args.out_dir} is up to date ({args.images} images)")
                return 0
    except (OSError, ValueError):
        pass
    if os.path.exists(marker):
        os.remove(marker)
    photos = load_photographs(args.source)
    sizes = []
    for index in range(args.images):
        rng = random.Random(f"{args.seed}:{index}")
        name, photo = photos[rng.randrange(len(photos))]
        data = cut(photo, rng)
        label = index % args.classes
        folder = os.path.join(args.out_dir, f"n{label:05d}_class{label}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"photo_{index:05d}.jpg"), "wb") as out:
            out.write(data)
        sizes.append(len(data))
    summary = {"parameters": parameters, "photographs": [name for name, _ in photos],
               "mean_kib": round(statistics.mean(sizes) / 1024, 1),
               "median_kib": round(statistics.median(sizes) / 1024, 1)}
    with open(marker, "w") as out:
        json.dump(summary, out, indent=2)
    if not args.quiet:
        print(f"photo dataset: {args.images} JPEGs from {len(photos)} photographs in "
              f"{args.out_dir}, mean {summary['mean_kib']} KiB, median {summary['median_kib']} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
