// The tabular kind: sample i of a tabular dataset (format/tabular.h) is a
// row; its dense values go into the data row (float32, (dense count)), its
// sparse ids into the first extra tensor ((sparse count) of sparse_dtype),
// its label into the label row (float32 scalar), as TabularConvert makes
// them; with LoaderOptions::embeddings, the tables' rows of its ids into
// the extra tensors after that (tabular_embeddings.h), looked up once the
// rows of a run are written.
//
// Rows are a few hundred bytes, so the kind writes whole runs: with
// shuffle="block" or none, the blocks the run's rows lie in come from a
// TabularReader (one large read per block part, shared by every batch that
// takes rows from it); with shuffle=True or "node" (rows from anywhere)
// each row is read on its own through the store.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "format/criteo_line.h"
#include "format/tabular.h"
#include "format/tabular_field.h"
#include "pipeline/host_stats.h"
#include "pipeline/sample_kind.h"
#include "pipeline/tabular_convert.h"
#include "pipeline/tabular_embeddings.h"
#include "pipeline/tabular_reader.h"

namespace gpufeed {
namespace {

// Samples a worker claims at once, whatever the batch size: a large batch
// is written by every worker at once, a part each (the consumer gets it
// after a run per worker, not after one worker wrote it all, and each run
// moves the blocks' read-ahead on); small batches share a run up to
// max_run_batches (one lock round trip for many rows).
constexpr uint64_t kTabularRun = 16384;
// Rows located (and their bytes prefetched) before a chunk is converted.
constexpr size_t kChunk = 32;
// Rows from anywhere: rows read at once (their reads all in flight).
constexpr size_t kRowsPerRead = 2048;

class TabularSamples final : public SampleKind {
 public:
  explicit TabularSamples(const LoaderOptions& options)
      : SampleKind(options), embeddings_(options.embeddings, options.tabular.sparse_dtype) {}

  const char* name() const override { return "tabular"; }
  bool TakesEmbeddings() const override { return true; }
  void AddStats(StageStats* stats) const override { embeddings_.AddStats(stats); }

  Status Validate() const override {
    // The column counts are checked again by Prepare, against the dataset's.
    GPUFEED_RETURN_IF_ERROR(TabularEmbeddings::Check(options_.embeddings));
    return TabularConvert::Check(
        options_.tabular, static_cast<uint32_t>(std::max<size_t>(1, options_.tabular.hash_sizes.size())));
  }

  Status Prepare(std::shared_ptr<const Dataset> opened,
                 std::shared_ptr<const Dataset>* prepared) override;
  Status Layout(const Dataset& dataset, BatchLayout* layout) const override;

  WorkSchedule Schedule(const std::vector<uint64_t>&, bool) const override {
    WorkSchedule schedule;
    schedule.run_tasks = kTabularRun;
    schedule.max_run_batches = static_cast<size_t>(std::max(1, options_.prefetch / 2));
    schedule.time_per_run = true;
    schedule.whole_runs = true;
    return schedule;
  }

  Status Write(uint64_t sample, uint64_t, const Record& record, const BatchLayout& layout,
               const SampleRow& row, SampleScratch*) const override;
  Status WriteRun(const DatasetBase& dataset, const uint64_t* samples, size_t count,
                  size_t ahead, const BatchLayout& layout, const RunRows& first, size_t* written,
                  RunFigures* figures) const override;

