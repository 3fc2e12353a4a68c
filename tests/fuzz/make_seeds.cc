// Writes the seed corpora of the fuzz targets, made the way the tests make
// their inputs: real RecordIO framing (magic inside payloads, multi-part
// records, labels), .idx text, manifests, caffe.Datum messages, and real
// JPEG (RGB, grayscale, CMYK, progressive) and PNG images.
//
//   make_seeds OUTPUT_DIR    -> OUTPUT_DIR/<target>/seed-NNN
#include <png.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "format/npy.h"
#include "format/recordio.h"
#include "format/tfrecord.h"
#include "format/irheader.h"
#include "format/tar_index.h"
#include "format/token_corpus.h"
#include "format/token_heads.h"
#include "jpeg_test_util.h"
#include "png_test_util.h"
#include "protobuf_test_util.h"
#include "util/file.h"
#include "util/path.h"
#ifdef GPUFEED_HAVE_TIFF
#include "tiff_test_util.h"
#endif
#ifdef GPUFEED_HAVE_WEBP
#include <webp/encode.h>

#include "webp_test_util.h"
#endif

using namespace gpufeed;

namespace {

std::string output_root;

void Write(const std::string& target, const std::string& bytes) {
  static std::map<std::string, int> counts;
  std::string directory = JoinPath(output_root, target);
  const Status made = CreateDirectories(directory);
  if (!made.ok()) {
    std::fprintf(stderr, "cannot create %s: %s\n", directory.c_str(), made.ToString().c_str());
    std::exit(1);
  }
  char name[32];
  std::snprintf(name, sizeof(name), "seed-%03d", counts[target]++);
  if (!WriteFileAtomically(JoinPath(directory, name), bytes).ok()) {
    std::fprintf(stderr, "cannot write %s\n", JoinPath(directory, name).c_str());
    std::exit(1);
  }
}

std::string Payload(const std::vector<float>& labels, const std::string& data, uint64_t id) {
  SampleToWrite sample;
  sample.index = id;
  sample.labels = labels;
  sample.data = data;
  std::string out;
  AppendIRPayload(sample, &out);
  return out;
}


std::string Png(int width, int height, uint32_t format) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr);
  std::string png(size, '\0');
  png_image_write_to_memory(&image, png.data(), &size, 0, pixels.data(), 0, nullptr);
  png.resize(size);
  return png;
}


