"""The feature keys and kinds of a TFRecord file's first tf.train.Example,
for ``gpufeed inspect`` (the native reader has already checked the file's
framing and CRCs when it opened the dataset)."""

from __future__ import annotations

import struct
from typing import List, Tuple

_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a varint runs past its message")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes):
    """(field number, wire type, bytes of a length-delimited field or None)."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            length, pos = _varint(data, pos)
            yield number, wire, data[pos:pos + length]
            pos += length
        elif wire == 0:
            _, pos = _varint(data, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire} in a tf.train.Example")
        if pos > len(data):
            raise ValueError("a field runs past its message")


def first_record_features(path: str) -> List[Tuple[str, str]]:
    """[(key, "bytes_list" | "float_list" | "int64_list")] of the first
    record of the TFRecord file at `path`, in the Example's order."""
    with open(path, "rb") as f:
        header = f.read(12)
        if len(header) < 12:
            return []
        (length,) = struct.unpack("<Q", header[:8])
        example = f.read(length)
    features = []
    for number, _, body in _fields(example):
        if number != 1 or body is None:
            continue
        for entry_number, _, entry in _fields(body):
            if entry_number != 1 or entry is None:
                continue
            key, kind = b"", "empty"
            for part_number, _, part in _fields(entry):
                if part_number == 1 and part is not None:
                    key = part
                elif part_number == 2 and part is not None:
                    for kind_number, _, _ in _fields(part):
                        kind = _KINDS.get(kind_number, kind)
            features.append((key.decode("utf-8", "replace"), kind))
    return features
