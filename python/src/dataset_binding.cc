// Bindings for Dataset, Pack, Verify and WriteRecordIOIndex.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <functional>

#include "binding_util.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

// Relays a C++ progress callback to Python (called on the calling thread,
// at most ~20 times a second). Ctrl-C, or an exception from the callback,
// stops reporting, sets `cancel` (when the operation has one) and is raised
// by RaiseIfInterrupted once the operation has returned.
class ProgressRelay {
 public:
  ProgressRelay(py::object progress, std::atomic<bool>* cancel)
      : progress_(std::move(progress)), cancel_(cancel) {}

  std::function<void(uint64_t, uint64_t)> Callback() {
    return [this](uint64_t done, uint64_t total) {
      auto now = std::chrono::steady_clock::now();
      if (done != total && now - last_call_ < std::chrono::milliseconds(50)) return;
      last_call_ = now;
      py::gil_scoped_acquire acquire;
      if (interrupted_) return;
      if (PyErr_CheckSignals() != 0) {
        Interrupt();
        return;
      }
      if (!progress_.is_none()) {
        try {
          progress_(done, total);
        } catch (py::error_already_set& error) {
          error.restore();
          Interrupt();
        }
      }
    };
  }

  // REQUIRES: the GIL.
  void RaiseIfInterrupted() const {
    if (interrupted_ && PyErr_Occurred()) throw py::error_already_set();
  }

 private:
  void Interrupt() {
    interrupted_ = true;
    if (cancel_ != nullptr) *cancel_ = true;
  }

  py::object progress_;
  std::atomic<bool>* cancel_;
  std::chrono::steady_clock::time_point last_call_;
  bool interrupted_ = false;
};

DatasetFormat FormatFromName(const std::string& name) {
  DatasetFormat format = DatasetFormat::kAuto;
  ThrowIfError(ParseFormat(name, &format));
  return format;
}

}  // namespace

// {"image_key": [str], "label_key": str, "label_field": str, "tars": [str],
//  "index_dir": str}; absent keys keep WebDatasetOptions' defaults. Shared
// with the loader binding.
WebDatasetOptions WebDatasetOptionsFromDict(const py::dict& webdataset) {
  WebDatasetOptions options;
  if (webdataset.contains("image_key")) {
    options.image_keys = webdataset["image_key"].cast<std::vector<std::string>>();
  }
  if (webdataset.contains("label_key")) options.label_key = webdataset["label_key"].cast<std::string>();
  if (webdataset.contains("label_field")) {
    options.label_field = webdataset["label_field"].cast<std::string>();
  }
  if (webdataset.contains("tars")) options.tars = webdataset["tars"].cast<std::vector<std::string>>();
  if (webdataset.contains("index_dir")) options.index_dir = webdataset["index_dir"].cast<std::string>();
  return options;
}

// {"cache_dir": str, "cache_capacity": int, "cache_policy": str,
//  "cache_prefetch": int, "cache_wait": bool, "cache_group": str}; absent
// keys keep CacheOptions' defaults. Shared with the loader binding.
CacheOptions CacheOptionsFromDict(const py::dict& cache) {
  CacheOptions options;
  if (cache.contains("cache_dir") && !cache["cache_dir"].is_none()) {
    options.cache_dir = py::str(cache["cache_dir"]);
  }
  if (cache.contains("cache_capacity") && !cache["cache_capacity"].is_none()) {
    options.capacity = cache["cache_capacity"].cast<uint64_t>();
  }
  if (cache.contains("cache_policy") && !cache["cache_policy"].is_none()) {
    ThrowIfError(ParseCachePolicy(cache["cache_policy"].cast<std::string>(), &options.policy));
  }
  if (cache.contains("cache_prefetch") && !cache["cache_prefetch"].is_none()) {
    options.prefetch_shards = cache["cache_prefetch"].cast<uint32_t>();
  }
  if (cache.contains("cache_wait") && !cache["cache_wait"].is_none()) {
    options.wait_for_fill = cache["cache_wait"].cast<bool>();
  }
  if (cache.contains("cache_group") && !cache["cache_group"].is_none()) {
    options.cache_group = cache["cache_group"].cast<std::string>();
  }
  return options;
}

