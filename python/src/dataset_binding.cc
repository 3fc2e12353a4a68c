// Bindings for Dataset, Pack, Verify and WriteRecordIOIndex.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>

#include "binding_util.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

DatasetFormat FormatFromName(const std::string& name) {
  DatasetFormat format = DatasetFormat::kAuto;
  ThrowIfError(ParseFormat(name, &format));
  return format;
}

class PyDataset {
 public:
  PyDataset(const std::string& path, const std::string& format, bool allow_external_paths) {
    DatasetOptions options;
    options.format = FormatFromName(format);
    options.allow_external_paths = allow_external_paths;
    Status status;
    {
      py::gil_scoped_release release;
      status = Dataset::Open(path, options, &dataset_);
    }
    ThrowIfError(status);
  }

  uint64_t size() const { return dataset_->size(); }

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
  if (format == "recordio") {
    options.format = ShardFormat::kRecordIO;
  } else if (format == "lmdb") {
    options.format = ShardFormat::kLmdb;
  } else {
    ThrowIfError(Status::InvalidArgument("pack format must be \"recordio\" or \"lmdb\", not \"" +
                                         format + "\""));
  }
  options.shard_size = shard_size;
  options.workers = workers;
  options.overwrite = overwrite;
  options.allow_external_paths = allow_external_paths;
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  // Python is called at most ~20 times a second, and Ctrl-C is honoured there.
  auto last_call = std::chrono::steady_clock::time_point();
  bool interrupted = false;
  options.progress = [&](uint64_t done, uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_call < std::chrono::milliseconds(50)) return;
    last_call = now;
    py::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {
      interrupted = true;
      cancel = true;
      return;
    }
    if (!progress.is_none()) {
      try {
        progress(done, total);
      } catch (py::error_already_set& error) {
        error.restore();
        interrupted = true;
        cancel = true;
      }
    }
  };
  PackSummary summary;
  Status status;
  {
    py::gil_scoped_release release;
    status = Pack(source, destination, options, &summary);
  }
  if (interrupted && PyErr_Occurred()) throw py::error_already_set();
  ThrowIfError(status);
  py::dict out;
  out["records"] = summary.records;
  out["shards"] = summary.shards;
  out["bytes"] = summary.bytes;
  out["seconds"] = summary.seconds;
  return out;
}

py::dict VerifyBinding(const std::string& path, const std::string& format,
                       bool allow_external_paths) {
  DatasetOptions options;
  options.format = FormatFromName(format);
  options.allow_external_paths = allow_external_paths;
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

}  // namespace

void BindDataset(py::module_& module) {
  py::class_<PyDataset>(module, "Dataset")
      .def(py::init<const std::string&, const std::string&, bool>(), py::arg("path"),
           py::arg("format") = "auto", py::arg("allow_external_paths") = false)
      .def("__len__", &PyDataset::size)
      .def("read", &PyDataset::Read, py::arg("index"))
      .def_property_readonly("format", &PyDataset::format)
      .def_property_readonly("path", &PyDataset::path)
      .def_property_readonly("classes", &PyDataset::classes)
      .def_property_readonly("integer_labels", &PyDataset::integer_labels)
      .def_property_readonly("shards", &PyDataset::shards);
  module.def("pack", &PackBinding, py::arg("source"), py::arg("destination"), py::arg("format"),
             py::arg("shard_size"), py::arg("workers"), py::arg("overwrite"),
             py::arg("progress") = py::none(), py::arg("allow_external_paths") = false);
  module.def("verify", &VerifyBinding, py::arg("path"), py::arg("format") = "auto",
             py::arg("allow_external_paths") = false);
  module.def("write_index", &WriteIndexBinding, py::arg("rec_path"), py::arg("idx_path"));
}

}  // namespace gpufeed::python
