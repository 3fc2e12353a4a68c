// TIFF decoded to 8-bit RGB with the bytes of PIL's Image.open(f).convert("RGB")
// (Pillow 9.4 decompresses TIFF through libtiff and unpacks the samples with
// its own rules; gpufeed links the same libtiff and follows those rules):
//   - the file's first image (IFD), as Pillow opens it;
//   - the pixel layouts of Pillow's OPEN_INFO table (photometric
//     interpretation, sample format, fill order, bits and extra samples), each
//     converted as Image.convert("RGB") converts Pillow's mode for it:
//       bilevel 0 / 255, min-is-white inverted;
//       gray of 2, 4 or 8 bits scaled to 0..255, min-is-white inverted;
//       unsigned 12- and 16-bit gray (Pillow's I;16, min-is-white not
//       inverted) clipped at 255; signed 16/32-bit and unsigned 32-bit gray (its I)
//       clipped to 0..255; 32-bit float gray (its F) truncated into 0..255;
//       gray + alpha: the gray;
//       RGB of 8 or 16 bits (the high byte), extra samples and alpha dropped;
//       premultiplied (associated) alpha divided out first, as Pillow's
//       RGBa unpackers do;
//       palette images through the colormap's high bytes;
//       CMYK of 8 or 16 bits, as Pillow converts CMYK;
//       YCbCr compressed with JPEG converted by libjpeg (libtiff's
//       JPEGCOLORMODE_RGB, which Pillow asks for);
//   - every compression Pillow names (none, CCITT, LZW, JPEG, Deflate,
//     PackBits, LZMA, Zstd, WebP, ...) as far as libtiff was built with it,
//     predictors, strips or tiles, contiguous or separate planes;
//   - the Orientation tag applied after decoding, as Pillow's load applies
//     it (the header's width and height are the rotated image's);
//   - only the strips or tiles that hold the crop are decompressed, and
//     those of its last row of blocks only down to its last row.
// Tags libtiff fills in, drops or repairs (Photometric, ExtraSamples,
// Orientation, ColorMap) are read as the file holds them, as Pillow reads
// them: a missing Photometric is min-is-white, a palette's colormap of any
// length gives count / 3 colours (grey past them), four RGB samples in
// separate planes without ExtraSamples are premultiplied when compressed.
// Where Pillow fails or misreads (its own unpacking of uncompressed files:
// fill order 2 of min-is-white 8-bit gray and of 1-4-bit palettes has no
// unpacker; separate planes are unpacked with one letter of its rawmode
// each, so premultiplied alpha fails, 16-bit planes are read as 8-bit, and
// one-sample files lose their inversion or bit order; compressed separate
// planes of 5 or 6 samples fail), gpufeed gives what libtiff reads, which is
// what Pillow gives for the same pixels stored otherwise. A palette file
// below 8 bits whose colormap libtiff rejects fails to open (Pillow reads
// it); tiles of more than 4x the image's bytes (and 64 MiB) are refused.
// Refused with NotSupported, naming the layout: what Pillow does not open
// ("unknown pixel mode"), CIE L*a*b*, YCbCr not compressed with (new-style)
// JPEG or in separate planes, old-style JPEG. Bad or cut data is
// Corruption naming the strip or tile, its byte offset and libtiff's message.
// Built without libtiff (GPUFEED_HAVE_TIFF unset), every TIFF file is
// NotSupported, naming the missing library.
#ifndef GPUFEED_DECODE_TIFF_DECODER_H_
#define GPUFEED_DECODE_TIFF_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {

// "II*\0" or "MM\0*" (classic TIFF), "II+\0" or "MM\0+" (BigTIFF), and the
// two swapped headers PIL also accepts (libtiff then refuses them).
bool LooksLikeTiff(const uint8_t* data, size_t size);

// The image's width and height after its Orientation tag. NotSupported for a
// layout gpufeed does not decode, Corruption when the header is bad.
Status ReadTiffSize(const uint8_t* data, size_t size, int* width, int* height);

// Decodes `crop` (clamped to the image, in oriented coordinates) into *out
// as RGB. Images larger than max_pixels are refused before any pixel buffer
// is allocated.
Status DecodeTiff(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                  uint64_t max_pixels);

}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_TIFF_DECODER_H_
