#!/usr/bin/python3
"""Generate the deterministic, ImageNet-shaped demo dataset for the benchmarks.

The gpufeed benchmarks need a JPEG ImageFolder that exercises the decoder the
way a real dataset would: variable image sizes, photographic texture (so the
entropy decoder has real work to do), 4:2:0 chroma subsampling and file sizes
in the usual ImageNet range. Shipping such a dataset is impractical, so this
script synthesises one from a seed. Every image depends only on
``(seed, image index)``, so the output is byte-identical across runs and
across worker counts.

Layout::

    OUT_DIR/
        .complete                      # JSON of the parameters, written last
        n00000_class0/n00000_class0_00000.jpg
        n00001_class1/n00001_class1_00001.jpg
        ...

Images are assigned round-robin (``class = index % classes``), so classes are
balanced, and the class directories sort in class-index order.

Usage::

    /usr/bin/python3 benchmarks/make_demo_dataset.py OUT_DIR \\
        [--images 2000] [--classes 10] [--seed 0] [--workers N] [--quiet]

If ``OUT_DIR/.complete`` already records the same parameters the directory is
reused as is, so reruns of ``benchmarks/run.sh`` are instant.

Only the standard library, numpy and Pillow are required; tqdm is used for a
progress bar when it is importable.
"""

import argparse
import colorsys
import ctypes
import io
import json
import math
import multiprocessing
import os
import re
import statistics
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

try:  # Optional: a nicer progress bar when python3-tqdm is installed.
    import tqdm as _tqdm
except ImportError:  # pragma: no cover - depends on the host packages.
    _tqdm = None

# Bump whenever the image synthesis changes: it is part of the parameters in
# ``.complete``, so stale datasets from an older generator are regenerated.
GENERATOR_VERSION = 1

COMPLETE_MARKER = ".complete"

# File-size bounds. The lower bound uses binary KB and the upper bound decimal
# KB, so the files satisfy "20-120 KB" under either definition.
MIN_BYTES = 20 * 1024
MAX_BYTES = 120 * 1000

# Tags mixed into SeedSequence entropy so per-class palettes never share a
# stream with per-image generators (those use the 2-word key [seed, index]).
_PALETTE_TAG = 0x9A1E77E

_CLASS_DIR_RE = re.compile(r"^n\d{5,}_class\d+$")
_IMAGE_FILE_RE = re.compile(r"^n\d{5,}_class\d+_\d{5,}\.jpg$")


def class_name(class_index):
    """Returns the directory name of a class.

    The zero-padded ``nNNNNN`` prefix makes lexicographic order equal to the
    class index, which is how ImageFolder-style loaders assign labels.
    """
    return f"n{class_index:05d}_class{class_index}"


def image_path(out_dir, index, classes):
    """Returns the path of image ``index`` (its class is ``index % classes``)."""
    name = class_name(index % classes)
    return os.path.join(out_dir, name, f"{name}_{index:05d}.jpg")


