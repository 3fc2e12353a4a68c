// The functions behind `gpufeed cache stat|clear|warm` and checkpoints.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "format/datasets.h"
#include "format/registry.h"
#include "storage/cache_directory.h"
#include "storage/node_cache.h"
#include "storage/store.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// Inspecting or clearing never creates a cache directory.
Status OpenExisting(const std::string& cache_dir, std::shared_ptr<CacheDirectory>* directory) {
  if (!PathExists(cache_dir)) {
    return Status::NotFound(cache_dir + ": no such cache directory");
  }
  // A team cache (created with cache_group=) is setgid and group-owned:
  // inspect it in group mode, which checks that group.
  struct stat st;
  std::string group;
  if (::stat(cache_dir.c_str(), &st) == 0 && (st.st_mode & S_ISGID) && (st.st_mode & S_IWGRP)) {
    if (struct group* entry = ::getgrgid(st.st_gid)) group = entry->gr_name;
  }
  return CacheDirectory::Open(cache_dir, group, /*create=*/false, directory);
}

// Fills one source with `fill` (CacheDirectory::Fill or FillBundle),
// retrying while another process fills it, and tallies the outcome in
// *summary: `shard` is 1 when the source counts as a shard, 0 for a shard's
// index; `unread` says why a source neither filled nor refused for room was
// skipped. *copied: the bytes copied. A cache that cannot be written is an
// error, as is any failed Status.
template <typename FillCall>
Status WarmOne(CacheDirectory* directory, const CacheSource& source, uint64_t shard,
               const char* unread, const FillCall& fill, CacheWarmSummary* summary,
               uint64_t* copied) {
  *copied = 0;
  for (int attempt = 0;; ++attempt) {
    FillResult result;
    Status status = fill(&result);
    const FillOutcome outcome = result.outcome;
    if (outcome == FillOutcome::kBusy && attempt < 3) {
      directory->WaitForFill(source);  // another process fills it
      continue;
    }
    if (outcome == FillOutcome::kFilled) {
      summary->filled += shard;
      summary->bytes_copied += result.copied;
      *copied = result.copied;
    } else if (outcome == FillOutcome::kAlreadyCached) {
      summary->already_cached += shard;
    } else {
      if (outcome == FillOutcome::kUnavailable) {
        return status.ok() ? Status::IOError(directory->path() + ": the cache cannot be written")
                           : status;
      }
      if (!status.ok()) return status;
      summary->skipped += 1;
      Log().warn("cache warm: {} not cached ({})", source.path,
                 outcome == FillOutcome::kNoRoom ? "no room under the capacity" : unread);
    }
    return Status::OK();
  }
}

// Bundles (storage/store.h), filled member by member. Their sizes are not
// known before they are read (nothing is stat'ed): progress's total is an
// estimate, never below what was copied.
Status WarmBundles(const std::string& dataset_path, std::vector<WarmSource>* sources,
                   const CacheOptions& options,
                   const std::function<void(uint64_t, uint64_t)>& progress,
                   CacheWarmSummary* summary) {
  std::shared_ptr<CacheDirectory> directory;
  GPUFEED_RETURN_IF_ERROR(CacheDirectory::Open(options.cache_dir, options.cache_group, true,
                                               &directory));
  uint64_t capacity = options.capacity;
  if (capacity == 0) GPUFEED_RETURN_IF_ERROR(directory->DefaultCapacity(&capacity));
  std::shared_ptr<Store> source = NewPosixStore();
  auto read_member = [&](const std::string& path, std::string* data, int64_t* mtime_ns) {
    return source->ReadWholeFile(path, data, mtime_ns);
  };
  uint64_t members = 0;
  for (const WarmSource& warm : *sources) members += warm.source.members.size();
  uint64_t estimate = NodeCache::kBundleMemberEstimate * members;
  uint64_t done = 0;
  if (progress) progress(0, estimate);
  for (WarmSource& warm : *sources) {
    CacheSource& cache_source = warm.source;
    summary->shards += 1;
    cache_source.dataset = dataset_path;
    cache_source.policy = options.policy;
    BundleFillRequest request;
    request.read_member = read_member;
    request.estimate = NodeCache::kBundleMemberEstimate * cache_source.members.size();
    request.budget = {capacity, options.high_watermark, options.low_watermark};
    request.progress = [&](uint64_t bytes, uint64_t) {
      if (progress) progress(done + bytes, std::max(estimate, done + bytes));
    };
    uint64_t copied = 0;
    GPUFEED_RETURN_IF_ERROR(WarmOne(
        directory.get(), cache_source, 1, "a member could not be read",
        [&](FillResult* result) { return directory->FillBundle(cache_source, request, result); },
        summary, &copied));
    done += copied;
  }
  if (progress) progress(done, done);
  return Status::OK();
}

