#!/usr/bin/python3
"""Write an ImageFolder as a Caffe LMDB, the way Caffe's convert_imageset
--encoded does: one LMDB environment whose values are caffe.Datum protobufs
holding the JPEG bytes (field 4 data), the class index (field 5 label) and
encoded=true (field 7); keys are "%08d_<relative path>" in file order.

    /usr/bin/python3 benchmarks/make_caffe_lmdb.py FOLDER OUT

Classes are the subdirectories of FOLDER in sorted order (as gpufeed reads an
ImageFolder). OUT is written beside itself and renamed into place at the end,
so an existing OUT is complete and is reused as is. Needs the Python `lmdb`
module (Debian: python3-lmdb).
"""

import argparse
import os
import shutil
import sys

import lmdb


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encoded_datum(data, label):
    """caffe.Datum{data=data, label=label, encoded=true}, as protobuf writes it."""
    return b"\x22" + _varint(len(data)) + data + b"\x28" + _varint(label) + b"\x38\x01"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("out")
    args = parser.parse_args(argv)
    if os.path.exists(os.path.join(args.out, "data.mdb")):
        print(f"{args.out}: exists, reused")
        return 0
    classes = sorted(entry.name for entry in os.scandir(args.folder) if entry.is_dir())
    files = []
    for label, name in enumerate(classes):
        directory = os.path.join(args.folder, name)
        files += [(os.path.join(name, file), label) for file in sorted(os.listdir(directory))]
    total = sum(os.path.getsize(os.path.join(args.folder, path)) for path, _ in files)
    partial = args.out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    # The map is an upper bound, not the file size (no writemap): data.mdb
    # grows to the pages used.
    env = lmdb.open(partial, map_size=2 * total + (64 << 20), subdir=True)
    with env.begin(write=True) as txn:
        for index, (path, label) in enumerate(files):
            with open(os.path.join(args.folder, path), "rb") as image:
                txn.put(b"%08d_%s" % (index, path.encode()), encoded_datum(image.read(), label))
    env.sync()
    env.close()
    os.rename(partial, args.out)
    size = os.path.getsize(os.path.join(args.out, "data.mdb"))
    print(f"{args.out}: {len(files)} records, {len(classes)} classes, "
          f"{total / 1e6:.1f} MB of images, data.mdb {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
