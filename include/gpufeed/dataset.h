// Dataset: random access to the samples of a packed or unpacked dataset.
//
//   std::unique_ptr<gpufeed::Dataset> dataset;
//   gpufeed::Status s = gpufeed::Dataset::Open("/data/imagenet-train", {}, &dataset);
//   gpufeed::Record record;
//   if (s.ok()) s = dataset->Read(0, &record);
//
// Formats (byte-level spec in docs/formats.md):
//   recordio     MXNet/DALI .rec + .idx shards (one file or a directory of them)
//   lmdb         gpufeed LMDB shards (one environment per shard directory)
//   caffe_lmdb   Caffe's LMDB of caffe.Datum protobufs (read only)
//   imagefolder  root/<class>/<file>, as torchvision.datasets.ImageFolder (read only)
//   megatron     Megatron-LM indexed datasets, PREFIX.bin + PREFIX.idx (read only)
//   llmc         llm.c / modded-nanogpt token shards (256 x int32 header; read only)
//   tokens       headerless token files (nanoGPT's train.bin), dtype named by the user
//   webdataset   WebDataset tar shards (KEY.jpg + KEY.cls members), read through
//                a member index built once per tar
// Token corpora are read as fixed-length windows (see TokenCorpusOptions).
// FormatNames() lists every format of this build.
//
// Thread safety: after Open returns, every const method may be called from
// any number of threads at once; Read is the hot path and takes no
// process-wide lock (a pread on a shared descriptor; LMDB values too, at the
// offsets one walk of data.mdb found at Open). Destroying a Dataset while
// another thread calls Read is undefined. A Dataset may be used in a child
// fork()ed while other threads of the parent read it (torch DataLoader
// workers): docs/architecture.md, "Forks".
#ifndef GPUFEED_DATASET_H_
#define GPUFEED_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/export.h"
#include "gpufeed/status.h"

