// gpufeed_transform_bench: the per-image cost of the decode pool's transform
// on one thread, against a plain full decode of the same files measured in
// the same run (the "decode ceiling": a plain libjpeg-turbo decode as PIL's,
// a decompressor per image, the whole image to RGB, no crop, no resize;
// gpufeed's own entropy decoder, which the transforms use, plays no part).
//
//   gpufeed_transform_bench PATH [--rounds 5] [--size 224] [--path auto|scalar|sse41|avx2]
//                           [--highres] [--only CASE]
//
// Each round times, over every record (read into memory first): the full
// decode, then the train transform (RandomResizedCrop + flip, NCHW) in uint8
// and float32, then the eval transform in uint8 (--highres: train and eval in
// uint8, each exact and with exact=false, the DCT-scaled fast path, and a
// full decode at 1/8 scale, about the entropy decoding alone: the floor of any
// DCT-domain shortcut; for benchmarks/highres_compare.py). Rounds interleave the cases
// so a busy machine slows them alike, after one untimed pass of every case
// (buffers grown, tables built, code warm); the figures are medians over rounds
// of this thread's CPU time (not wall time, which counts waits for a core).
// Prints one RESULT line per case with µs per image, its breakdown (decode:
// header + region decode; resample: both passes; write: layout, flip, dtype),
// the rate relative to the full decode, and each round's µs per image in
// round order (round r draws the same crops for every case: epoch r, so two
// cases compare best round by round):
//   RESULT case=train_uint8 us_per_image=... decode_us=... resample_us=... write_us=...
//          vs_full_decode=1.23 path=avx2 images=... rounds=... rounds_us=a,b,...
#include <setjmp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "decode/image_decoder.h"
#include "decode/jpeg_decoder.h"
#include "decode/resample.h"
#include "decode/transform.h"
#include "gpufeed/dataset.h"

using namespace gpufeed;

