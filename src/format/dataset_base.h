// The read path under the public Dataset (include/gpufeed/dataset.h): where a
// sample's bytes lie, how a record is built from bytes read elsewhere, the
// units a block shuffle keeps together, the reads a node cache should fetch
// ahead. The loader's pipeline (src/pipeline) reads through it; a C++ trainer
// sees only Dataset.
//
// Every Dataset is a DatasetBase: Dataset's constructor is private to it, and
// Dataset::Open makes every format's dataset (ReadPathOf relies on this).
#ifndef GPUFEED_FORMAT_DATASET_BASE_H_
#define GPUFEED_FORMAT_DATASET_BASE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

// Where a record's bytes lie on disk, for readers that batch their I/O (the
// loader's read engine): a byte range of a file, or a whole file.
struct RecordLocation {
  std::string path;  // the source file, for messages
  uint64_t offset = 0;
  uint64_t length = 0;
  bool whole_file = false;
  // Byte ranges: the descriptor to read them from (the source, or a
  // node-cache copy), kept open and leased while `hold` lives. A reader
  // keys its own handles by hold.get().
  int fd = -1;
  bool local = false;  // fd is a node-cache copy
  std::shared_ptr<const void> hold;
};

// The base of every format: it reads through a Store (storage/store.h) and
// never knows whether the bytes come from the source or a node-cache copy.
// Every method is safe from many threads at once.
class DatasetBase : public Dataset {
 public:
  // Where sample `index` lies: false when the format has no byte ranges
  // (LMDB, Caffe: pages of a memory map) or the range is not known (an
  // unsorted .idx).
  virtual bool Locate(uint64_t index, RecordLocation* location) const;
  // Builds the record from the bytes of Locate's range (reading more
  // itself if the record runs past them). The default reads the sample.
  virtual Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                              size_t size, Record* record) const;
  // True when Locate gives byte ranges for this dataset's samples.
  virtual bool CanLocate() const;
  // The read engine read `bytes` of Locate's range once, for every sample
  // whose location names that range (token windows share their block's
  // read): a format that counts a located read once per range, not in
  // ParseLocated per sample, counts it here. The default does nothing.
  virtual void CountLocatedRead(const RecordLocation& location, uint64_t bytes) const;
  // The samples the caller will read next, in order (a loader's epoch for
  // this rank): maps them to the files or bundles that hold them (UnitOf)
  // and tells the store the order and the working set, so that a node cache
  // fetches them ahead. A later call replaces the earlier one.
  virtual void ExpectReads(const std::vector<uint64_t>& samples) const;
  // Samples per unit of shuffle="block" (kBlock shuffles these units, then
  // samples within windows of them), in storage order: the shards' record
  // counts by default; token corpora give contiguous blocks of windows.
  virtual std::vector<uint64_t> BlockSizes() const;

  // The counters of the store chain (opens, stats, source bytes, cache reads).
  StorageStats storage_stats() const override;
  const std::shared_ptr<Store>& store() const { return store_; }

 protected:
  DatasetBase(DatasetFormat format, std::string path, std::shared_ptr<Store> store);

  // The file sample `index` is read from, for ExpectReads; nullptr when
  // the format has no per-sample files worth fetching ahead.
  virtual const StoreFile* FileOf(uint64_t index) const;
  // The file or bundle sample `index` is read from: FileOf unless the
  // format reads bundles of small files.
  virtual const StoreUnit* UnitOf(uint64_t index) const { return FileOf(index); }

  // OutOfRange naming the index, the dataset and its size.
  Status CheckIndex(uint64_t index) const {
    if (index < size()) return Status::OK();
    return Status::OutOfRange("sample " + std::to_string(index) + " is past the end of " + path_ +
                              " (" + std::to_string(size()) + " samples)");
  }

  // What Dataset's accessors return, set by the format while it opens:
  // references to Dataset's own members (set before the dataset is shared).
  DatasetFormat& format_;
  std::string& path_;
  std::vector<std::string>& classes_;
  bool& integer_labels_;
  std::vector<ShardInfo>& shards_;
  std::shared_ptr<Store> store_;
};

// The read path of `dataset`. Every Dataset is a DatasetBase (see above).
inline const DatasetBase& ReadPathOf(const Dataset& dataset) {
  return static_cast<const DatasetBase&>(dataset);
}

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_DATASET_BASE_H_