// Copies one file source (retrying while another process fills it);
// `shard` is 1 when it counts as a shard, 0 for a shard's index.
Status WarmFile(CacheDirectory* directory, CacheSource* cache_source, uint64_t shard,
                const FillRequest& request, CacheWarmSummary* summary) {
  uint64_t copied = 0;
  return WarmOne(
      directory, *cache_source, shard, "it changed while being copied",
      [&](FillResult* result) { return directory->Fill(*cache_source, request, result); },
      summary, &copied);
}

// Files, each copied whole under the key the store looks it up by.
Status WarmFiles(const std::string& dataset_path, std::vector<WarmSource>* sources,
                 const CacheOptions& options,
                 const std::function<void(uint64_t, uint64_t)>& progress,
                 CacheWarmSummary* summary) {
  std::shared_ptr<CacheDirectory> directory;
  bool unsafe = false;
  GPUFEED_RETURN_IF_ERROR(
      CacheDirectory::Open(options.cache_dir, options.cache_group, true, &directory, &unsafe));
  uint64_t capacity = options.capacity;
  if (capacity == 0) GPUFEED_RETURN_IF_ERROR(directory->DefaultCapacity(&capacity));
  uint64_t total = 0;
  for (const WarmSource& warm : *sources) total += warm.source.size;
  if (options.policy == CachePolicy::kPinned && total > capacity) {
    return Status::InvalidArgument("cache policy \"pinned\": " + dataset_path + " needs " +
                                   std::to_string(total) + " bytes, more than the capacity (" +
                                   std::to_string(capacity) + " bytes)");
  }
  uint64_t done = 0;
  if (progress) progress(0, total);
  std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();  // null: pread
  for (WarmSource& warm : *sources) {
    CacheSource& cache_source = warm.source;
    const uint64_t shard = warm.counts_as_shard ? 1 : 0;
    summary->shards += shard;
    cache_source.dataset = dataset_path;
    cache_source.policy = options.policy;
    const uint64_t base = done;
    FillRequest request;
    request.budget = {capacity, options.high_watermark, options.low_watermark};
    request.engine = engine.get();
    request.progress = [&](uint64_t bytes, uint64_t) {
      if (progress) progress(base + bytes, total);
    };
    GPUFEED_RETURN_IF_ERROR(WarmFile(directory.get(), &cache_source, shard, request, summary));
    done = base + cache_source.size;
    if (progress) progress(done, total);
  }
  return Status::OK();
}

}  // namespace

Status CacheStat(const std::string& cache_dir, CacheReport* report) {
  std::shared_ptr<CacheDirectory> directory;
  GPUFEED_RETURN_IF_ERROR(OpenExisting(cache_dir, &directory));
  *report = CacheReport();
  report->cache_dir = directory->path();
  std::vector<CacheEntryInfo> entries;
  GPUFEED_RETURN_IF_ERROR(
      directory->List(&entries, &report->fills_in_progress, &report->fill_bytes_in_progress));
  std::map<std::string, CacheDatasetReport> by_dataset;
  for (const CacheEntryInfo& entry : entries) {
    std::string name = entry.source.dataset.empty() ? "-" : entry.source.dataset;
    CacheDatasetReport& dataset = by_dataset[name];
    dataset.dataset = name;
    dataset.policy = CachePolicyName(entry.source.policy);
    dataset.entries += 1;
    dataset.bytes += entry.bytes;
    report->entries += 1;
    report->bytes += entry.bytes;
    if (directory->IsLeased(entry.key)) report->leased_entries += 1;
  }
  std::string text;
  GPUFEED_RETURN_IF_ERROR(directory->ReadCountersText(&text));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_object() && json.contains("datasets") && json["datasets"].is_object()) {
    for (auto& [name, counters] : json["datasets"].items()) {
      if (!counters.is_object()) continue;
      CacheDatasetReport& dataset = by_dataset[name];
      dataset.dataset = name;
      if (dataset.policy.empty()) dataset.policy = counters.value("policy", std::string("train"));
      auto get = [&, &counters = counters](const char* field) {
        return counters.contains(field) && counters[field].is_number_unsigned()
                   ? counters[field].get<uint64_t>()
                   : uint64_t{0};
      };
      dataset.hits = get("hits");
      dataset.misses = get("misses");
      dataset.fills = get("fills");
      dataset.fill_bytes = get("fill_bytes");
      dataset.evictions = get("evictions");
    }
  }
  for (auto& [name, dataset] : by_dataset) report->datasets.push_back(dataset);
  return Status::OK();
}

Status CacheClear(const std::string& cache_dir, const std::string& dataset, uint64_t* removed,
                  uint64_t* in_use) {
  *removed = 0;
  *in_use = 0;
  std::shared_ptr<CacheDirectory> directory;
  GPUFEED_RETURN_IF_ERROR(OpenExisting(cache_dir, &directory));
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(directory->List(&entries, &fills, &fill_bytes));
  std::string wanted = dataset.empty() ? "" : AbsolutePath(dataset);
  for (const CacheEntryInfo& entry : entries) {
    if (!wanted.empty() && entry.source.dataset != wanted && entry.source.path != wanted) continue;
    bool gone = false;
    GPUFEED_RETURN_IF_ERROR(directory->Remove(entry.key, &gone));
    (gone ? *removed : *in_use) += 1;
  }
  return Status::OK();
}

