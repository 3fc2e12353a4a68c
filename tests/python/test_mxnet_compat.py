"""Byte compatibility of gpufeed's RecordIO with MXNet, dmlc-core and DALI.

MXNet cannot be installed in the test environment (no PyPI access), so this
module carries a small pure-Python transliteration of the reference code that
defines the format, and checks gpufeed against it in both directions:

* dmlc-core ``src/recordio.cc`` (``RecordIOWriter::WriteRecord``,
  ``RecordIOReader::NextRecord``) and ``include/dmlc/recordio.h`` (magic,
  ``EncodeLRec``/``DecodeFlag``/``DecodeLength``, ``RecordIOWriter::Tell``):
  the framing.
* MXNet ``python/mxnet/recordio.py`` (``MXRecordIO``, ``MXIndexedRecordIO``,
  ``IRHeader``, ``pack``, ``unpack``): the image record payload and the
  ``.idx`` text.
* MXNet ``tools/im2rec.py`` (``read_list``, ``image_encode``, the
  ``write_idx`` loop): what real ``.rec``/``.idx`` files contain.
* DALI ``dali/operators/reader/loader/recordio_loader.h``
  (``RecordIOLoader::ReadIndexFile``) and
  ``dali/operators/reader/parser/recordio_parser.h``
  (``ReadSingleImageRecordIO``): how DALI's ``readers.mxnet`` sizes and parses
  records.

The transliterations follow the sources line by line (control flow, names and
quirks kept), so that a disagreement with gpufeed points at gpufeed. Sources
checked: dmlc/dmlc-core at d1ececd5 (recordio.cc) and c256d8a0 (recordio.h);
apache/mxnet recordio.py at 04ec8697 and im2rec.py at 069f9b96, plus the
Python 3 im2rec.py of MXNet 1.x (same logic, f-strings) as vendored with its
ASF header in ROCm/rocAL tools/im2rec.py; NVIDIA/DALI recordio_loader.h at
1221b18a and recordio_parser.h at 1cb81ab5.

Every sample set mixes the payloads that stress the framing: the magic word
at 4-byte-aligned and unaligned offsets (inside the image bytes, inside the
24-byte IRHeader, inside the labels), consecutive magics, empty and 1..7-byte
images (padding), multi-label records and a ~300 KB image.
"""

import collections
import io
import numbers
import os
import random
import struct

import numpy as np
import pytest

import gpufeed

# ---------------------------------------------------------------------------
# dmlc-core: include/dmlc/recordio.h and src/recordio.cc
# ---------------------------------------------------------------------------

# RecordIOWriter::kMagic. The 2015 value 0x3ed7230a (cflag << 30) was replaced
# by 0xced7230a (cflag << 29) so that "(kMagic >> 29) & 7 > 3" and an lrec can
# never equal the magic; current dmlc-core, MXNet and DALI all use this one.
K_MAGIC = 0xCED7230A
# WriteRecord compares the payload against the magic's in-memory bytes
# (reinterpret_cast<const char*>(&umagic)), i.e. little-endian on every
# platform MXNet ships for.
MAGIC = struct.pack("<I", K_MAGIC)
assert MAGIC == b"\x0a\x23\xd7\xce"


def encode_lrec(cflag, length):
    """RecordIOWriter::EncodeLRec."""
    return (cflag << 29) | length


def decode_flag(rec):
    """RecordIOWriter::DecodeFlag."""
    return (rec >> 29) & 7


def decode_length(rec):
    """RecordIOWriter::DecodeLength."""
    return rec & ((1 << 29) - 1)


class RecordIOWriter:
    """dmlc::RecordIOWriter over a binary file object."""

    def __init__(self, stream):
        self._stream = stream
        self.except_counter = 0

    def write_record(self, buf):
        """RecordIOWriter::WriteRecord(const void *buf, size_t size)."""
        size = len(buf)
        assert size < (1 << 29), "RecordIO only accept record less than 2^29 bytes"
        magic = MAGIC
        bhead = bytes(buf)
        length = size
        lower_align = (length >> 2) << 2
        upper_align = ((length + 3) >> 2) << 2
        dptr = 0
        # Only 4-byte-aligned words below lower_align are compared: a magic
        # at an unaligned offset, or in a trailing partial word, stays as data.
        for i in range(0, lower_align, 4):
            if bhead[i:i + 4] == magic:
                lrec = encode_lrec(1 if dptr == 0 else 2, i - dptr)
                self._stream.write(magic)
                self._stream.write(struct.pack("<I", lrec))
                if i != dptr:
                    self._stream.write(bhead[dptr:i])
                dptr = i + 4
                self.except_counter += 1
        lrec = encode_lrec(3 if dptr != 0 else 0, length - dptr)
        self._stream.write(magic)
        self._stream.write(struct.pack("<I", lrec))
        if length != dptr:
            self._stream.write(bhead[dptr:length])
        # Write padded bytes: only the end of the whole record is padded; the
        # parts before it are multiples of 4 long by construction.
        if upper_align != length:
            self._stream.write(b"\0" * (upper_align - length))

    def tell(self):
        """RecordIOWriter::Tell: the underlying SeekStream's position."""
        return self._stream.tell()