namespace {

struct Case {
  std::string name;
  bool full_decode = false;
  bool train = true;
  OutputDtype dtype = OutputDtype::kUint8;
  bool exact = true;
  int min_side = 0;  // full_decode: DCT-scaled while both sides stay >= this
};

struct Figures {
  std::vector<double> total, decode, resample, write;
};

// CPU time of this thread, not wall time: the machine may be shared with
// other work, and this counts only what decoding costs this thread.
double ThreadCpuMicroseconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

struct PlainError {
  jpeg_error_mgr manager;
  jmp_buf jump;
};

void PlainErrorExit(j_common_ptr info) {
  longjmp(reinterpret_cast<PlainError*>(info->err)->jump, 1);
}

// The reference decode: libjpeg-turbo alone, with its defaults as PIL uses
// them (ISLOW IDCT, fancy upsampling), to RGB (CMYK sources to CMYK), at
// the largest DCT scale of 1/8, 1/4, 1/2 that keeps both sides at least
// min_side (min_side 0: full size). False for data libjpeg refuses.
// Nothing with a destructor lives between setjmp and the library calls.
bool PlainDecode(const uint8_t* data, size_t size, int min_side, std::vector<uint8_t>* pixels) {
  jpeg_decompress_struct info;
  PlainError error;
  info.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = PlainErrorExit;
  if (setjmp(error.jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  info.dct_method = JDCT_ISLOW;
  const CropRect whole{0, 0, static_cast<int>(info.image_width),
                       static_cast<int>(info.image_height)};
  info.scale_num = 1;
  info.scale_denom = static_cast<unsigned>(DctDenominator(whole, min_side, min_side));
  jpeg_start_decompress(&info);
  const size_t row_bytes = static_cast<size_t>(info.output_width) * info.output_components;
  pixels->resize(row_bytes * info.output_height);
  while (info.output_scanline < info.output_height) {
    JSAMPROW rows[16];
    const JDIMENSION wanted = std::min<JDIMENSION>(16, info.output_height - info.output_scanline);
    for (JDIMENSION i = 0; i < wanted; ++i) {
      rows[i] = pixels->data() + (info.output_scanline + i) * row_bytes;
    }
    if (jpeg_read_scanlines(&info, rows, wanted) == 0) break;
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

// What one pass of a case works with: the records, the output buffer and
// the scratch kept between calls, as a decode thread keeps them.
struct Bench {
  const std::vector<std::string>* records;
  int size;
  std::vector<uint8_t> output;
  Image image;
  TransformScratch scratch;
};

// Times case `c` over every record with the crops of `epoch`, adding the
// per-image figures to *f (null: an untimed warm-up pass). False after
// printing a record's error.
bool TimeCase(const Case& c, uint64_t epoch, Bench* bench, Figures* f) {
  TransformStageTimes times;
  bench->scratch.times = &times;
  ImageTransformOptions options;
  options.size = bench->size;
  options.train = c.train;
  options.dtype = c.dtype;
  options.exact = c.exact;
  const std::vector<std::string>& records = *bench->records;
  const double started = ThreadCpuMicroseconds();
  for (size_t i = 0; i < records.size(); ++i) {
    const auto* data = reinterpret_cast<const uint8_t*>(records[i].data());
    Status status =
        c.full_decode
            ? (PlainDecode(data, records[i].size(), c.min_side, &bench->image.pixels)
                   ? Status::OK()
                   : Status::Corruption("libjpeg refused the image"))
            : TransformImage(data, records[i].size(), options, 0, epoch, i,
                             bench->output.data(), &bench->scratch);
    if (!status.ok()) {
      std::fprintf(stderr, "record %zu: %s\n", i, status.ToString().c_str());
      bench->scratch.times = nullptr;  // `times` ends here
      return false;
    }
  }
  const double us = ThreadCpuMicroseconds() - started;
  bench->scratch.times = nullptr;
  if (f == nullptr) return true;
  const double n = static_cast<double>(records.size());
  f->total.push_back(us / n);
  f->decode.push_back(times.decode_ns / 1e3 / n);
  f->resample.push_back(times.resample_ns / 1e3 / n);
  f->write.push_back(times.write_ns / 1e3 / n);
  return true;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One RESULT line per case that ran (see the header).
void PrintResults(const std::vector<Case>& cases, std::map<std::string, Figures>* figures,
                  size_t images, int rounds) {
  const double full =
      (*figures)["full_decode"].total.empty() ? 0 : Median((*figures)["full_decode"].total);
  std::printf("%zu images, %d rounds, one thread, resample path %s; medians of thread CPU us per image\n",
              images, rounds, ResamplePathName(ActiveResamplePath()));
  for (const Case& c : cases) {
    const Figures& f = (*figures)[c.name];
    if (f.total.empty()) continue;  // not run (--only)
    double total = Median(f.total);
    std::string per_round;
    for (double us : f.total) {
      char value[32];
      std::snprintf(value, sizeof(value), "%s%.1f", per_round.empty() ? "" : ",", us);
      per_round += value;
    }
    std::printf("RESULT case=%s us_per_image=%.1f decode_us=%.1f resample_us=%.1f write_us=%.1f "
                "vs_full_decode=%.3f path=%s images=%zu rounds=%d rounds_us=%s\n",
                c.name.c_str(), total, Median(f.decode), Median(f.resample), Median(f.write),
                full / total, ResamplePathName(ActiveResamplePath()), images, rounds,
                per_round.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH [--rounds R] [--size S] [--path auto|scalar|sse41|avx2] [--highres] [--only CASE]\n",
                 argv[0]);
    return 2;
  }
  int rounds = 5, size = 224;
  std::string path_name = "auto";
  bool highres = false;
  std::string only;  // run this case alone (for profiling)
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (flag == "--rounds") rounds = std::max(1, std::atoi(value().c_str()));
    else if (flag == "--size") size = std::atoi(value().c_str());
    else if (flag == "--path") path_name = value();
    else if (flag == "--highres") highres = true;
    else if (flag == "--only") only = value();
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (path_name != "auto") {
    ResamplePath path;
    if (!ParseResamplePath(path_name, &path) || !SetResamplePathForTesting(path)) {
      std::fprintf(stderr, "resample path %s is unknown or not supported by this CPU\n",
                   path_name.c_str());
      return 2;
    }
  }
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(argv[1], {}, &dataset);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<std::string> records(dataset->size());
  Record record;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    status = dataset->Read(i, &record);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    records[i] = record.data;
  }
  const std::vector<Case> cases =
      highres ? std::vector<Case>{{"full_decode", true},
                                  {"full_decode_1_8", true, true, OutputDtype::kUint8, true, 1},
                                  {"train_uint8", false, true, OutputDtype::kUint8},
                                  {"train_uint8_fast", false, true, OutputDtype::kUint8, false},
                                  {"eval_uint8", false, false, OutputDtype::kUint8},
                                  {"eval_uint8_fast", false, false, OutputDtype::kUint8, false}}
              : std::vector<Case>{{"full_decode", true},
                                  {"train_uint8", false, true, OutputDtype::kUint8},
                                  {"train_float32", false, true, OutputDtype::kFloat32},
                                  {"eval_uint8", false, false, OutputDtype::kUint8}};
  std::map<std::string, Figures> figures;
  Bench bench{&records, size, std::vector<uint8_t>(static_cast<size_t>(size) * size * 3 * 4), {},
              {}};
  // One untimed pass first (crops of an epoch no round uses): the buffers
  // each case grows to, the tables and the code are warm for every round.
  for (const Case& c : cases) {
    if ((only.empty() || only == c.name) &&
        !TimeCase(c, static_cast<uint64_t>(rounds), &bench, nullptr)) {
      return 1;
    }
  }
  for (int round = 0; round < rounds; ++round) {
    for (const Case& c : cases) {
      if (!only.empty() && only != c.name) continue;
      if (!TimeCase(c, static_cast<uint64_t>(round), &bench, &figures[c.name])) return 1;
    }
  }
  PrintResults(cases, &figures, records.size(), rounds);
  return 0;
}