namespace gpufeed {

enum class DatasetFormat : int {
  kAuto = 0,  // detect from the path (see Dataset::Open)
  kRecordIO = 1,
  kLmdb = 2,
  kCaffeLmdb = 3,
  kImageFolder = 4,
  kWebDataset = 5,
  // Token corpora (src/format/token_*.cc): samples are windows of
  // TokenCorpusOptions::seq_len + 1 tokens of the corpus's token stream.
  kMegatron = 10,
  kLlmc = 11,
  kTokens = 12,
  // Formats added since have values from 20 up, given by their registration
  // (src/format/registry.cc) and not listed here: name them with
  // ParseFormat("name") and print them with FormatName.
};

// The element type of a token file. kAuto: from the file's header (Megatron
// .idx, llm.c magic); headerless files (kTokens) need it named.
enum class TokenDtype : int { kAuto = 0, kUint8, kInt8, kInt16, kUint16, kInt32, kUint32, kInt64 };
// "auto", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64".
GPUFEED_EXPORT const char* TokenDtypeName(TokenDtype dtype);
// The inverse of TokenDtypeName; InvalidArgument listing the accepted names.
GPUFEED_EXPORT Status ParseTokenDtype(const std::string& name, TokenDtype* dtype);
GPUFEED_EXPORT size_t TokenDtypeSize(TokenDtype dtype);  // 0 for kAuto

// How a token corpus is cut into samples. The corpus is the token stream
// of its files in order; sample i is stream[i*seq_len, i*seq_len + seq_len + 1)
// (the input and its next-token targets), for i < (tokens - 1) / seq_len.
struct TokenCorpusOptions {
  // Needed for headerless files; for Megatron and llm.c files a value other
  // than kAuto must match the header's.
  TokenDtype token_dtype = TokenDtype::kAuto;
  uint32_t seq_len = 1024;
};

// What a token corpus holds (Dataset::token_info), for inspect.
struct TokenCorpusInfo {
  TokenDtype token_dtype = TokenDtype::kAuto;
  uint64_t tokens = 0;     // the stream's length
  uint64_t documents = 0;  // Megatron: documents of the .idx; else 0 (not recorded)
  uint64_t sequences = 0;  // Megatron: sequences of the .idx; else 0
  uint32_t seq_len = 0;
  uint64_t windows = 0;    // == Dataset::size()
};

// The format's registered name ("recordio", "webdataset", ...; "auto" for
// kAuto), or "unknown" for a value no format registered.
GPUFEED_EXPORT const char* FormatName(DatasetFormat format);
// The inverse of FormatName; InvalidArgument listing the accepted names.
GPUFEED_EXPORT Status ParseFormat(const std::string& name, DatasetFormat* format);
// Every name ParseFormat accepts: "auto" first, then the registered formats
// in the order format=auto tries them.
GPUFEED_EXPORT std::vector<std::string> FormatNames();

// How WebDataset tar shards are read (DatasetFormat::kWebDataset).
struct WebDatasetOptions {
  // The image is the member with the first of these extensions the sample
  // has (webdataset's "jpg;jpeg;png", and WebP, which many web-scale sets hold).
  std::vector<std::string> image_keys = {"jpg", "jpeg", "png", "webp"};
  // The label member's extension. "json" (or an extension ending in
  // ".json") reads `label_field` of a JSON object, a number; any other is an
  // integer as text (webdataset's "cls").
  std::string label_key = "cls";
  std::string label_field = "label";
  // The tar files to read, in this order (a Python list of paths); empty:
  // those `path` names (a .tar, a directory of .tar files, a brace pattern
  // "shards-{000000..000099}.tar", or a list file with format kWebDataset).
  std::vector<std::string> tars;
  // Where a tar's member index is kept when the tar's directory is not
  // writable. Empty: <cache.cache_dir>/tar-index with a node cache, else
  // $XDG_CACHE_HOME/gpufeed/tar-index (~/.cache/gpufeed/tar-index).
  std::string index_dir;
};

// How a field of a tabular (CTR) row is stored: little-endian, packed.
enum class FieldType : int {
  kBool = 0, kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kFloat32, kFloat64,
};
// "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
// "uint64", "float16", "float32", "float64".
GPUFEED_EXPORT const char* FieldTypeName(FieldType type);
// The inverse of FieldTypeName; InvalidArgument listing the accepted names.
GPUFEED_EXPORT Status ParseFieldType(const std::string& name, FieldType* type);
GPUFEED_EXPORT size_t FieldTypeSize(FieldType type);

// Fixed-size binary records (format "records"): each record is the label,
// then dense_count dense values, then sparse_count sparse ids, packed,
// little-endian, no padding. The default is MLPerf DLRM's 160-byte record.
struct RecordSchema {
  FieldType label = FieldType::kInt32;
  FieldType dense = FieldType::kInt32;
  uint32_t dense_count = 13;
  FieldType sparse = FieldType::kInt32;
  uint32_t sparse_count = 26;
  size_t record_bytes() const {
    return FieldTypeSize(label) + FieldTypeSize(dense) * dense_count +
           FieldTypeSize(sparse) * sparse_count;
  }
};

// Tabular (CTR) datasets: TorchRec's Criteo .npy triplets ("criteo_npy"),
// raw Criteo TSV ("criteo_tsv") and fixed-size records ("records"); see
// docs/tabular.md.
struct TabularDatasetOptions {
  // format "records": the layout of one record.
  RecordSchema record_schema;
  // Consecutive rows are read together in blocks of about this many bytes
  // (one large read each; the units of shuffle="block").
  uint32_t block_bytes = 8u << 20;
  // criteo_tsv: where a file's line index is kept when the file's
  // directory is not writable. Empty: <cache.cache_dir>/line-index with a
  // node cache, else $XDG_CACHE_HOME/gpufeed/line-index.
  std::string index_dir;
};

struct DatasetOptions {
  // kAuto detects the format from the path; any other value skips detection
  // and fails with Corruption or NotFound when the path does not hold it.
  DatasetFormat format = DatasetFormat::kAuto;
  // Datasets come from the internet: a manifest (gpufeed.json) or a shard
  // directory could name files elsewhere on the machine. By default every
  // shard and index must resolve, symlinks followed, to a path inside the
  // dataset directory; an absolute name, a ".." segment or a symlink leading
  // out is refused with PermissionDenied naming the entry. true: trust the
  // dataset and follow such names (shards kept on another mount on purpose).
  // ImageFolder datasets follow symlinks as torchvision does, either way.
  bool allow_external_paths = false;
  // Node-local cache of the shards (include/gpufeed/cache.h). With an empty
  // cache.cache_dir (the default) every read goes to the source.
  CacheOptions cache;
  // Token corpora (kMegatron, kLlmc, kTokens): the token dtype and window.
  TokenCorpusOptions tokens;
  // WebDataset tar shards: which members are the image and the label.
  WebDatasetOptions webdataset;
  // Tabular datasets: the record layout, block size, line-index place.
  TabularDatasetOptions tabular;
};

// What the rows of a tabular dataset hold (Dataset::tabular_info), for
// inspect: each field's stored type and count (criteo_tsv: the types its
// text is parsed into), and how rows are read.
struct TabularInfo {
  FieldType label = FieldType::kInt32;
  FieldType dense = FieldType::kInt32;
  uint32_t dense_count = 0;
  FieldType sparse = FieldType::kInt32;
  uint32_t sparse_count = 0;
  bool text = false;       // rows are Criteo TSV lines
  uint64_t rows = 0;       // == Dataset::size()
  uint64_t blocks = 0;     // read units (and shuffle="block" units)
  uint64_t row_bytes = 0;  // bytes a row takes on disk (text: the mean line)
};

// One sample as stored. Reading into the same Record again reuses its buffers.
struct Record {
  // The sample bytes: an encoded image (JPEG, PNG, ...) or, for raw Caffe
  // records (encoded == false), uint8 pixels laid out as `layout` says.
  std::string data;
  // The labels, always at least one for labelled formats. RecordIO and LMDB
  // records carry float32 labels (MXNet's IRHeader); Caffe and ImageFolder
  // labels are class indices stored as floats.
  std::vector<float> labels;
  // The key: the .idx key (RecordIO), the LMDB key, the path relative to
  // the root (ImageFolder), or the sample key (WebDataset: the member path up
  // to the first dot of its base name).
  std::string key;
  // IRHeader id (RecordIO, LMDB); the sample index for the other formats.
  uint64_t id = 0;
  // The shape of raw pixels in `layout` order: (channels, height, width) for
  // kChw, (height, width, 3) for kHwcRgb; empty for encoded records.
  std::vector<int64_t> shape;
  // False only for raw Caffe Datum pixels.
  bool encoded = true;
  // How raw pixels lie in `data`. kChw: the Datum as stored, planes of
  // (channels, height, width), 3 channels in BGR order (OpenCV's), as Read
  // returns them. kHwcRgb: interleaved (height, width, 3) RGB (a gray plane
  // replicated), as ReadForDecode returns them for the image transform.
  enum class PixelLayout : int { kChw = 0, kHwcRgb = 1 };
  PixelLayout layout = PixelLayout::kChw;
  // Where the bytes came from, for error messages: "<file> at byte offset N"
  // (RecordIO), "<dir>/data.mdb, key K" (LMDB), or the file (ImageFolder).
  std::string source;
};

// What the storage layer under a dataset did since it was opened.
struct StorageStats {
  uint64_t source_opens = 0;  // open() of a source file
  uint64_t source_stats = 0;  // fstat()/statx() of a source file
  uint64_t source_reads = 0;  // reads from the source (dataset reads and cache fills)
  uint64_t source_bytes = 0;  // bytes of those reads
  uint64_t cache_reads = 0;   // reads served from a node-cache copy
  uint64_t open_files = 0;    // source descriptors held now
};

// One file (RecordIO) or environment (LMDB) of a dataset.
struct ShardInfo {
  std::string path;          // absolute path of the .rec file or LMDB directory
  uint64_t first_record = 0;  // global index of its first record
  uint64_t records = 0;
  uint64_t bytes = 0;         // size on disk (.rec file; data.mdb for LMDB)
  std::string xxh64;          // 16 hex digits from the manifest, or empty
};

class GPUFEED_EXPORT Dataset {
 public:
  // Opens the dataset at `path` and stores it in *dataset.
  //
  // With options.format == kAuto the format is detected in this order: a file
  // ending in .rec; a file ending in .tar, or a brace pattern of them
  // ("shards-{000..099}.tar"), or options.webdataset.tars (webdataset); a
  // directory with a gpufeed.json manifest; a directory of .rec files; an
  // LMDB environment (data.mdb) whose values are caffe.Datum protobufs
  // (caffe_lmdb) or gpufeed payloads (lmdb); a directory of LMDB
  // environments; a directory of .tar files (webdataset); a directory of
  // class subdirectories (imagefolder). A compressed tar (.tar.gz, ...) is
  // NotSupported: decompress it. A tar's member index is built on its first
  // open and saved (docs/formats.md section 11).
  //
  // Errors: NotFound (no such path, a shard or .idx named by the manifest is
  // missing), PermissionDenied, Corruption (bad framing, bad manifest, an
  // .idx offset past the end or not at a record boundary), InvalidArgument
  // (an empty dataset, an undetectable format).
  static Status Open(const std::string& path, const DatasetOptions& options,
                     std::unique_ptr<Dataset>* dataset);

  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  virtual ~Dataset();