class RecordIOReader:
    """dmlc::RecordIOReader over a binary file object."""

    def __init__(self, stream):
        self._stream = stream
        self._end_of_stream = False

    def next_record(self):
        """RecordIOReader::NextRecord; returns bytes, or None at the end."""
        if self._end_of_stream:
            return None
        out_rec = bytearray()
        while True:
            header = self._stream.read(8)
            if len(header) == 0:
                self._end_of_stream = True
                return None
            assert len(header) == 8, "Invalid RecordIO File"
            magic, lrec = struct.unpack("<II", header)
            assert magic == K_MAGIC, "Invalid RecordIO File"
            cflag = decode_flag(lrec)
            length = decode_length(lrec)
            upper_align = ((length + 3) >> 2) << 2
            if upper_align != 0:
                part = self._stream.read(upper_align)
                assert len(part) == upper_align, f"Invalid RecordIO File upper_align={upper_align}"
                # "squeeze back": the padding is read and dropped.
                out_rec += part[:length]
            if cflag == 0 or cflag == 3:
                break
            out_rec += MAGIC
        return bytes(out_rec)

    def seek(self, pos):
        """RecordIOReader::Seek (used by MXRecordIOReaderSeek)."""
        self._stream.seek(pos)
        self._end_of_stream = False

    def tell(self):
        return self._stream.tell()


# ---------------------------------------------------------------------------
# MXNet: python/mxnet/recordio.py (the C API calls go to the classes above:
# MXRecordIOWriterWriteRecord -> WriteRecord, MXRecordIOWriterTell ->
# writer->Tell(), MXRecordIOReaderReadRecord -> NextRecord,
# MXRecordIOReaderSeek -> Seek)
# ---------------------------------------------------------------------------


class MXRecordIO:
    """mxnet.recordio.MXRecordIO: sequential read ('r') or write ('w')."""

    def __init__(self, uri, flag):
        self.uri = os.fspath(uri)
        self.flag = flag
        self.is_open = False
        self.open()

    def open(self):
        if self.flag == "w":
            self._file = open(self.uri, "wb")
            self.writer = RecordIOWriter(self._file)
            self.writable = True
        elif self.flag == "r":
            self._file = open(self.uri, "rb")
            self.reader = RecordIOReader(self._file)
            self.writable = False
        else:
            raise ValueError("Invalid flag %s" % self.flag)
        self.is_open = True

    def close(self):
        if not self.is_open:
            return
        self._file.close()
        self.is_open = False

    def write(self, buf):
        assert self.writable
        self.writer.write_record(buf)

    def read(self):
        assert not self.writable
        return self.reader.next_record()


class MXIndexedRecordIO(MXRecordIO):
    """mxnet.recordio.MXIndexedRecordIO: random access through a .idx file."""

    def __init__(self, idx_path, uri, flag, key_type=int):
        self.idx_path = os.fspath(idx_path)
        self.idx = {}
        self.keys = []
        self.key_type = key_type
        self.fidx = None
        super().__init__(uri, flag)

    def open(self):
        super().open()
        self.idx = {}
        self.keys = []
        self.fidx = open(self.idx_path, self.flag)
        if not self.writable:
            for line in iter(self.fidx.readline, ""):
                line = line.strip().split("\t")
                key = self.key_type(line[0])
                self.idx[key] = int(line[1])
                self.keys.append(key)

    def close(self):
        if not self.is_open:
            return
        super().close()
        self.fidx.close()

    def seek(self, idx):
        assert not self.writable
        self.reader.seek(self.idx[idx])

    def tell(self):
        assert self.writable
        return self.writer.tell()

    def read_idx(self, idx):
        self.seek(idx)
        return self.read()

    def write_idx(self, idx, buf):
        # The offset recorded is the write head *before* the record, taken
        # with tell(); the key is key_type(idx) printed with %s.
        key = self.key_type(idx)
        pos = self.tell()
        self.write(buf)
        self.fidx.write("%s\t%d\n" % (str(key), pos))
        self.idx[key] = pos
        self.keys.append(key)


IRHeader = collections.namedtuple("HEADER", ["flag", "label", "id", "id2"])
# Native byte order and alignment, as MXNet uses it: 4 + 4 + 8 + 8 = 24 bytes,
# little-endian on every platform MXNet and gpufeed support.
_IR_FORMAT = "IfQQ"
_IR_SIZE = struct.calcsize(_IR_FORMAT)
assert _IR_SIZE == 24


def pack(header, s):
    """mxnet.recordio.pack: IRHeader, then float32 labels when label is an
    array (flag = label count, label field 0), then the bytes."""
    header = IRHeader(*header)
    if isinstance(header.label, numbers.Number):
        header = header._replace(flag=0)
    else:
        label = np.asarray(header.label, dtype=np.float32)
        header = header._replace(flag=label.size, label=0)
        s = label.tobytes() + s  # MXNet: label.tostring(), the same bytes
    s = struct.pack(_IR_FORMAT, *header) + s
    return s


