// The node-local cache as a store: each file of the dataset is a slot of a
// NodeCache; views come from its copies (complete, or being filled) or from
// the source store below.
#include <unordered_map>

#include "storage/node_cache.h"
#include "storage/store.h"

namespace gpufeed {

namespace {

class CachedFile final : public StoreFile {
 public:
  CachedFile(std::shared_ptr<NodeCache> cache, size_t index,
             std::shared_ptr<const StoreFile> source)
      : StoreFile(source->path(), source->size(), source->mtime_ns()),
        cache_(std::move(cache)),
        index_(index),
        source_(std::move(source)) {}

  Status View(uint64_t offset, uint64_t length, FileView* view) const override {
    return cache_->View(index_, offset, length, view);
  }
  Status SourceView(FileView* view) const override { return source_->SourceView(view); }
  void Count(const FileView& view, uint64_t bytes) const override {
    if (!view.local) source_->Count(view, bytes);  // a copy's reads are local
  }
  void Invalidate(FileView* view) const override { cache_->Invalidate(index_, view); }

  size_t index() const { return index_; }
  const NodeCache* cache() const { return cache_.get(); }

 private:
  std::shared_ptr<NodeCache> cache_;
  size_t index_;
  std::shared_ptr<const StoreFile> source_;
};

class CachedStore final : public Store {
 public:
  CachedStore(std::shared_ptr<Store> source, std::shared_ptr<NodeCache> cache)
      : source_(std::move(source)), cache_(std::move(cache)) {}

  Status Open(const std::string& path, const std::string& xxh64,
              std::shared_ptr<const StoreFile>* file) override {
    std::shared_ptr<const StoreFile> opened;
    GPUFEED_RETURN_IF_ERROR(source_->Open(path, xxh64, &opened));
    size_t index = cache_->AddFile(opened, xxh64);
    *file = std::make_shared<CachedFile>(cache_, index, std::move(opened));
    return Status::OK();
  }

  // Whole small files are not cached yet (each would be a cache entry of
  // its own); they are read from the source.
  Status ReadWholeFile(const std::string& path, std::string* data) const override {
    return source_->ReadWholeFile(path, data);
  }

  Status Seal() override { return cache_->Seal(); }

  void ExpectFiles(const std::vector<const StoreFile*>& first_use_order,
                   uint64_t live_bytes) const override {
    std::vector<size_t> order;
    order.reserve(first_use_order.size());
    for (const StoreFile* file : first_use_order) {
      auto* cached = dynamic_cast<const CachedFile*>(file);
      if (cached != nullptr && cached->cache() == cache_.get()) order.push_back(cached->index());
    }
    cache_->ExpectFiles(std::move(order), live_bytes);
  }

  void Drain() const override { cache_->Drain(); }

  StoreStats stats() const override {
    StoreStats stats = source_->stats();
    stats.cache_reads = cache_->hits();
    return stats;
  }

 private:
  std::shared_ptr<Store> source_;
  std::shared_ptr<NodeCache> cache_;
};

}  // namespace

Status NewCachedStore(std::shared_ptr<Store> source, const CacheOptions& options,
                      const std::string& dataset, std::shared_ptr<Store>* store) {
  std::unique_ptr<NodeCache> cache;
  GPUFEED_RETURN_IF_ERROR(NodeCache::Open(options, dataset, &cache));
  if (cache == nullptr) {
    *store = std::move(source);  // the cache cannot be used; logged by Open
    return Status::OK();
  }
  *store = std::make_shared<CachedStore>(std::move(source), std::shared_ptr<NodeCache>(std::move(cache)));
  return Status::OK();
}

}  // namespace gpufeed
