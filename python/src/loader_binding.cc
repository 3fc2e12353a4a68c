// _core.Loader: the C++ Loader for the Python DataLoader. It takes a
// _core.LoaderOptions (options_binding.cc) and the _core.DatasetOptions its
// dataset opens with (dataset_options_binding.cc), and hands out batches as
// _core.Batch (batch_binding.h), whose tensors export DLPack (zero copy);
// Stats gives a _core.LoaderStats (stats_binding.cc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "batch_binding.h"
#include "binding_util.h"
#include "gpufeed/loader.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

// How the loader's dataset is opened: `dataset` as given, except that token
// windows set the corpus's seq_len (LoaderOptions::tokens.seq_len).
DatasetOptions LoaderDatasetOptions(const LoaderOptions& options, DatasetOptions dataset) {
  if (options.transform == TransformKind::kTokenWindows) {
    dataset.tokens.seq_len = options.tokens.seq_len;
  }
  return dataset;
}

// The labels of the dataset's first record, at least 1: label_count for
// float labels when the caller gave none.
Status CountFirstRecordLabels(const Dataset& dataset, int* label_count) {
  Record record;
  Status status = dataset.Read(0, &record);
  if (status.ok()) *label_count = std::max(1, static_cast<int>(record.labels.size()));
  return status;
}

class PyLoader {
 public:
  // Opens the dataset at `path` once and the loader on it. count_labels:
  // options.label_count is taken from the first record (see
  // CountFirstRecordLabels).
  PyLoader(py::object path, LoaderOptions options, const DatasetOptions& dataset_options_given,
           bool count_labels) {
    DatasetOptions dataset_options = LoaderDatasetOptions(options, dataset_options_given);
    std::string dataset_path = py::str(path);
    Status status;
    {
      py::gil_scoped_release release;
      std::unique_ptr<Dataset> dataset;
      status = Dataset::Open(dataset_path, dataset_options, &dataset);
      if (status.ok() && count_labels) {
        status = CountFirstRecordLabels(*dataset, &options.label_count);
      }
      if (status.ok()) {
        std::shared_ptr<const Dataset> shared = std::move(dataset);
        status = Loader::Open(shared, options, &loader_);
      }
    }
    ThrowIfError(status);
  }

