// TabularEmbeddings: the embedding rows the tabular kind delivers with a
// batch (LoaderOptions::embeddings). Lookup i has its own plane after the
// sparse ids, (batch, dim) of its table's dtype (Batch::extras()[1 + i]),
// and row r of it is the table's row sparse[r, column]: the ids as the
// transform wrote them into the sparse plane (after hashing), read back
// from there, so the two can never disagree.
//
// Thread safety: const after construction; LookupRows runs on many workers
// at once (EmbeddingTable::Lookup is thread-safe), each on its own rows.
#ifndef GPUFEED_PIPELINE_TABULAR_EMBEDDINGS_H_
#define GPUFEED_PIPELINE_TABULAR_EMBEDDINGS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/loader.h"
#include "pipeline/sample_kind.h"

namespace gpufeed {

class TabularEmbeddings {
 public:
  // Most lookups: one plane each beside the sparse ids.
  static constexpr size_t kMaxLookups = kMaxExtras - 1;

  // InvalidArgument for a null table or more than kMaxLookups lookups.
  static Status Check(const std::vector<EmbeddingLookup>& lookups);

  // `sparse_dtype`: the sparse plane's (kInt64 or kInt32).
  TabularEmbeddings(std::vector<EmbeddingLookup> lookups, TensorDtype sparse_dtype);

  bool empty() const { return lookups_.empty(); }
  // InvalidArgument naming the lookup's column and `dataset` when a column
  // is not below the dataset's `sparse_count`.
  Status CheckColumns(uint32_t sparse_count, const std::string& dataset) const;
  // Appends one extra plane per lookup, in the order given.
  void AddPlanes(BatchLayout* layout) const;
  // The tables' rows and RAM hits (EmbeddingTable::Stats), each table once.
  void AddStats(StageStats* stats) const;

  // Fills the embedding planes of the `count` rows written from `first`
  // (samples[i] is row i's sample), from the ids in their sparse plane.
  // *done: the rows whose every embedding is in place. On an id a table
  // cannot give (or a failed read), returns its error naming the sample
  // and the column, with *done the rows before it. Time and ids counted in
  // *figures.
  Status LookupRows(const uint64_t* samples, size_t count, const BatchLayout& layout,
                    const RunRows& first, size_t* done, LookupFigures* figures) const;

 private:
  // ids[l * count + i]: lookup l's id of row i, read from the sparse plane.
  void GatherIds(size_t count, const BatchLayout& layout, const RunRows& first,
                 std::vector<int64_t>* ids) const;
  // Where lookup l's row `row` goes.
  char* PlaneRow(const BatchLayout& layout, const RunRows& first, size_t l, size_t row) const;
  // After a failed lookup of many rows: row by row, every table, until the
  // first row that fails (*done the rows before it).
  Status LookupOneByOne(const uint64_t* samples, size_t count, const BatchLayout& layout,
                        const RunRows& first, const std::vector<int64_t>& ids, size_t* done) const;

  const std::vector<EmbeddingLookup> lookups_;
  const size_t id_bytes_;  // 8 (int64 ids) or 4 (int32)
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_TABULAR_EMBEDDINGS_H_