def _rng(*key):
    """Returns an independent PCG64 generator for an integer key.

    Using explicit keys instead of the global RNG is what makes the output
    independent of the worker count and of the order images are produced in.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(key))))


def _hsv(h, s, v):
    """Converts an HSV triple (hue wraps) to a float32 RGB array in [0, 255]."""
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, min(max(s, 0.0), 1.0), min(max(v, 0.0), 1.0))
    return np.array([r, g, b], dtype=np.float32) * 255.0


def _class_palette(seed, class_index, classes):
    """Returns the colour scheme of a class as HSV tuples.

    Hues are spread evenly around the colour wheel so that classes are
    visibly different, with a seeded jitter so different seeds differ too.
    """
    rng = _rng(seed, _PALETTE_TAG, class_index)
    hue = class_index / max(classes, 1) + rng.uniform(-0.03, 0.03)
    return {
        # Sky and ground get muted, class-tinted versions of natural colours.
        "sky": (0.58 + 0.25 * (hue - 0.5), rng.uniform(0.25, 0.55), rng.uniform(0.75, 0.95)),
        "ground": (hue + rng.uniform(-0.08, 0.08), rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.6)),
        # Objects use the class hue and two neighbours: the "subject" colours.
        "objects": [
            (hue + off, rng.uniform(0.5, 0.9), rng.uniform(0.45, 0.95))
            for off in (0.0, rng.uniform(0.06, 0.14), -rng.uniform(0.06, 0.14))
        ],
    }


def _fractal_noise(rng, height, width, cells, octaves, persistence=0.5, stretch=1.0):
    """Returns multi-octave value noise in roughly [0, 1] as float32 (H, W).

    Each octave is a small random grid; doubling the grid and multiplying the
    amplitude by ``persistence`` per octave gives the 1/f-like spectrum of
    natural images. Octaves are accumulated coarse to fine on the grids
    themselves (bicubic-upsampling the running sum onto each finer grid) and
    only the finished sum is resized to full resolution, so the cost is one
    full-size resize instead of one per octave. ``stretch`` > 1 elongates
    features horizontally (water, sand ripples), < 1 vertically (grass).
    """
    acc = None
    amplitude = 1.0
    total = 0.0
    for octave in range(octaves):
        # Grid cells never get smaller than ~2 px: finer detail than that is
        # left to the sensor noise.
        gw = max(2, min(int(cells * 2 ** octave), width // 2))
        gh = int(round(gw * height / width / stretch))
        gh = max(2, min(gh, height // 2))
        grid = rng.random((gh, gw), dtype=np.float32)
        grid *= amplitude
        if acc is not None:
            grid += np.asarray(Image.fromarray(acc, mode="F").resize((gw, gh), Image.BICUBIC))
        acc = grid
        total += amplitude
        amplitude *= persistence
    out = np.asarray(Image.fromarray(acc, mode="F").resize((width, height), Image.BICUBIC))
    return out * np.float32(1.0 / total)


def _soft_shape_mask(rng, height, width):
    """Draws one random soft-edged shape.

    Shapes are rasterised with ImageDraw (ellipses or irregular polygons) and
    then Gaussian-blurred, which gives the defocused edges of real objects
    without per-pixel distance computations. Only the shape's bounding box
    is rasterised, so the cost scales with the shape, not the image.

    Returns:
        ``(alpha, (x0, y0, x1, y1))``: float32 alpha in [0, 1] of shape
        ``(y1 - y0, x1 - x0)`` and the box it covers in the image.
    """
    size = rng.uniform(0.12, 0.45) * width
    cx = rng.uniform(0.1, 0.9) * width
    cy = rng.uniform(0.25, 0.95) * height
    pad = int(size * 0.7) + 8
    x0, y0 = max(0, int(cx - pad)), max(0, int(cy - pad))
    x1, y1 = min(width, int(cx + pad)), min(height, int(cy + pad))
    # cx/cy lie at least 0.1 * size inside the image, so the box is never empty.
    mask = Image.new("L", (x1 - x0, y1 - y0), 0)
    draw = ImageDraw.Draw(mask)
    lx, ly = cx - x0, cy - y0
    if rng.random() < 0.55:
        rx = size * 0.5
        ry = rx * rng.uniform(0.5, 1.3)
        draw.ellipse([lx - rx, ly - ry, lx + rx, ly + ry], fill=255)
    else:
        # A star-ish polygon with jittered radii reads as a rock/leaf/animal
        # silhouette rather than a geometric primitive.
        n = int(rng.integers(5, 10))
        angles = np.sort(rng.uniform(0, 2 * math.pi, n))
        radii = size * 0.5 * rng.uniform(0.55, 1.0, n)
        points = [(lx + r * math.cos(a), ly + r * math.sin(a)) for a, r in zip(angles, radii)]
        draw.polygon(points, fill=255)
    mask = mask.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 4.0)))
    alpha = np.asarray(mask, dtype=np.float32) * np.float32(1.0 / 255.0)
    return alpha, (x0, y0, x1, y1)


def render_image(seed, index, classes):
    """Synthesises one image; returns a uint8 (H, W, 3) array and the JPEG quality.

    Everything random is drawn from ``_rng(seed, index)`` (plus the class
    palette, which depends only on ``(seed, class)``), so the result does
    not depend on which process renders it or in which order.

    The image is composed in planar (3, H, W) float32 layout: broadcasting a
    (H, W) field over the leading channel axis keeps numpy's inner loops
    contiguous, which is several times faster than broadcasting over a
    trailing channel axis of an (H, W, 3) array.
    """
    rng = _rng(seed, index)
    class_index = index % classes
    palette = _class_palette(seed, class_index, classes)

    # ImageNet-like geometry: mostly 4:3 landscape, some 3:2, 5:4 and square.
    width = int(rng.integers(400, 641))
    aspect = float(rng.choice([0.75, 0.6667, 0.8, 1.0, 0.625], p=[0.55, 0.15, 0.12, 0.1, 0.08]))
    height = int(round(width * aspect * rng.uniform(0.97, 1.03)))
    height = min(max(height, int(0.6 * width)), width)

    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]  # (H, 1)
    xs = np.linspace(-1.0, 1.0, width, dtype=np.float32)[None, :]  # (1, W)

    # Per-image jitter of the class colours, so images of a class vary the
    # way photos taken in different light do.
    hue_jitter = rng.uniform(-0.03, 0.03)
    light = rng.uniform(0.8, 1.15)

    def colour(hsv, dv=0.0):
        h, s, v = hsv
        return _hsv(h + hue_jitter, s, (v + dv) * light)[:, None, None]  # (3, 1, 1)

    # Background: sky gradient above a wavy horizon, ground gradient below.
    sky_top = colour(palette["sky"], -0.2)
    sky_low = colour(palette["sky"], 0.1)
    ground_far = colour(palette["ground"], 0.1)
    ground_near = colour(palette["ground"], -0.15)

    horizon_y = rng.uniform(0.3, 0.65)
    horizon_wave = _fractal_noise(rng, 1, width, cells=3, octaves=4)[0] - 0.5
    horizon = horizon_y + 0.18 * horizon_wave[None, :]  # (1, W)

    # Soft horizon transition (a sigmoid of the distance to the horizon line)
    # avoids the hard aliased edge synthetic images usually give away; the
    # exponent is clipped only to keep exp() from overflowing.
    dist = (ys - horizon) * (height / 3.0)
    ground_alpha = 1.0 / (1.0 + np.exp(-np.clip(dist, -30.0, 30.0)))  # (H, W)

    # Linear gradients, evaluated per row/column and broadcast, not per pixel.
    t_sky = np.clip(ys / np.maximum(horizon, 1e-3), 0.0, 1.0)
    t_ground = np.clip((ys - horizon) / np.maximum(1.0 - horizon, 1e-3), 0.0, 1.0)
    img = sky_top + (sky_low - sky_top) * t_sky  # (3, H, W)
    ground = ground_far + (ground_near - ground_far) * t_ground
    ground -= img
    ground *= ground_alpha
    img += ground

    # Clouds: low-frequency noise brightening the sky only.
    clouds = _fractal_noise(rng, height, width, cells=rng.uniform(2, 5), octaves=4)
    img += np.clip(clouds - 0.45, 0.0, None) * (rng.uniform(0.0, 90.0) * (1.0 - ground_alpha))

    # Texture: coarse to pixel-scale octaves modulating brightness, strongest
    # on the ground. This is what gives the JPEG entropy coder real work, as
    # foliage, grass and gravel do in photos. A persistence near 0.8 keeps the
    # fine octaves strong: real photos' spectra fall off only like 1/f.
    texture = _fractal_noise(rng, height, width, cells=rng.uniform(3, 6), octaves=7,
                             persistence=rng.uniform(0.72, 0.85))
    # Ridged noise (|n - 0.5|) adds crease-like lines: cracks, grass, bark.
    ridges = _fractal_noise(rng, height, width, cells=rng.uniform(8, 16), octaves=4,
                            persistence=0.8)
    ridges = np.abs(ridges - 0.5)
    # Directional grain (vertical like grass or horizontal like water) makes
    # the ground read as a surface rather than as a cloud.
    stretch = float(rng.choice([0.25, 4.0]))
    grain = _fractal_noise(rng, height, width, cells=rng.uniform(16, 32), octaves=3,
                           persistence=0.9, stretch=stretch)
    ridges += rng.uniform(0.2, 0.5) * (grain - 0.5) * ground_alpha
    strength = rng.uniform(0.8, 1.3)
    modulation = strength * (texture - 0.5) - rng.uniform(0.5, 1.2) * ridges
    modulation *= 0.4 + 0.6 * ground_alpha
    modulation += 1.0
    img *= modulation

    # Objects: a few soft shapes in the class colours, shaded top-to-bottom
    # and textured with their own noise so they are not flat fills.
    detail = _fractal_noise(rng, height, width, cells=rng.uniform(8, 16), octaves=5,
                            persistence=0.8)
    for _ in range(int(rng.integers(2, 6))):
        alpha, (x0, y0, x1, y1) = _soft_shape_mask(rng, height, width)
        obj = palette["objects"][int(rng.integers(0, len(palette["objects"])))]
        base = colour(obj, rng.uniform(-0.15, 0.1))
        # Vertical shading inside the bounding box imitates a light source above.
        shade = np.linspace(1.15, 0.75, y1 - y0, dtype=np.float32)[:, None]
        fill = base * (shade * (0.4 + 1.2 * detail[y0:y1, x0:x1]))
        region = img[:, y0:y1, x0:x1]  # A view: blending writes into img.
        region += (fill - region) * alpha

    # Vignetting: real lenses darken the corners.
    r2 = xs * xs + ((ys - 0.5) * 2.0) ** 2
    img *= 1.0 - rng.uniform(0.05, 0.25) * 0.5 * r2

    # Slight optical blur; a fixed 3x3 smoothing kernel is cheap and enough
    # to take the edge off the pixel-scale octaves like a lens would.
    np.clip(img, 0.0, 255.0, out=img)
    planes = [Image.fromarray(img[c].astype(np.uint8), mode="L") for c in range(3)]
    if rng.random() < 0.5:
        planes = [p.filter(ImageFilter.SMOOTH) for p in planes]

    # Sensor noise, added after the blur as in a camera. An Irwin-Hall sum of
    # three uniform bytes (std 128) is a close and several times cheaper
    # stand-in for standard_normal. The noise is mostly luminance with weaker
    # per-channel (chroma) noise, like a camera's in-body processing leaves.
    sigma = rng.uniform(3.0, 5.5)
    raw = rng.integers(0, 256, size=(3, 4, height, width), dtype=np.uint8)
    gauss = raw.sum(axis=0, dtype=np.int16).astype(np.float32)
    gauss -= 382.5
    gauss *= sigma / 128.0
    luma = gauss[3]
    out = np.empty((height, width, 3), dtype=np.uint8)
    for c in range(3):
        plane = np.asarray(planes[c], dtype=np.float32) + luma + 0.5 * gauss[c]
        np.clip(plane, 0.0, 255.0, out=plane)
        out[..., c] = plane

    quality = int(rng.integers(85, 93))
    return out, quality


def encode_jpeg(pixels, quality):
    """Encodes to JPEG (4:2:0), nudging quality until the size is in bounds.

    The adjustment depends only on the pixels and the starting quality, so it
    is as deterministic as the rendering itself.
    """
    pil = Image.fromarray(pixels, mode="RGB")

    def encode(q):
        buf = io.BytesIO()
        pil.save(buf, format="JPEG", quality=q, subsampling=2)
        return buf.getvalue()

    data = encode(quality)
    q = quality
    while len(data) > MAX_BYTES and q > 30:
        q -= 4
        data = encode(q)
    while len(data) < MIN_BYTES and q < 100:
        q = min(100, q + 3)
        data = encode(q)
    if not MIN_BYTES <= len(data) <= MAX_BYTES:
        raise RuntimeError(f"cannot bring JPEG size into bounds ({len(data)} bytes at quality {q})")
    return data


def _init_worker():
    """Pool initializer: stops glibc from returning big buffers to the OS.

    Every image allocates a few megabytes of differently sized temporaries.
    By default glibc serves those with fresh mmap()s and unmaps them on free,
    so every array is page-faulted in again; in VMs where page faults are
    expensive that more than doubled the render time. Raising the mmap and
    trim thresholds lets freed memory be reused. This is done only in the
    worker processes so callers of generate() keep their own malloc tuning.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 16 << 20)  # M_MMAP_THRESHOLD: heap-allocate up to 16 MiB.
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: keep up to 256 MiB of free heap.
    except (OSError, AttributeError):
        pass  # Not glibc: only a speed-up, so carry on without it.