  // Number of samples.
  virtual uint64_t size() const = 0;

  // Reads sample `index` into *record. OutOfRange if index >= size();
  // Corruption naming the file, the byte offset and the sample when the bytes
  // on disk are malformed; IOError/PermissionDenied from the OS.
  // Safe to call concurrently from many threads (with distinct records).
  virtual Status Read(uint64_t index, Record* record) const = 0;
  // As Read, for the image transform: raw pixels come as (height, width, 3)
  // RGB (Record::PixelLayout::kHwcRgb), converted by the format. Encoded
  // records are as Read gives them. Also NotSupported (naming the sample)
  // for raw pixels that are not 1 or 3 channels. Safe from many threads.
  virtual Status ReadForDecode(uint64_t index, Record* record) const;

  // Counters of the storage layer under the dataset since Open.
  virtual StorageStats storage_stats() const;
  // Token corpora: what the corpus holds; nullptr for the other formats.
  virtual const TokenCorpusInfo* token_info() const { return nullptr; }
  // Tabular datasets: what a row holds; nullptr for the other formats.
  virtual const TabularInfo* tabular_info() const { return nullptr; }

  DatasetFormat format() const { return format_; }
  // The path given to Open, made absolute.
  const std::string& path() const { return path_; }
  // Class names in label order (manifest, ImageFolder), else empty.
  const std::vector<std::string>& classes() const { return classes_; }
  // True when labels are class indices (Caffe, ImageFolder, and packs made
  // from an ImageFolder); false for float labels.
  bool integer_labels() const { return integer_labels_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }

 private:
  // Every Dataset is made by Open: its formats derive from the internal
  // DatasetBase (src/format/dataset_base.h), which carries the read path the
  // Loader uses, so the constructor is for it alone.
  friend class DatasetBase;
  Dataset(DatasetFormat format, std::string path);

  DatasetFormat format_;
  std::string path_;
  std::vector<std::string> classes_;
  bool integer_labels_ = false;
  std::vector<ShardInfo> shards_;
};

// gpufeed cache warm for a dataset opened with `options` (a format that is
// never detected: format "records" with its record_schema, "criteo_tsv"):
// as CacheWarm (include/gpufeed/cache.h), the copies going to options.cache.
GPUFEED_EXPORT Status CacheWarm(const std::string& source, const DatasetOptions& options,
                                const std::function<void(uint64_t, uint64_t)>& progress,
                                CacheWarmSummary* summary);

// Result of Verify: what was checked and every problem found.
struct VerifyReport {
  DatasetFormat format = DatasetFormat::kAuto;
  uint64_t records_checked = 0;
  uint64_t shards_checked = 0;
  uint64_t checksums_checked = 0;  // shards whose xxh64 was compared
  std::vector<std::string> problems;  // each names the file (and offset)
  bool ok() const { return problems.empty(); }
};

// Checks the framing of every record of every shard and each shard's xxh64
// against the manifest. Returns OK when the check ran (the verdict is in
// report->problems); a failed Status when it could not run at all (no such
// path, unknown format).
GPUFEED_EXPORT Status Verify(const std::string& path, const DatasetOptions& options,
                             VerifyReport* report);

// Feature set this library was built with.
struct BuildInfo {
  std::string version;
  bool with_cuda = false;
  bool with_io_uring = false;
  bool with_webp = false;  // built with libwebp: WebP images decode (else NotSupported)
  bool with_tiff = false;  // built with libtiff: TIFF images decode (else NotSupported)
};
GPUFEED_EXPORT BuildInfo GetBuildInfo();

}  // namespace gpufeed

#endif  // GPUFEED_DATASET_H_