namespace {

class PyDataset {
 public:
  PyDataset(const std::string& path, const std::string& format, bool allow_external_paths,
            py::dict cache, const std::string& token_dtype, uint32_t seq_len,
            py::dict webdataset) {
    DatasetOptions options;
    options.format = FormatFromName(format);
    ThrowIfError(ParseTokenDtype(token_dtype, &options.tokens.token_dtype));
    options.tokens.seq_len = seq_len;
    options.allow_external_paths = allow_external_paths;
    options.cache = CacheOptionsFromDict(cache);
    options.webdataset = WebDatasetOptionsFromDict(webdataset);
    Status status;
    {
      py::gil_scoped_release release;
      status = Dataset::Open(path, options, &dataset_);
    }
    ThrowIfError(status);
  }

  uint64_t size() const { return dataset_->size(); }
  const Dataset& dataset() const { return *dataset_; }

  // Returns (data: bytes, labels: list[float], key: str, id: int,
  // shape: tuple | None, encoded: bool).
  py::tuple Read(uint64_t index) const {
    Record record;
    Status status;
    {
      py::gil_scoped_release release;
      status = dataset_->Read(index, &record);
    }
    ThrowIfError(status);
    py::object shape = py::none();
    if (!record.shape.empty()) shape = py::tuple(py::cast(record.shape));
    // Keys are bytes on disk; undecodable ones are shown with escapes.
    py::str key = LossyStr(record.key);
    return py::make_tuple(py::bytes(record.data), py::cast(record.labels), key, record.id, shape,
                          record.encoded);
  }

  std::string format() const { return FormatName(dataset_->format()); }
  py::str path() const { return LossyStr(dataset_->path()); }
  py::list classes() const { return LossyList(dataset_->classes()); }
  bool integer_labels() const { return dataset_->integer_labels(); }
  // Token corpora: {token_dtype, tokens, documents, sequences, seq_len,
  // windows}; None for the other formats.
  py::object tokens() const {
    const TokenCorpusInfo* info = dataset_->token_info();
    if (info == nullptr) return py::none();
    py::dict out;
    out["token_dtype"] = TokenDtypeName(info->token_dtype);
    out["tokens"] = info->tokens;
    out["documents"] = info->documents;
    out["sequences"] = info->sequences;
    out["seq_len"] = info->seq_len;
    out["windows"] = info->windows;
    return std::move(out);
  }
  py::list shards() const {
    py::list out;
    for (const ShardInfo& shard : dataset_->shards()) {
      py::dict entry;
      entry["path"] = LossyStr(shard.path);
      entry["first_record"] = shard.first_record;
      entry["records"] = shard.records;
      entry["bytes"] = shard.bytes;
      entry["xxh64"] = shard.xxh64.empty() ? py::object(py::none()) : py::str(shard.xxh64);
      out.append(entry);
    }
    return out;
  }