def _write_one(task):
    """Pool worker: renders, encodes and writes one image; returns its size."""
    out_dir, seed, classes, index = task
    pixels, quality = render_image(seed, index, classes)
    data = encode_jpeg(pixels, quality)
    with open(image_path(out_dir, index, classes), "wb") as f:
        f.write(data)
    return len(data)


def _params(images, classes, seed):
    """The parameters that determine the dataset contents (not the worker count)."""
    return {"images": images, "classes": classes, "seed": seed, "version": GENERATOR_VERSION}


def _read_marker(out_dir):
    """Returns the parameters recorded in ``.complete``, or None."""
    try:
        with open(os.path.join(out_dir, COMPLETE_MARKER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _remove_stale(out_dir):
    """Removes a previous (possibly partial) dataset from ``out_dir``.

    Only files and directories matching this script's naming scheme are
    touched, so a mistyped OUT_DIR cannot wipe unrelated data.
    """
    marker = os.path.join(out_dir, COMPLETE_MARKER)
    if os.path.exists(marker):
        os.remove(marker)
    for entry in os.listdir(out_dir):
        path = os.path.join(out_dir, entry)
        if not (_CLASS_DIR_RE.match(entry) and os.path.isdir(path)):
            continue
        for name in os.listdir(path):
            if _IMAGE_FILE_RE.match(name):
                os.remove(os.path.join(path, name))
        try:
            os.rmdir(path)
        except OSError:
            pass  # Foreign files inside; leave the directory in place.


def _stats(sizes, classes, seconds, out_dir, reused):
    """Builds the summary dict returned by generate()."""
    sizes = sorted(sizes)
    return {
        "out_dir": out_dir,
        "images": len(sizes),
        "classes": classes,
        "total_bytes": sum(sizes),
        "min_bytes": sizes[0] if sizes else 0,
        "median_bytes": int(statistics.median(sizes)) if sizes else 0,
        "max_bytes": sizes[-1] if sizes else 0,
        "seconds": seconds,
        "reused": reused,
    }


def _summary_line(stats):
    """Formats the one-line summary printed at the end."""
    return (
        f"{stats['images']} images, {stats['classes']} classes, "
        f"{stats['total_bytes'] / 1e6:.1f} MB total, "
        f"size min/median/max {stats['min_bytes'] / 1024:.1f}/"
        f"{stats['median_bytes'] / 1024:.1f}/{stats['max_bytes'] / 1024:.1f} KB, "
        f"{stats['seconds']:.1f} s"
        + (" (reused)" if stats["reused"] else "")
    )


def _progress(iterable, total, quiet):
    """Wraps an iterator with tqdm, or with periodic plain prints as fallback.

    tqdm is only used on a terminal: redirected into a log file its carriage
    return updates turn into one huge line, so logs get the plain prints.
    """
    if quiet:
        yield from iterable
        return
    if _tqdm is not None and sys.stderr.isatty():
        yield from _tqdm.tqdm(iterable, total=total, unit="img", desc="demo dataset")
        return
    step = max(1, total // 10)
    for done, item in enumerate(iterable, 1):
        if done % step == 0 or done == total:
            print(f"  {done}/{total} images", file=sys.stderr, flush=True)
        yield item


def generate(out_dir, images=2000, classes=10, seed=0, workers=None, quiet=False):
    """Generates (or reuses) the demo dataset in ``out_dir``.

    Args:
        out_dir: Destination ImageFolder root; created if missing.
        images: Total number of images, spread round-robin over the classes.
        classes: Number of classes (class directories).
        seed: Dataset seed; each image is seeded from ``(seed, index)``.
        workers: Worker processes; defaults to ``os.cpu_count()``. The output
            does not depend on this value.
        quiet: Suppress progress and summary output.

    Returns:
        A dict with ``out_dir``, ``images``, ``classes``, ``total_bytes``,
        ``min_bytes``, ``median_bytes``, ``max_bytes``, ``seconds`` and
        ``reused``.

    Raises:
        ValueError: If ``images`` or ``classes`` is not positive or ``seed``
            is negative.
    """
    if images < 1 or classes < 1:
        raise ValueError("images and classes must be positive")
    if seed < 0:
        raise ValueError("seed must be non-negative")  # SeedSequence rejects negatives.
    workers = max(1, workers or os.cpu_count() or 1)
    start = time.perf_counter()
    params = _params(images, classes, seed)
    os.makedirs(out_dir, exist_ok=True)

    if _read_marker(out_dir) == params:
        # The marker is only written after every image succeeded; stat()ing
        # the files (cheap) additionally catches images deleted since then.
        try:
            sizes = [os.path.getsize(image_path(out_dir, i, classes)) for i in range(images)]
        except OSError:
            if not quiet:
                print(f"{out_dir}: images missing despite {COMPLETE_MARKER}; regenerating")
        else:
            stats = _stats(sizes, classes, time.perf_counter() - start, out_dir, reused=True)
            if not quiet:
                print(f"reusing existing demo dataset in {out_dir} "
                      f"({json.dumps(params, sort_keys=True)})")
                print(_summary_line(stats))
            return stats

    # Any other state (different parameters or an interrupted run) is
    # rebuilt from scratch so no stale image can leak into the dataset.
    _remove_stale(out_dir)
    for c in range(min(classes, images)):
        os.makedirs(os.path.join(out_dir, class_name(c)), exist_ok=True)

    tasks = [(out_dir, seed, classes, i) for i in range(images)]
    # A pool is used even for one worker so that _init_worker's malloc tuning
    # never leaks into the calling process. Chunks amortise the IPC but stay
    # small enough to balance the load and keep the progress bar moving.
    chunksize = max(1, min(16, images // (workers * 8)))
    with multiprocessing.Pool(workers, initializer=_init_worker) as pool:
        results = pool.imap(_write_one, tasks, chunksize=chunksize)
        sizes = list(_progress(results, images, quiet))

    # Write the marker atomically and last: its presence means "complete".
    tmp = os.path.join(out_dir, COMPLETE_MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump(params, f, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, COMPLETE_MARKER))

    stats = _stats(sizes, classes, time.perf_counter() - start, out_dir, reused=False)
    if not quiet:
        print(_summary_line(stats))
    return stats


def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description="Generate the deterministic ImageNet-shaped JPEG demo dataset.")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="ImageFolder root to write")
    parser.add_argument("--images", type=int, default=2000, help="number of images (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (default 0)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: os.cpu_count())")
    parser.add_argument("--quiet", action="store_true", help="no progress or summary output")
    args = parser.parse_args(argv)
    if args.images < 1 or args.classes < 1:
        parser.error("--images and --classes must be positive")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.seed < 0:
        parser.error("--seed must be non-negative")  # SeedSequence rejects negatives.
    generate(args.out_dir, images=args.images, classes=args.classes, seed=args.seed,
             workers=args.workers, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