 private:
  // Where one row's fields lie, and which segment it belongs to.
  struct RowBytes {
    const TabularSegment* segment = nullptr;
    const char* parts[3] = {nullptr, nullptr, nullptr};  // binary: at the row
    const char* line = nullptr;                          // text
    size_t line_bytes = 0;
    uint64_t row_in_segment = 0;
  };
  Status WriteRow(uint64_t sample, const RowBytes& bytes, const SampleRow& row) const;
  // Write without the embeddings.
  Status WriteRecord(uint64_t sample, const Record& record, const SampleRow& row) const;
  // A binary row's stored fields, converted into `row`.
  void WriteFields(const char* label, const char* dense, const char* sparse,
                   const SampleRow& row) const;
  Status WriteLine(uint64_t sample, const TabularSegment& segment, uint64_t row_in_segment,
                   const char* line, size_t size, const SampleRow& row) const;
  // The blocks a run's loop keeps at hand, and the one the last row was in.
  struct HeldBlocks {
    // At most held_blocks_: the reader's buffer budget counts them.
    std::vector<std::shared_ptr<const TabularBlockBytes>> blocks;
    std::vector<uint64_t> chunk_of;  // the last chunk whose rows point into each
    uint64_t chunk = 0;              // the chunk being located
    size_t next = 0;                 // the oldest place
    size_t current = SIZE_MAX;       // the place of the last row's block
  };
  Status LocateRow(uint64_t sample, HeldBlocks* held, RowBytes* bytes, bool* full,
                   RunFigures* figures) const;
  Status WriteBlocks(const uint64_t* samples, size_t count, const BatchLayout& layout,
                     const RunRows& first, size_t* written, RunFigures* figures) const;
  Status WriteRows(const DatasetBase& dataset, const uint64_t* samples, size_t count,
                   const BatchLayout& layout, const RunRows& first, size_t* written,
                   RunFigures* figures) const;
  Status WriteSingles(const DatasetBase& dataset, const uint64_t* samples, size_t count,
                      const BatchLayout& layout, const RunRows& first, size_t* written,
                      RunFigures* figures) const;
  static SampleRow Advance(const RunRows& first, const BatchLayout& layout, size_t i) {
    SampleRow row = first;
    row.data += i * layout.sample_bytes;
    row.labels += i * layout.label_bytes_per_sample;
    for (size_t e = 0; e < layout.extras.size(); ++e) {
      row.extras[e] += i * layout.extras[e].bytes_per_sample;
    }
    return row;
  }

  const TabularEmbeddings embeddings_;

