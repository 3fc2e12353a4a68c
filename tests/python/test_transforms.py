"""gpufeed's image transforms against torchvision's on the same images and
the same crop parameters (the loader reports what it drew).

ImageTransform(exact=True), the default, gives PIL / torchvision's bytes at
every image size: the crop is decoded at full resolution (only the region it
needs), then resampled with PIL's fixed-point bilinear filter over the same
box; the tests below hold it to byte equality, on ImageNet-sized images and
on photographs of 1-14 megapixels. exact=False decodes crops at least twice
the output with libjpeg-turbo's DCT scaling first: close to PIL (PSNR above
35 dB), not equal.
"""

import io
import os
import struct
import zlib

import pytest

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")
TF = pytest.importorskip("torchvision.transforms.functional")

from gpufeed import _core  # noqa: E402  (the private hook the tests use)

MEAN = [0.485, 0.456, 0.406]
PIL_WEBP = pytest.importorskip("PIL.features").check("webp")
WEBP_BUILT = _core.build_info()["with_webp"]
STD = [0.229, 0.224, 0.225]


def photo(width, height, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([128 + 80 * np.sin(x / (17 + 3 * c) + c) * np.cos(y / (23 + c)) for c in range(3)], -1)
    noise = rng.normal(0, 12, (height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(array, fmt="JPEG"):
    buffer = io.BytesIO()
    PIL.fromarray(array).save(buffer, format=fmt, quality=90)
    return buffer.getvalue()


def ours(data, size=224, train=True, seed=0, epoch=0, sample=0, dtype="uint8", layout="NHWC",
         flip=True, exact=True):
    out, crop = _core._transform_image(data, size, train, seed, epoch, sample, dtype, layout, flip,
                                       [0.08, 1.0], [3 / 4, 4 / 3], MEAN, STD, exact)
    np_dtype = {"uint8": np.uint8, "float32": np.float32, "float16": np.float16,
                "bfloat16": np.uint16}[dtype]
    shape = (size, size, 3) if layout == "NHWC" else (3, size, size)
    return np.frombuffer(out, np_dtype).reshape(shape), crop


def torchvision_crop(image, crop, size=224):
    # F.resized_crop with float boxes is not available; PIL's resize with a
    # box is what torchvision's PIL path does for integer crops.
    box = (crop["x"], crop["y"], crop["x"] + crop["width"], crop["y"] + crop["height"])
    resized = image.resize((size, size), PIL.BILINEAR, box=box)
    if crop["flip"]:
        resized = resized.transpose(PIL.FLIP_LEFT_RIGHT)
    return np.asarray(resized)


def test_png_resampling_is_bit_identical_to_pil():
    array = photo(333, 250, 1)
    data = encode(array, "PNG")
    image = PIL.open(io.BytesIO(data)).convert("RGB")
    for sample in range(20):
        got, crop = ours(data, sample=sample)
        assert crop["width"] > 0 and crop["height"] > 0
        np.testing.assert_array_equal(got, torchvision_crop(image, crop))


def assert_pils_bytes(kinds, samples=3):
    """Each (name, file) through the exact eval and train (`samples` crops)
    transforms equals torchvision on PIL.Image.open(file).convert("RGB")."""
    for name, data in kinds:
        image = PIL.open(io.BytesIO(data)).convert("RGB")
        reference = np.asarray(TF.center_crop(TF.resize(image, 256), 224))
        got, _ = ours(data, train=False)
        np.testing.assert_array_equal(got, reference, err_msg=f"{name}, eval")
        for sample in range(samples):
            got, crop = ours(data, sample=sample)
            np.testing.assert_array_equal(got, torchvision_crop(image, crop),
                                          err_msg=f"{name}, train sample {sample}, {crop}")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_file(width, height, depth, color_type, rows, chunks=b""):
    """A PNG written here, chunk by chunk: any depth and colour type, and
    ancillary chunks (gAMA, tRNS) PIL's writer does not produce."""
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    raw = b"".join(b"\0" + row for row in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + chunks +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def png_kinds():
    """(name, PNG bytes) of every colour type and bit depth, as they are,
    with a gAMA of 1.0, and with a tRNS chunk where the type takes one."""
    rng = np.random.default_rng(11)
    width, height = 40, 30
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
    out = []
    for color_type, depths in ((0, (1, 2, 4, 8, 16)), (2, (8, 16)), (3, (1, 2, 4, 8)),
                               (4, (8, 16)), (6, (8, 16))):
        for depth in depths:
            values = rng.integers(0, 2 ** depth, (height, width * channels[color_type]))
            if depth == 16 and color_type == 0:
                values[: height // 2] %= 256  # PIL keeps values below 256, clips the rest
            if depth == 16:
                rows = [r.astype(">u2").tobytes() for r in values]
            else:  # samples of `depth` bits, packed most significant first
                bits = np.unpackbits(values.astype(np.uint8)[..., None], axis=-1)[..., 8 - depth:]
                rows = [np.packbits(r.reshape(-1)).tobytes() for r in bits]
            palette = b""
            if color_type == 3:
                palette = png_chunk(b"PLTE", rng.integers(0, 256, 3 * 2 ** depth, dtype=np.uint8)
                                    .tobytes())
            name = f"type {color_type} depth {depth}"
            out.append((name, png_file(width, height, depth, color_type, rows, palette)))
            gamma = png_chunk(b"gAMA", struct.pack(">I", 100000))
            out.append((name + " gAMA 1.0",
                        png_file(width, height, depth, color_type, rows, gamma + palette)))
            if color_type in (0, 2, 3):
                body = (bytes(range(0, 256, 2 ** (8 - depth))) if color_type == 3
                        else b"\0" * (2 if color_type == 0 else 6))
                out.append((name + " tRNS", png_file(width, height, depth, color_type, rows,
                                                     palette + png_chunk(b"tRNS", body))))
    return out


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
def test_png_of_every_colour_type_and_depth_gives_pils_bytes():
    # torchvision's ImageFolder loads with PIL's convert("RGB"): 16-bit
    # samples keep their high byte (16-bit gray is clipped), gAMA is ignored,
    # transparency dropped. libpng's simplified API did otherwise (a gAMA of
    # 1.0 moved values by up to 72 levels).
    assert_pils_bytes(png_kinds())


def netpbm_kinds():
    """(name, bytes) of raw and plain PBM/PGM/PPM files at maxvals where
    Pillow scales (15, 1000), keeps (255, 65535 for PGM) and clips (a PGM
    above 255 is an "I" image), with comments in the header and the data."""
    rng = np.random.default_rng(5)
    width, height = 37, 23
    out = []
    for maxval in (1, 15, 255, 256, 1000, 65535):
        for kind in (2, 3, 5, 6):
            values = rng.integers(0, maxval + 1, (height, width, 3 if kind in (3, 6) else 1))
            head = f"P{kind}\n# made here\n{width} {height}\n{maxval}\n".encode()
            if kind >= 5:
                body = values.astype(np.uint8 if maxval < 256 else ">u2").tobytes()
            else:
                numbers = [str(int(v)) for v in values.reshape(-1)]
                lines = [" ".join(numbers[i:i + 7]) for i in range(0, len(numbers), 7)]
                lines.insert(1, "# a comment 12 34")
                body = ("\n".join(lines) + "\n").encode()
            out.append((f"P{kind} maxval {maxval}", head + body))
    bits = rng.integers(0, 2, (height, width))
    out.append(("P4", f"P4 {width} {height}\n".encode() + np.packbits(bits, axis=1).tobytes()))
    out.append(("P1", f"P1\n{width} {height}\n".encode() +
                b"\n".join(b"".join(b"%d" % v for v in row) for row in bits) + b"\n"))
    out.append(("P5 samples above maxval", b"P5 4 4 100\n" + bytes(range(200, 216))))
    return out


def test_netpbm_gives_pils_bytes():
    # torchvision's ImageFolder lists .ppm and .pgm files (GTSRB ships .ppm).
    assert_pils_bytes(netpbm_kinds())


def test_bad_netpbm_is_an_error_naming_the_offset():
    good = b"P6 4 4 255\n" + bytes(range(48))
    cases = ((good[:-5], "truncated"), (b"P2 2 2 10\n1 2 3 11\n", "above maxval"),
             (b"P3 1 1 255\n1 x 3\n", "not a number"), (b"P5 4 4 0\n" + bytes(16), "maxval"),
             (b"P1 2 2\n0 1 2 0\n", "other than 0 or 1"), (b"P6 4\n", "header ends"))
    for data, words in cases:
        with pytest.raises(Exception) as info:
            ours(data)
        assert words in str(info.value) and "at byte" in str(info.value), (data, str(info.value))


def bmp_file(width, height, bits, rows, compression=0, masks=b"", palette=b"", colors=0,
             header=40, top_down=False):
    """A BMP written here: any header size, depth, bitfields and palette."""
    stride = ((width * bits + 31) >> 3) & ~3
    data = b"".join(row.ljust(stride, b"\0") for row in (rows if top_down else rows[::-1]))
    if header == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", header, width, -height if top_down else height, 1,
                           bits, compression, len(data), 2835, 2835, colors, 0)
        info += masks[:16] if header > 40 else b""
        info = info.ljust(header, b"\0")
        if header == 40:
            info += masks
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + palette + data


def bmp_kinds():
    """(name, bytes) of the BMP layouts Pillow reads: PIL's own writer's,
    palettes of 1-8 bits (shorter than 2^bits, OS/2 BGR entries), 16-bit
    5-5-5 and 5-6-5, every 32-bit bitfield layout, top-down, v4/v5 headers."""
    rng = np.random.default_rng(7)
    width, height = 37, 23
    out = []
    image = PIL.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    for mode in ("RGB", "RGBA", "L", "P", "1"):
        buffer = io.BytesIO()
        image.convert(mode).save(buffer, "BMP")
        out.append((f"PIL {mode}", buffer.getvalue()))
    for bits in (1, 4, 8):
        for colors, entry, header in ((0, 4, 40), (2 ** bits - 1, 4, 40), (0, 3, 12)):
            count = colors or 2 ** bits
            palette = rng.integers(0, 256, (count, entry), dtype=np.uint8).tobytes()
            values = rng.integers(0, 2 ** bits, (height, width)).astype(np.uint8)
            bits_array = np.unpackbits(values[..., None], axis=-1)[..., 8 - bits:]
            rows = [np.packbits(r.reshape(-1)).tobytes() for r in bits_array]
            out.append((f"{bits}-bit, {count} colours, header {header}",
                        bmp_file(width, height, bits, rows, palette=palette, colors=colors,
                                 header=header)))
    pixels16 = [rng.integers(0, 65536, width).astype("<u2").tobytes() for _ in range(height)]
    out.append(("16-bit 5-5-5", bmp_file(width, height, 16, pixels16)))
    for masks in ((0xF800, 0x7E0, 0x1F), (0x7C00, 0x3E0, 0x1F)):
        out.append((f"16-bit bitfields {masks}",
                    bmp_file(width, height, 16, pixels16, 3, struct.pack("<III", *masks))))
    pixels32 = [rng.integers(0, 256, 4 * width, dtype=np.uint8).tobytes() for _ in range(height)]
    for masks in ((0xFF0000, 0xFF00, 0xFF, 0), (0xFF000000, 0xFF0000, 0xFF00, 0),
                  (0xFF000000, 0xFF0000, 0xFF00, 0xFF), (0xFF, 0xFF00, 0xFF0000, 0xFF000000),
                  (0xFF0000, 0xFF00, 0xFF, 0xFF000000)):
        for header in (108, 124):
            out.append((f"32-bit bitfields {masks}, header {header}",
                        bmp_file(width, height, 32, pixels32, 3, struct.pack("<IIII", *masks),
                                 header=header)))
    pixels24 = [rng.integers(0, 256, 3 * width, dtype=np.uint8).tobytes() for _ in range(height)]
    out.append(("24-bit top-down", bmp_file(width, height, 24, pixels24, top_down=True)))
    out.append(("32-bit raw", bmp_file(width, height, 32, pixels32)))
    return out


def test_bmp_gives_pils_bytes():
    assert_pils_bytes(bmp_kinds())


def test_bmp_palettes_over_256_colours_as_pil():
    """A palette of more than 256 entries: Pillow raises ("invalid palette
    size") unless its entries are grey, or the file holds fewer of them."""
    def bmp(colors, entries, grey):
        palette = b"".join(bytes([i & 255] * 3 + [0]) if grey else
                           bytes([i & 255, (i * 7) & 255, (i * 13) & 255, 0])
                           for i in range(entries))
        rows = bytes([1, 2, 3, 250]) * 2
        info = struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 8, 0, len(rows), 2835, 2835, colors, 0)
        offset = 14 + len(info) + len(palette)
        return (b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset) + info + palette +
                rows)

    outcomes = []
    for colors, entries, grey in ((300, 300, False), (257, 257, False), (300, 300, True),
                                  (300, 10, False), (256, 256, False)):
        data = bmp(colors, entries, grey)
        try:
            image = PIL.open(io.BytesIO(data)).convert("RGB")
        except ValueError:
            outcomes.append("refused")
            with pytest.raises(Exception, match="invalid palette size"):
                ours(data, train=False)
            continue
        outcomes.append("loaded")
        reference = np.asarray(TF.center_crop(TF.resize(image, 256), 224))
        np.testing.assert_array_equal(ours(data, train=False)[0], reference)
    assert outcomes == ["refused", "refused", "loaded", "loaded", "loaded"]


def rle_stream(rng, width, height, rle4, deltas=True):
    """An RLE8/RLE4 stream as the BMP specification writes one: per row,
    runs (encoded, and absolute ones of 3 or more, word-aligned), an end of
    line, here and there a delta escape; an end of bitmap last."""
    out = bytearray()
    top = 16 if rle4 else 256
    y = 0
    while y < height:
        x = 0
        while x < width:
            left = width - x
            kind = rng.integers(0, 3)
            if kind == 2 and deltas and y + 1 < height and left > 2:
                right = int(rng.integers(0, left))
                up = int(rng.integers(0, 2))
                out += bytes([0, 2, right, up])
                x += right
                if up:
                    y += 1
                continue
            if kind == 1 and left >= 3:
                n = int(rng.integers(3, min(left, 40) + 1))
                values = rng.integers(0, top, n)
                payload = (bytes(int(values[i]) << 4 | (int(values[i + 1]) if i + 1 < n else 0)
                                 for i in range(0, n, 2)) if rle4 else bytes(values.tolist()))
                out += bytes([0, n]) + payload + b"\0" * (len(payload) % 2)
                x += n
            else:
                n = int(rng.integers(1, min(left, 60) + 1))
                value = int(rng.integers(0, 256 if rle4 else top))
                out += bytes([n, value])
                x += n
        out += b"\0\0"
        y += 1
    return bytes(out + b"\0\1")


def rle_bmp(width, height, bits, compression, palette, stream, colors=0):
    """A BMP with a 40-byte header whose pixel data is the RLE `stream`."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, compression, len(stream), 2835,
                       2835, colors, 0)
    offset = 14 + len(info) + len(palette)
    return b"BM" + struct.pack("<IHHI", offset + len(stream), 0, 0, offset) + info + palette + stream


def rle_kinds():
    """(name, RLE8/RLE4 BMP) from rle_stream: 8-, 4- and 1-bit images,
    coloured and greyscale palettes, a short palette (indices past it), odd
    sizes; with deltas
    (Pillow 9.4 reads a delta's two bytes, then takes right and up from the
    next two: the rest of such an image is mostly zeros) and without."""
    rng = np.random.default_rng(21)
    out = []
    for bits, compression in ((8, 1), (4, 2)):
        for width, height, colors, grey, deltas in ((37, 23, 0, False, True),
                                                    (64, 40, 5, False, False),
                                                    (17, 9, 0, True, False),
                                                    (50, 31, 0, False, False)):
            count = colors or 1 << bits
            palette = b"".join(bytes([i, i, i, 0]) if grey else
                               bytes(rng.integers(0, 256, 3).tolist()) + b"\0"
                               for i in range(count))
            stream = rle_stream(rng, width, height, bits == 4, deltas)
            out.append((f"RLE{bits} {width}x{height} colours {count} grey {grey} deltas {deltas}",
                        rle_bmp(width, height, bits, compression, palette, stream, colors)))
    # 1-bit images RLE-compressed (Pillow loads them as palette images unless
    # the palette is black and white): indices past the two entries.
    for compression in (1, 2):
        stream = rle_stream(rng, 29, 11, compression == 2, False)
        palette = bytes([10, 200, 30, 0, 250, 40, 90, 0])
        out.append((f"1-bit, RLE{4 if compression == 2 else 8}",
                    rle_bmp(29, 11, 1, compression, palette, stream)))
    return out


def test_rle_bmp_gives_pils_bytes():
    assert_pils_bytes(rle_kinds(), samples=4)


def test_damaged_rle_bmp_fails_where_pil_fails():
    """Cut or damaged RLE streams: gpufeed's output equals Pillow's where
    Pillow loads the file, and is an error where Pillow raises."""
    rng = np.random.default_rng(5)
    for name, data in rle_kinds():
        for trial in range(12):
            damaged = bytearray(data)
            if trial % 3 == 0:
                damaged = damaged[:int(rng.integers(120, len(data)))]
            else:
                for _ in range(3):
                    damaged[int(rng.integers(120, len(data)))] = int(rng.integers(0, 256))
            damaged = bytes(damaged)
            try:
                image = PIL.open(io.BytesIO(damaged)).convert("RGB")
            except Exception:
                with pytest.raises(Exception):
                    ours(damaged, train=False)
                continue
            reference = np.asarray(TF.center_crop(TF.resize(image, 256), 224))
            got, _ = ours(damaged, train=False)
            np.testing.assert_array_equal(got, reference, err_msg=f"{name}, trial {trial}")


def webp_save(image, **options):
    buffer = io.BytesIO()
    image.save(buffer, format="WEBP", **options)
    return buffer.getvalue()


def webp_chunk(tag, payload):
    """A RIFF chunk as the WebP container specification lays it out."""
    return tag + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) % 2)


def u24(value):
    return struct.pack("<I", value)[:3]


def webp_kinds():
    """(name, WebP bytes) as Pillow writes them: lossy at three qualities and
    the fastest method, lossless, with alpha (lossy and lossless), grayscale,
    at odd sizes down to 1x1, and a two-frame animation (its first frame)."""
    save = webp_save
    out = []
    for width, height in [(333, 250), (250, 333), (1, 1), (3, 5), (17, 13)]:
        array = photo(width, height, width + height)
        image = PIL.fromarray(array)
        for quality in (10, 75, 95):
            out.append((f"{width}x{height} lossy q{quality}", save(image, quality=quality)))
        out.append((f"{width}x{height} method 0", save(image, quality=80, method=0)))
        out.append((f"{width}x{height} lossless", save(image, lossless=True)))
        alpha = (np.arange(width * height).reshape(height, width) % 256).astype(np.uint8)
        rgba = PIL.fromarray(np.dstack([array, alpha]), "RGBA")
        out.append((f"{width}x{height} RGBA lossy", save(rgba, quality=80)))
        out.append((f"{width}x{height} RGBA lossless", save(rgba, lossless=True)))
        out.append((f"{width}x{height} gray", save(PIL.fromarray(array[..., 1]), quality=80)))
    frames = [PIL.fromarray(photo(200, 150, seed)) for seed in (1, 2)]
    out.append(("animation", save(frames[0], save_all=True, append_images=frames[1:],
                                   duration=100)))
    # A first frame smaller than the canvas, at an offset (PIL's writer puts
    # the first frame over the whole canvas): chunks as the WebP container
    # specification lays them out, the frame a lossless file's VP8L chunk.
    rgba = np.dstack([photo(30, 20, 4), np.full((20, 30), 200, np.uint8)])
    frame = save(PIL.fromarray(rgba, "RGBA"), lossless=True)[12:]
    chunk = webp_chunk
    body = (b"WEBP" + chunk(b"VP8X", b"\x12\0\0\0" + u24(99) + u24(79)) +
            chunk(b"ANIM", struct.pack("<IH", 0xFFFF0000, 0)) +
            chunk(b"ANMF", u24(6 // 2) + u24(10 // 2) + u24(29) + u24(19) + u24(100) + b"\0" +
                  frame))
    out.append(("animation, frame at (6, 10)", b"RIFF" + struct.pack("<I", len(body)) + body))
    return out


def test_webp_gives_pils_bytes():
    if not PIL_WEBP or not WEBP_BUILT:
        pytest.skip("this Pillow or this gpufeed build has no WebP support")
    kinds = webp_kinds()
    assert PIL.open(io.BytesIO(dict(kinds)["animation"])).n_frames == 2
    assert_pils_bytes(kinds, samples=8)


def test_webp_containers_refused_where_pil_refuses_them():
    """Containers assembled chunk by chunk, sound and not (chunks out of
    order, doubled, missing, cut by the RIFF size, a canvas larger than the
    frame, an animation's later frame damaged): gpufeed gives Pillow's bytes
    where Pillow loads the file and an error where it raises."""
    if not PIL_WEBP or not WEBP_BUILT:
        pytest.skip("this Pillow or this gpufeed build has no WebP support")

    chunk, save = webp_chunk, webp_save

    def riff(body):
        return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body

    array = photo(20, 14, 1)
    lossy = save(PIL.fromarray(array), quality=80)[12:]
    lossless = save(PIL.fromarray(array), lossless=True)[12:]
    rgba = save(PIL.fromarray(np.dstack([array, np.full((14, 20), 128, np.uint8)]), "RGBA"),
                quality=80)[12:]
    parts, at = [], 0  # VP8X, ALPH, VP8
    while at < len(rgba):
        size = struct.unpack("<I", rgba[at + 4:at + 8])[0]
        parts.append(rgba[at:at + 8 + size + size % 2])
        at += 8 + size + size % 2
    assert [part[:4] for part in parts] == [b"VP8X", b"ALPH", b"VP8 "]

    def vp8x(flags, width=20, height=14):
        return chunk(b"VP8X", bytes([flags, 0, 0, 0]) + u24(width - 1) + u24(height - 1))

    def frame(data, width=20, height=14):
        return chunk(b"ANMF", u24(0) + u24(0) + u24(width - 1) + u24(height - 1) + u24(100) +
                     b"\0" + data)

    animation = vp8x(0x02) + chunk(b"ANIM", bytes(6))
    cases = {
        "unknown chunk before the image": riff(vp8x(0) + chunk(b"ZZZZ", b"hello") + lossy),
        "unknown chunk after the image": riff(vp8x(0) + lossy + chunk(b"ZZZZ", b"hello")),
        "ALPH after VP8": riff(parts[0] + parts[2] + parts[1]),
        "two VP8 chunks": riff(vp8x(0) + lossy + lossy),
        "two VP8 chunks, no VP8X": riff(lossy + lossy),
        "canvas larger than the image": riff(vp8x(0, 30) + lossy),
        "animation flag, no frame": riff(animation + lossy),
        "alpha flag, no ALPH": riff(vp8x(0x10) + lossy),
        "ALPH on a lossless image": riff(vp8x(0x10) + parts[1] + lossless),
        "ALPH of garbage": riff(parts[0] + chunk(b"ALPH", b"\x01" + bytes(30)) + parts[2]),
        "frame larger than the canvas": riff(vp8x(0x02, 10, 10) + chunk(b"ANIM", bytes(6)) +
                                             frame(lossy)),
        "second frame cut": riff(animation + frame(lossy) + frame(lossy[:40])),
        "EXIF after the image, RIFF size short": riff(vp8x(0x08) + lossy)[:-0] +
        chunk(b"EXIF", b"Exif\0\0" + bytes(20)),
        "a byte after the RIFF": riff(lossy) + b"\0",
    }
    loaded = refused = 0
    for name, data in cases.items():
        try:
            image = PIL.open(io.BytesIO(data)).convert("RGB")
        except Exception:
            refused += 1
            with pytest.raises(Exception):
                ours(data, train=False)
            continue
        loaded += 1
        reference = np.asarray(TF.center_crop(TF.resize(image, 256), 224))
        np.testing.assert_array_equal(ours(data, train=False)[0], reference, err_msg=name)
    assert loaded >= 3 and refused >= 3, (loaded, refused)


def test_bad_webp_is_an_error_naming_webp():
    if not PIL_WEBP:
        pytest.skip("this Pillow has no WebP support")
    data = dict(webp_kinds())["333x250 lossy q75"]
    with pytest.raises(Exception, match="WebP"):
        ours(data[:len(data) // 2])


def test_eval_transform_matches_torchvision_resize_center_crop():
    for seed, (width, height) in enumerate([(500, 375), (375, 500), (640, 427), (300, 300)]):
        data = encode(photo(width, height, seed))
        image = PIL.open(io.BytesIO(data)).convert("RGB")
        reference = np.asarray(TF.center_crop(TF.resize(image, 256), 224))
        got, _ = ours(data, train=False)
        np.testing.assert_array_equal(got, reference, err_msg=f"{width}x{height}")


@pytest.mark.parametrize("width,height", [(500, 375), (1600, 1200)])
def test_train_crops_match_torchvision_on_the_drawn_parameters(width, height):
    data = encode(photo(width, height, 7))
    image = PIL.open(io.BytesIO(data)).convert("RGB")
    for sample in range(40):
        got, crop = ours(data, sample=sample)
        np.testing.assert_array_equal(got, torchvision_crop(image, crop),
                                      err_msg=f"sample {sample}, crop {crop}")


WALLPAPERS = "/usr/share/wallpapers"


def multi_megapixel_jpegs():
    """(kind, [(name, JPEG bytes)]) of 1-14 megapixels: Debian's
    plasma-workspace-wallpapers photographs when installed (benchmarks/run.sh
    installs it; two 2560x1600 photographs as shipped, the 5120x2880 one, a
    1280x800 window re-encoded), else synthetic photo-like images of the same
    sizes (the assertion messages name which)."""
    def shipped(name):
        folder = os.path.join(WALLPAPERS, name, "contents", "images")
        files = [os.path.join(folder, f) for f in os.listdir(folder)] if os.path.isdir(folder) else []
        files = [f for f in files if f.endswith(".jpg") and not os.path.islink(f)]
        return max(files, key=os.path.getsize) if files else None
    paths = [shipped(name) for name in ("Path", "ColorfulCups", "Volna")]
    if all(paths):
        out = []
        for path in paths:
            with open(path, "rb") as source:
                out.append((os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(path)))),
                            source.read()))
        window = PIL.open(io.BytesIO(out[0][1])).convert("RGB").crop((400, 300, 1680, 1100))
        out.append(("Path 1280x800 window", encode(np.asarray(window))))
        return "photographs", out
    sizes = [(1280, 800), (2560, 1600), (4608, 3072)]
    return "synthetic", [(f"{w}x{h}", encode(photo(w, h, 20 + i))) for i, (w, h) in enumerate(sizes)]


@pytest.fixture(scope="module")
def large_jpegs():
    return multi_megapixel_jpegs()


def test_exact_is_pils_bytes_on_multi_megapixel_jpegs(large_jpegs):
    kind, images = large_jpegs
    assert_pils_bytes([(f"{kind}: {name}", data) for name, data in images], samples=6)


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return np.inf if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def test_fast_path_is_close_on_multi_megapixel_jpegs(large_jpegs):
    # exact=False: large crops decoded DCT-scaled (no longer PIL's bytes),
    # within 35 dB of the exact output; the drawn parameters are the same.
    kind, images = large_jpegs
    for name, data in images:
        for train, sample in ((False, 0), (True, 1), (True, 2)):
            exact, crop = ours(data, train=train, sample=sample)
            fast, fast_crop = ours(data, train=train, sample=sample, exact=False)
            assert fast_crop == crop
            if min(crop["width"], crop["height"]) >= 2 * 224:
                assert not np.array_equal(fast, exact), (kind, name, sample, "not scaled")
            assert psnr(fast, exact) >= 35, (kind, name, train, sample, psnr(fast, exact))


def test_crop_parameters_follow_torchvision_rules():
    data = encode(photo(500, 375, 3))
    areas, ratios, flips = [], [], []
    for sample in range(400):
        _, crop = ours(data, sample=sample)
        assert 0 <= crop["x"] and crop["x"] + crop["width"] <= 500
        assert 0 <= crop["y"] and crop["y"] + crop["height"] <= 375
        areas.append(crop["width"] * crop["height"] / (500 * 375))
        ratios.append(crop["width"] / crop["height"])
        flips.append(crop["flip"])
    assert min(areas) >= 0.08 * 0.9 and max(areas) <= 1.0
    assert min(ratios) >= 0.7 and max(ratios) <= 1.4
    assert 0.4 < np.mean(flips) < 0.6
    # Deterministic in (seed, epoch, sample id); different across epochs.
    assert ours(data, sample=5)[1] == ours(data, sample=5)[1]
    assert ours(data, sample=5, epoch=1)[1] != ours(data, sample=5)[1]


def test_normalized_float_outputs_and_layouts():
    data = encode(photo(320, 240, 4), "PNG")
    u8, _ = ours(data, sample=3, dtype="uint8", layout="NHWC")
    f32, _ = ours(data, sample=3, dtype="float32", layout="NCHW")
    expected = TF.normalize(torch.from_numpy(u8.copy()).permute(2, 0, 1).float().div(255), MEAN, STD)
    np.testing.assert_array_equal(f32, expected.numpy())
    f16, _ = ours(data, sample=3, dtype="float16", layout="NCHW")
    np.testing.assert_array_equal(f16, expected.numpy().astype(np.float16))
    bf16, _ = ours(data, sample=3, dtype="bfloat16", layout="NCHW")
    reference = expected.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bf16, reference)


def test_bad_images_raise():
    with pytest.raises(Exception) as info:
        ours(b"not an image")
    assert "not a JPEG, PNG, Netpbm (PBM/PGM/PPM), BMP, WebP or TIFF image" in str(info.value)
    data = encode(photo(200, 150, 1))
    with pytest.raises(Exception, match="truncated|JPEG"):
        ours(data[: len(data) // 2])


def test_the_loader_takes_exact_from_image_transform(large_jpegs, tmp_path):
    # DataLoader(transform=ImageTransform(exact=...)) reaches the decode
    # threads: its batches equal the single-image hook's, exact or not.
    import gpufeed
    kind, images = large_jpegs
    folder = tmp_path / "folder" / "c0"
    folder.mkdir(parents=True)
    for index, (_, data) in enumerate(images[:2]):
        (folder / f"{index}.jpg").write_bytes(data)
    dataset = gpufeed.open_dataset(str(tmp_path / "folder"))
    for exact in (True, False):
        loader = gpufeed.DataLoader(str(tmp_path / "folder"), batch_size=2, shuffle=False,
                                    transform=gpufeed.ImageTransform(224, train=False, dtype="uint8",
                                                                     layout="NHWC", exact=exact))
        batch, _ = next(iter(loader))
        for index in range(2):
            expected, _ = ours(dataset[index].data, train=False, exact=exact)
            np.testing.assert_array_equal(np.asarray(batch[index]), expected,
                                          err_msg=f"{kind}: image {index}, exact={exact}")
