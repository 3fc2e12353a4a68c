#!/usr/bin/python3
"""An ImageFolder rewritten as Mosaic Streaming MDS shards or TFRecord files,
by writers made from the formats' specifications, independent of gpufeed.

    python benchmarks/foreign_writers.py mds IMAGEFOLDER OUT [--shard-size 64MiB]
    python benchmarks/foreign_writers.py tfrecord IMAGEFOLDER OUT [--shard-size 64MiB]

MDS (index.json version 2): columns "cls" (int) and "jpg" (jpeg), sorted by
name as Streaming's MDSWriter sorts them; a shard is a u32 sample count, count
+ 1 u32 absolute sample offsets, then the samples; a sample is the u32 sizes
of its variable-size columns (jpg), then every column's bytes in column order.

TFRecord: each record is u64 length, masked CRC32C of those 8 bytes, a
tf.train.Example (features "image/encoded" bytes, "image/class/label" int64,
build_imagenet_data.py's keys), masked CRC32C of it.

OUT gets a `.complete` file (the parameters, written last); a rerun with the
same parameters keeps OUT as it is.
"""

import argparse
import json
import os
import shutil
import struct

import numpy as np

_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected
_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ _POLY if _crc & 1 else _crc >> 1
    _TABLE.append(_crc)
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)
_CHUNK = 256  # bytes per lane of the vectorised CRC


def _zeros(state, count):
    """The CRC register after `count` zero bytes from `state`."""
    for _ in range(count):
        state = _TABLE[state & 0xFF] ^ (state >> 8)
    return state


# _SHIFT[k][v]: the register after _CHUNK zero bytes from v << 8k (the
# register is linear over GF(2), so a state's shift is the XOR of its bytes').
_SHIFT = [[_zeros(value << (8 * k), _CHUNK) for value in range(256)] for k in range(4)]