// A tar header block (ustar magic, valid checksum) followed by `data`
// padded to whole blocks.
std::string TarBlocks(const std::string& name, char typeflag, const std::string& data,
                      bool gnu = false) {
  std::string block(512, '\0');
  std::memcpy(&block[0], name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&block[100], 8, "%07o", 0644);
  std::snprintf(&block[124], 12, "%011llo", static_cast<unsigned long long>(data.size()));
  std::snprintf(&block[136], 12, "%011o", 1700000000);
  block[156] = typeflag;
  std::memcpy(&block[257], gnu ? "ustar  " : "ustar\0" "00", 8);
  std::memset(&block[148], ' ', 8);
  unsigned sum = 0;
  for (char c : block) sum += static_cast<unsigned char>(c);
  std::snprintf(&block[148], 8, "%06o", sum);
  std::string padded = data;
  padded.resize((data.size() + 511) / 512 * 512, '\0');
  return block + padded;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  output_root = argv[1];
  const uint32_t magic = kRecordIOMagic;
  std::string magic_bytes(reinterpret_cast<const char*>(&magic), 4);

  // RecordIO shards: the tricky payloads of tests/python/conftest.py.
  std::vector<std::string> payloads = {
      Payload({1.0f}, "plain", 0),
      Payload({2.0f}, "", 1),
      Payload({3.0f, 4.0f, 5.0f}, "multi-label", 2),
      Payload({6.0f}, "abc" + magic_bytes + "def" + magic_bytes + magic_bytes, 3),
      Payload({7.0f}, magic_bytes + "x", 4),
      Payload({8.0f}, std::string(1, '\x01'), 5),
      Payload({9.0f}, std::string(7, '\x02'), 6),
  };
  std::string shard;
  std::string index;
  for (size_t i = 0; i < payloads.size(); ++i) {
    index += std::to_string(i) + "\t" + std::to_string(shard.size()) + "\n";
    std::string one;
    EncodeRecordIO(payloads[i], &one);
    Write("recordio", one);
    shard += one;
  }
  Write("recordio", shard);
  Write("recordio", shard.substr(0, shard.size() - 5));  // truncated
  std::string legacy = shard;
  legacy[3] = 0x3E;  // the pre-2016 magic
  Write("recordio", legacy);

  // .idx: 4 bytes of .rec size, then the text.
  uint32_t rec_size = static_cast<uint32_t>(shard.size());
  std::string size_prefix(reinterpret_cast<const char*>(&rec_size), 4);
  Write("idx", size_prefix + index);
  Write("idx", size_prefix + "0\t0\n1 \t 40\textra\r\n\n   \n");
  Write("idx", size_prefix + "key\t99999999999999999999\n");

  // Token headers: a parser byte (1: Megatron .idx, 0: llm.c, 2: a
  // gpufeed.heads), 8 bytes of the data file's size (unused by the heads),
  // then the index, the shard's header or the heads file.
  {
    auto put = [](std::string* out, const void* value, size_t bytes) {
      out->append(static_cast<const char*>(value), bytes);
    };
    std::string idx(kMegatronMagic, sizeof(kMegatronMagic));
    uint64_t version = 1, sequences = 3, entries = 3;
    put(&idx, &version, 8);
    idx.push_back(8);  // uint16
    put(&idx, &sequences, 8);
    put(&idx, &entries, 8);
    int32_t lengths[3] = {5, 0, 7};
    int64_t pointers[3] = {0, 10, 10};
    int64_t documents[3] = {0, 2, 3};
    put(&idx, lengths, sizeof(lengths));
    put(&idx, pointers, sizeof(pointers));
    put(&idx, documents, sizeof(documents));
    uint64_t bin_size = 24;
    std::string prefix(1, '\1');
    put(&prefix, &bin_size, 8);
    Write("token_header", prefix + idx);
    Write("token_header", prefix + idx + std::string(3, '\0'));  // multimodal modes
    int32_t header[256] = {kLlmcMagicUint16, 1, 100};
    uint64_t shard_size = kLlmcHeaderBytes + 200;
    std::string llmc(1, '\0');
    put(&llmc, &shard_size, 8);
    put(&llmc, header, sizeof(header));
    Write("token_header", llmc);
    TokenHeadsLayout layout;
    layout.token_bytes = 2;
    std::vector<std::string> heads;
    for (uint64_t data_end : {1024u + 2000u, 6000u}) {
      TokenHeadsEntry entry{data_end + 10, 0x1234, data_end == 6000 ? 0u : 1024u, data_end};
      TokenHeadsSpan(entry.data_offset, data_end, layout.granule, 2, &entry.first, &entry.count);
      layout.entries.push_back(entry);
      heads.push_back(std::string(entry.count * 2, 'h'));
    }
    std::string heads_seed(1, '\2');
    heads_seed.append(8, '\0');
    Write("token_header", heads_seed + SerializeTokenHeads(&layout, heads));
  }

  // .npy headers as np.save writes them (version 1.0 and 2.0), each with
  // the size of the file they describe.
  {
    auto npy = [](int major, std::string dict, uint64_t data_bytes) {
      const size_t preamble = major == 1 ? 10 : 12;
      while ((preamble + dict.size() + 1) % 64 != 0) dict += ' ';
      dict += '\n';
      std::string bytes("\x93NUMPY", 6);
      bytes += static_cast<char>(major);
      bytes += '\0';
      for (size_t i = 0; i < preamble - 8; ++i) bytes += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
      const uint64_t file_size = bytes.size() + dict.size() + data_bytes;
      std::string seed(reinterpret_cast<const char*>(&file_size), 8);
      return seed + bytes + dict;
    };
    Write("npy_header", npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 13), }", 156));
    Write("npy_header", npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }", 5));
    Write("npy_header", npy(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 26), }", 416));
  }

  // Criteo TSV lines: a Kaggle line, one with missing and negative fields
  // and CRLF, one with every feature missing, and bad ones (41 fields, a
  // non-hex categorical, 17 hex digits, an int64 overflow).
  {
    const std::string kaggle =
        "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t"
        "7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t"
        "37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\t"
        "b1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16";
    Write("criteo_line", kaggle + "\n");
    Write("criteo_line", "1\t-1\t\t+3\t-9223372036854775808\t\t\t\t\t\t\t\t\t9\t"
                         "FFFFFFFFFFFFFFFF\t\t0\tAbC\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"
                         "\t\t\t\t\t\t05db9164\r\n");
    Write("criteo_line", "1" + std::string(39, '\t'));
    Write("criteo_line", kaggle + "\t\n");
    Write("criteo_line", "0\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\tzz" +
                             std::string(25, '\t') + "\n");
    Write("criteo_line", "0" + std::string(14, '\t') + "0123456789abcdef0" + std::string(25, '\t'));
    Write("criteo_line", "99999999999999999999" + std::string(39, '\t'));
  }

  // MDS: a shard of the fuzzer's schema (jpeg, int, str_int, pil, uint8,
  // int16) and an index.json.
  {
    auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
    std::string pil = u32(1) + u32(1) + u32(3) + "RGB" + "\x01\x02\x03";
    std::string sample = u32(4) + u32(2) + u32(static_cast<uint32_t>(pil.size())) + "\xff\xd8xy" +
                         std::string("\x05\0\0\0\0\0\0\0", 8) + "42" + pil + "\x07" +
                         std::string("\xfe\xff", 2);
    uint32_t first = 4 + 4 * 3;
    std::string shard = u32(2) + u32(first) + u32(first + static_cast<uint32_t>(sample.size())) +
                        u32(first + 2 * static_cast<uint32_t>(sample.size())) + sample + sample;
    Write("mds", shard);
    Write("mds", shard.substr(0, shard.size() - 3));  // truncated
    Write("mds", R"({"version": 2, "shards": [{"column_encodings": ["jpeg:90", "int", "ndarray:uint8:2,3"],
      "column_names": ["image", "cls", "nd"], "column_sizes": [null, 8, 6], "compression": "zstd:3",
      "format": "mds", "hashes": ["xxh64"], "raw_data": {"basename": "shard.00000.mds", "bytes": 99,
      "hashes": {"xxh64": "0123456789abcdef"}}, "samples": 2, "size_limit": 67108864,
      "version": 2, "zip_data": {"basename": "shard.00000.mds.zstd", "bytes": 50, "hashes": {}}}]})");
  }

  // Manifests.
  Manifest manifest;
  manifest.records = 3;
  manifest.classes = {"cat", "dog"};
  manifest.integer_labels = true;
  manifest.shards.push_back({"part-00000.rec", "part-00000.idx", 2, 1234, "0123456789abcdef"});
  manifest.shards.push_back({"part-00001.rec", "part-00001.idx", 1, 99, ""});
  Write("manifest", SerializeManifest(manifest));
  manifest.format = DatasetFormat::kLmdb;
  manifest.shards = {{"part-00000", "", 3, 4096, "fedcba9876543210"}};
  Write("manifest", SerializeManifest(manifest));
  Write("manifest", R"({"format":"llmc","format_version":1,"records":3,"shards":[
    {"file":"a.bin","records":3,"tokens":3,"bytes":1030,"data_offset":1024,
     "token_dtype":"uint16","xxh64":"0123456789abcdef"}]})");
  Write("manifest", R"({"format":"megatron","format_version":1,"records":2,"shards":[
    {"file":"c.bin","index":"c.idx","records":2,"tokens":2,"bytes":4,"token_dtype":"uint16",
     "documents":1,"sequences":1,"index_bytes":70,"index_xxh64":"fedcba9876543210",
     "xxh64":"0123456789abcdef"}]})");
  Write("manifest", R"({"format":"recordio","format_version":1,"records":1,
    "shards":[{"file":"../outside.rec","index":"/etc/passwd","records":1}]})");

  // caffe.Datum messages.
  auto field = Tag;
  std::string pixels(2 * 3 * 4, '\x07');
  Write("caffe_datum", field(1, 0) + Varint(2) + field(2, 0) + Varint(3) + field(3, 0) +
                           Varint(4) + field(4, 2) + Varint(pixels.size()) + pixels +
                           field(5, 0) + Varint(17));
  Write("caffe_datum", field(4, 2) + Varint(4) + "\xFF\xD8\xFF\xE0" + field(7, 0) + Varint(1) +
                           field(5, 0) + Varint(static_cast<uint64_t>(int64_t{-3})));
  std::string floats = field(1, 0) + Varint(1) + field(2, 0) + Varint(1) + field(3, 0) + Varint(2);
  floats += field(6, 5) + std::string(4, '\0') + field(6, 5) + std::string(4, '\0');
  Write("caffe_datum", floats);
  Write("caffe_datum", field(1, 0) + Varint(1) + field(2, 0) + Varint(1) + field(3, 0) + Varint(2) +
                           field(6, 2) + Varint(8) + std::string(8, '\0') + field(99, 1) +
                           std::string(8, 'z'));

  // Tars: ustar, a GNU long name, a pax path record, a directory entry,
  // the end marker; and a saved member index.
  std::string end(1024, '\0');
  std::string ustar = TarBlocks("a/x.jpg", '0', "\xFF\xD8jpeg") +
                      TarBlocks("a/x.cls", '0', "3\n") +
                      TarBlocks("a/y.jpg", '0', std::string(700, 'y')) +
                      TarBlocks("a/y.cls", '0', "4");
  Write("tar_index", ustar + end);
  std::string long_name = std::string(150, 'd') + "/k.seg.png";
  Write("tar_index", TarBlocks("dir/", '5', "") +
                         TarBlocks("././@LongLink", 'L', long_name + std::string(1, '\0'), true) +
                         TarBlocks(long_name.substr(0, 100), '0', "png", true) + end);
  Write("tar_index", TarBlocks("PaxHeaders/k", 'x', "27 path=some/long/key.json\n" "10 size=2\n") +
                         TarBlocks("short", '0', "{}") + TarBlocks("README", '0', "no dot") + end);
  Write("tar_index", ustar.substr(0, 1000));  // truncated inside a member
  TarIndex tar_index;
  tar_index.tar_size = 4096;
  tar_index.extensions = {"jpg", "cls"};
  tar_index.members = {{0, 512, 6, 0}, {1, 1536, 2, 1024}};
  tar_index.samples = {{"a/x", 0, 2}};
  std::string encoded;
  EncodeTarIndex(tar_index, &encoded);
  Write("tar_index", encoded);

  // TFRecord files of tf.train.Example records (packed and unpacked lists),
  // a cut one, and a tfrecord2idx index.
  auto entry = [&](const std::string& key, int kind, const std::string& list) {
    std::string feature = field(kind, 2) + Varint(list.size()) + list;
    std::string body = field(1, 2) + Varint(key.size()) + key + field(2, 2) +
                       Varint(feature.size()) + feature;
    return field(1, 2) + Varint(body.size()) + body;
  };
  std::string image = field(1, 2) + Varint(4) + "\xFF\xD8\xFF\xE0";
  std::string packed = field(1, 2) + Varint(2) + Varint(7) + Varint(300 & 0x7f);
  std::string unpacked_floats = field(1, 5) + std::string("\0\0\x80\x3f", 4);
  std::string features = entry("image/encoded", 1, image) + entry("image/class/label", 3, packed) +
                         entry("score", 2, unpacked_floats);
  std::string example = field(1, 2) + Varint(features.size()) + features;
  std::string tfrecords = EncodeTfRecord(example) + EncodeTfRecord("") + EncodeTfRecord(example);
  Write("tfrecord", tfrecords);
  Write("tfrecord", tfrecords.substr(0, tfrecords.size() - 7));
  Write("tfrecord", example);
  Write("tfrecord", "0 40\n40 16\n56 40\n");

  // Images: the last byte of each seed is the fuzzer's control byte.
  std::vector<std::string> images = {
      EncodeJpeg(48, 40, JCS_RGB, 90, 1), EncodeJpeg(33, 17, JCS_GRAYSCALE, 75, 2),
      EncodeJpeg(24, 24, JCS_CMYK, 80, 3), EncodeJpeg(64, 48, JCS_RGB, 50, 4),
      EncodeJpeg(40, 30, JCS_RGB, 90, 7, /*progressive=*/true), Png(20, 12, PNG_FORMAT_RGB),
      Png(9, 9, PNG_FORMAT_GA), Png(16, 8, PNG_FORMAT_RGBA)};
  // The classic API's kinds: 16-bit, sub-byte gray and palettes, tRNS,
  // gAMA, Adam7 interlacing.
  const PngSpec specs[] = {{21, 13, 16, PNG_COLOR_TYPE_RGB_ALPHA, true, 1.0, false},
                           {18, 11, 16, PNG_COLOR_TYPE_GRAY, false, 0, true},
                           {25, 9, 2, PNG_COLOR_TYPE_GRAY, true, 0, false},
                           {19, 17, 4, PNG_COLOR_TYPE_PALETTE, false, 0.45455, true},
                           {33, 12, 8, PNG_COLOR_TYPE_GRAY_ALPHA, true, 0, false}};
  for (const PngSpec& spec : specs) images.push_back(EncodePng(spec, PngRows(spec, spec.width)));
  // Netpbm: raw and plain, maxvals that Pillow keeps, scales and clips.
  std::string ppm = "P6\n# seed\n9 7\n255\n", pgm16 = "P5 6 5 1000\n", pbm = "P4 13 3\n";
  for (int i = 0; i < 9 * 7 * 3; ++i) ppm += static_cast<char>(i * 11);
  for (int i = 0; i < 6 * 5 * 2; ++i) pgm16 += static_cast<char>(i % 2 ? i * 37 : i % 4);
  for (int i = 0; i < 2 * 3; ++i) pbm += static_cast<char>(0xA5 ^ i);
  images.insert(images.end(),
                {ppm, pgm16, pbm, "P3 3 2 15\n1 2 3 4 5 6\n# c\n7 8 9 10 11 12 13\n14 15 0 1 2\n",
                 "P2 4 2 65535\n0 255 256 65535\n1 2 3 4\n", "P1 5 2\n10110\n0 1 0 1 1\n"});
  // BMP: a 4-bit palette (40-byte header), 16-bit 5-6-5 bitfields, 32-bit
  // RGBA bitfields in a v4 header (top-down), as Pillow reads them.
  auto u16 = [](uint32_t v) {
    return std::string{static_cast<char>(v), static_cast<char>(v >> 8)};
  };
  auto u32 = [&](uint32_t v) { return u16(v & 0xFFFF) + u16(v >> 16); };
  auto bmp = [&](int32_t width, int32_t height, int bits, uint32_t compression,
                 const std::string& extra, uint32_t header, size_t data_bytes) {
    std::string info = u32(header) + u32(width) + u32(height) + u16(1) + u16(bits) +
                       u32(compression) + u32(data_bytes) + u32(0) + u32(0) + u32(0) + u32(0);
    if (header > 40) info += extra + std::string(header - 40 - extra.size(), '\0');
    const std::string after = header > 40 ? "" : extra;
    std::string data;
    for (size_t i = 0; i < data_bytes; ++i) data += static_cast<char>(i * 29 + 3);
    const uint32_t offset = 14 + info.size() + after.size();
    return "BM" + u32(offset + data.size()) + u32(0) + u32(offset) + info + after + data;
  };
  std::string palette16;
  for (int i = 0; i < 16; ++i) palette16 += u32(0x010203u * i);
  images.push_back(bmp(7, 5, 4, 0, palette16, 40, 4 * 5));
  images.push_back(bmp(6, 4, 16, 3, u32(0xF800) + u32(0x7E0) + u32(0x1F), 40, 12 * 4));
  images.push_back(bmp(5, -3, 32, 3, u32(0xFF) + u32(0xFF00) + u32(0xFF0000) + u32(0xFF000000),
                       108, 20 * 3));
  // RLE4 and RLE8: runs, an absolute run with its pad, ends of line, a
  // delta escape, an end of bitmap (the file size field is not read).
  images.push_back(bmp(7, 3, 4, 2, palette16, 40, 0) +
                   std::string("\x05\x1F\x02\x33\x00\x00\x00\x05\x12\x34\x50\x00"
                               "\x00\x00\x00\x02\x01\x00\x03\x07\x00\x00\x00\x01",
                               24));
  images.push_back(bmp(6, 2, 8, 1, palette16, 40, 0) +
                   std::string("\x03\x09\x03\x0E\x00\x03\x01\x02\x03\x00\x02\x04"
                               "\x00\x00\x00\x01",
                               16));
