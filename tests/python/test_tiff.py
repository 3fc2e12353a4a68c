"""TIFF through gpufeed's transforms against torchvision on
PIL.Image.open(f).convert("RGB") (Pillow 9.4 reads TIFF through libtiff, as
gpufeed does): every pixel layout of Pillow's OPEN_INFO table that gpufeed
decodes, written sample by sample, then recompressed, tiled, split into
planes and reoriented by libtiff's own tiffcp / tiffset; the files Pillow
writes itself; what is refused.
"""

import io
import shutil
import struct
import subprocess

import pytest

np = pytest.importorskip("numpy")
PIL = pytest.importorskip("PIL.Image")
TF = pytest.importorskip("torchvision.transforms.functional")

from gpufeed import _core  # noqa: E402
from test_transforms import assert_pils_bytes, ours, photo  # noqa: E402

if not _core.build_info()["with_tiff"]:
    pytest.skip("this gpufeed build has no libtiff", allow_module_level=True)

SHORT, LONG = 3, 4


def tiff_file(width, height, bits, samples, photometric, payload, big_endian=False, extra=(),
              sample_format=None, fill_order=None, colormap=None, orientation=None,
              rows_per_strip=5, photometric_tag=True, tags_written=None):
    """An uncompressed, striped classic TIFF whose pixel rows are `payload`
    (height rows of ceil(width * samples * bits / 8) bytes), tags as given;
    `tags_written` ({tag: (SHORT or LONG, values)}) adds or replaces tags."""
    order = ">" if big_endian else "<"
    row_bytes = (width * samples * bits + 7) // 8
    strips = [payload[y * row_bytes:min(height, y + rows_per_strip) * row_bytes]
              for y in range(0, height, rows_per_strip)]
    tags = {256: (LONG, [width]), 257: (LONG, [height]), 258: (SHORT, [bits] * samples),
            259: (SHORT, [1]), 277: (SHORT, [samples]), 278: (LONG, [rows_per_strip]),
            279: (LONG, [len(s) for s in strips]), 284: (SHORT, [1]), 273: (LONG, [0] * len(strips))}
    if photometric_tag:
        tags[262] = (SHORT, [photometric])
    if fill_order:
        tags[266] = (SHORT, [fill_order])
    if orientation:
        tags[274] = (SHORT, [orientation])
    if colormap is not None:
        tags[320] = (SHORT, list(colormap))
    if extra:
        tags[338] = (SHORT, list(extra))
    if sample_format:
        tags[339] = (SHORT, [sample_format] * samples)
    tags.update(tags_written or {})
    # Header, IFD, then the values longer than 4 bytes, then the strips.
    entries = sorted(tags)
    fmt = {SHORT: "H", LONG: "I"}
    out_of_line = 8 + 2 + 12 * len(entries) + 4
    blob_bytes = sum(-(-len(tags[t][1]) * (2 if tags[t][0] == SHORT else 4) // 2) * 2
                     for t in entries if len(tags[t][1]) * (2 if tags[t][0] == SHORT else 4) > 4)
    position = out_of_line + blob_bytes
    offsets = []
    for strip in strips:
        offsets.append(position)
        position += len(strip)
    tags[273] = (LONG, offsets)
    blobs, ifd = b"", b""
    for tag in entries:
        kind, values = tags[tag]
        blob = struct.pack(order + fmt[kind] * len(values), *values)
        if len(blob) > 4:
            ifd += struct.pack(order + "HHII", tag, kind, len(values), out_of_line + len(blobs))
            blobs += blob + b"\0" * (len(blob) & 1)
        else:
            ifd += struct.pack(order + "HHI", tag, kind, len(values)) + blob.ljust(4, b"\0")
    header = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(order + "I", 8)
    ifd = struct.pack(order + "H", len(entries)) + ifd + struct.pack(order + "I", 0)
    assert len(blobs) == blob_bytes
    return header + ifd + blobs + b"".join(strips)


def pack_bits(values, bits):
    """Rows of `values` (height x width x samples) packed MSB first."""
    rows = []
    for row in values.reshape(values.shape[0], -1):
        out, accumulator, filled = bytearray(), 0, 0
        for v in row:
            accumulator = (accumulator << bits) | int(v)
            filled += bits
            while filled >= 8:
                filled -= 8
                out.append((accumulator >> filled) & 0xFF)
        if filled:
            out.append((accumulator << (8 - filled)) & 0xFF)
        rows.append(bytes(out))
    return b"".join(rows)


def reverse_bits(data):
    table = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))
    return data.translate(table)