 private:
  std::unique_ptr<Dataset> dataset_;
};

py::dict PackBinding(const std::string& source, const std::string& destination,
                     const std::string& format, uint64_t shard_size, int workers, bool overwrite,
                     py::object progress, bool allow_external_paths) {
  PackOptions options;
  ThrowIfError(ParseShardFormat(format, &options.format));
  options.shard_size = shard_size;
  options.workers = workers;
  options.overwrite = overwrite;
  options.allow_external_paths = allow_external_paths;
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  ProgressRelay relay(progress, &cancel);
  options.progress = relay.Callback();
  PackSummary summary;
  Status status;
  {
    py::gil_scoped_release release;
    status = Pack(source, destination, options, &summary);
  }
  relay.RaiseIfInterrupted();
  ThrowIfError(status);
  py::dict out;
  out["records"] = summary.records;
  out["shards"] = summary.shards;
  out["bytes"] = summary.bytes;
  out["seconds"] = summary.seconds;
  return out;
}

py::dict VerifyBinding(const std::string& path, const std::string& format,
                       bool allow_external_paths, const std::string& token_dtype,
                       py::dict webdataset) {
  DatasetOptions options;
  options.format = FormatFromName(format);
  ThrowIfError(ParseTokenDtype(token_dtype, &options.tokens.token_dtype));
  options.allow_external_paths = allow_external_paths;
  options.webdataset = WebDatasetOptionsFromDict(webdataset);
  VerifyReport report;
  Status status;
  {
    py::gil_scoped_release release;
    status = Verify(path, options, &report);
  }
  ThrowIfError(status);
  py::dict out;
  out["format"] = FormatName(report.format);
  out["records_checked"] = report.records_checked;
  out["shards_checked"] = report.shards_checked;
  out["checksums_checked"] = report.checksums_checked;
  out["problems"] = LossyList(report.problems);
  return out;
}

uint64_t WriteIndexBinding(const std::string& rec_path, const std::string& idx_path) {
  uint64_t records = 0;
  Status status;
  {
    py::gil_scoped_release release;
    status = WriteRecordIOIndex(rec_path, idx_path, &records);
  }
  ThrowIfError(status);
  return records;
}

uint64_t WriteTarIndexBinding(const std::string& tar_path, const std::string& index_path) {
  uint64_t samples = 0;
  Status status;
  {
    py::gil_scoped_release release;
    status = WriteTarIndex(tar_path, index_path, &samples);
  }
  ThrowIfError(status);
  return samples;
}

py::tuple WriteTokenManifestBinding(const std::string& path, const std::string& format,
                                    const std::string& token_dtype, bool allow_external_paths) {
  DatasetOptions options;
  options.format = FormatFromName(format);
  ThrowIfError(ParseTokenDtype(token_dtype, &options.tokens.token_dtype));
  options.allow_external_paths = allow_external_paths;
  std::string manifest_path;
  uint64_t tokens = 0;
  Status status;
  {
    py::gil_scoped_release release;
    status = WriteTokenManifest(path, options, &manifest_path, &tokens);
  }
  ThrowIfError(status);
  return py::make_tuple(manifest_path, tokens);
}

}  // namespace

py::dict CacheStatBinding(const std::string& cache_dir) {
  CacheReport report;
  Status status;
  {
    py::gil_scoped_release release;
    status = CacheStat(cache_dir, &report);
  }
  ThrowIfError(status);
  py::dict out;
  out["cache_dir"] = LossyStr(report.cache_dir);
  out["entries"] = report.entries;
  out["bytes"] = report.bytes;
  out["fills_in_progress"] = report.fills_in_progress;
  out["fill_bytes_in_progress"] = report.fill_bytes_in_progress;
  out["leased_entries"] = report.leased_entries;
  py::list datasets;
  for (const CacheDatasetReport& dataset : report.datasets) {
    py::dict entry;
    entry["dataset"] = LossyStr(dataset.dataset);
    entry["policy"] = dataset.policy;
    entry["entries"] = dataset.entries;
    entry["bytes"] = dataset.bytes;
    entry["hits"] = dataset.hits;
    entry["misses"] = dataset.misses;
    entry["fills"] = dataset.fills;
    entry["fill_bytes"] = dataset.fill_bytes;
    entry["evictions"] = dataset.evictions;
    datasets.append(entry);
  }
  out["datasets"] = datasets;
  return out;
}

py::tuple CacheClearBinding(const std::string& cache_dir, const std::string& dataset) {
  uint64_t removed = 0, in_use = 0;
  Status status;
  {
    py::gil_scoped_release release;
    status = CacheClear(cache_dir, dataset, &removed, &in_use);
  }
  ThrowIfError(status);
  return py::make_tuple(removed, in_use);
}

py::dict CacheWarmBinding(const std::string& source, py::dict cache, py::object progress) {
  CacheOptions options = CacheOptionsFromDict(cache);
  CacheWarmSummary summary;
  ProgressRelay relay(progress, nullptr);
  auto report = relay.Callback();
  Status status;
  {
    py::gil_scoped_release release;
    status = CacheWarm(source, options, report, &summary);
  }
  relay.RaiseIfInterrupted();
  ThrowIfError(status);
  py::dict out;
  out["shards"] = summary.shards;
  out["filled"] = summary.filled;
  out["already_cached"] = summary.already_cached;
  out["skipped"] = summary.skipped;
  out["bytes_copied"] = summary.bytes_copied;
  return out;
}