def unpack(s):
    """mxnet.recordio.unpack: returns (IRHeader, image bytes)."""
    header = IRHeader(*struct.unpack(_IR_FORMAT, s[:_IR_SIZE]))
    s = s[_IR_SIZE:]
    if header.flag > 0:
        # MXNet: np.fromstring(s, np.float32, header.flag), the same values.
        header = header._replace(label=np.frombuffer(s, np.float32, header.flag))
        s = s[header.flag * 4:]
    return header, s


# ---------------------------------------------------------------------------
# MXNet: tools/im2rec.py (write path with --pass-through, so that the image
# bytes are stored verbatim instead of being re-encoded by OpenCV)
# ---------------------------------------------------------------------------


def im2rec_write_list(path_out, image_list):
    """im2rec.write_list: "index<TAB>label...<TAB>path" per item, item being
    (index, path, label, ...). MXNet 1.x prints labels with f'{j}' (older
    releases with '%f', which the reader parses the same way)."""
    with open(path_out, "w") as fout:
        for item in image_list:
            line = f"{item[0]}\t"
            for j in item[2:]:
                line += f"{j}\t"
            line += f"{item[1]}\n"
            fout.write(line)


def im2rec_read_list(path_in):
    """im2rec.read_list: yields [index, path, label, ...]."""
    with open(path_in) as fin:
        while True:
            line = fin.readline()
            if not line:
                break
            line = [i.strip() for i in line.strip().split("\t")]
            if len(line) < 3:
                continue
            try:
                item = [int(line[0])] + [line[-1]] + [float(i) for i in line[1:-1]]
            except Exception:  # im2rec prints and skips unparsable lines.
                continue
            yield item


def im2rec(lst_path, root, pack_label=True):
    """im2rec.py <prefix> <root> --pass-through [--pack-label]: writes
    <prefix>.rec and <prefix>.idx beside the .lst (single-threaded branch;
    the multi-process branch reorders results back to list order, so it
    writes the same bytes). Returns (rec_path, idx_path)."""
    lst_path = os.fspath(lst_path)
    prefix = os.path.splitext(lst_path)[0]
    record = MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "w")
    for item in im2rec_read_list(lst_path):
        # image_encode: several labels are packed only with --pack-label;
        # without it im2rec keeps just the first label.
        if len(item) > 3 and pack_label:
            header = IRHeader(0, item[2:], item[0], 0)
        else:
            header = IRHeader(0, item[2], item[0], 0)
        with open(os.path.join(root, item[1]), "rb") as fin:
            img = fin.read()
        s = pack(header, img)
        # write_worker: the key (and, via the header, the id) is the list
        # index item[0], not the position in the list.
        record.write_idx(item[0], s)
    record.close()
    return prefix + ".rec", prefix + ".idx"


# ---------------------------------------------------------------------------
# DALI: readers.mxnet
# ---------------------------------------------------------------------------


def dali_read_index_file(index_path, paths):
    """RecordIOLoader::ReadIndexFile: returns [(offset, size, file_index)].

    DALI reads "index offset" pairs with `fin >> index >> offset` (both
    size_t: any whitespace separates, and the key must be an unsigned
    integer), sorts the offsets, and takes each record's size as the
    distance to the next offset, or to the end of the files for the last.
    """
    file_offsets = [0]
    for path in paths:
        file_offsets.append(os.path.getsize(path) + file_offsets[-1])
    with open(index_path) as fin:
        tokens = fin.read().split()
    temp = []
    for index_text, offset_text in zip(tokens[0::2], tokens[1::2]):
        # operator>> into size_t: a non-numeric key stops the loop; here it
        # fails loudly instead, because it would mean DALI drops records.
        assert index_text.isdigit() and offset_text.isdigit(), (index_text, offset_text)
        temp.append(int(offset_text))
    assert temp, "RecordIO index file doesn't contain any indices"
    temp.sort()
    indices = []
    file_offset_index = 0
    for i in range(len(temp) - 1):
        if temp[i] >= file_offsets[file_offset_index + 1]:
            file_offset_index += 1
        size = temp[i + 1] - temp[i]
        if size:  # DALI skips 0 sized images
            indices.append((temp[i] - file_offsets[file_offset_index], size, file_offset_index))
    size = file_offsets[-1] - temp[-1]
    if size:
        indices.append((temp[-1] - file_offsets[file_offset_index], size, file_offset_index))
    return indices