#ifdef GPUFEED_HAVE_WEBP
  // WebP: lossy, lossy with an alpha chunk (VP8X), lossless with alpha, and
  // an animation whose first frame lies inside the canvas at an offset.
  {
    const std::vector<uint8_t> rgba = MakePixels(24, 18, 4, 12);
    const std::vector<uint8_t> rgb = MakePixels(24, 18, 3, 13);
    auto encoded = [](size_t (*encode)(const uint8_t*, int, int, int, float, uint8_t**),
                      const std::vector<uint8_t>& pixels, int stride, float quality) {
      uint8_t* bytes = nullptr;
      const size_t size = encode(pixels.data(), 24, 18, stride, quality, &bytes);
      std::string out(reinterpret_cast<const char*>(bytes), size);
      WebPFree(bytes);
      return out;
    };
    images.push_back(encoded(WebPEncodeRGB, rgb, 72, 80));
    images.push_back(encoded(WebPEncodeRGBA, rgba, 96, 70));
    uint8_t* bytes = nullptr;
    const size_t size = WebPEncodeLosslessRGBA(rgba.data(), 24, 18, 96, &bytes);
    const std::string lossless(reinterpret_cast<const char*>(bytes), size);
    WebPFree(bytes);
    images.push_back(lossless);
    images.push_back(WebpAnimation(lossless.substr(12), 24, 18, 40, 30, 6, 4));
  }