  // The next batch, or None at the end of the epoch.
  // timeout_seconds > 0: RuntimeError when no batch came within it (as
  // torch's DataLoader(timeout=)).
  std::optional<BatchView> Next(double timeout_seconds) {
    auto batch = std::make_shared<Batch>();
    const auto started = std::chrono::steady_clock::now();
    while (true) {
      Status status;
      bool ready = false;
      {
        py::gil_scoped_release release;
        int wait_ms = 100;
        if (timeout_seconds > 0) {
          double left = timeout_seconds - std::chrono::duration<double>(
                                              std::chrono::steady_clock::now() - started)
                                              .count();
          wait_ms = static_cast<int>(std::max(1.0, std::min(100.0, left * 1e3)));
        }
        status = Native().NextFor(batch.get(), wait_ms, &ready);
      }
      ThrowIfError(status);
      if (ready) break;
      // Ctrl-C (or any pending signal) surfaces within 100 ms.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (timeout_seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >=
              timeout_seconds) {
        char message[96];
        std::snprintf(message, sizeof(message), "DataLoader timed out after %g seconds",
                      timeout_seconds);
        throw std::runtime_error(message);
      }
    }
    if (batch->end_of_epoch()) return std::nullopt;
    return ViewOf(batch);
  }

  void SetEpoch(uint64_t epoch) {
    Loader& loader = Native();
    Status status;
    {
      py::gil_scoped_release release;
      status = loader.SetEpoch(epoch);
    }
    ThrowIfError(status);  // with the GIL: it raises
  }

  py::dict State() const {
    LoaderState state = Native().State();
    py::dict out;
    out["seed"] = state.seed;
    out["epoch"] = state.epoch;
    out["consumed"] = state.consumed;
    out["shuffle"] = static_cast<int>(state.shuffle);
    out["shuffle_window_shards"] = state.shuffle_window_shards;
    out["num_nodes"] = state.split.num_nodes;
    out["world_size"] = state.split.world_size;
    out["split_batch_size"] = state.split.batch_size;
    out["drop_last"] = state.split.drop_last;
    py::list earlier;
    for (const NodeSplitSegment& segment : state.earlier_splits) {
      earlier.append(py::make_tuple(segment.until, segment.split.num_nodes,
                                    segment.split.world_size, segment.split.batch_size,
                                    segment.split.drop_last));
    }
    out["earlier_splits"] = earlier;
    out["samples"] = state.samples;
    if (state.seq_len != 0) {
      out["seq_len"] = state.seq_len;
      out["token_block_bytes"] = state.token_block_bytes;
    }
    return out;
  }

  void Restore(py::dict state) {
    LoaderState restored;
    restored.seed = state["seed"].cast<uint64_t>();
    restored.epoch = state["epoch"].cast<uint64_t>();
    restored.consumed = state["consumed"].cast<uint64_t>();
    restored.shuffle = static_cast<ShuffleMode>(state["shuffle"].cast<int>());
    restored.shuffle_window_shards = state["shuffle_window_shards"].cast<uint32_t>();
    // Absent from older states: unchecked.
    if (state.contains("samples")) restored.samples = state["samples"].cast<uint64_t>();
    if (state.contains("seq_len")) {
      restored.seq_len = state["seq_len"].cast<uint32_t>();
      restored.token_block_bytes = state["token_block_bytes"].cast<uint32_t>();
    }
    // States from before node-partitioned shuffle lack the split: this
    // loader's own (only kNode orders depend on it).
    restored.split = Native().State().split;
    if (state.contains("num_nodes")) {
      restored.split.num_nodes = state["num_nodes"].cast<uint32_t>();
      restored.split.world_size = state["world_size"].cast<uint32_t>();
      restored.split.batch_size = state["split_batch_size"].cast<uint32_t>();
      restored.split.drop_last = state["drop_last"].cast<bool>();
    }
    if (state.contains("earlier_splits")) {
      for (py::handle item : state["earlier_splits"]) {
        py::sequence segment = item.cast<py::sequence>();
        if (segment.size() != 5) throw py::value_error("earlier_splits entries have 5 fields");
        NodeSplitSegment parsed;
        parsed.until = segment[0].cast<uint64_t>();
        parsed.split.num_nodes = segment[1].cast<uint32_t>();
        parsed.split.world_size = segment[2].cast<uint32_t>();
        parsed.split.batch_size = segment[3].cast<uint32_t>();
        parsed.split.drop_last = segment[4].cast<bool>();
        restored.earlier_splits.push_back(parsed);
      }
    }
    Status status;
    {
      py::gil_scoped_release release;
      status = Native().Restore(restored);
    }
    ThrowIfError(status);
  }

  LoaderStats Stats(StatsSpan span) const { return Native().Stats(span); }

  // Loader::SkippedSamples as dicts {sample, path, offset (None: unknown),
  // reason}.
  py::list SkippedSamples() const {
    std::vector<SkippedSample> skipped = Native().SkippedSamples();
    py::list out;
    for (const SkippedSample& s : skipped) {
      py::dict entry;
      entry["sample"] = s.sample;
      entry["path"] = s.path;
      entry["offset"] = s.offset == UINT64_MAX ? py::object(py::none()) : py::int_(s.offset);
      entry["reason"] = s.reason;
      out.append(std::move(entry));
    }
    return out;
  }

  uint64_t batches_per_epoch() const { return Native().batches_per_epoch(); }
  uint64_t epoch() const { return Native().epoch(); }

  void Close() {
    py::gil_scoped_release release;
    loader_.reset();
  }

 private:
  // The loader, or ValueError once close() ran (never a null dereference).
  Loader& Native() const {
    if (!loader_) throw py::value_error("the loader is closed");
    return *loader_;
  }
  std::unique_ptr<Loader> loader_;
};

}  // namespace

void BindLoader(py::module_& module) {
  module.def(
      "cuda_status",
      [](int device_id) {
        Status status = CudaDeviceStatus(device_id);
        return status.ok() ? std::string() : status.message();
      },
      py::arg("device_id") = 0,
      "'' when CUDA device `device_id` is usable by gpufeed, else the reason.");
  py::class_<PyLoader>(module, "Loader")
      .def(py::init<py::object, LoaderOptions, const DatasetOptions&, bool>(), py::arg("path"),
           py::arg("options"), py::arg("dataset") = DatasetOptions(),
           py::arg("count_labels") = false)
      .def("next", &PyLoader::Next, py::arg("timeout") = 0.0)
      .def("set_epoch", &PyLoader::SetEpoch)
      .def("state", &PyLoader::State)
      .def("restore", &PyLoader::Restore)
      .def("stats", &PyLoader::Stats, py::arg("span") = StatsSpan::kSinceOpen)
      .def("skipped_samples", &PyLoader::SkippedSamples)
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("epoch", &PyLoader::epoch)
      .def("close", &PyLoader::Close);
}

}  // namespace gpufeed::python