def _crc32c_bytewise(data):
    state = 0xFFFFFFFF
    for byte in data:
        state = _TABLE[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state ^ 0xFFFFFFFF


def crc32c_many(datas):
    """CRC32C of each of `datas`, computed _CHUNK-byte lanes at a time with
    numpy over all of them: the initial 0xFFFFFFFF is folded into the first 4
    bytes (a reflected CRC's identity), each is zero-padded in front (zeros
    from a zero register stay zero), every lane's register is run from zero,
    and each one's lanes are joined: crc(A + B) = shift_len(B)(crc(A)) ^ crc(B)."""
    lane_counts = [-(-len(data) // _CHUNK) if len(data) >= 4 else 0 for data in datas]
    padded = np.zeros(sum(lane_counts) * _CHUNK, dtype=np.uint8)
    end = 0
    for data, lanes in zip(datas, lane_counts):
        end += lanes * _CHUNK
        if lanes:
            start = end - len(data)
            padded[start:end] = np.frombuffer(data, dtype=np.uint8)
            padded[start:start + 4] ^= 0xFF
    grid = padded.reshape(-1, _CHUNK)
    states = np.zeros(len(grid), dtype=np.uint32)
    for column in range(_CHUNK):
        states = _TABLE_NP[(states ^ grid[:, column]) & 0xFF] ^ (states >> 8)
    s0, s1, s2, s3 = _SHIFT
    lanes_all = states.tolist()
    crcs, first = [], 0
    for data, lanes in zip(datas, lane_counts):
        if not lanes:
            crcs.append(_crc32c_bytewise(data))
            continue
        state = 0
        for lane in lanes_all[first:first + lanes]:
            state = (s0[state & 0xFF] ^ s1[(state >> 8) & 0xFF] ^ s2[(state >> 16) & 0xFF]
                     ^ s3[state >> 24] ^ lane)
        first += lanes
        crcs.append(state ^ 0xFFFFFFFF)
    return crcs


def crc32c(data):
    return crc32c_many([bytes(data)])[0]


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value):
    out = bytearray()
    value &= (1 << 64) - 1  # int64 two's complement, as protobuf writes a negative
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example_bytes(image, label):
    """tf.train.Example{features{feature{"image/encoded": bytes_list,
    "image/class/label": int64_list (packed)}}}."""
    features = {b"image/encoded": _field(1, _field(1, image)),
                b"image/class/label": _field(3, _field(1, _varint(label)))}
    entries = b"".join(_field(1, _field(1, key) + _field(2, feature))
                       for key, feature in features.items())
    return _field(1, entries)


def tfrecord_records(examples):
    """The framed records of `examples` (bytes each)."""
    lengths = [struct.pack("<Q", len(data)) for data in examples]
    crcs = crc32c_many(lengths + examples)
    return [length + struct.pack("<I", masked(length_crc)) + data + struct.pack("<I", masked(crc))
            for length, length_crc, data, crc in
            zip(lengths, crcs[:len(examples)], examples, crcs[len(examples):])]


def mds_sample(image, label):
    """Columns in sorted order, cls (int: 8 bytes) then jpg (variable): the
    u32 size of jpg, then cls, then jpg."""
    return struct.pack("<I", len(image)) + np.int64(label).tobytes() + image


def mds_shard(samples):
    offset = 4 + 4 * (len(samples) + 1)
    offsets = [offset]
    for sample in samples:
        offset += len(sample)
        offsets.append(offset)
    return struct.pack(f"<I{len(offsets)}I", len(samples), *offsets) + b"".join(samples)


def mds_index_entry(name, samples, size, limit):
    return {"column_encodings": ["int", "jpeg"], "column_names": ["cls", "jpg"],
            "column_sizes": [8, None], "compression": None, "format": "mds", "hashes": [],
            "raw_data": {"basename": name, "bytes": size, "hashes": {}}, "samples": samples,
            "size_limit": limit, "version": 2, "zip_data": None}


def image_folder(root):
    """(path, class index) in torchvision's order: classes sorted, files sorted."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    items = []
    for label, name in enumerate(classes):
        for directory, _, files in sorted(os.walk(os.path.join(root, name))):
            items.extend((os.path.join(directory, f), label) for f in sorted(files)
                         if f.lower().endswith((".jpg", ".jpeg", ".png")))
    return items


def write(kind, items, out, shard_size):
    """Shards of at most `shard_size` bytes (a sample larger alone in one)."""
    shards, current, current_bytes = [], [], 0
    for path, label in items:
        with open(path, "rb") as source:
            image = source.read()
        encoded = mds_sample(image, label) if kind == "mds" else example_bytes(image, label)
        framed = len(encoded) + (4 if kind == "mds" else 16)  # an offset, or the framing
        if current and current_bytes + framed > shard_size:
            shards.append(current)
            current, current_bytes = [], 0
        current.append(encoded)
        current_bytes += framed
    if current:
        shards.append(current)
    index = []
    for number, samples in enumerate(shards):
        if kind == "mds":
            name, data = f"shard.{number:05d}.mds", mds_shard(samples)
            index.append(mds_index_entry(name, len(samples), len(data), shard_size))
        else:
            name = f"train-{number:05d}-of-{len(shards):05d}.tfrecord"
            data = b"".join(tfrecord_records(samples))
        with open(os.path.join(out, name), "wb") as shard:
            shard.write(data)
    if kind == "mds":
        with open(os.path.join(out, "index.json"), "w") as index_file:
            json.dump({"shards": index, "version": 2}, index_file, indent=2, sort_keys=True)
    return len(shards)


def parse_size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("mds", "tfrecord"))
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--shard-size", default="64MiB")
    args = parser.parse_args()
    items = image_folder(args.folder)
    if not items:
        raise SystemExit(f"{args.folder}: no images")
    params = {"kind": args.kind, "folder": os.path.abspath(args.folder), "images": len(items),
              "shard_size": parse_size(args.shard_size)}
    marker = os.path.join(args.out, ".complete")
    if os.path.exists(marker):
        with open(marker) as existing:
            if json.load(existing) == params:
                print(f"{args.out}: kept ({len(items)} images, {args.kind})")
                return
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    shards = write(args.kind, items, args.out, params["shard_size"])
    with open(marker, "w") as done:
        json.dump(params, done)
    print(f"{args.out}: {len(items)} images in {shards} {args.kind} shard(s)")


if __name__ == "__main__":
    main()