#endif
#ifdef GPUFEED_HAVE_TIFF
  // TIFF: LZW strips with a predictor, 16-bit separate planes in Deflate
  // tiles, CCITT G4 bilevel, a 4-bit palette, JPEG YCbCr, and a rotation.
  {
    using testing::TiffSpec;
    const std::vector<uint8_t> rgb = MakePixels(24, 18, 3, 14);
    const std::vector<uint8_t> wide = MakePixels(24, 18, 6, 15);
    TiffSpec strips{24, 18};
    strips.compression = COMPRESSION_LZW;
    images.push_back(testing::WriteTiff(strips, rgb));
    TiffSpec planes{24, 18, 16, 3};
    planes.planar = true;
    planes.tile = 16;
    planes.compression = COMPRESSION_ADOBE_DEFLATE;
    images.push_back(testing::WriteTiff(planes, wide));
    TiffSpec fax{24, 18, 1, 1, PHOTOMETRIC_MINISWHITE};
    fax.compression = COMPRESSION_CCITTFAX4;
    images.push_back(testing::WriteTiff(fax, std::vector<uint8_t>(wide.begin(), wide.begin() + 54)));
    TiffSpec palette{24, 18, 4, 1, PHOTOMETRIC_PALETTE};
    for (int i = 0; i < 48; ++i) palette.colormap.push_back(static_cast<uint16_t>(i * 1361));
    images.push_back(testing::WriteTiff(palette, std::vector<uint8_t>(rgb.begin(), rgb.begin() + 216)));
    TiffSpec jpeg{24, 18, 8, 3, PHOTOMETRIC_YCBCR};
    jpeg.compression = COMPRESSION_JPEG;
    jpeg.rows_per_strip = 16;
    images.push_back(testing::WriteTiff(jpeg, rgb));
    TiffSpec turned = strips;
    turned.orientation = 6;
    images.push_back(testing::WriteTiff(turned, rgb));
  }
