// Bindings for Dataset, Pack, Verify, the index writers and the cache
// tools. They take the option structs of dataset_options_binding.cc and
// return the result structs of dataset_results_binding.cc.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

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

class PyDataset {
 public:
  PyDataset(const std::string& path, const DatasetOptions& options) {
    Status status;
    {
      py::gil_scoped_release release;
      status = Dataset::Open(path, options, &dataset_);
    }
    ThrowIfError(status);
  }

  uint64_t size() const { return dataset_->size(); }

  Record Read(uint64_t index) const {
    Record record;
    Status status;
    {
      py::gil_scoped_release release;
      status = dataset_->Read(index, &record);
    }
    ThrowIfError(status);
    return record;
  }

  std::string format() const { return FormatName(dataset_->format()); }
  py::str path() const { return LossyStr(dataset_->path()); }
  py::list classes() const { return LossyList(dataset_->classes()); }
  bool integer_labels() const { return dataset_->integer_labels(); }
  // Token corpora: what the corpus holds; None for the other formats.
  std::optional<TokenCorpusInfo> tokens() const {
    const TokenCorpusInfo* info = dataset_->token_info();
    if (info == nullptr) return std::nullopt;
    return *info;
  }
  // Tabular datasets: what a row holds; None for the other formats.
  std::optional<TabularInfo> tabular() const {
    const TabularInfo* info = dataset_->tabular_info();
    if (info == nullptr) return std::nullopt;
    return *info;
  }
  std::vector<ShardInfo> shards() const { return dataset_->shards(); }
  StorageStats storage_stats() const { return dataset_->storage_stats(); }

 private:
  std::unique_ptr<Dataset> dataset_;
};

// `options`' progress and cancel are this call's: the relay's.
PackSummary PackBinding(const std::string& source, const std::string& destination,
                        PackOptions options, py::object progress) {
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
  return summary;
}

VerifyReport VerifyBinding(const std::string& path, const DatasetOptions& options) {
  VerifyReport report;
  Status status;
  {
    py::gil_scoped_release release;
    status = Verify(path, options, &report);
  }
  ThrowIfError(status);
  return report;
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

// Reads options.tabular.index_dir, cache.cache_dir and allow_external_paths.
std::vector<std::tuple<std::string, uint64_t, std::string>> WriteLineIndexBinding(
    const std::string& path, const DatasetOptions& options) {
  std::vector<LineIndexWritten> written;
  Status status;
  {
    py::gil_scoped_release release;
    status = WriteLineIndex(path, options, &written);
  }
  ThrowIfError(status);
  std::vector<std::tuple<std::string, uint64_t, std::string>> result;
  for (const LineIndexWritten& entry : written) {
    result.emplace_back(entry.file, entry.lines, entry.index_path);
  }
  return result;
}

// Reads options.format, tokens.token_dtype and allow_external_paths.
py::tuple WriteTokenManifestBinding(const std::string& path, const DatasetOptions& options) {
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

CacheReport CacheStatBinding(const std::string& cache_dir) {
  CacheReport report;
  Status status;
  {
    py::gil_scoped_release release;
    status = CacheStat(cache_dir, &report);
  }
  ThrowIfError(status);
  return report;
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

CacheWarmSummary CacheWarmBinding(const std::string& source, const CacheOptions& options,
                                  py::object progress, std::optional<DatasetOptions> dataset) {
  CacheWarmSummary summary;
  ProgressRelay relay(progress, nullptr);
  auto report = relay.Callback();
  Status status;
  {
    py::gil_scoped_release release;
    if (dataset) {
      // The dataset's format options (records' schema, ...), copied into `options`' cache.
      DatasetOptions opened = *dataset;
      opened.cache = options;
      status = CacheWarm(source, opened, report, &summary);
    } else {
      status = CacheWarm(source, options, report, &summary);
    }
  }
  relay.RaiseIfInterrupted();
  ThrowIfError(status);
  return summary;
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

void BindDatasetClass(py::module_& module) {
  py::class_<PyDataset>(module, "Dataset")
      .def(py::init<const std::string&, const DatasetOptions&>(), py::arg("path"),
           py::arg("options") = DatasetOptions())
      .def("__len__", &PyDataset::size)
      .def("read", &PyDataset::Read, py::arg("index"))
      .def_property_readonly("format", &PyDataset::format)
      .def_property_readonly("path", &PyDataset::path)
      .def_property_readonly("classes", &PyDataset::classes)
      .def_property_readonly("integer_labels", &PyDataset::integer_labels)
      .def_property_readonly("shards", &PyDataset::shards)
      .def_property_readonly("tokens", &PyDataset::tokens)
      .def_property_readonly("tabular", &PyDataset::tabular)
      .def("storage_stats", &PyDataset::storage_stats);
}

void BindCacheFunctions(py::module_& module) {
  module.def("cache_stat", &CacheStatBinding, py::arg("cache_dir"));
  module.def("cache_clear", &CacheClearBinding, py::arg("cache_dir"), py::arg("dataset") = "");
  module.def("cache_warm", &CacheWarmBinding, py::arg("source"), py::arg("options"),
             py::arg("progress") = py::none(), py::arg("dataset") = py::none());
  module.def("cache_put_checkpoint", &CachePutCheckpointBinding, py::arg("path"),
             py::arg("cache_dir"), py::arg("keep"), py::arg("cache_group") = "");
  module.def("cache_latest_checkpoint", &CacheLatestCheckpointBinding, py::arg("directory"),
             py::arg("cache_dir"));
}

}  // namespace

void BindDataset(py::module_& module) {
  BindDatasetClass(module);
  BindCacheFunctions(module);
  module.def("pack", &PackBinding, py::arg("source"), py::arg("destination"), py::arg("options"),
             py::arg("progress") = py::none());
  module.def("format_names", &FormatNames,
             "Every name format= accepts: \"auto\", then the registered formats.");
  module.def("pack_format_names", &ShardFormatNames,
             "The formats pack writes (registered formats with a writer).");
  module.def("token_format_names", &TokenFormatNames,
             "The token corpus formats (`gpufeed index` describes them in a gpufeed.json).");
  module.def("verify", &VerifyBinding, py::arg("path"), py::arg("options") = DatasetOptions());
  module.def("write_index", &WriteIndexBinding, py::arg("rec_path"), py::arg("idx_path"));
  module.def("write_tar_index", &WriteTarIndexBinding, py::arg("tar_path"),
             py::arg("index_path") = "");
  module.def("write_line_index", &WriteLineIndexBinding, py::arg("path"),
             py::arg("options") = DatasetOptions());
  module.def("write_token_manifest", &WriteTokenManifestBinding, py::arg("path"),
             py::arg("options") = DatasetOptions());
}

}  // namespace gpufeed::python
