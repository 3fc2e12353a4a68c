"""An MDS writer written from Streaming's format description (index.json
version 2; a shard is u32 count, count + 1 u32 absolute offsets, then the
samples; a sample is the u32 sizes of its variable columns, then every
column's bytes), independent of gpufeed. Used by test_mds.py."""

import io
import json
import shutil
import struct
import subprocess

import numpy as np

FIXED = {"int": 8, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2,
         "uint32": 4, "uint64": 8, "float16": 2, "float32": 4, "float64": 8}
NDARRAY_DTYPES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32,
                  "int32": 33, "float32": 34, "uint64": 64, "int64": 65, "float64": 66}


M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                      9650029242287828579, 2870177450012600261)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64_hex(data):
    """XXH64 (seed 0) from its specification, as Python xxhash's hexdigest."""
    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ _round(0, v[k])) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return f"{h:016x}"


HASHES = {"xxh64": xxh64_hex}


def encode(encoding, value):
    kind = encoding.split(":")[0]
    if kind in ("bytes", "jpeg", "png", "pkl"):
        return bytes(value)
    if kind in ("str", "str_int", "str_float", "str_decimal"):
        return str(value).encode("utf-8")
    if kind == "json":
        return json.dumps(value).encode("utf-8")
    if kind == "int":
        return np.int64(value).tobytes()
    if kind in FIXED:
        return np.array(value, dtype=kind).tobytes()
    if kind == "pil":
        mode, width, height, raw = value
        return struct.pack("<3I", width, height, len(mode)) + mode.encode() + raw
    if kind == "ndarray":
        parts = encoding.split(":")
        array = np.asarray(value)
        out = b""
        if len(parts) < 2:
            out += bytes([NDARRAY_DTYPES[array.dtype.name]])
        if len(parts) < 3:
            out += bytes([(array.ndim << 2) | 0]) + np.array(array.shape, np.uint8).tobytes()
        return out + array.tobytes()
    raise ValueError(encoding)


def column_size(encoding):
    parts = encoding.split(":")
    if parts[0] in FIXED:
        return FIXED[parts[0]]
    if parts[0] == "ndarray" and len(parts) == 3:
        count = int(np.prod([int(d) for d in parts[2].split(",")]))
        return count * np.dtype(parts[1]).itemsize
    return None


def shard_bytes(columns, samples):
    encoded = []
    for sample in samples:
        head, body = b"", b""
        for name, encoding in columns:
            datum = encode(encoding, sample[name])
            if column_size(encoding) is None:
                head += struct.pack("<I", len(datum))
            body += datum
        encoded.append(head + body)
    offset = 4 + 4 * (len(samples) + 1)
    offsets = [offset]
    for data in encoded:
        offset += len(data)
        offsets.append(offset)
    return struct.pack("<I", len(samples)) + struct.pack(f"<{len(offsets)}I", *offsets) + \
        b"".join(encoded)


def write_mds(out_dir, columns, samples, per_shard, zstd=False, hashes=("xxh64",)):
    """Writes shard.NNNNN.mds (or .mds.zstd, compressed by the zstd CLI) and
    index.json; returns the shard paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    entries, paths = [], []
    for first in range(0, len(samples), per_shard):
        raw = shard_bytes(columns, samples[first:first + per_shard])
        name = f"shard.{first // per_shard:05d}.mds"
        digest = {h: HASHES[h](raw) for h in hashes}
        entry = {"column_encodings": [e for _, e in columns],
                 "column_names": [n for n, _ in columns],
                 "column_sizes": [column_size(e) for _, e in columns],
                 "compression": None, "format": "mds", "hashes": list(hashes),
                 "raw_data": {"basename": name, "bytes": len(raw), "hashes": digest},
                 "samples": len(samples[first:first + per_shard]), "size_limit": 1 << 26,
                 "version": 2, "zip_data": None}
        if zstd:
            zipped = subprocess.run([shutil.which("zstd"), "-q", "-c", "-3"], input=raw,
                                    stdout=subprocess.PIPE, check=True).stdout
            (out_dir / (name + ".zstd")).write_bytes(zipped)
            entry["compression"] = "zstd:3"
            entry["zip_data"] = {"basename": name + ".zstd", "bytes": len(zipped),
                                 "hashes": {h: HASHES[h](zipped)
                                            for h in hashes}}
            paths.append(out_dir / (name + ".zstd"))
        else:
            (out_dir / name).write_bytes(raw)
            paths.append(out_dir / name)
        entries.append(entry)
    (out_dir / "index.json").write_text(json.dumps({"version": 2, "shards": entries}))
    return paths


def jpeg_bytes(seed, size=(24, 20)):
    from PIL import Image
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), np.uint8)).save(out, "JPEG")
    return out.getvalue()


def png_bytes(seed):
    from PIL import Image
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (10, 12, 3), np.uint8)).save(out, "PNG")
    return out.getvalue()