W, H = 45, 37


def layouts():
    """(name, file) for each layout, sample values drawn at random."""
    rng = np.random.default_rng(5)
    out = []
    rgb = photo(W, H, 3)
    for photometric in (0, 1):
        for bits in (1, 2, 4, 8):
            values = rng.integers(0, 1 << bits, (H, W))
            payload = pack_bits(values, bits)
            out.append((f"gray {bits}-bit photometric {photometric}",
                        tiff_file(W, H, bits, 1, photometric, payload)))
            out.append((f"gray {bits}-bit photometric {photometric} fill order 2",
                        tiff_file(W, H, bits, 1, photometric, reverse_bits(payload), fill_order=2)))
    for big in (False, True):
        order = ">" if big else "<"
        gray16 = rng.integers(0, 600, (H, W)).astype(order + "u2")
        out.append((f"gray 16-bit big={big}", tiff_file(W, H, 16, 1, 1, gray16.tobytes(), big)))
        signed = rng.integers(-300, 600, (H, W)).astype(order + "i2")
        out.append((f"signed 16-bit big={big}",
                    tiff_file(W, H, 16, 1, 1, signed.tobytes(), big, sample_format=2)))
        signed32 = rng.integers(-300, 600, (H, W)).astype(order + "i4")
        out.append((f"signed 32-bit big={big}",
                    tiff_file(W, H, 32, 1, 1, signed32.tobytes(), big, sample_format=2)))
        floats = rng.uniform(-20, 280, (H, W)).astype(order + "f4")
        floats[0, :5] = [np.nan, 0.5, 254.99, 255.0, -0.0]
        out.append((f"float 32-bit big={big}",
                    tiff_file(W, H, 32, 1, 1, floats.tobytes(), big, sample_format=3)))
        rgb16 = (rgb.astype(order + "u2") * 257 + rng.integers(0, 256, rgb.shape)).astype(order + "u2")
        out.append((f"RGB 16-bit big={big}", tiff_file(W, H, 16, 3, 2, rgb16.tobytes(), big)))
        alpha = rng.integers(0, 256, (H, W, 1))
        for extra in ((), (0,), (1,), (2,)):
            a16 = (alpha * 257).astype(order + "u2")
            premultiplied = rgb16 if extra != (1,) else (rgb16.astype(np.uint32) * a16 // 65535)
            data = np.concatenate([premultiplied.astype(order + "u2"), a16], -1)
            out.append((f"RGBA 16-bit extra {extra} big={big}",
                        tiff_file(W, H, 16, 4, 2, data.tobytes(), big, extra=extra)))
        palette = rng.integers(0, 65536, 3 * 256)
        index = rng.integers(0, 256, (H, W)).astype(np.uint8)
        out.append((f"palette 8-bit big={big}",
                    tiff_file(W, H, 8, 1, 3, index.tobytes(), big, colormap=palette)))
    out.append(("gray 12-bit", tiff_file(W, H, 12, 1, 1,
                                         pack_bits(rng.integers(0, 4096, (H, W)), 12))))
    gray16 = rng.integers(0, 600, (H, W)).astype("<u2")
    out.append(("gray 16-bit min-is-white", tiff_file(W, H, 16, 1, 0, gray16.tobytes())))
    out.append(("unsigned 32-bit", tiff_file(W, H, 32, 1, 1, rng.integers(0, 2**32, (H, W))
                                             .astype("<u4").tobytes(), sample_format=1)))
    out.append(("RGB", tiff_file(W, H, 8, 3, 2, rgb.tobytes())))
    out.append(("RGB fill order 2", tiff_file(W, H, 8, 3, 2, reverse_bits(rgb.tobytes()),
                                               fill_order=2)))
    alpha = rng.integers(0, 256, (H, W, 1)).astype(np.uint8)
    alpha[0, :4, 0] = [0, 255, 1, 128]
    premultiplied = (rgb.astype(np.uint32) * alpha // 255).astype(np.uint8)
    premultiplied[0, 0] = [10, 20, 30]  # alpha 0 with colour: Pillow gives black
    for extra in ((), (0,), (1,), (2,), (999,), (0, 0), (1, 0), (2, 0), (0, 0, 0), (1, 0, 0),
                  (2, 0, 0)):
        extra_bands = [alpha] + [rng.integers(0, 256, (H, W, 1)).astype(np.uint8)
                                 for _ in range(len(extra) - 1)] if extra else [alpha]
        colour = premultiplied if extra[:1] == (1,) else rgb
        data = np.concatenate([colour] + extra_bands, -1)
        out.append((f"RGB extra {extra}", tiff_file(W, H, 8, data.shape[-1], 2, data.tobytes(),
                                                    extra=extra)))
    out.append(("gray + alpha", tiff_file(W, H, 8, 2, 1, rng.integers(0, 256, (H, W, 2))
                                          .astype(np.uint8).tobytes(), extra=(2,))))
    for bits in (1, 2, 4, 8):
        palette = rng.integers(0, 65536, 3 << bits)
        values = rng.integers(0, 1 << bits, (H, W))
        payload = pack_bits(values, bits)
        out.append((f"palette {bits}-bit", tiff_file(W, H, bits, 1, 3, payload, colormap=palette)))
        out.append((f"palette {bits}-bit fill order 2",
                    tiff_file(W, H, bits, 1, 3, reverse_bits(payload), colormap=palette,
                              fill_order=2)))
    palette = rng.integers(0, 65536, 3 * 256)
    out.append(("palette + alpha", tiff_file(W, H, 8, 2, 3, rng.integers(0, 256, (H, W, 2))
                                             .astype(np.uint8).tobytes(), colormap=palette,
                                             extra=(2,))))
    cmyk = rng.integers(0, 256, (H, W, 6)).astype(np.uint8)
    out.append(("CMYK", tiff_file(W, H, 8, 4, 5, cmyk[..., :4].tobytes())))
    out.append(("CMYK + 1 extra", tiff_file(W, H, 8, 5, 5, cmyk[..., :5].tobytes(), extra=(0,))))
    out.append(("CMYK + 2 extra", tiff_file(W, H, 8, 6, 5, cmyk.tobytes(), extra=(0, 0))))
    cmyk16 = rng.integers(0, 65536, (H, W, 4)).astype("<u2")
    out.append(("CMYK 16-bit", tiff_file(W, H, 16, 4, 5, cmyk16.tobytes())))
    gray = rng.integers(0, 256, (H, W)).astype(np.uint8)
    out.append(("no photometric tag (Pillow: min-is-white)",
                tiff_file(W, H, 8, 1, 0, gray.tobytes(), photometric_tag=False)))
    return out


# Uncompressed files Pillow reads with its own unpackers, which lack these
# modes (ValueError: unknown raw mode); compressed, libtiff reverses the
# bits and Pillow reads them. gpufeed reads both as libtiff does.
PIL_RAW_LACKS = {"gray 8-bit photometric 0 fill order 2", "palette 1-bit fill order 2",
                 "palette 2-bit fill order 2", "palette 4-bit fill order 2"}


def test_every_layout_gives_pils_bytes():
    assert_pils_bytes([k for k in layouts() if k[0] not in PIL_RAW_LACKS], samples=4)


def tiffcp(data, *options, tmp_path):
    source, target = tmp_path / "in.tif", tmp_path / "out.tif"
    source.write_bytes(data)
    if target.exists():
        target.unlink()
    subprocess.run(["tiffcp", *options, str(source), str(target)], check=True,
                   capture_output=True)
    return target.read_bytes()


@pytest.fixture
def libtiff_tools():
    if shutil.which("tiffcp") is None or shutil.which("tiffset") is None:
        pytest.skip("libtiff's tools are not installed (apt-get install libtiff-tools)")


def assert_equal_to_pil_reading(data, reference, name):
    """gpufeed on `data` gives torchvision's bytes on Pillow's reading of
    `reference` (the same pixels, written so that Pillow reads them)."""
    image = PIL.open(io.BytesIO(reference)).convert("RGB")
    got, _ = ours(data, train=False)
    np.testing.assert_array_equal(got, np.asarray(TF.center_crop(TF.resize(image, 256), 224)),
                                  err_msg=name)


def test_files_pil_reads_only_compressed_give_the_compressed_files_bytes(tmp_path,
                                                                          libtiff_tools):
    kinds = dict(layouts())
    for name in sorted(PIL_RAW_LACKS):
        with pytest.raises(ValueError, match="unknown raw mode"):
            PIL.open(io.BytesIO(kinds[name])).load()
        compressed = tiffcp(kinds[name], "-c", "lzw", tmp_path=tmp_path)  # keeps fill order 2
        assert PIL.open(io.BytesIO(compressed)).tag_v2[266] == 2
        assert_equal_to_pil_reading(kinds[name], compressed, name)
    # Premultiplied RGBA in separate planes, uncompressed: Pillow unpacks
    # each plane with one letter of its rawmode, and has none for "a".
    planes = tiffcp(kinds["RGB extra (1,)"], "-p", "separate", tmp_path=tmp_path)
    assert_equal_to_pil_reading(planes, kinds["RGB extra (1,)"], "RGBa in planes")


def test_compressed_tiled_and_planar_files_give_pils_bytes(tmp_path, libtiff_tools):
    kinds = dict(layouts())
    out = []
    for name in ["RGB", "gray 8-bit photometric 1", "gray 1-bit photometric 0", "palette 4-bit",
                 "RGB extra (1,)", "RGB extra (2,)", "RGB 16-bit big=True", "CMYK",
                 "float 32-bit big=False", "gray 16-bit big=False", "palette 2-bit fill order 2"]:
        eight_bit_bands = name in ("RGB", "RGB extra (2,)", "CMYK")
        for options in (["-c", "lzw"], ["-c", "zip:p9"], ["-c", "packbits"], ["-c", "lzma"],
                        ["-c", "zstd"], ["-c", "lzw:2"], ["-t", "-w", "16", "-l", "16"],
                        ["-t", "-w", "32", "-l", "16", "-c", "zip"], ["-p", "separate"],
                        ["-p", "separate", "-t", "-w", "16", "-l", "16", "-c", "lzw"],
                        ["-r", "1"], ["-r", "64"]):
            if "lzw:2" in options and ("bit" in name and name.split("-bit")[0][-1] in "124"):
                continue  # no predictor below 8 bits
            if "separate" in options and not eight_bit_bands:
                continue  # tiffcp splits 8-bit samples only
            if name in PIL_RAW_LACKS and "-c" not in options:
                continue  # Pillow's own unpacking fails (above)
            out.append((f"{name} {' '.join(options)}", tiffcp(kinds[name], *options,
                                                              tmp_path=tmp_path)))
    for scheme in ("g3", "g4", "g3:2d"):
        out.append((f"bilevel {scheme}", tiffcp(kinds["gray 1-bit photometric 0"], "-c", scheme,
                                                tmp_path=tmp_path)))
    # JPEG: YCbCr 4:2:0 converted by libjpeg (and RGB, gray), strips and tiles.
    for options in (["-c", "jpeg", "-r", "16"], ["-c", "jpeg:r", "-r", "8"],
                    ["-c", "jpeg:50", "-t", "-w", "16", "-l", "16"], ["-c", "jpeg", "-r", "32"]):
        out.append((f"RGB {' '.join(options)}", tiffcp(kinds["RGB"], *options, tmp_path=tmp_path)))
    out.append(("gray jpeg", tiffcp(kinds["gray 8-bit photometric 1"], "-c", "jpeg", "-r", "8",
                                    tmp_path=tmp_path)))
    assert len(out) >= 100
    assert_pils_bytes(out, samples=3)


def test_orientation_is_applied_as_pil_applies_it(tmp_path, libtiff_tools):
    rgb = photo(61, 29, 4)
    base = tiff_file(61, 29, 8, 3, 2, rgb.tobytes())
    out = []
    for orientation in range(1, 9):
        for options in ([], ["-t", "-w", "16", "-l", "16", "-c", "lzw"]):
            path = tmp_path / f"o{orientation}.tif"
            path.write_bytes(tiffcp(base, *options, tmp_path=tmp_path) if options else base)
            subprocess.run(["tiffset", "-s", "274", str(orientation), str(path)], check=True)
            out.append((f"orientation {orientation} {options}", path.read_bytes()))
    # 5-8 swap width and height: the eval transform's resize follows them.
    assert PIL.open(io.BytesIO(out[-1][1])).convert("RGB").size == (29, 61)
    assert_pils_bytes(out, samples=4)


def test_files_pil_writes_give_pils_bytes():
    rgb = photo(97, 67, 6)
    out = []
    for mode in ("RGB", "RGBA", "RGBX", "L", "LA", "1", "P", "PA", "CMYK", "I;16", "I;16B", "I",
                 "F"):
        gray = mode in ("I;16", "I;16B", "I", "F")
        image = PIL.fromarray(rgb[..., 0] if gray else rgb).convert(mode)
        for compression in (None, "tiff_lzw", "tiff_adobe_deflate", "tiff_deflate", "packbits",
                            "jpeg", "group4"):
            if compression == "jpeg" and mode not in ("RGB", "L", "CMYK"):
                continue
            if compression == "group4" and mode != "1":
                continue
            buffer = io.BytesIO()
            image.save(buffer, "TIFF", compression=compression)
            out.append((f"{mode} {compression}", buffer.getvalue()))
    assert len(out) >= 60
    assert_pils_bytes(out, samples=3)


def test_layouts_pil_does_not_open_are_refused_naming_them():
    refused = [
        ("big-endian 12-bit gray", tiff_file(W, H, 12, 1, 1, bytes((W * 12 + 7) // 8 * H),
                                             big_endian=True)),
        ("two extra samples of gray", tiff_file(W, H, 8, 3, 1, bytes(W * H * 3), extra=(0, 0))),
        ("64-bit float", tiff_file(W, H, 64, 1, 1, bytes(W * H * 8), sample_format=3)),
        ("big-endian min-is-white 16-bit", tiff_file(W, H, 16, 1, 0, bytes(W * H * 2),
                                                     big_endian=True)),
        ("RGBA fill order 2", tiff_file(W, H, 8, 4, 2, bytes(W * H * 4), fill_order=2)),
    ]
    for name, data in refused:
        with pytest.raises(Exception):
            PIL.open(io.BytesIO(data)).convert("RGB")
        with pytest.raises(Exception, match="TIFF with") as error:
            ours(data, train=False)
        assert "not decoded" in str(error.value), name
    # Pillow opens CIE L*a*b*; its conversion to RGB is not a colour
    # conversion, and gpufeed does not decode such files.
    lab = tiff_file(W, H, 8, 3, 8, bytes(W * H * 3))
    PIL.open(io.BytesIO(lab)).convert("RGB")
    with pytest.raises(Exception, match="CIE L.a.b. pixels"):
        ours(lab, train=False)


def test_bad_tiff_is_an_error_naming_the_strip_and_offset(tmp_path, libtiff_tools):
    rgb = photo(W, H, 2)
    data = tiffcp(tiff_file(W, H, 8, 3, 2, rgb.tobytes()), "-c", "lzw", "-r", "8",
                  tmp_path=tmp_path)
    image = PIL.open(io.BytesIO(data))
    offsets = image.tag_v2[273]
    damaged = bytearray(data)
    damaged[offsets[2]:offsets[2] + 40] = b"\xff" * 40
    with pytest.raises(Exception, match=r"TIFF strip 2 at byte %d: " % offsets[2]):
        ours(bytes(damaged), train=False)
    # Cut inside the last strip: an error, never a crash or a hang.
    for cut in (len(data) // 2, offsets[-1] + 3, 30, 9):
        with pytest.raises(Exception, match="TIFF"):
            ours(data[:cut], train=False)


def test_headers_over_max_pixels_are_refused_before_decoding():
    # 100,000 x 100,000 declared, one strip of 300 bytes held.
    data = tiff_file(100_000, 100_000, 8, 3, 2, bytes(300), rows_per_strip=100_000)
    with pytest.raises(Exception, match="header declares 10000000000 pixels"):
        ours(data, train=False)


def test_an_image_folder_of_tiffs_gives_torchvisions_batches(tmp_path):
    import gpufeed
    from torchvision import datasets, transforms
    for index in range(6):
        folder = tmp_path / "folder" / f"c{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        image = PIL.fromarray(photo(120 + 7 * index, 90 + 5 * index, index))
        image.save(folder / f"{index}.tif", compression=("tiff_lzw", None, "jpeg")[index % 3])
    reference = datasets.ImageFolder(str(tmp_path / "folder"), transforms.Compose(
        [transforms.Resize(256), transforms.CenterCrop(224), transforms.PILToTensor()]))
    loader = gpufeed.DataLoader(str(tmp_path / "folder"), batch_size=6, shuffle=False,
                                transform=gpufeed.ImageTransform(224, train=False, dtype="uint8",
                                                                 layout="NCHW"))
    batch, labels = next(iter(loader))
    for index in range(6):
        want, label = reference[index]
        np.testing.assert_array_equal(np.asarray(batch[index]), want.numpy(), err_msg=str(index))
        assert int(labels[index]) == label


def test_tags_libtiff_repairs_are_read_as_pil_reads_them(tmp_path, libtiff_tools):
    rng = np.random.default_rng(8)
    rgba = rng.integers(0, 256, (H, W, 4)).astype(np.uint8)
    index = rng.integers(0, 256, (H, W)).astype(np.uint8)
    sixteen = rng.integers(0, 65536, 48)
    rgb = photo(W, H, 9)
    kinds = [
        # A colormap of 16 entries in an 8-bit file: libtiff drops it and
        # calls the file gray; Pillow looks up 16 colours, grey past them.
        ("8-bit palette, 16-entry colormap", tiff_file(W, H, 8, 1, 3, index.tobytes(),
                                                       colormap=sixteen)),
        # Two orientation values: libtiff drops the tag, Pillow takes the first.
        ("orientation of two values", tiff_file(W, H, 8, 3, 2, rgb.tobytes(),
                                                tags_written={274: (SHORT, [6, 1])})),
        ("orientation as a LONG", tiff_file(W, H, 8, 3, 2, rgb.tobytes(),
                                            tags_written={274: (LONG, [8])})),
    ]
    # Four RGB samples without an ExtraSamples tag in separate planes,
    # compressed: Pillow's libtiff reading divides out the fourth as
    # premultiplied alpha.
    planes = tiffcp(tiff_file(W, H, 8, 4, 2, rgba.tobytes()), "-p", "separate", "-c", "zip",
                    tmp_path=tmp_path)
    assert 338 not in PIL.open(io.BytesIO(planes)).tag_v2
    kinds.append(("planar RGBA without ExtraSamples, Deflate", planes))
    assert_pils_bytes(kinds, samples=3)
    refused = [
        ("8-bit palette without a colormap", tiff_file(W, H, 8, 1, 3, index.tobytes()),
         "without a colormap"),
        ("5 samples, one ExtraSamples value", tiff_file(W, H, 8, 5, 2, bytes(W * H * 5),
                                                        extra=(2,)), "unknown pixel mode"),
        ("CMYK, 6 samples, one ExtraSamples value", tiff_file(W, H, 8, 6, 5, bytes(W * H * 6),
                                                              extra=(0,)), "unknown pixel mode"),
    ]
    for name, data, message in refused:
        with pytest.raises(Exception):
            PIL.open(io.BytesIO(data)).convert("RGB")
        with pytest.raises(Exception, match=message):
            ours(data, train=False)


def test_tiles_far_larger_than_the_image_are_refused():
    # 240 bytes declaring 32768x32768 tiles: 3 GB of tile buffer. Refused
    # before any is allocated (a few such files on many decode threads
    # would end the process).
    data = tiff_file(16, 16, 8, 3, 2, bytes(100), rows_per_strip=16,
                     tags_written={322: (LONG, [32768]), 323: (LONG, [32768])})
    data = data.replace(struct.pack("<HHI", 273, LONG, 1), struct.pack("<HHI", 324, LONG, 1))
    data = data.replace(struct.pack("<HHI", 279, LONG, 1), struct.pack("<HHI", 325, LONG, 1))
    with pytest.raises(Exception, match="TIFF tiles of 32768x32768 pixels for a 16x16 image"):
        ours(data, train=False)


def test_a_read_error_names_the_reads_failure_not_a_repaired_tag(tmp_path, libtiff_tools):
    rgb = photo(W, H, 2)
    data = tiffcp(tiff_file(W, H, 8, 3, 2, rgb.tobytes(), tags_written={274: (SHORT, [1])}),
                  "-c", "lzw", "-r", "8", tmp_path=tmp_path)
    entry = struct.pack("<HHIH", 274, SHORT, 1, 1)
    assert data.count(entry) == 1
    data = data.replace(entry, struct.pack("<HHIH", 274, SHORT, 1, 9))  # libtiff: "Bad value 9"
    offsets = PIL.open(io.BytesIO(data)).tag_v2[273]
    damaged = bytearray(data)
    damaged[offsets[1]:offsets[1] + 40] = b"\xff" * 40
    with pytest.raises(Exception) as error:
        ours(bytes(damaged), train=False)
    assert f"TIFF strip 1 at byte {offsets[1]}: " in str(error.value)
    assert "Orientation" not in str(error.value)