def dali_parse_record(data):
    """RecordIOParser::ReadSingleImageRecordIO on the `size` bytes that
    ReadSample hands it; returns (labels, image bytes).

    DALI reads the 24-byte IRHeader straight after the first part's header,
    so it needs the first part to hold the whole IRHeader; records whose
    magic occurs inside the IRHeader break DALI (for MXNet's files as much as
    for gpufeed's) and are not given to this function.
    """
    pos = 0

    def read_single(fmt):
        nonlocal pos
        values = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return values

    (magic,) = read_single("<I")
    assert magic == K_MAGIC, "Invalid RecordIO: wrong magic number"
    (length_flag,) = read_single("<I")
    cflag = decode_flag(length_flag)
    clength = decode_length(length_flag)
    hdr_flag, hdr_label, _, _ = read_single("<IfQQ")
    label = [hdr_label] if hdr_flag == 0 else None
    data_size = clength - 24
    label_size = hdr_flag * 4
    image_size = data_size - label_size
    if cflag == 0:
        image = data[pos + label_size:pos + label_size + image_size]
        if hdr_flag > 0:
            label = list(struct.unpack_from(f"<{hdr_flag}f", data, pos))
        assert len(image) == image_size
        return label, image
    assert data_size >= 0, "first part shorter than the IRHeader (DALI cannot parse it)"
    temp_vec = bytearray(data[pos:pos + data_size])
    pos += data_size
    while True:
        # DALI computes this pad as a (wrapping) size_t; it is 0 for every
        # part before the last, which is the only time it is used.
        pad = clength - (((clength + 3) >> 2) << 2)
        pos += pad
        if cflag != 3:
            temp_vec += MAGIC
        else:
            break
        (magic,) = read_single("<I")
        (length_flag,) = read_single("<I")
        cflag = decode_flag(length_flag)
        clength = decode_length(length_flag)
        temp_vec += data[pos:pos + clength]
        pos += clength
    image = bytes(temp_vec[label_size:])
    if hdr_flag > 0:
        label = list(struct.unpack_from(f"<{hdr_flag}f", temp_vec, 0))
    return label, image


# ---------------------------------------------------------------------------
# Helpers and sample sets
# ---------------------------------------------------------------------------

# The float32 whose bits are the magic word: as a label it puts the magic at
# payload offset 4 (single label) or 24 + 4 * k (k-th of several labels).
MAGIC_FLOAT = struct.unpack("<f", MAGIC)[0]
# An im2rec list index whose low 32 bits are the magic: IRHeader.id puts the
# magic at payload offset 8, inside the header.
MAGIC_ID = K_MAGIC

Sample = collections.namedtuple("Sample", ["index", "data", "labels"])


def f32(value):
    """What MXNet stores for a label parsed by im2rec: float() then float32."""
    return float(np.float32(value))


def tricky_samples(first_index=0, seed=0):
    """Samples (list index, image bytes, labels) that cover every framing
    case. Indices are shuffled, as `im2rec --list` writes them, so that a
    reader confusing list index with position is caught."""
    rng = random.Random(seed)
    large = bytearray(rng.randbytes(300_000))
    for offset in (0, 4096, 4100, 150_000, 299_996):  # aligned: each splits
        large[offset:offset + 4] = MAGIC
    large[77_777:77_781] = MAGIC  # unaligned: stays data
    images_and_labels = [
        (b"", [0.0]),                                      # empty image
        (MAGIC, [1.0]),                                    # image is the magic
        (MAGIC + b"start", [2.0]),                         # magic at image start
        (b"abcd" + MAGIC + b"middle", [3.0]),              # aligned, middle
        (b"ab" + MAGIC + b"cd", [4.0]),                    # unaligned: no split
        (b"wxyz" + MAGIC, [5.0]),                          # aligned, at the end
        (b"xyz" + MAGIC, [6.0]),                           # unaligned, at the end
        (MAGIC * 3 + b"12" + MAGIC, [7.0]),                # several, last unaligned
        (MAGIC + MAGIC, [8.0]),                            # adjacent: empty middle part
        (b"multi" + MAGIC + b"...." + MAGIC, [0.1, 2.0, -3.5]),  # multi-label
        (b"", [1.0, 2.0]),                                 # multi-label, empty image
        (b"label is magic", [MAGIC_FLOAT]),                # magic at payload offset 4
        (b"2nd label is magic", [9.0, MAGIC_FLOAT, 0.25]),  # magic at payload offset 28
        (bytes(large), [10.0]),                            # ~300 KB
        (b"\xce" * 1001, [11.0]),                          # magic-like bytes only
    ]
    images_and_labels += [(bytes(range(65, 65 + n)), [20.0 + n]) for n in range(1, 8)]
    indices = list(range(first_index, first_index + len(images_and_labels)))
    rng.shuffle(indices)
    return [Sample(index, data, labels)
            for index, (data, labels) in zip(indices, images_and_labels)]


def write_images(root, samples, prefix="img"):
    """Writes each sample's image to root/<prefix>_<n>.bin; returns the
    relative paths in sample order."""
    os.makedirs(root, exist_ok=True)
    paths = []
    for n, sample in enumerate(samples):
        name = f"{prefix}_{n:03d}.bin"
        with open(os.path.join(root, name), "wb") as f:
            f.write(sample.data)
        paths.append(name)
    return paths


def make_im2rec_dataset(directory, name, samples):
    """Writes images, <name>.lst and, with im2rec, <name>.rec/.idx."""
    paths = write_images(os.path.join(directory, name + "_images"), samples)
    lst = os.path.join(directory, name + ".lst")
    im2rec_write_list(lst, [(s.index, os.path.join(name + "_images", p), *s.labels)
                            for s, p in zip(samples, paths)])
    return im2rec(lst, directory)