#endif
  for (size_t i = 0; i < images.size(); ++i) {
    Write("image", images[i] + std::string(1, static_cast<char>(i * 37)));
  }
  std::string truncated = images[0].substr(0, images[0].size() / 2);
  Write("image", truncated + std::string(1, '\x03'));
  // exact=False (control bit 0x40) on images large enough for DCT scaling:
  // gpufeed's own baseline and progressive entropy decoders.
  Write("image", EncodeJpeg(160, 120, JCS_RGB, 90, 8) + std::string(1, '\x41'));
  Write("image", EncodeJpeg(160, 120, JCS_RGB, 85, 9, /*progressive=*/true) + std::string(1, '\x40'));
  Write("image", EncodeJpeg(120, 96, JCS_GRAYSCALE, 80, 10, /*progressive=*/true) +
                     std::string(1, '\x43'));
  // Restart markers every 3 MCUs: exact=False passes the intervals outside
  // the crop unread, the exact path decodes them inside libjpeg.
  const std::string restarts = CompressJpeg(MakePixels(192, 128, 3, 11), 192, 128, JCS_RGB,
                                            [](jpeg_compress_struct* info) {
                                              jpeg_set_quality(info, 90, TRUE);
                                              info->restart_interval = 3;
                                            });
  Write("image", restarts + std::string(1, '\x41'));
  Write("image", restarts + std::string(1, '\x05'));
  return 0;
}
