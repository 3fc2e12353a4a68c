// JPEGs for the entropy decoders' tests: libjpeg encodings with every
// sampling, restart markers, optimized and crossed tables and long codes
// (Encodings), and hand-made grayscale files with chosen tables and
// bitstreams (BitWriter, CraftGrayWithTables).
#ifndef GPUFEED_TESTS_JPEG_ENCODINGS_UTIL_H_
#define GPUFEED_TESTS_JPEG_ENCODINGS_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "jpeg_test_util.h"

namespace gpufeed {

struct Encoding {
  int width = 64, height = 48;
  int components = 3;  // 1: grayscale
  int h = 2, v = 2;    // luma sampling
  int chroma_h = 1, chroma_v = 1;
  int quality = 90;
  int restart_interval = 0;  // MCUs
  bool optimize = false;
  bool progressive = false;
  bool custom_script = false;  // progressive with split bands and more refinements
  // Tables: Y DC 0 / AC 0, Cb DC 1 / AC 1, Cr DC 1 / AC 1 (libjpeg's); when
  // crossed, Cb DC 1 / AC 0 (Y's AC table) and Cr DC 0 / AC 1.
  bool crossed_tables = false;
  double noise = 10;  // amplitude of the pixel noise (more: longer codes)
  uint32_t seed = 1;
};

inline std::string Describe(const Encoding& e) {
  return std::to_string(e.width) + "x" + std::to_string(e.height) + " c" +
         std::to_string(e.components) + " " + std::to_string(e.h) + "x" + std::to_string(e.v) +
         " q" + std::to_string(e.quality) + " ri" + std::to_string(e.restart_interval) +
         (e.optimize ? " optimized" : "") + (e.progressive ? " progressive" : "") +
         (e.crossed_tables ? " crossed tables" : "");
}

inline std::string Encode(const Encoding& e) {
  std::mt19937 generator(e.seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(e.width) * e.height * e.components);
  for (int y = 0; y < e.height; ++y) {
    for (int x = 0; x < e.width; ++x) {
      for (int c = 0; c < e.components; ++c) {
        const double noise = e.noise * (static_cast<double>(generator() % 2001) / 1000.0 - 1.0);
        const double value = 128 + 60 * std::sin(x * 0.11 + c) + 40 * std::cos(y * 0.07 * (c + 1)) + noise;
        pixels[(static_cast<size_t>(y) * e.width + x) * e.components + c] =
            static_cast<uint8_t>(std::min(255.0, std::max(0.0, value)));
      }
    }
  }
  // Bands split at 2, 9 and 24, three refinements of the luma, DC refined
  // twice; chroma AC in one first scan and one refinement.
  static jpeg_scan_info script[] = {
      {3, {0, 1, 2}, 0, 0, 0, 2}, {1, {0}, 1, 2, 0, 3}, {1, {0}, 3, 9, 0, 3},
      {1, {0}, 10, 24, 0, 2},     {1, {0}, 25, 63, 0, 1}, {1, {1}, 1, 63, 0, 1},
      {1, {2}, 1, 63, 0, 1},      {3, {0, 1, 2}, 0, 0, 2, 1}, {1, {0}, 1, 9, 3, 2},
      {1, {0}, 1, 24, 2, 1},      {3, {0, 1, 2}, 0, 0, 1, 0}, {1, {0}, 1, 63, 1, 0},
      {1, {1}, 1, 63, 1, 0},      {1, {2}, 1, 63, 1, 0}};
  return CompressJpeg(pixels, e.width, e.height, e.components == 1 ? JCS_GRAYSCALE : JCS_RGB,
                      [&](jpeg_compress_struct* info) {
                        jpeg_set_quality(info, e.quality, TRUE);
                        info->comp_info[0].h_samp_factor = e.h;
                        info->comp_info[0].v_samp_factor = e.v;
                        for (int c = 1; c < e.components; ++c) {
                          info->comp_info[c].h_samp_factor = e.chroma_h;
                          info->comp_info[c].v_samp_factor = e.chroma_v;
                        }
                        info->restart_interval = e.restart_interval;
                        if (e.crossed_tables && e.components == 3) {
                          info->comp_info[1].dc_tbl_no = 1;
                          info->comp_info[1].ac_tbl_no = 0;
                          info->comp_info[2].dc_tbl_no = 0;
                          info->comp_info[2].ac_tbl_no = 1;
                        }
                        info->optimize_coding = e.optimize ? TRUE : FALSE;
                        if (e.progressive) jpeg_simple_progression(info);
                        if (e.custom_script) {
                          info->scan_info = script;
                          info->num_scans = sizeof(script) / sizeof(script[0]);
                        }
                      });
}

inline const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }
// The restart intervals of `jpeg`'s scan: the offsets of their first data
// bytes and of the markers that end them (the last ends at EOI).
inline std::vector<std::pair<size_t, size_t>> Intervals(const std::string& jpeg, size_t start) {
  std::vector<std::pair<size_t, size_t>> intervals;
  size_t from = start;
  for (size_t at = start; at + 1 < jpeg.size(); ++at) {
    const uint8_t marker = static_cast<uint8_t>(jpeg[at + 1]);
    if (static_cast<uint8_t>(jpeg[at]) != 0xFF || marker == 0 || marker == 0xFF) continue;
    intervals.emplace_back(from, at);
    if (marker == 0xD9) break;
    from = at + 2;
    ++at;
  }
  return intervals;
}

