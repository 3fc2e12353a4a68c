#include "pipeline/tabular_embeddings.h"

#include <cstring>
#include <string>
#include <utility>

#include "pipeline/host_stats.h"
#include "util/system_stats.h"

namespace gpufeed {

Status TabularEmbeddings::Check(const std::vector<EmbeddingLookup>& lookups) {
  if (lookups.size() > kMaxLookups) {
    return Status::InvalidArgument("embeddings: " + std::to_string(lookups.size()) +
                                   " tables, at most " + std::to_string(kMaxLookups) +
                                   " may come with a batch");
  }
  for (const EmbeddingLookup& lookup : lookups) {
    if (!lookup.table) {
      return Status::InvalidArgument("embeddings: no table for sparse column " +
                                     std::to_string(lookup.column));
    }
  }
  return Status::OK();
}

TabularEmbeddings::TabularEmbeddings(std::vector<EmbeddingLookup> lookups, TensorDtype sparse_dtype)
    : lookups_(std::move(lookups)), id_bytes_(TensorDtypeSize(sparse_dtype)) {}

Status TabularEmbeddings::CheckColumns(uint32_t sparse_count, const std::string& dataset) const {
  for (const EmbeddingLookup& lookup : lookups_) {
    if (lookup.column >= sparse_count) {
      return Status::InvalidArgument("embeddings: sparse column " + std::to_string(lookup.column) +
                                     " (table " + lookup.table->path() + ") is not one of " +
                                     dataset + "'s " + std::to_string(sparse_count) +
                                     " sparse columns (0 to " +
                                     std::to_string(static_cast<int64_t>(sparse_count) - 1) + ")");
    }
  }
  return Status::OK();
}

void TabularEmbeddings::AddPlanes(BatchLayout* layout) const {
  for (const EmbeddingLookup& lookup : lookups_) {
    ExtraLayout plane;
    plane.dtype = lookup.table->dtype();
    plane.shape = {static_cast<int64_t>(lookup.table->dim())};
    plane.bytes_per_sample = lookup.table->row_bytes();
    layout->extras.push_back(std::move(plane));
  }
}

void TabularEmbeddings::AddStats(StageStats* stats) const {
  for (size_t l = 0; l < lookups_.size(); ++l) {
    bool seen = false;
    for (size_t k = 0; k < l; ++k) seen = seen || lookups_[k].table == lookups_[l].table;
    if (seen) continue;
    const EmbeddingStats table = lookups_[l].table->Stats();
    stats->lookup_table_rows += table.rows;
    stats->lookup_ram_hits += table.ram_hits;
  }
}

void TabularEmbeddings::GatherIds(size_t count, const BatchLayout& layout, const RunRows& first,
                                  std::vector<int64_t>* ids) const {
  ids->resize(lookups_.size() * count);
  const size_t stride = layout.extras[0].bytes_per_sample;
  for (size_t l = 0; l < lookups_.size(); ++l) {
    const char* at = first.extras[0] + lookups_[l].column * id_bytes_;
    int64_t* out = ids->data() + l * count;
    if (id_bytes_ == sizeof(int64_t)) {
      for (size_t i = 0; i < count; ++i, at += stride) std::memcpy(&out[i], at, sizeof(int64_t));
    } else {
      for (size_t i = 0; i < count; ++i, at += stride) {
        int32_t id;
        std::memcpy(&id, at, sizeof(id));
        out[i] = id;
      }
    }
  }
}

char* TabularEmbeddings::PlaneRow(const BatchLayout& layout, const RunRows& first, size_t l,
                                  size_t row) const {
  return first.extras[1 + l] + row * layout.extras[1 + l].bytes_per_sample;
}

Status TabularEmbeddings::LookupRows(const uint64_t* samples, size_t count,
                                     const BatchLayout& layout, const RunRows& first, size_t* done,
                                     LookupFigures* figures) const {
  *done = 0;
  if (lookups_.empty() || count == 0) return Status::OK();
  const auto started = Clock::now();
  const double cpu_started = ThreadCpuSeconds();
  // The worker's own: runs of the same size come one after another.
  thread_local std::vector<int64_t> ids;
  GatherIds(count, layout, first, &ids);
  Status status;
  for (size_t l = 0; l < lookups_.size() && status.ok(); ++l) {
    status =
        lookups_[l].table->Lookup(ids.data() + l * count, count, PlaneRow(layout, first, l, 0));
  }
  if (status.ok()) {
    *done = count;
  } else {
    // Which row: the rows before it keep their embeddings.
    status = LookupOneByOne(samples, count, layout, first, ids, done);
  }
  figures->seconds += Seconds(Clock::now() - started);
  figures->cpu_seconds += ThreadCpuSeconds() - cpu_started;
  figures->rows += lookups_.size() * *done;
  return status;
}

Status TabularEmbeddings::LookupOneByOne(const uint64_t* samples, size_t count,
                                         const BatchLayout& layout, const RunRows& first,
                                         const std::vector<int64_t>& ids, size_t* done) const {
  for (size_t i = 0; i < count; ++i) {
    for (size_t l = 0; l < lookups_.size(); ++l) {
      Status status =
          lookups_[l].table->Lookup(&ids[l * count + i], 1, PlaneRow(layout, first, l, i));
      if (!status.ok()) {
        *done = i;
        return status.WithContext("sample " + std::to_string(samples[i]) +
                                  ", embedding of sparse column " +
                                  std::to_string(lookups_[l].column));
      }
    }
  }
  // Every row went through one by one: the failure was not of an id (a
  // read that failed once); the rows are in place now.
  *done = count;
  return Status::OK();
}

}  // namespace gpufeed