def write_gpufeed_list(directory, samples, name="list.txt"):
    """gpufeed's own list format: "path<TAB>label[,label...]", paths relative
    to the list file. repr() keeps every float exact."""
    paths = write_images(os.path.join(directory, "images"), samples)
    list_path = os.path.join(directory, name)
    with open(list_path, "w") as f:
        for sample, path in zip(samples, paths):
            f.write(f"images/{path}\t" + ",".join(repr(float(x)) for x in sample.labels) + "\n")
    return list_path


def read_frames(rec_bytes):
    """Walks the framing; returns [(offset, cflag, length)] for every part."""
    frames, pos = [], 0
    while pos < len(rec_bytes):
        magic, lrec = struct.unpack_from("<II", rec_bytes, pos)
        assert magic == K_MAGIC
        frames.append((pos, decode_flag(lrec), decode_length(lrec)))
        pos += 8 + ((decode_length(lrec) + 3) & ~3)
    return frames


def reference_records(rec_path):
    """[(offset, end, payload)] as dmlc-core's reader finds them."""
    out = []
    with open(rec_path, "rb") as f:
        reader = RecordIOReader(f)
        while True:
            offset = reader.tell()
            payload = reader.next_record()
            if payload is None:
                return out
            out.append((offset, reader.tell(), payload))


def read_text(path):
    with open(path) as f:
        return f.read()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def check_record(record, sample):
    """A gpufeed Record against the sample im2rec (or pack) stored."""
    assert record.data == sample.data, sample.index
    assert record.labels == [f32(x) for x in sample.labels], sample.index
    if len(sample.labels) == 1:
        assert isinstance(record.label, float) and record.label == f32(sample.labels[0])
    else:
        assert record.label is None
    assert record.key == str(sample.index)
    assert record.id == sample.index


# ---------------------------------------------------------------------------
# The reference itself
# ---------------------------------------------------------------------------


def test_reference_writer_frames_as_dmlc_core():
    """Hand-computed framing pins the transliteration down, so that the
    comparisons below test gpufeed and not a drifted reference."""

    def frame(payload):
        stream = io.BytesIO()
        RecordIOWriter(stream).write_record(payload)
        return stream.getvalue()

    def part(cflag, body):
        return MAGIC + struct.pack("<I", (cflag << 29) | len(body)) + body

    assert frame(b"") == part(0, b"")
    assert frame(b"abcde") == part(0, b"abcde") + b"\0\0\0"
    # Aligned magic at 0: an empty first part, the magic dropped.
    assert frame(MAGIC + b"xy") == part(1, b"") + part(3, b"xy") + b"\0\0"
    # Aligned magics in the middle and at the end: a middle part, an empty last part.
    assert frame(b"abcd" + MAGIC + b"efgh" + MAGIC) == (
        part(1, b"abcd") + part(2, b"efgh") + part(3, b""))
    # Unaligned magic, or one in the trailing partial word: plain data.
    assert frame(b"ab" + MAGIC) == part(0, b"ab" + MAGIC) + b"\0\0"
    for payload in (b"", MAGIC, MAGIC + b"xy", b"abcd" + MAGIC + b"efgh" + MAGIC, b"q" * 7):
        assert RecordIOReader(io.BytesIO(frame(payload))).next_record() == payload
    header, image = unpack(pack(IRHeader(0, [1.5, MAGIC_FLOAT], 7, 0), b"img"))
    assert header.flag == 2 and list(header.label) == [1.5, MAGIC_FLOAT] and header.id == 7
    assert image == b"img"


def test_sample_set_exercises_every_continuation_flag(tmp_path):
    """Guards the sample set: if it stopped producing split records the
    compatibility tests below would silently test less."""
    rec, _ = make_im2rec_dataset(str(tmp_path), "train", tricky_samples())
    frames = read_frames(read_bytes(rec))
    assert {cflag for _, cflag, _ in frames} == {0, 1, 2, 3}
    # Magic inside the IRHeader (label bits) and inside the labels.
    assert any(cflag == 1 and length == 4 for _, cflag, length in frames)
    assert any(cflag == 1 and length == 28 for _, cflag, length in frames)


# ---------------------------------------------------------------------------
# 1. Files written by im2rec read back byte-exact
# ---------------------------------------------------------------------------


def test_im2rec_files_read_back_byte_exact(tmp_path):
    samples = tricky_samples()
    # A list index whose low word is the magic splits the record inside the
    # IRHeader's id field (payload offset 8).
    samples.append(Sample(MAGIC_ID, b"id is magic", [12.0]))
    rec, idx = make_im2rec_dataset(str(tmp_path), "train", samples)

    ds = gpufeed.open_dataset(rec)
    assert ds.format == "recordio"
    assert len(ds) == len(samples)
    for position, sample in enumerate(samples):
        check_record(ds[position], sample)
    # gpufeed follows the .idx order, which for im2rec is the list order.
    assert [int(line.split("\t")[0]) for line in read_text(idx).splitlines()] == [
        s.index for s in samples]
    assert gpufeed.verify(rec)["problems"] == []


