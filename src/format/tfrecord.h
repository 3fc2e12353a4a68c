// TFRecord files of tf.train.Example records (docs/formats.md, "TFRecord"):
// the record framing with its two masked CRC32Cs, the Example protobuf read
// straight from its wire format (no generated code), and DALI's tfrecord2idx
// text index of record offsets.
#ifndef GPUFEED_FORMAT_TFRECORD_H_
#define GPUFEED_FORMAT_TFRECORD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

constexpr DatasetFormat kTfRecordFormat = DatasetFormat{23};

// A record: u64 length (little-endian), masked CRC32C of those 8 bytes,
// `length` bytes of data, masked CRC32C of the data.
constexpr size_t kTfRecordHeaderSize = 12;
constexpr size_t kTfRecordFooterSize = 4;
constexpr size_t kTfRecordFraming = kTfRecordHeaderSize + kTfRecordFooterSize;
// A record longer than this is refused as corrupt (TensorFlow's own limit
// is the protobuf's 2 GiB).
constexpr uint64_t kTfRecordMaxLength = uint64_t{1} << 31;

// CRC32C (Castagnoli), continuing from `crc` (0 for a fresh one).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
// The same by slicing-by-8 tables: what Crc32c uses on CPUs without SSE4.2
// (tests compare the two).
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc = 0);
// TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// Checks the 12 header bytes of the record at `offset` of `path` and gives
// its data length; Corruption naming the file and offset when the length's
// CRC does not match or the length is implausible.
Status ParseTfRecordHeader(const char* header, const std::string& path, uint64_t offset,
                           uint64_t* length);
// Checks a whole record (`size` bytes from its header on: exactly header,
// data and footer) and points *data at its payload.
Status CheckTfRecord(const char* record, size_t size, const std::string& path, uint64_t offset,
                     std::string_view* data);
// NotSupported with a one-line way to decompress when `head` (the file's
// first bytes) starts with a gzip magic or a zlib header.
Status CheckNotCompressedTfRecord(const char* head, size_t size, const std::string& path);
// One framing record to append to a file (tests, fuzz seeds).
std::string EncodeTfRecord(std::string_view data);

// The kind of a Feature: which list it holds.
enum class TfFeatureKind : uint8_t { kNone, kBytes, kFloat, kInt64 };
const char* TfFeatureKindName(TfFeatureKind kind);

// Calls `visit(key, kind, list)` for every entry of the Example's feature
// map, in wire order (a later entry of a key overrides an earlier one);
// `list` is the bytes of the BytesList/FloatList/Int64List message.
// Corruption (what is wrong, no file) on malformed wire bytes.
Status ForEachTfFeature(
    std::string_view example,
    const std::function<Status(std::string_view key, TfFeatureKind kind, std::string_view list)>&
        visit);
// The values of a list message of each kind; packed and unpacked numbers.
Status TfBytesValues(std::string_view list, std::vector<std::string_view>* values);
Status TfFloatValues(std::string_view list, std::vector<float>* values);
Status TfInt64Values(std::string_view list, std::vector<int64_t>* values);

// One record of an index: its first byte and its size with the framing.
struct TfRecordEntry {
  uint64_t offset = 0;
  uint64_t size = 0;
};
// DALI's tfrecord2idx text ("offset size" a line). Corruption naming
// `index_path` and the line when a line is not two numbers.
Status ParseTfRecordIndex(std::string_view text, const std::string& index_path,
                          std::vector<TfRecordEntry>* entries);
void EncodeTfRecordIndex(const std::vector<TfRecordEntry>& entries, std::string* text);
// True when the entries tile [0, file_size) record after record: an index
// that does not is stale (the file was rewritten or appended to).
bool TfRecordIndexMatches(const std::vector<TfRecordEntry>& entries, uint64_t file_size);
// Reads `length` bytes at `offset` into `destination`; *done < length at
// the end of the file.
using TfReadAt = std::function<Status(uint64_t offset, size_t length, char* destination,
                                      size_t* done)>;
// One sequential pass over a file of `file_size` bytes: every record's
// framing and both CRCs checked; Corruption naming `path` and the offset.
Status ScanTfRecords(const std::string& path, uint64_t file_size, const TfReadAt& read,
                     std::vector<TfRecordEntry>* entries);

// The TFRecord files a source names (a file, a directory's .tfrecord /
// .tfrec / .tfrecords files in natural order, a glob, a list file, or
// options.webdataset.tars).
bool IsTfRecordFileName(const std::string& name);
bool IsGlobPattern(const std::string& path);
Status ResolveTfRecordFiles(const std::string& path, const DatasetOptions& options,
                            std::vector<std::string>* files);
Status OpenTfRecordDataset(const std::string& path, const std::vector<std::string>& files,
                           const DatasetOptions& options, const std::shared_ptr<Store>& store,
                           std::unique_ptr<Dataset>* dataset);
// The index beside `file` (DALI's name) and its fallback place.
std::string TfRecordIndexPathBeside(const std::string& file);
std::string TfRecordIndexFallback(const std::string& file, const DatasetOptions& options);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TFRECORD_H_
