// Tabular (CTR) datasets: every sample is one row of a label, dense
// features and sparse (categorical) ids. The formats (criteo_npy,
// criteo_tsv, records) differ only in where a row's bytes lie and how they
// are spelled; each describes its rows once, at open, as a TabularTable,
// and derives its dataset from TabularDatasetBase, which serves Read,
// BlockSizes and the node cache's expectations from that table. The
// loader's tabular kind (src/pipeline/tabular_samples.cc) reads whole
// blocks of rows through the read engine from the same table.
//
//   binary rows (criteo_npy, records): field f of row r of a segment lies
//     in part p = schema.f.part at
//       parts[p].data_offset + (r - first_row) * parts[p].stride + schema.f.offset
//     of file parts[p].file: count values of type schema.f.type, packed.
//   text rows (criteo_tsv): row r is the line at byte line_offsets[r -
//     first_row] of file parts[0].file, up to line_offsets[r - first_row + 1]
//     (its '\n' included; a last line may have none); ParseCriteoLine
//     (format/criteo_line.h) reads it.
//
// Thread safety: a TabularTable is immutable once its dataset is shared.
#ifndef GPUFEED_FORMAT_TABULAR_H_
#define GPUFEED_FORMAT_TABULAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/dataset_base.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

// One field of a row: `count` values of `type` (text rows: the type the
// parsed values take), at `offset` within the row's bytes of part `part`.
struct TabularField {
  FieldType type = FieldType::kInt32;
  uint32_t count = 0;
  int part = 0;
  uint64_t offset = 0;
};

struct TabularSchema {
  TabularField label;   // count 1
  TabularField dense;   // Criteo: 13
  TabularField sparse;  // Criteo: 26
  bool text = false;    // rows are Criteo TSV lines
};

// A file's share of a segment's rows (binary: a column file of a triplet,
// or the records file; text: the TSV file, stride 0).
struct TabularPart {
  size_t file = 0;           // in TabularTable::files
  uint64_t data_offset = 0;  // where row first_row starts (an .npy header's end)
  uint64_t stride = 0;       // bytes per row in this part
};

// Consecutive rows stored together (one triplet stem, one records file,
// one TSV file).
struct TabularSegment {
  uint64_t first_row = 0;
  uint64_t rows = 0;
  std::vector<TabularPart> parts;
  // text: rows + 1 byte offsets of the lines (the last: the end of the
  // last line) in parts[0]'s file; shared with the line index.
  std::shared_ptr<const std::vector<uint64_t>> line_offsets;
};

struct TabularTable {
  TabularSchema schema;
  std::vector<std::shared_ptr<const StoreFile>> files;
  std::vector<TabularSegment> segments;  // in row order, none empty
  uint64_t rows = 0;
};

// Rows read together: a block never spans two segments.
struct TabularBlock {
  size_t segment = 0;
  uint64_t first_row = 0;
  uint64_t rows = 0;
};

// The blocks of `table`, in row order: each segment cut into runs of rows
// of about `block_bytes` (at least one row each).
std::vector<TabularBlock> CutTabularBlocks(const TabularTable& table, uint64_t block_bytes);

// Bytes of one row over all parts (text: the segment's mean line length).
uint64_t TabularRowBytes(const TabularTable& table, const TabularSegment& segment);

// A byte range of a table's file.
struct TabularRange {
  size_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// The ranges holding rows [first, first + count) of `segment`, one per part
// (binary), or the lines' span (text). REQUIRES: the rows lie in it.
void TabularRanges(const TabularSegment& segment, uint64_t first, uint64_t count,
                   std::vector<TabularRange>* ranges);

// The table as the loader's tabular kind sees a dataset.
class TabularRows {
 public:
  virtual ~TabularRows() = default;
  virtual const TabularTable& table() const = 0;
  // The blocks BlockSizes reports, in row order.
  virtual const std::vector<TabularBlock>& blocks() const = 0;
  // The block holding `row` (binary search over blocks()).
  size_t BlockOf(uint64_t row) const;
  // The segment of table() holding `row` (binary search).
  size_t SegmentOf(uint64_t row) const;
};

// `dataset` as tabular rows, or null (look it up once: a dynamic_cast).
const TabularRows* AsTabularRows(const Dataset& dataset);

// The base of the tabular formats. Read gives a row as a Record: `data` the
// row's stored bytes (binary: label, dense, sparse packed in that order,
// each as stored; text: the line without its newline), labels[0] the label
// as a float, key "<file>:<row>", source naming the file and the byte offset
// (text: the line number).
class TabularDatasetBase : public DatasetBase, public TabularRows {
 public:
  uint64_t size() const override { return table_.rows; }
  Status Read(uint64_t index, Record* record) const override;
  std::vector<uint64_t> BlockSizes() const override;
  void ExpectReads(const std::vector<uint64_t>& samples) const override;
  const TabularTable& table() const override { return table_; }
  const std::vector<TabularBlock>& blocks() const override { return blocks_; }
  const TabularInfo* tabular_info() const override { return &info_; }


 protected:
  // The table must describe at least one row. Sets shards() (one per
  // segment: its first part's file, first row, rows and bytes).
  TabularDatasetBase(DatasetFormat format, std::string path, std::shared_ptr<Store> store,
                     TabularTable table, uint64_t block_bytes);
  const StoreFile* FileOf(uint64_t index) const override;

 private:
  TabularTable table_;
  std::vector<TabularBlock> blocks_;
  TabularInfo info_;
};

// Where a field's value `i` of `row` lies in `bytes`, a read of
// TabularRanges(segment, first, count) (the parts' bytes laid one after
// another, in part order). REQUIRES: binary rows.
inline const char* TabularFieldAt(const TabularField& field, const TabularSegment& segment,
                                  const char* const* part_bytes, uint64_t row_in_range) {
  return part_bytes[field.part] + row_in_range * segment.parts[field.part].stride + field.offset;
}

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TABULAR_H_