def test_im2rec_single_label_mode_keeps_first_label(tmp_path):
    """Without --pack-label im2rec stores only the first label (flag 0);
    gpufeed must report exactly that, not the list's other labels."""
    samples = [Sample(3, b"two labels", [4.0, 5.0]), Sample(1, MAGIC + b"x", [6.0, 7.0])]
    paths = write_images(str(tmp_path / "images"), samples)
    lst = str(tmp_path / "val.lst")
    im2rec_write_list(lst, [(s.index, "images/" + p, *s.labels) for s, p in zip(samples, paths)])
    rec, _ = im2rec(lst, str(tmp_path), pack_label=False)
    ds = gpufeed.open_dataset(rec)
    for position, sample in enumerate(samples):
        check_record(ds[position], sample._replace(labels=sample.labels[:1]))


def test_mxnet_one_element_label_array(tmp_path):
    """mx.recordio.pack with a 1-element label array writes flag 1 and the
    label after the header (im2rec never does, user scripts do): one label,
    so gpufeed reports it as `label` too."""
    rec = str(tmp_path / "one.rec")
    writer = MXIndexedRecordIO(str(tmp_path / "one.idx"), rec, "w")
    writer.write_idx(0, pack(IRHeader(0, [2.5], 0, 0), b"data"))
    writer.close()
    record = gpufeed.open_dataset(rec)[0]
    assert (record.data, record.labels, record.label, record.key) == (b"data", [2.5], 2.5, "0")


def test_directory_of_im2rec_shards_is_one_dataset(tmp_path):
    # Created out of name order: gpufeed must sort by file name, not rely on
    # directory order or creation time.
    parts = {}
    for name, first_index in (("train_2", 200), ("train_0", 0), ("train_1", 100)):
        samples = tricky_samples(first_index=first_index, seed=first_index)
        make_im2rec_dataset(str(tmp_path), name, samples)
        parts[name] = samples
    for name in parts:  # keep only .rec/.idx next to each other
        os.remove(tmp_path / (name + ".lst"))

    ds = gpufeed.open_dataset(tmp_path)
    ordered = [s for name in sorted(parts) for s in parts[name]]
    assert len(ds) == len(ordered)
    assert [os.path.basename(s["path"]) for s in ds.shards] == [
        "train_0.rec", "train_1.rec", "train_2.rec"]
    assert [s["first_record"] for s in ds.shards] == [0, len(parts["train_0"]),
                                                      2 * len(parts["train_0"])]
    for position, sample in enumerate(ordered):
        check_record(ds[position], sample)


# ---------------------------------------------------------------------------
# 2. Files gpufeed writes open in MXNet and DALI
# ---------------------------------------------------------------------------


@pytest.fixture
def packed(tmp_path):
    """gpufeed.pack of the tricky samples from a "path<TAB>labels" list."""
    samples = tricky_samples()
    list_path = write_gpufeed_list(str(tmp_path), samples)
    dst = tmp_path / "packed"
    gpufeed.pack(list_path, dst, format="recordio", progress=False)
    # pack numbers samples by list position: that is the id and .idx key.
    samples = [s._replace(index=position) for position, s in enumerate(samples)]
    return samples, str(dst / "part-00000.rec"), str(dst / "part-00000.idx")


def test_packed_records_read_in_mxnet(packed):
    samples, rec, idx = packed
    records = reference_records(rec)
    assert len(records) == len(samples)
    for sample, (_, _, payload) in zip(samples, records):
        header, image = unpack(payload)
        assert image == sample.data
        assert header.id == sample.index and header.id2 == 0
        if len(sample.labels) == 1:
            assert header.flag == 0 and header.label == f32(sample.labels[0])
        else:
            assert header.flag == len(sample.labels)
            assert list(header.label) == [f32(x) for x in sample.labels]

    # MXIndexedRecordIO (what gluon's ImageRecordDataset uses) by key.
    reader = MXIndexedRecordIO(idx, rec, "r")
    assert reader.keys == [s.index for s in samples]
    for sample, (_, _, payload) in zip(samples, records):
        assert reader.read_idx(sample.index) == payload
    reader.close()


def test_packed_index_points_at_each_record(packed):
    samples, rec, idx = packed
    records = reference_records(rec)
    lines = read_text(idx).splitlines()
    assert len(lines) == len(records)
    for sample, line, (offset, _, _) in zip(samples, lines, records):
        key, offset_text = line.split("\t")  # exactly one TAB, as write_idx
        assert (key, int(offset_text)) == (str(sample.index), offset)


