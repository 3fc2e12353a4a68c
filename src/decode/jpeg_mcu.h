// gpufeed's baseline entropy decoder in place of libjpeg's, inside a libjpeg
// decompression: the exact path's Huffman decoding, with libjpeg doing the
// rest (inverse DCT, upsampling, color conversion) as PIL's decode does.
//
// Huffman decoding is lossless: the coefficients handed to libjpeg are the
// ones its own decoder would produce, so the pixels are libjpeg's, byte for
// byte. What it saves: each code is read with its magnitude bits in one
// table lookup (jpeg_entropy.h), the MCUs libjpeg only reads past (rows
// above a crop: jpeg_skip_scanlines) go through the multi-symbol skip
// tables, and so do the MCUs of a row outside the crop's columns, which
// libjpeg decodes and then drops. In a file with restart markers, an
// interval none of whose MCUs libjpeg needs is not read at all: the decoder
// goes on from the marker after it (libjpeg's own decoder would decode it,
// warn about damage there and drop it; the pixels do not depend on it).
//
// How it attaches: libjpeg calls its entropy module's decode_mcu once per
// MCU, in the order of the data (a sequential scan cannot be read any other
// way); InstallMcuHook replaces that one function pointer after
// jpeg_start_decompress. The module's layout (EntropyModule in jpeg_mcu.cc)
// is libjpeg's `struct jpeg_entropy_decoder` from jpegint.h, the same in
// IJG libjpeg 6b-9 and libjpeg-turbo 1.x-3.x. Only single-scan baseline
// images are hooked (8-bit, Huffman, every component in the one scan:
// libjpeg then decodes in one pass, each MCU once).
//
// When the data is not what this decoder follows exactly as libjpeg reads it
// (a bad code, a restart marker out of place, data that ends early or
// within libjpeg's read-ahead of the bits used, anything but EOI after the
// last MCU), the hook stops the decode through `fail`
// (which must not return; JpegDecoder longjmps out and decodes the image
// again with libjpeg's own decoder, whose warnings and errors then apply).
//
// Thread safety: an McuHook belongs to one decompression at a time.
#ifndef GPUFEED_DECODE_JPEG_MCU_H_
#define GPUFEED_DECODE_JPEG_MCU_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE declared first

#include <jpeglib.h>

#include "decode/jpeg_bits.h"
#include "decode/jpeg_blocks.h"
#include "decode/jpeg_entropy.h"

namespace gpufeed {
namespace jpeg_entropy {

class McuHook {
 public:
  // Called when the data is not followed; must not return (it longjmps).
  using Fail = void (*)(j_decompress_ptr info);

  // Replaces libjpeg's decode_mcu for this decompression when the image is
  // one this decoder reads (see the header); false, with libjpeg untouched,
  // otherwise. MCU columns [first_col, end_col) of each row are stored, the
  // others only read past: the columns libjpeg keeps after
  // jpeg_crop_scanline (all of them without a crop). Uses info->client_data.
  // REQUIRES: jpeg_start_decompress done, no scanline read or skipped yet;
  // info->src a memory source whose data ends at `end`.
  bool Install(jpeg_decompress_struct* info, const uint8_t* end, int first_col, int end_col,
               Fail fail);

  // Whether Install attached to the current decompression (until the next
  // Install). libjpeg's source was not advanced past the scan: finish the
  // decompression with jpeg_abort_decompress, not jpeg_finish_decompress.
  bool installed() const { return installed_; }
  // After the last MCU libjpeg asked for: whether the MCUs it asked for and
  // the hook left unread (an interval it needed nothing of, so far) are in
  // the file as libjpeg would have read them: their interval is followed by
  // its restart marker. False: the file may end within them, where
  // libjpeg's own decoder would warn (an error here); decode with libjpeg.
  bool DeferredDataWhole() const;
  // Forgets the last Install: for a decompression that goes without it.
  void Detach() { installed_ = false; }

 private:
  static boolean DecodeMcu(j_decompress_ptr info, JBLOCKROW* blocks);
  bool Next(JBLOCKROW* blocks);
  bool Deferred(bool store);
  bool ReadDeferred(Bits* b);

  bool installed_ = false;
  Fail fail_ = nullptr;
  Scan scan_;
  Source source_{};
  Bits bits_{0, 0};
  int dc_[kMaxComponents] = {};
  RestartCount restart_;
  int column_ = 0;  // of the next MCU in its row
  // MCUs of the current restart interval libjpeg did not need and that are
  // not read yet (from its start, where source_ stands): read past only when
  // the interval turns out to hold a needed MCU, else passed to its marker.
  int deferred_ = 0;
  long total_ = 0;  // MCUs in the scan
  // The 0xFF of the file's last marker (before the scan's data: none).
  const uint8_t* last_marker_ = nullptr;
  int first_col_ = 0, end_col_ = 0;
  long remaining_ = 0;  // MCUs left in the scan
};

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_MCU_H_
