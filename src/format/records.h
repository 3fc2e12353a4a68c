// Fixed-size binary records (format "records"): every file holds records of
// RecordSchema::record_bytes() bytes, each the label, then dense_count dense
// values, then sparse_count sparse ids, packed little-endian with no header
// and no padding (MLPerf DLRM's 160-byte records by default). A dataset is a
// file, or a directory of such files read in natural name order, or a
// directory whose gpufeed.json lists them. Raw binary has no signature: the
// format is never detected, only opened when format="records" is asked for.
#ifndef GPUFEED_FORMAT_RECORDS_H_
#define GPUFEED_FORMAT_RECORDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"
#include "util/path.h"

namespace gpufeed {

// The format's value (docs/extending.md: unnamed in include/gpufeed/dataset.h).
constexpr DatasetFormat kRecordsFormat = DatasetFormat{21};

// InvalidArgument unless every field of `schema` has a known FieldType (the
// record is then at least one byte: the label).
Status CheckRecordSchema(const RecordSchema& schema);

// "int32 label, 13 x int32 dense, 26 x int32 sparse = 160 bytes".
std::string DescribeRecordSchema(const RecordSchema& schema);

// True for a directory entry that is no records file: hidden (".name"), or
// named *.json (gpufeed.json, metadata), *.idx, *.md or *.txt.
bool IsSkippedRecordsName(const std::string& name);

// The records files of `directory`: its regular files but the skipped
// names, in natural order, each resolved inside it (ResolveInsideDirectory).
// NotFound when there is none.
Status ListRecordsFiles(const std::string& directory, bool allow_external_paths,
                        std::vector<std::string>* files);

// One file of a records dataset, and what a manifest says of it.
struct RecordsFileSpec {
  std::string path;               // absolute
  std::string xxh64;              // from a manifest, or empty
  uint64_t expected_bytes = 0;    // from a manifest; 0: not recorded
  int64_t expected_records = -1;  // from a manifest; -1: not recorded
  std::string described_by;       // the manifest's path, for errors
};

// Opens `files` (in this order) as the records dataset at `path`, with
// options.tabular's schema and block size. Every file is opened and its
// size checked now: Corruption naming the file, its size and the record
// size when the size is no multiple of it (or differs from the manifest);
// an empty file adds no rows; InvalidArgument when no file has a row.
Status OpenRecordsDataset(const std::string& path, const std::vector<RecordsFileSpec>& files,
                          const DatasetOptions& options, const std::shared_ptr<Store>& store,
                          std::unique_ptr<Dataset>* dataset);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_RECORDS_H_