def test_packed_files_read_in_dali(packed):
    samples, rec, idx = packed
    records = reference_records(rec)
    data = read_bytes(rec)
    indices = dali_read_index_file(idx, [rec])
    assert len(indices) == len(records)
    for sample, (offset, size, file_index), (ref_offset, ref_end, _) in zip(
            samples, indices, records):
        # Each DALI sample is exactly one whole framed record, padding included.
        assert (offset, offset + size, file_index) == (ref_offset, ref_end, 0)
        blob = data[offset:offset + size]
        first_length = decode_length(struct.unpack_from("<I", blob, 4)[0])
        if decode_flag(struct.unpack_from("<I", blob, 4)[0]) != 0 and first_length < 24:
            continue  # magic inside the IRHeader: DALI's own limitation
        labels, image = dali_parse_record(blob)
        assert image == sample.data
        assert labels == [f32(x) for x in sample.labels]


# ---------------------------------------------------------------------------
# 3. Byte for byte: gpufeed.pack == im2rec
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("list_format", ["gpufeed", "mxnet_lst"])
def test_pack_output_equals_im2rec_output(tmp_path, list_format):
    # gpufeed.pack numbers samples by list position (id and .idx key), so
    # im2rec is given a list whose indices are the positions: then both must
    # write the same bytes. (For a .lst with other indices they differ, see
    # test_lst_parsing_matches_im2rec.)
    samples = [s._replace(index=position) for position, s in enumerate(tricky_samples())]
    im2rec_rec, im2rec_idx = make_im2rec_dataset(str(tmp_path), "train", samples)
    if list_format == "gpufeed":
        list_path = write_gpufeed_list(str(tmp_path), samples)
    else:
        list_path = str(tmp_path / "train.lst")  # the very list im2rec read
    gpufeed.pack(list_path, tmp_path / "packed", progress=False)

    assert read_bytes(tmp_path / "packed" / "part-00000.rec") == read_bytes(im2rec_rec)
    assert read_text(tmp_path / "packed" / "part-00000.idx") == read_text(im2rec_idx)


def test_sharded_pack_concatenates_to_im2rec_output(tmp_path):
    """Shards cut the record stream only between records, ids stay global
    and each .idx counts offsets from the start of its own shard."""
    samples = [s._replace(index=position) for position, s in enumerate(tricky_samples())]
    im2rec_rec, im2rec_idx = make_im2rec_dataset(str(tmp_path), "train", samples)
    summary = gpufeed.pack(tmp_path / "train.lst", tmp_path / "packed", shard_size=64 * 1024,
                           progress=False)
    assert summary.shards >= 2
    shards = [tmp_path / "packed" / f"part-{n:05d}" for n in range(summary.shards)]
    assert b"".join(read_bytes(str(s) + ".rec") for s in shards) == read_bytes(im2rec_rec)
    expected = []
    base = 0
    for shard in shards:
        for line in read_text(str(shard) + ".idx").splitlines():
            key, offset = line.split("\t")
            expected.append(f"{key}\t{int(offset) + base}\n")
        base += os.path.getsize(str(shard) + ".rec")
    assert "".join(expected) == read_text(im2rec_idx)


@pytest.mark.parametrize("case", ["lst_index", "label_rounding", "field_whitespace"])
def test_lst_parsing_matches_im2rec(tmp_path, case):
    """Details of how im2rec reads a .lst (regression tests for divergences
    found while writing this file): each case writes a .lst that im2rec
    packs, and expects gpufeed.pack to write the same .rec and .idx."""
    (tmp_path / "a.jpg").write_bytes(b"AAAA" + MAGIC)
    (tmp_path / "b.jpg").write_bytes(b"BB")
    if case == "lst_index":
        # im2rec --list shuffles, so real .lst indices are not positions.
        text = "17\t3.0\ta.jpg\n5\t1.0\tb.jpg\n"
    elif case == "label_rounding":
        # Just above the midpoint between float32 1.0 and its successor:
        # correctly rounded (strtof) it is 1.0000001, but Python's float()
        # first rounds it to the double midpoint, which float32 rounds to even, 1.0.
        text = "0\t1.000000059604644775390625000000001\ta.jpg\n1\t2.0\tb.jpg\n"
    else:
        text = "0\t 3.0 \ta.jpg\n1\t2.0\tb.jpg\n"
    (tmp_path / "train.lst").write_text(text)
    im2rec_rec, im2rec_idx = im2rec(tmp_path / "train.lst", str(tmp_path))
    try:
        gpufeed.pack(tmp_path / "train.lst", tmp_path / "packed", progress=False)
    except gpufeed.InvalidArgumentError as error:
        pytest.fail(f"gpufeed.pack refused a list im2rec packs: {error}")
    assert read_bytes(tmp_path / "packed" / "part-00000.rec") == read_bytes(im2rec_rec)
    assert read_text(tmp_path / "packed" / "part-00000.idx") == read_text(im2rec_idx)


# ---------------------------------------------------------------------------
# 4. A .rec without .idx
# ---------------------------------------------------------------------------


