// RewriteProgressiveJpegAsBaseline and RewriteJpegWithRestarts
// (include/gpufeed/writer.h): a lossless transcode through libjpeg's
// coefficient API, as `jpegtran [-optimize] -copy all [-restart NB]` does.
#include "gpufeed/writer.h"

#include <setjmp.h>

#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <cstdlib>

#include <jpeglib.h>

namespace gpufeed {
namespace {

// One error manager for both objects: any error longjmps back, any warning
// (damaged data libjpeg reads past) is noted; nothing is printed. What the
// rewrite sets lives here, not in locals, so that it is valid after a
// longjmp.
struct Rewrite {
  jpeg_error_mgr manager;
  jmp_buf jump;
  bool warned = false;
  bool done = false;  // the baseline file is complete
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
};

void RewriteErrorExit(j_common_ptr info) {
  longjmp(reinterpret_cast<Rewrite*>(info->err)->jump, 1);
}

void RewriteEmitMessage(j_common_ptr info, int level) {
  if (level < 0) reinterpret_cast<Rewrite*>(info->err)->warned = true;
}

void RewriteOutputMessage(j_common_ptr) {}

// PIL's (and ImageTransformOptions::max_pixels') default limit: a header
// declaring more (a decompression bomb) is left as it is, for the loader to
// refuse, rather than having its coefficients allocated here.
constexpr uint64_t kMaxRewritePixels = 178956970;

// Smaller JPEGs are written with libjpeg's standard Huffman tables instead
// of tables fitted to each file: the same tables in every such file, so the
// decoders build them once (their table cache) instead of once per decode,
// which on ImageNet-sized photographs cost about 10% of the train
// transform's time, against 4% more bytes (docs/tuning.md, "Restart markers
// at pack time"). Larger ones keep fitted tables: fewer bits to read, and
// one build is little against their decode.
constexpr uint64_t kMinFittedTablePixels = kMinRestartPixels;

bool IsMarker(const jpeg_saved_marker_ptr m, int code, const char* tag, unsigned tag_size) {
  if (m->marker != code || m->data_length < tag_size) return false;
  for (unsigned i = 0; i < tag_size; ++i) {
    if (m->data[i] != static_cast<JOCTET>(tag[i])) return false;
  }
  return true;
}

// Whether the progressive scans sent every bit of every coefficient. A
// file that stops short (its AC scans or last refinements missing: libjpeg
// reads it without a warning) is decoded by libjpeg with block smoothing,
// which estimates the missing coefficients, so the same coefficients written
// as baseline would decode to other pixels.
bool EveryBitSent(const jpeg_decompress_struct& in) {
  for (int c = 0; c < in.num_components; ++c) {
    for (int k = 0; k < DCTSIZE2; ++k) {
      if (in.coef_bits[c][k] != 0) return false;  // -1: never sent; > 0: bits left
    }
  }
  return true;
}

// The markers of `in` (COM and APPn, as saved) into `out`, after the JFIF
// and Adobe markers libjpeg writes itself (those are not written twice).
void CopyMarkers(const jpeg_decompress_struct& in, jpeg_compress_struct* out) {
  for (jpeg_saved_marker_ptr m = in.marker_list; m != nullptr; m = m->next) {
    if (out->write_JFIF_header && IsMarker(m, JPEG_APP0, "JFIF", 5)) continue;
    if (out->write_Adobe_marker && IsMarker(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
    jpeg_write_marker(out, m->marker, m->data, m->data_length);
  }
}

// Whether every coefficient has a code in libjpeg's standard tables: DC
// values within 11 bits' differences, AC values within 10 bits. libjpeg's
// writer does not check this with standard tables (an out-of-range value
// gets a code of no bits: a file that decodes to other pixels); its
// fitted-table pass refuses such a file, which is then left as it is.
bool FitsStandardTables(jpeg_decompress_struct* in, jvirt_barray_ptr* coefficients) {
  for (int c = 0; c < in->num_components; ++c) {
    const jpeg_component_info& component = in->comp_info[c];
    for (JDIMENSION row = 0; row < component.height_in_blocks; ++row) {
      JBLOCKARRAY blocks = (*in->mem->access_virt_barray)(
          reinterpret_cast<j_common_ptr>(in), coefficients[c], row, 1, FALSE);
      for (JDIMENSION b = 0; b < component.width_in_blocks; ++b) {
        const JCOEF* block = blocks[0][b];
        if (block[0] < -1024 || block[0] > 1023) return false;  // |DC difference| < 2048
        for (int k = 1; k < DCTSIZE2; ++k) {
          if (block[k] < -1023 || block[k] > 1023) return false;
        }
      }
    }
  }
  return true;
}

// The output's parameters: the source's (no restart markers), then these.
void SetUpOutput(jpeg_decompress_struct* in, jvirt_barray_ptr* coefficients, uint64_t pixels,
                 unsigned interval, jpeg_compress_struct* out) {
  jpeg_copy_critical_parameters(in, out);
  // libjpeg marks CMYK output with an Adobe marker, which makes readers
  // (PIL, gpufeed) take the samples as inverted: a CMYK file without one
  // must stay without one.
  if (in->jpeg_color_space == JCS_CMYK && !in->saw_Adobe_marker) out->write_Adobe_marker = FALSE;
  // Fitted tables (jpegtran -optimize) where their build per decode is
  // small against the decode (kMinFittedTablePixels), or where standard
  // tables cannot code the coefficients (the fitted pass refuses them).
  out->optimize_coding =
      pixels >= kMinFittedTablePixels || !FitsStandardTables(in, coefficients);
  out->restart_interval = interval;
}

// The transcode behind both rewrites: a baseline JPEG of the same
// coefficients (Huffman tables: kMinFittedTablePixels), and a restart marker every
// `restart_interval` MCUs (0: none) when it has at least `min_pixels`;
// done for a progressive JPEG, and for a baseline one that is to get
// another restart interval.
bool Transcode(std::string* data, int restart_interval, uint64_t min_pixels) {
  if (data->size() < 4 || static_cast<uint8_t>((*data)[0]) != 0xFF ||
      static_cast<uint8_t>((*data)[1]) != 0xD8) {
    return false;
  }
  Rewrite state;
  jpeg_decompress_struct in;
  jpeg_compress_struct out;
  in.err = out.err = jpeg_std_error(&state.manager);
  state.manager.error_exit = RewriteErrorExit;
  state.manager.emit_message = RewriteEmitMessage;
  state.manager.output_message = RewriteOutputMessage;
  jpeg_create_decompress(&in);
  jpeg_create_compress(&out);
  if (setjmp(state.jump) == 0) {
    jpeg_mem_src(&in, reinterpret_cast<const unsigned char*>(data->data()),
                 static_cast<unsigned long>(data->size()));
    jpeg_save_markers(&in, JPEG_COM, 0xFFFF);
    for (int app = 0; app < 16; ++app) jpeg_save_markers(&in, JPEG_APP0 + app, 0xFFFF);
    jpeg_read_header(&in, TRUE);
    const uint64_t pixels = static_cast<uint64_t>(in.image_width) * in.image_height;
    const unsigned interval = pixels >= min_pixels ? static_cast<unsigned>(restart_interval) : 0;
    const bool wanted = in.progressive_mode || (interval > 0 && in.restart_interval != interval);
    if (wanted && !state.warned && pixels <= kMaxRewritePixels) {
      jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&in);
      // coef_bits exists for progressive files only.
      if (!state.warned && (!in.progressive_mode || EveryBitSent(in))) {
        jpeg_mem_dest(&out, &state.buffer, &state.size);
        SetUpOutput(&in, coefficients, pixels, interval, &out);
        jpeg_write_coefficients(&out, coefficients);
        CopyMarkers(in, &out);
        jpeg_finish_compress(&out);
        jpeg_finish_decompress(&in);
        state.done = !state.warned;
      }
    }
  }
  if (state.done) data->assign(reinterpret_cast<const char*>(state.buffer), state.size);
  jpeg_destroy_compress(&out);
  jpeg_destroy_decompress(&in);
  std::free(state.buffer);
  return state.done;
}

}  // namespace

bool RewriteProgressiveJpegAsBaseline(std::string* data) { return Transcode(data, 0, 0); }

bool RewriteJpegWithRestarts(std::string* data, int restart_interval, uint64_t min_pixels) {
  if (restart_interval < 1 || restart_interval > kMaxRestartInterval) return false;
  return Transcode(data, restart_interval, min_pixels);
}

}  // namespace gpufeed