  // Set by Prepare (the prepared dataset outlives the kind's use).
  const TabularRows* rows_ = nullptr;
  std::unique_ptr<TabularConvert> convert_;
  std::unique_ptr<TabularReader> reader_;
  bool block_reads_ = false;  // shuffle block or none: whole blocks; else rows one by one
  size_t held_blocks_ = 1;    // blocks a worker keeps at hand: a window's, and two more
  size_t lookahead_rows_ = 0;               // samples after a run whose blocks are read ahead
};

Status TabularSamples::Prepare(std::shared_ptr<const Dataset> opened,
                               std::shared_ptr<const Dataset>* prepared) {
  rows_ = AsTabularRows(*opened);
  if (rows_ == nullptr) {
    return Status::InvalidArgument(
        opened->path() + " is a " + FormatName(opened->format()) +
        " dataset, not a tabular one (criteo_npy, criteo_tsv, records): the tabular transform "
        "reads rows of those formats only");
  }
  const TabularSchema& schema = rows_->table().schema;
  GPUFEED_RETURN_IF_ERROR(TabularConvert::Check(options_.tabular, schema.sparse.count));
  GPUFEED_RETURN_IF_ERROR(embeddings_.CheckColumns(schema.sparse.count, opened->path()));
  convert_ = std::make_unique<TabularConvert>(options_.tabular, schema.sparse.count);
  block_reads_ =
      options_.shuffle == ShuffleMode::kBlock || options_.shuffle == ShuffleMode::kNone;
  const int threads = options_.num_threads > 0
                          ? options_.num_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t window = std::max<uint32_t>(1, options_.shuffle_window_shards);
  // The window's blocks and the next window's, for every worker (rows from
  // anywhere keep no blocks).
  const size_t capacity = block_reads_ ? 2 * window + static_cast<size_t>(threads) + 2 : 1;
  held_blocks_ = window + 2;
  // What the workers hold beyond the cache (and the block each may be
  // loading) counts in the reader's buffer budget, so that a read never
  // waits for buffers only a waiting worker could free.
  const size_t holders = block_reads_ ? static_cast<size_t>(threads) * (held_blocks_ + 1) : 1;
  GPUFEED_RETURN_IF_ERROR(TabularReader::Create(rows_, options_.io, capacity, holders, &reader_));
  // About one window of blocks beyond the run.
  const uint64_t block_rows = rows_->blocks().empty() ? 0 : rows_->blocks()[0].rows;
  lookahead_rows_ = static_cast<size_t>(block_rows * (window + 1));
  *prepared = std::move(opened);
  return Status::OK();
}

Status TabularSamples::Layout(const Dataset&, BatchLayout* layout) const {
  const TabularSchema& schema = rows_->table().schema;
  layout->data_dtype = TensorDtype::kFloat32;
  layout->sample_shape = {static_cast<int64_t>(schema.dense.count)};
  layout->sample_bytes = sizeof(float) * schema.dense.count;
  ExtraLayout sparse;
  sparse.dtype = options_.tabular.sparse_dtype;
  sparse.shape = {static_cast<int64_t>(schema.sparse.count)};
  sparse.bytes_per_sample = convert_->sparse_item() * schema.sparse.count;
  layout->extras = {sparse};
  embeddings_.AddPlanes(layout);
  layout->label_dtype = TensorDtype::kFloat32;
  layout->label_shape.clear();
  layout->label_bytes_per_sample = sizeof(float);
  layout->lengths_bytes = 0;
  layout->labels_in_data = true;  // dense, sparse and labels: one copy to the GPU
  return Status::OK();
}

Status TabularSamples::WriteRow(uint64_t sample, const RowBytes& bytes,
                                const SampleRow& row) const {
  const TabularSchema& schema = rows_->table().schema;
  if (schema.text) {
    return WriteLine(sample, *bytes.segment, bytes.row_in_segment, bytes.line, bytes.line_bytes,
                     row);
  }
  auto at = [&](const TabularField& field) { return bytes.parts[field.part] + field.offset; };
  WriteFields(at(schema.label), at(schema.dense), at(schema.sparse), row);
  return Status::OK();
}

void TabularSamples::WriteFields(const char* label, const char* dense, const char* sparse,
                                 const SampleRow& row) const {
  const TabularSchema& schema = rows_->table().schema;
  convert_->Dense(schema.dense.type, dense, schema.dense.count, reinterpret_cast<float*>(row.data));
  convert_->Sparse(schema.sparse.type, sparse, schema.sparse.count, row.extras[0]);
  const float value = static_cast<float>(FieldAsDouble(schema.label.type, label));
  std::memcpy(row.labels, &value, sizeof(value));
}

Status TabularSamples::WriteLine(uint64_t sample, const TabularSegment& segment,
                                 uint64_t row_in_segment, const char* line, size_t size,
                                 const SampleRow& row) const {
  CriteoRow parsed;
  Status status = ParseCriteoLine(line, size, &parsed);
  if (!status.ok()) {
    const std::string& path = rows_->table().files[segment.parts[0].file]->path();
    return Status::Corruption(path + " line " + std::to_string(row_in_segment + 1) +
                              " (byte offset " +
                              std::to_string((*segment.line_offsets)[row_in_segment]) +
                              ", sample " + std::to_string(sample) + "): " + status.message());
  }
  convert_->DenseValues(parsed.dense, kCriteoDense, reinterpret_cast<float*>(row.data));
  convert_->SparseValues(parsed.sparse, kCriteoSparse, row.extras[0]);
  const float label = static_cast<float>(parsed.label);
  std::memcpy(row.labels, &label, sizeof(label));
  return Status::OK();
}

// A row read on its own (a substitute): the Record of
// TabularDatasetBase::Read (packed stored fields, or the line), then its
// embeddings.
Status TabularSamples::Write(uint64_t sample, uint64_t, const Record& record,
                             const BatchLayout& layout, const SampleRow& row,
                             SampleScratch* scratch) const {
  GPUFEED_RETURN_IF_ERROR(WriteRecord(sample, record, row));
  LookupFigures ignored;
  size_t done = 0;
  return embeddings_.LookupRows(&sample, 1, layout, row, &done,
                                scratch != nullptr ? &scratch->lookups : &ignored);
}

Status TabularSamples::WriteRecord(uint64_t sample, const Record& record,
                                   const SampleRow& row) const {
  const TabularTable& table = rows_->table();
  const TabularSegment& segment = table.segments[rows_->SegmentOf(sample)];
  RowBytes bytes;
  bytes.segment = &segment;
  bytes.row_in_segment = sample - segment.first_row;
  if (table.schema.text) {
    bytes.line = record.data.data();
    bytes.line_bytes = record.data.size();
    return WriteRow(sample, bytes, row);
  }
  // Packed: label, dense, sparse, each as stored.
  const TabularSchema& schema = table.schema;
  const size_t label = FieldTypeSize(schema.label.type);
  const size_t dense = FieldTypeSize(schema.dense.type) * schema.dense.count;
  if (record.data.size() != label + dense + FieldTypeSize(schema.sparse.type) * schema.sparse.count) {
    return Status::Internal("sample " + std::to_string(sample) + " (" + record.source +
                            "): a row of " + std::to_string(record.data.size()) + " bytes");
  }
  const char* base = record.data.data();
  WriteFields(base, base + label, base + label + dense, row);
  return Status::OK();
}

Status TabularSamples::WriteRun(const DatasetBase& dataset, const uint64_t* samples, size_t count,
                                size_t ahead, const BatchLayout& layout, const RunRows& first,
                                size_t* written, RunFigures* figures) const {
  Status status;
  if (block_reads_) {
    // The blocks of this run and of the next window or so are read ahead.
    reader_->Prefetch(samples, count + std::min<size_t>(ahead, lookahead_rows_));
    status = WriteBlocks(samples, count, layout, first, written, figures);
  } else {
    status = WriteRows(dataset, samples, count, layout, first, written, figures);
  }
  // The written rows' embeddings, in one lookup per table: every row
  // reported written has them.
  size_t looked_up = 0;
  Status lookup =
      embeddings_.LookupRows(samples, *written, layout, first, &looked_up, &figures->lookups);
  if (!lookup.ok()) {
    *written = looked_up;
    return lookup;
  }
  return status;
}

// Each row from its block's bytes; the blocks at hand are kept in a small
// array (a window's rows come from a few blocks in random order). Rows are
// located a chunk at a time and their bytes prefetched before any of them
// is converted: random rows of a window's blocks miss the CPU caches, and
// the misses of a chunk then overlap instead of coming one after another.
Status TabularSamples::WriteBlocks(const uint64_t* samples, size_t count,
                                   const BatchLayout& layout, const RunRows& first,
                                   size_t* written, RunFigures* figures) const {
  HeldBlocks held;
  held.blocks.resize(held_blocks_);
  held.chunk_of.assign(held_blocks_, 0);
  RowBytes located[kChunk];
  for (size_t base = 0; base < count;) {
    size_t n = std::min(kChunk, count - base);
    held.chunk += 1;
    Status failed;
    for (size_t j = 0; j < n; ++j) {
      bool full = false;
      failed = LocateRow(samples[base + j], &held, &located[j], &full, figures);
      if (!failed.ok() || full) {
        n = j;  // the rows before it are written; a full hand goes on in the next chunk
        break;
      }
    }
    for (size_t j = 0; j < n; ++j) {
      Status status = WriteRow(samples[base + j], located[j], Advance(first, layout, base + j));
      if (!status.ok()) {
        *written = base + j;
        return status;
      }
    }
    base += n;
    if (!failed.ok()) {
      *written = base;
      return failed;
    }
  }
  *written = count;
  return Status::OK();
}

// Where `sample`'s bytes lie in its block (read through the reader when it
// is not at hand), its cache lines prefetched. A block the current chunk's
// rows point into stays at hand until the chunk is written: *full (and
// nothing located) when a new block would need such a place.
Status TabularSamples::LocateRow(uint64_t sample, HeldBlocks* held, RowBytes* bytes, bool* full,
                                 RunFigures* figures) const {
  const TabularTable& table = rows_->table();
  const std::vector<TabularBlock>& blocks = rows_->blocks();
  auto holds = [&](size_t slot) {
    const auto& block = held->blocks[slot];
    return block && sample >= blocks[block->block].first_row &&
           sample < blocks[block->block].first_row + blocks[block->block].rows;
  };
  size_t slot = held->current;
  if (slot >= held->blocks.size() || !holds(slot)) {
    slot = held->blocks.size();
    for (size_t k = 0; k < held->blocks.size() && slot == held->blocks.size(); ++k) {
      if (holds(k)) slot = k;
    }
  }
  if (slot == held->blocks.size()) {
    // A place not used by this chunk, from the oldest on.
    for (size_t k = 0; k < held->blocks.size() && slot == held->blocks.size(); ++k) {
      const size_t candidate = (held->next + k) % held->blocks.size();
      if (held->chunk_of[candidate] != held->chunk) slot = candidate;
    }
    if (slot == held->blocks.size()) {
      *full = true;
      return Status::OK();
    }
    std::shared_ptr<const TabularBlockBytes> got;
    Status status = reader_->Get(rows_->BlockOf(sample), &got, &figures->read_seconds);
    if (!status.ok()) return status.WithContext("sample " + std::to_string(sample));
    held->blocks[slot] = std::move(got);
    held->next = (slot + 1) % held->blocks.size();
  }
  held->current = slot;
  held->chunk_of[slot] = held->chunk;
  const TabularBlockBytes* current = held->blocks[slot].get();
  const TabularBlock& block = blocks[current->block];
  const TabularSegment& segment = table.segments[block.segment];
  bytes->segment = &segment;
  bytes->row_in_segment = sample - segment.first_row;
  const uint64_t in_block = sample - block.first_row;
  if (table.schema.text) {
    const auto& lines = *segment.line_offsets;
    const uint64_t start = block.first_row - segment.first_row;
    bytes->line = current->parts[0] + (lines[bytes->row_in_segment] - lines[start]);
    bytes->line_bytes = lines[bytes->row_in_segment + 1] - lines[bytes->row_in_segment];
    figures->bytes += bytes->line_bytes;
    __builtin_prefetch(bytes->line);
    return Status::OK();
  }
  for (size_t p = 0; p < segment.parts.size() && p < 3; ++p) {
    const uint64_t stride = segment.parts[p].stride;
    bytes->parts[p] = current->parts[p] + in_block * stride;
    figures->bytes += stride;
    for (uint64_t line = 0; line < stride; line += 64) __builtin_prefetch(bytes->parts[p] + line);
    __builtin_prefetch(bytes->parts[p] + stride - 1);
  }
  return Status::OK();
}

// Rows from anywhere (global or node shuffle): the rows of a chunk read at
// once through the reader's engine (many small reads in flight), then
// converted. A chunk whose reads fail is read again row by row, so that the
// error names the row.
Status TabularSamples::WriteRows(const DatasetBase& dataset, const uint64_t* samples,
                                 size_t count, const BatchLayout& layout, const RunRows& first,
                                 size_t* written, RunFigures* figures) const {
  const TabularTable& table = rows_->table();
  const size_t chunk = std::min<size_t>(reader_->RowsPerRead(), kRowsPerRead);
  std::vector<ReadCompletion> reads;
  for (size_t base = 0; base < count;) {
    const size_t n = std::min(chunk, count - base);
    if (!reader_->ReadRows(samples + base, n, &reads, &figures->read_seconds).ok()) {
      size_t done = 0;
      Status status = WriteSingles(dataset, samples + base, n, layout, Advance(first, layout, base),
                                   &done, figures);
      if (!status.ok()) {
        *written = base + done;
        return status;
      }
      base += n;
      continue;
    }
    const size_t parts = reads.size() / n;
    for (size_t j = 0; j < n; ++j) {
      const uint64_t sample = samples[base + j];
      const TabularSegment& segment = table.segments[rows_->SegmentOf(sample)];
      RowBytes bytes;
      bytes.segment = &segment;
      bytes.row_in_segment = sample - segment.first_row;
      for (size_t p = 0; p < parts && p < 3; ++p) {
        bytes.parts[p] = reads[j * parts + p].buffer.data();
        figures->bytes += reads[j * parts + p].buffer.size();
      }
      bytes.line = bytes.parts[0];
      bytes.line_bytes = reads[j * parts].buffer.size();
      Status status = WriteRow(sample, bytes, Advance(first, layout, base + j));
      if (!status.ok()) {
        *written = base + j;
        return status;
      }
    }
    base += n;
  }
  *written = count;
  return Status::OK();
}

// Rows read one by one through the store (a chunk whose engine reads failed).
Status TabularSamples::WriteSingles(const DatasetBase& dataset, const uint64_t* samples,
                                    size_t count, const BatchLayout& layout, const RunRows& first,
                                    size_t* written, RunFigures* figures) const {
  Record record;
  for (size_t i = 0; i < count; ++i) {
    const auto started = Clock::now();
    Status status = dataset.Read(samples[i], &record);
    figures->read_seconds += Seconds(Clock::now() - started);
    if (status.ok()) {
      figures->bytes += record.data.size();
      status = WriteRecord(samples[i], record, Advance(first, layout, i));
    }
    if (!status.ok()) {
      *written = i;
      return status.WithContext("sample " + std::to_string(samples[i]));
    }
  }
  *written = count;
  return Status::OK();
}

}  // namespace

std::shared_ptr<SampleKind> NewTabularSamples(const LoaderOptions& options) {
  return std::make_shared<TabularSamples>(options);
}

}  // namespace gpufeed