def test_rec_without_idx_is_scanned_and_write_index_matches_mxnet(tmp_path):
    samples = tricky_samples()
    payloads = [pack(IRHeader(0, s.labels if len(s.labels) > 1 else s.labels[0], s.index, 0),
                     s.data) for s in samples]
    # The same records written twice: plain MXRecordIO (no index) and
    # MXIndexedRecordIO with keys 0..n-1, the reference for write_index.
    rec = str(tmp_path / "plain.rec")
    writer = MXRecordIO(rec, "w")
    for payload in payloads:
        writer.write(payload)
    writer.close()
    indexed = MXIndexedRecordIO(str(tmp_path / "ref.idx"), str(tmp_path / "ref.rec"), "w")
    for position, payload in enumerate(payloads):
        indexed.write_idx(position, payload)
    indexed.close()
    assert read_bytes(rec) == read_bytes(tmp_path / "ref.rec")
    assert not os.path.exists(tmp_path / "plain.idx")

    ds = gpufeed.open_dataset(rec)  # no .idx: gpufeed scans the file
    assert len(ds) == len(samples)
    for position, sample in enumerate(samples):
        record = ds[position]
        # Scanned keys are positions; the id still comes from the header.
        assert record.key == str(position) and record.id == sample.index
        assert record.data == sample.data
        assert record.labels == [f32(x) for x in sample.labels]
    assert not os.path.exists(tmp_path / "plain.idx")  # opening does not write

    assert gpufeed.write_index(rec) == len(samples)
    assert read_text(tmp_path / "plain.idx") == read_text(tmp_path / "ref.idx")
    # An explicit index path, and an empty .rec (MXNet writes an empty .idx).
    assert gpufeed.write_index(rec, tmp_path / "other.idx") == len(samples)
    assert read_text(tmp_path / "other.idx") == read_text(tmp_path / "ref.idx")
    (tmp_path / "empty.rec").write_bytes(b"")
    assert gpufeed.write_index(tmp_path / "empty.rec") == 0
    assert read_text(tmp_path / "empty.idx") == ""


def _detection_rec(tmp_path, objects_per_image):
    """A .rec as MXNet's detection tools write it (im2rec --pack-label with a
    detection .lst, as tools/im2rec.py and gluoncv's VOC/COCO scripts do):
    IRHeader flag = the record's label count, labels
    [header_width=2, object_width=5, (class, xmin, ymin, xmax, ymax) per object]."""
    from PIL import Image
    rec = str(tmp_path / "det.rec")
    writer = MXIndexedRecordIO(str(tmp_path / "det.idx"), rec, "w")
    labels = []
    rng = np.random.default_rng(5)
    for index, count in enumerate(objects_per_image):
        boxes = []
        for _ in range(count):
            x0, y0 = rng.uniform(0, 0.5, 2)
            boxes += [float(rng.integers(0, 20)), x0, y0, x0 + 0.3, y0 + 0.4]
        label = np.array([2, 5] + boxes, dtype=np.float32)
        labels.append(label)
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)).save(buffer, "JPEG")
        writer.write_idx(index, pack(IRHeader(0, label, index, 0), buffer.getvalue()))
    writer.close()
    return rec, labels


def test_variable_length_detection_labels_are_padded_with_their_lengths(tmp_path):
    counts = [1, 3, 0, 7, 2, 5, 4, 1, 6]
    rec, labels = _detection_rec(tmp_path, counts)
    width = 2 + 5 * max(counts)
    loader = gpufeed.DataLoader(rec, batch_size=4, shuffle=False, label_dtype="float32",
                                label_lengths=True, label_count=width,
                                transform=gpufeed.ImageTransform(16, train=False))
    seen = 0
    for images, batch_labels, lengths in loader:
        batch_labels, lengths = np.asarray(batch_labels), np.asarray(lengths)
        assert batch_labels.shape == (len(lengths), width)
        for row, length in zip(range(len(lengths)), lengths):
            want = labels[seen]
            assert length == len(want)
            assert np.array_equal(batch_labels[row, :length], want)  # nothing lost
            assert np.all(batch_labels[row, length:] == -1)          # MXNet's padding
            seen += 1
    assert seen == len(counts)


def test_a_record_longer_than_label_count_raises_naming_it(tmp_path):
    rec, _ = _detection_rec(tmp_path, [1, 2, 9, 1])
    loader = gpufeed.DataLoader(rec, batch_size=4, shuffle=False, label_dtype="float32",
                                label_lengths=True, label_count=2 + 5 * 2,
                                transform=gpufeed.ImageTransform(16, train=False))
    with pytest.raises(ValueError, match=r"sample 2 .*47 labels, more than label_count \(12\)"):
        next(iter(loader))
    with pytest.raises(ValueError, match="label_count"):
        gpufeed.DataLoader(rec, batch_size=4, label_dtype="float32", label_lengths=True)


def test_varying_label_counts_without_label_lengths_are_refused_not_truncated(tmp_path):
    rec, _ = _detection_rec(tmp_path, [1, 2, 3, 1])
    # The width comes from the first record (7 labels); the second has 12.
    loader = gpufeed.DataLoader(rec, batch_size=4, shuffle=False, label_dtype="float32",
                                transform=gpufeed.ImageTransform(16, train=False))
    with pytest.raises(ValueError, match="label_lengths"):
        next(iter(loader))
