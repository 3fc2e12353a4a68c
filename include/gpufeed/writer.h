// Writing datasets: ShardWriter appends samples to one shard; Pack turns an
// ImageFolder or a list file into a directory of shards plus a manifest.
//
//   gpufeed::PackOptions options;
//   options.format = gpufeed::ShardFormat::kRecordIO;
//   gpufeed::PackSummary summary;
//   gpufeed::Status s = gpufeed::Pack("/data/train", "/lustre/train-packed", options, &summary);
//
// Thread safety: a ShardWriter is used by one thread at a time. Pack uses its
// own worker threads and may be called from any thread.
#ifndef GPUFEED_WRITER_H_
#define GPUFEED_WRITER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/export.h"
#include "gpufeed/status.h"

namespace gpufeed {

enum class ShardFormat : int {
  kRecordIO = 1,  // part-NNNNN.rec + part-NNNNN.idx (MXNet/DALI compatible)
  kLmdb = 2,      // part-NNNNN/ (data.mdb, lock.mdb)
  kWebDataset = 3,  // part-NNNNN.tar: KEY.jpg (the image) + KEY.cls (the label)
};

// The formats Pack writes, by name ("recordio", "lmdb", "webdataset"), in
// the format registry's order.
GPUFEED_EXPORT std::vector<std::string> ShardFormatNames();
GPUFEED_EXPORT const char* ShardFormatName(ShardFormat format);  // "unknown" for no writer's
// The inverse of ShardFormatName; InvalidArgument listing ShardFormatNames.
GPUFEED_EXPORT Status ParseShardFormat(const std::string& name, ShardFormat* format);

// A sample to append. The payload written is MXNet's IRHeader (flag, label,
// id, id2), then the labels when there are several, then `data`.
struct SampleToWrite {
  uint64_t index = 0;         // global sample index: the LMDB key
  // IRHeader id and RecordIO .idx key, as im2rec writes them (the .lst index);
  // unset means `index`.
  std::optional<uint64_t> id;
  std::vector<float> labels;  // one label: IRHeader.label; several: flag = count
  std::string_view data;      // the sample bytes; not owned, must outlive Append
  uint64_t id2 = 0;
};

class GPUFEED_EXPORT ShardWriter {
 public:
  // Creates a shard at `path`: a .rec file (its .idx written beside it,
  // same name with .idx) or an LMDB directory. AlreadyExists when it exists.
  static Status Open(const std::string& path, ShardFormat format,
                     std::unique_ptr<ShardWriter>* writer);

  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  virtual ~ShardWriter();

  // Appends one sample. InvalidArgument for a sample of 2^29 bytes or more in
  // RecordIO (the format's length field has 29 bits) or for LMDB indices that
  // do not increase.
  virtual Status Append(const SampleToWrite& sample) = 0;

  // Flushes, fsyncs and closes the shard; the writer is unusable afterwards.
  // The destructor of an unfinished writer closes without syncing.
  virtual Status Finish() = 0;

  uint64_t records() const { return records_; }
  // Bytes written so far (payload plus framing; for LMDB the payload bytes).
  uint64_t bytes() const { return bytes_; }

