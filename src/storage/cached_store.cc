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
      : StoreFile(source->path(), source->size(), source->mtime_ns(), source->xxh64(),
                  source->lazy()),
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

// A bundle of small files kept as one cache entry.
class CachedBundle final : public StoreBundle {
 public:
  CachedBundle(std::shared_ptr<NodeCache> cache, size_t index, std::string name)
      : StoreBundle(std::move(name)), cache_(std::move(cache)), index_(index) {}

  const std::vector<std::string>& members() const override { return cache_->members(index_); }
  uint64_t bytes() const override { return cache_->BundleBytes(index_); }
  Status ReadMember(size_t member, std::string* data) const override {
    return cache_->ReadMember(index_, member, data);
  }
  bool LocateMember(size_t member, FileView* view, uint64_t* offset,
                    uint64_t* length) const override {
    return cache_->LocateMember(index_, member, view, offset, length);
  }
  bool cached() const override { return true; }

  size_t index() const { return index_; }
  const NodeCache* cache() const { return cache_.get(); }

 private:
  std::shared_ptr<NodeCache> cache_;
  size_t index_;
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

  // Nothing is opened: the slot's key comes from `identity` (node_cache.h).
  Status OpenLazily(const std::string& path, const FileIdentity& identity,
                    std::shared_ptr<const StoreFile>* file) override {
    std::shared_ptr<const StoreFile> opened;
    GPUFEED_RETURN_IF_ERROR(source_->OpenLazily(path, identity, &opened));
    size_t index = cache_->AddFile(opened, identity.xxh64);
    *file = std::make_shared<CachedFile>(cache_, index, std::move(opened));
    return Status::OK();
  }

  // A small file outside a bundle is not cached (each would be a cache
  // entry of its own); it is read from the source.
  Status ReadWholeFile(const std::string& path, std::string* data,
                       int64_t* mtime_ns) const override {
    return source_->ReadWholeFile(path, data, mtime_ns);
  }

  // One cache entry for the bundle; its fills and misses read the members
  // through the store below (counted, throttled).
  Status OpenBundle(const std::string& name, std::vector<std::string> members,
                    std::shared_ptr<const StoreBundle>* bundle) override {
    size_t index = cache_->AddBundle(name, std::move(members), source_);
    *bundle = std::make_shared<CachedBundle>(cache_, index, name);
    return Status::OK();
  }

  Status Seal() override { return cache_->Seal(); }

  void ExpectUnits(const std::vector<const StoreUnit*>& first_use_order,
                   uint64_t live_bytes) const override {
    std::vector<size_t> order;
    order.reserve(first_use_order.size());
    for (const StoreUnit* unit : first_use_order) {
      if (auto* file = dynamic_cast<const CachedFile*>(unit)) {
        if (file->cache() == cache_.get()) order.push_back(file->index());
      } else if (auto* bundle = dynamic_cast<const CachedBundle*>(unit)) {
        if (bundle->cache() == cache_.get()) order.push_back(bundle->index());
      }
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