std::string CachePutCheckpointBinding(const std::string& path, const std::string& cache_dir,
                                      uint32_t keep, const std::string& cache_group) {
  std::string cached;
  Status status;
  {
    py::gil_scoped_release release;
    status = CachePutCheckpoint(path, cache_dir, keep, &cached, cache_group);
  }
  ThrowIfError(status);
  return cached;
}

py::object CacheLatestCheckpointBinding(const std::string& directory,
                                        const std::string& cache_dir) {
  std::string cached, source;
  Status status = CacheLatestCheckpoint(directory, cache_dir, &cached, &source);
  if (status.code() == Status::Code::kNotFound) return py::none();
  ThrowIfError(status);
  return py::make_tuple(cached, source);
}

void BindDataset(py::module_& module) {
  py::class_<PyDataset>(module, "Dataset")
      .def(py::init<const std::string&, const std::string&, bool, py::dict, const std::string&,
                    uint32_t, py::dict>(),
           py::arg("path"), py::arg("format") = "auto", py::arg("allow_external_paths") = false,
           py::arg("cache") = py::dict(), py::arg("token_dtype") = "auto",
           py::arg("seq_len") = 1024, py::arg("webdataset") = py::dict())
      .def("__len__", &PyDataset::size)
      .def("read", &PyDataset::Read, py::arg("index"))
      .def_property_readonly("format", &PyDataset::format)
      .def_property_readonly("path", &PyDataset::path)
      .def_property_readonly("classes", &PyDataset::classes)
      .def_property_readonly("integer_labels", &PyDataset::integer_labels)
      .def_property_readonly("shards", &PyDataset::shards)
      .def_property_readonly("tokens", &PyDataset::tokens)
      .def("storage_stats", [](const PyDataset& self) {
        StorageStats stats = self.dataset().storage_stats();
        py::dict out;
        out["source_opens"] = stats.source_opens;
        out["source_stats"] = stats.source_stats;
        out["source_reads"] = stats.source_reads;
        out["source_bytes"] = stats.source_bytes;
        out["cache_reads"] = stats.cache_reads;
        out["open_files"] = stats.open_files;
        return out;
      });
  module.def("pack", &PackBinding, py::arg("source"), py::arg("destination"), py::arg("format"),
             py::arg("shard_size"), py::arg("workers"), py::arg("overwrite"),
             py::arg("progress") = py::none(), py::arg("allow_external_paths") = false);
  module.def("cache_stat", &CacheStatBinding, py::arg("cache_dir"));
  module.def("cache_clear", &CacheClearBinding, py::arg("cache_dir"), py::arg("dataset") = "");
  module.def("cache_warm", &CacheWarmBinding, py::arg("source"), py::arg("cache"),
             py::arg("progress") = py::none());
  module.def("cache_put_checkpoint", &CachePutCheckpointBinding, py::arg("path"),
             py::arg("cache_dir"), py::arg("keep"), py::arg("cache_group") = "");
  module.def("cache_latest_checkpoint", &CacheLatestCheckpointBinding, py::arg("directory"),
             py::arg("cache_dir"));
  module.def("format_names", &FormatNames,
             "Every name format= accepts: \"auto\", then the registered formats.");
  module.def("pack_format_names", &ShardFormatNames,
             "The formats pack writes (registered formats with a writer).");
  module.def("token_format_names", &TokenFormatNames,
             "The token corpus formats (`gpufeed index` describes them in a gpufeed.json).");
  module.def("verify", &VerifyBinding, py::arg("path"), py::arg("format") = "auto",
             py::arg("allow_external_paths") = false, py::arg("token_dtype") = "auto",
             py::arg("webdataset") = py::dict());
  module.def("write_index", &WriteIndexBinding, py::arg("rec_path"), py::arg("idx_path"));
  module.def("write_tar_index", &WriteTarIndexBinding, py::arg("tar_path"),
             py::arg("index_path") = "");
  module.def("write_token_manifest", &WriteTokenManifestBinding, py::arg("path"),
             py::arg("format") = "auto", py::arg("token_dtype") = "auto",
             py::arg("allow_external_paths") = false);
}

}  // namespace gpufeed::python