 protected:
  ShardWriter() = default;
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
};

struct PackOptions {
  ShardFormat format = ShardFormat::kRecordIO;
  // A new shard starts when the current one holds at least this many bytes.
  // Large shards mean fewer files for the metadata server; a few hundred MB
  // keep enough shards to spread over ranks and to shuffle by block.
  uint64_t shard_size = 256ull << 20;
  // Threads reading source files (0: one per core the process may use).
  // Sources on Lustre/GPFS benefit from more than the core count.
  int workers = 0;
  // Replace the shards and manifest of a non-empty destination; without it a
  // non-empty destination is refused with AlreadyExists.
  bool overwrite = false;
  // Called from the calling thread after each record with (done, total).
  std::function<void(uint64_t, uint64_t)> progress;
  // When set and it becomes true, Pack stops and returns Cancelled. Like any
  // failed Pack, it removes the shards it wrote and writes no manifest.
  const std::atomic<bool>* cancel = nullptr;
  // A list file's paths must resolve (symlinks followed) inside the list
  // file's directory: an absolute path, a ".." segment or a symlink leading
  // out is refused with PermissionDenied naming the line, so that a list
  // file from elsewhere cannot pack /etc/shadow or ~/.ssh into a dataset.
  // true: accept them (a list of absolute paths written by you).
  bool allow_external_paths = false;
  // Called on the reading threads with each source file's bytes before they
  // are written; returns whether it changed them (counted in
  // PackSummary::rewritten). Must be thread-safe. Unset: the bytes are
  // written as read. E.g. RewriteProgressiveJpegAsBaseline, below.
  std::function<bool(std::string* data)> rewrite;
};

struct PackSummary {
  uint64_t records = 0;
  uint64_t shards = 0;
  uint64_t bytes = 0;  // bytes of the shard files written
  uint64_t rewritten = 0;  // records PackOptions::rewrite changed
  double seconds = 0;
};

// Packs `source` into shards under `destination` and writes gpufeed.json.
// `source` is an ImageFolder directory (labels = class indices, the class
// names recorded) or a list file of lines "path<TAB>label[,label...]"
// (relative paths resolved against the list file's directory, and kept
// inside it unless options.allow_external_paths; lines starting
// with '#' and blank lines ignored; MXNet .lst lines "index<TAB>label...<TAB>path"
// are accepted too). Records keep the source order. On failure the shards
// written so far are removed and no manifest is written.
GPUFEED_EXPORT Status Pack(const std::string& source, const std::string& destination,
                           const PackOptions& options, PackSummary* summary);

// A lossless rewrite for PackOptions::rewrite: when `data` is a progressive
// JPEG that libjpeg reads without a warning, replaces it with a baseline
// (sequential, Huffman-coded) JPEG of the same coefficients, quantization
// tables and sampling, and its COM and APPn markers (EXIF, ICC profile, ...)
// copied, as `jpegtran -copy all` writes it: with Huffman tables fitted to
// the image (`-optimize`) from kMinRestartPixels pixels on, libjpeg's
// standard tables below (the same in every such file, so the decoders build
// them once, not once per decode: about 10% of the train transform's time
// on ImageNet-sized photographs, for 4% more bytes than fitted tables).
// Decoded, it gives the same pixels, byte for byte; it
// decodes about 3x faster (libjpeg's progressive decoding keeps every
// coefficient of the image and passes over it once per scan; gpufeed's
// exact path reads baseline data with its own entropy decoder). Returns
// whether it rewrote. Left as is, false returned: not a JPEG; baseline
// already; anything libjpeg errors or warns about (damaged, truncated,
// 12-bit); a progressive file whose scans stop short (libjpeg decodes it
// with block smoothing); more pixels than the decoders' default max_pixels
// (178,956,970). Thread-safe.
GPUFEED_EXPORT bool RewriteProgressiveJpegAsBaseline(std::string* data);

// The largest restart interval a JPEG can declare (DRI's 16 bits).
constexpr int kMaxRestartInterval = 65535;
// RewriteJpegWithRestarts' default: smaller JPEGs get no restart markers
// (on ImageNet-sized photographs they save nothing, and with fitted Huffman
// tables, different in every file, they cost the decoders a table build
// per image: docs/tuning.md, "Restart markers at pack time"). Both rewrites
// write fitted tables from this size on, standard ones below.
constexpr uint64_t kMinRestartPixels = 1000000;

// A lossless rewrite for PackOptions::rewrite that also places restart
// markers: a JPEG of at least `min_pixels` pixels (progressive or baseline)
// that libjpeg reads without a warning is replaced with a baseline JPEG of
// the same coefficients, as RewriteProgressiveJpegAsBaseline writes it,
// with a restart marker every `restart_interval` MCUs (16: every 256 pixels
// of a 4:2:0 image's width); a smaller one is rewritten as
// RewriteProgressiveJpegAsBaseline does, without markers. It decodes to the
// same pixels, byte for byte, and is usually smaller (Huffman tables
// fitted to the image); a restart marker lets gpufeed's decoders pass over the
// intervals a crop does not touch without decoding them, both the exact
// path and exact=False (docs/tuning.md, "Restart markers at pack time"). Returns whether
// it rewrote; left as is, false returned: a baseline JPEG with this
// interval already, or under min_pixels; restart_interval outside
// 1..kMaxRestartInterval; and what RewriteProgressiveJpegAsBaseline leaves.
// Thread-safe.
GPUFEED_EXPORT bool RewriteJpegWithRestarts(std::string* data, int restart_interval,
                                            uint64_t min_pixels = kMinRestartPixels);

// Scans a .rec file and writes its index ("key<TAB>offset" lines, key = the
// record's position) to `idx_path`, replacing it atomically.
GPUFEED_EXPORT Status WriteRecordIOIndex(const std::string& rec_path, const std::string& idx_path,
                                         uint64_t* records);

// Scans the headers of a WebDataset .tar and writes its member index to
// `index_path` (empty: "<tar>.gpufeed-index" beside it, where Dataset::Open
// looks first), replacing it atomically; *samples gets the sample count.
// Corruption naming the tar, member and byte offset for a bad tar;
// NotSupported for a compressed tar (decompress it first).
GPUFEED_EXPORT Status WriteTarIndex(const std::string& tar_path, const std::string& index_path,
                                    uint64_t* samples);

// Builds the line index of a raw Criteo TSV file (format "criteo_tsv"), or
// of each file of a directory of them, and saves it where Dataset::Open
// looks first: beside the file ("<file>.gpufeed-lines"), else, when that
// directory is not writable, in options.tabular.index_dir (or the cache
// directories DatasetOptions::tabular names). An index already there is
// replaced. *written gets, per file in the dataset's order, the file, its
// line count and where its index went.
struct LineIndexWritten {
  std::string file;
  uint64_t lines = 0;
  std::string index_path;
};
GPUFEED_EXPORT Status WriteLineIndex(const std::string& path, const DatasetOptions& options,
                                     std::vector<LineIndexWritten>* written);

// The token corpus formats ("megatron", "llmc", "tokens"): WriteTokenManifest's
// options.format is one of them or kAuto.
GPUFEED_EXPORT std::vector<std::string> TokenFormatNames();

// Describes the token corpus at `path` in a gpufeed.json (its path goes to
// *manifest_path, the token count to *tokens): per file its name, bytes,
// data offset, token count, token dtype and xxh64, and for a Megatron pair
// its .idx's bytes, xxh64, documents and sequences. `path` is a directory of
// llm.c shards, of Megatron pairs or (options.format kTokens, with
// options.tokens.token_dtype) of headerless files, or one file or Megatron
// prefix of such a directory: the manifest always describes the whole
// directory and is written in it, replacing one there atomically. Every
// file is read once (the checksums, and the heads: gpufeed.heads, the token
// at every 512-byte boundary of each file's token data, written beside the
// manifest by rename before it; global shuffle then reads a window whose
// last token starts a boundary without it; docs/tokens.md, "Heads").
// Dataset::Open then opens the corpus from the manifest without touching a
// file until it is read (docs/tokens.md, "Lazy opens"). Errors as
// Dataset::Open's for the corpus; InvalidArgument when `path` is not a
// token corpus.
GPUFEED_EXPORT Status WriteTokenManifest(const std::string& path, const DatasetOptions& options,
                                         std::string* manifest_path, uint64_t* tokens);

}  // namespace gpufeed

#endif  // GPUFEED_WRITER_H_