inline std::vector<Encoding> Encodings() {
  std::vector<Encoding> all;
  Encoding e;
  all.push_back(e);  // 4:2:0, q90
  e.h = 1, e.v = 1, e.quality = 50;
  all.push_back(e);  // 4:4:4
  e.h = 2, e.v = 1, e.quality = 95;
  all.push_back(e);  // 4:2:2
  e.h = 1, e.v = 2, e.quality = 75;
  all.push_back(e);  // 4:4:0
  e = Encoding();
  e.components = 1, e.h = 1, e.v = 1, e.width = 37, e.height = 23;
  all.push_back(e);  // grayscale, odd size
  e = Encoding();
  e.width = 71, e.height = 45, e.restart_interval = 1;
  all.push_back(e);  // a restart marker after every MCU (more than 8: the numbers wrap)
  e.restart_interval = 3, e.optimize = true;
  all.push_back(e);
  e = Encoding();
  e.quality = 100, e.noise = 120, e.optimize = true, e.seed = 7;
  all.push_back(e);  // large values, long codes (past the lookup: the slow path)
  e.h = 1, e.v = 1, e.quality = 98, e.restart_interval = 5, e.components = 3;
  all.push_back(e);
  e = Encoding();
  e.crossed_tables = true, e.optimize = true, e.noise = 40;
  all.push_back(e);  // a chroma component sharing luma's AC table, each table fitted to its data
  return all;
}
// Writes bits MSB first with 0xFF stuffing, as an encoder does.
class BitWriter {
 public:
  void Put(uint32_t value, int bits) {
    for (int i = bits - 1; i >= 0; --i) {
      byte_ = static_cast<uint8_t>(byte_ << 1 | ((value >> i) & 1));
      if (++count_ == 8) {
        out_.push_back(static_cast<char>(byte_));
        if (byte_ == 0xFF) out_.push_back(0);
        byte_ = 0;
        count_ = 0;
      }
    }
  }
  // Pads the last byte with ones, as before a marker.
  void Align() {
    while (count_ != 0) Put(1, 1);
  }
  // Appends bytes as they are (a marker).
  void Raw(const std::string& bytes) { out_ += bytes; }
  std::string Finish() {
    Align();
    return out_;
  }

 private:
  std::string out_;
  uint8_t byte_ = 0;
  int count_ = 0;
};

inline std::string Segment(int marker, const std::string& payload) {
  const size_t length = payload.size() + 2;
  return std::string{'\xFF', static_cast<char>(marker), static_cast<char>(length >> 8),
                     static_cast<char>(length & 0xFF)} + payload;
}
// A grayscale baseline JPEG of w x h with the given DHT contents (counts
// per length at [1..16] and symbols in code order), restart interval and
// data.
inline std::string CraftGrayWithTables(int w, int h, const std::vector<int>& dc_counts,
                                const std::vector<int>& dc_symbols,
                                const std::vector<int>& ac_counts,
                                const std::vector<int>& ac_symbols, int restart_interval,
                                const std::string& data) {
  auto dht = [](int table_class, const std::vector<int>& counts, const std::vector<int>& symbols) {
    std::string payload(1, static_cast<char>(table_class << 4));
    for (int length = 1; length <= 16; ++length) payload += static_cast<char>(counts[length]);
    for (int symbol : symbols) payload += static_cast<char>(symbol);
    return Segment(0xC4, payload);
  };
  std::string out = "\xFF\xD8";
  out += Segment(0xDB, std::string(1, '\0') + std::string(64, '\1'));
  out += Segment(0xC0, std::string{8, static_cast<char>(h >> 8), static_cast<char>(h & 0xFF),
                                   static_cast<char>(w >> 8), static_cast<char>(w & 0xFF), 1, 1,
                                   0x11, 0});
  out += dht(0, dc_counts, dc_symbols) + dht(1, ac_counts, ac_symbols);
  if (restart_interval > 0) {
    out += Segment(0xDD, std::string{static_cast<char>(restart_interval >> 8),
                                     static_cast<char>(restart_interval & 0xFF)});
  }
  out += Segment(0xDA, std::string{1, 1, 0, 0, 63, 0});
  return out + data + "\xFF\xD9";
}


// Starts block `block` of a hand-made grayscale stream: the restart marker
// due before it (every `restart` blocks, 0: none; *marker counts them),
// then a random DC difference of size 0-2 (codes 0, 10 and 110: a DC table
// of one code each of lengths 1-3 for symbols 0, 1, 2).
inline void PutMarkerAndRandomDc(std::mt19937* g, int block, int restart, int* marker,
                                 BitWriter* bits) {
  if (restart > 0 && block > 0 && block % restart == 0) {
    bits->Align();
    bits->Raw(std::string{'\xFF', static_cast<char>(0xD0 + *marker)});
    *marker = (*marker + 1) & 7;
  }
  const int dc_size = static_cast<int>((*g)() % 3);
  bits->Put((1u << dc_size) - 1 << 1, dc_size + 1);
  if (dc_size > 0) bits->Put((*g)() & ((1u << dc_size) - 1), dc_size);
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_JPEG_ENCODINGS_UTIL_H_