Status CacheWarm(const std::string& source, const CacheOptions& options,
                 const std::function<void(uint64_t, uint64_t)>& progress,
                 CacheWarmSummary* summary) {
  DatasetOptions dataset_options;
  dataset_options.cache = options;
  return CacheWarm(source, dataset_options, progress, summary);
}

Status CacheWarm(const std::string& source, const DatasetOptions& opened_with,
                 const std::function<void(uint64_t, uint64_t)>& progress,
                 CacheWarmSummary* summary) {
  *summary = CacheWarmSummary();
  const CacheOptions options = opened_with.cache;
  if (options.cache_dir.empty()) return Status::InvalidArgument("cache warm: no cache_dir");
  // Opened from the source itself: the copies are made below.
  DatasetOptions dataset_options = opened_with;
  dataset_options.cache = CacheOptions();
  std::unique_ptr<Dataset> dataset;
  GPUFEED_RETURN_IF_ERROR(Dataset::Open(source, dataset_options, &dataset));
  // The copies a loader looks up, as the format's store keys them.
  const FormatEntry* entry = FindFormat(dataset->format());
  if (entry == nullptr || entry->warm_sources == nullptr) {
    return Status::NotSupported(dataset->path() + ": gpufeed cache warm does not copy " +
                                FormatName(dataset->format()) + " datasets");
  }
  std::vector<WarmSource> sources;
  GPUFEED_RETURN_IF_ERROR(entry->warm_sources(*dataset, &sources));
  if (!sources.empty() && sources.front().source.bundle()) {
    return WarmBundles(dataset->path(), &sources, options, progress, summary);
  }
  return WarmFiles(dataset->path(), &sources, options, progress, summary);
}

Status CachePutCheckpoint(const std::string& path, const std::string& cache_dir, uint32_t keep,
                          std::string* cached_path, const std::string& cache_group) {
  if (keep < 1) return Status::InvalidArgument("put_checkpoint: keep must be at least 1");
  std::shared_ptr<CacheDirectory> directory;
  GPUFEED_RETURN_IF_ERROR(CacheDirectory::Open(cache_dir, cache_group, true, &directory));
  CacheSource source;
  std::string absolute = AbsolutePath(path);
  GPUFEED_RETURN_IF_ERROR(StatCacheSource(absolute, &source));
  source.group = Dirname(absolute);
  source.dataset = source.group;
  source.policy = CachePolicy::kCheckpoint;
  std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();  // null: pread
  FillRequest request;  // the default budget: no capacity
  request.engine = engine.get();
  for (int attempt = 0;; ++attempt) {
    FillResult result;
    Status status = directory->Fill(source, request, &result);
    const FillOutcome outcome = result.outcome;
    if (outcome == FillOutcome::kBusy && attempt < 3) {
      directory->WaitForFill(source);
      continue;
    }
    if (outcome == FillOutcome::kSourceChanged) {
      return status.ok() ? Status::IOError(absolute + " changed while it was being cached; "
                                                      "put it again once it is written")
                         : status;
    }
    if (outcome != FillOutcome::kFilled && outcome != FillOutcome::kAlreadyCached) {
      return status.ok() ? Status::IOError(directory->path() + ": the cache cannot be written")
                         : status;
    }
    break;
  }
  GPUFEED_RETURN_IF_ERROR(directory->RotateCheckpoints(source.group, keep));
  *cached_path = directory->DataPathFor(CacheKeyFor(source));
  return Status::OK();
}

Status CacheLatestCheckpoint(const std::string& directory_path, const std::string& cache_dir,
                             std::string* cached_path, std::string* source_path) {
  std::shared_ptr<CacheDirectory> directory;
  GPUFEED_RETURN_IF_ERROR(OpenExisting(cache_dir, &directory));
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(directory->List(&entries, &fills, &fill_bytes));
  std::string group = AbsolutePath(directory_path);
  const CacheEntryInfo* newest = nullptr;
  for (const CacheEntryInfo& entry : entries) {
    if (entry.source.policy != CachePolicy::kCheckpoint || entry.source.group != group) continue;
    // A source rewritten since it was cached is not this copy any more; a
    // source that is gone (a purged scratch filesystem) leaves the copy as
    // the only one, which is what a restart wants.
    CacheSource now;
    if (StatCacheSource(entry.source.path, &now).ok() &&
        (now.size != entry.source.size || now.mtime_ns != entry.source.mtime_ns)) {
      continue;
    }
    if (newest == nullptr || entry.source.mtime_ns > newest->source.mtime_ns) newest = &entry;
  }
  if (newest == nullptr) {
    return Status::NotFound(cache_dir + ": no cached checkpoint of " + group);
  }
  *cached_path = directory->DataPathFor(newest->key);
  if (source_path != nullptr) *source_path = newest->source.path;
  return Status::OK();
}

}  // namespace gpufeed
