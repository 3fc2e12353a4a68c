// _core.EmbeddingTable: rows of an embedding table by id
// (include/gpufeed/embedding.h), with _core.EmbeddingTableOptions field for
// field and _core.EmbeddingStats as read-only fields in the header's order
// (gpufeed.EmbeddingTable.stats() is made from these properties in this
// order, so a field bound here reaches the dict with no other change).
//
// The table is held by std::shared_ptr: the loader binding takes the same
// object (a table shared by the pipeline and the Python caller). Lookup
// releases the GIL for the native call (EmbeddingTable::Lookup is
// thread-safe): Python threads looking up at once run in parallel.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "binding_util.h"
#include "gpufeed/embedding.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

// dtype: None (from the .npy header), a TensorDtype, or its text name
// ("float32", "bfloat16", ...; an unknown one is a ValueError naming it).
std::optional<TensorDtype> DtypeFromPython(const py::object& value) {
  if (value.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(value)) {
    // The bound enum's class, found from one of its values: pybind11 3's
    // type::of<T>() accepts only class_ types, not enums.
    const py::type dtype_class = py::type::of(py::cast(TensorDtype::kFloat32));
    return dtype_class(value).cast<TensorDtype>();
  }
  return value.cast<TensorDtype>();
}

void BindEmbeddingOptions(py::module_& module) {
  py::class_<EmbeddingTableOptions> options(module, "EmbeddingTableOptions");
  options.def(py::init<>())
      .def_readwrite("dim", &EmbeddingTableOptions::dim)
      .def_property(
          "dtype",
          [](const EmbeddingTableOptions& self) -> py::object {
            if (!self.dtype) return py::none();
            return py::cast(*self.dtype);
          },
          [](EmbeddingTableOptions& self, const py::object& value) {
            self.dtype = DtypeFromPython(value);
          },
          "None (a .npy's own), a TensorDtype or its name: float32, float16, bfloat16, int8, "
          "uint8.")
      .def_readwrite("cache_bytes", &EmbeddingTableOptions::cache_bytes)
      .def_readwrite("cache", &EmbeddingTableOptions::cache)
      .def_readwrite("preload", &EmbeddingTableOptions::preload)
      .def_readwrite("io", &EmbeddingTableOptions::io)
      .def_readwrite("coalesce_gap_bytes", &EmbeddingTableOptions::coalesce_gap_bytes);
  DefValueMethods(options);
}

void BindEmbeddingStats(py::module_& module) {
  py::class_<EmbeddingStats>(module, "EmbeddingStats",
                             "EmbeddingTable.stats(): counters since open or reset_stats().")
      .def_readonly("lookups", &EmbeddingStats::lookups)
      .def_readonly("rows", &EmbeddingStats::rows)
      .def_readonly("ram_hits", &EmbeddingStats::ram_hits)
      .def_readonly("nvme_rows", &EmbeddingStats::nvme_rows)
      .def_readonly("source_rows", &EmbeddingStats::source_rows)
      .def_readonly("nvme_reads", &EmbeddingStats::nvme_reads)
      .def_readonly("nvme_bytes", &EmbeddingStats::nvme_bytes)
      .def_readonly("source_reads", &EmbeddingStats::source_reads)
      .def_readonly("source_bytes", &EmbeddingStats::source_bytes)
      .def_readonly("admitted", &EmbeddingStats::admitted)
      .def_readonly("rejected", &EmbeddingStats::rejected)
      .def_readonly("evicted", &EmbeddingStats::evicted)
      .def_readonly("resident_rows", &EmbeddingStats::resident_rows)
      .def_readonly("resident_bytes", &EmbeddingStats::resident_bytes)
      .def_readonly("capacity_rows", &EmbeddingStats::capacity_rows)
      .def_readonly("preload_bytes", &EmbeddingStats::preload_bytes)
      .def_readonly("p50_us", &EmbeddingStats::p50_us)
      .def_readonly("p99_us", &EmbeddingStats::p99_us)
      .def_readonly("mean_us", &EmbeddingStats::mean_us)
      .def_readonly("lookup_seconds", &EmbeddingStats::lookup_seconds);
}

// The ids of a lookup: a 1-D C-contiguous int64 buffer (numpy int64, a CPU
// torch tensor's .numpy()). Anything else is a ValueError saying what was
// given; the caller converts.
const int64_t* CheckedIds(const py::buffer_info& ids) {
  const std::string& format = ids.format;
  const bool int64 = ids.itemsize == 8 && !format.empty() &&
                     (format.back() == 'q' || format.back() == 'l') &&
                     format.find_first_of(">!") == std::string::npos;
  if (!int64) {
    throw py::value_error("EmbeddingTable.lookup: ids must be int64, not a buffer of format '" +
                          format + "' (" + std::to_string(ids.itemsize) + " bytes an item)");
  }
  if (ids.ndim != 1) {
    throw py::value_error("EmbeddingTable.lookup: ids must be 1-D, not " +
                          std::to_string(ids.ndim) + "-D");
  }
  if (ids.shape[0] > 1 && ids.strides[0] != 8) {
    throw py::value_error("EmbeddingTable.lookup: ids must be contiguous (stride " +
                          std::to_string(ids.strides[0]) + " bytes)");
  }
  return static_cast<const int64_t*>(ids.ptr);
}

// True when `buffer` is C-contiguous (every stride the product of the
// extents after it).
bool IsCContiguous(const py::buffer_info& buffer) {
  py::ssize_t expected = buffer.itemsize;
  for (py::ssize_t axis = buffer.ndim - 1; axis >= 0; --axis) {
    if (buffer.shape[axis] > 1 && buffer.strides[axis] != expected) return false;
    expected *= buffer.shape[axis];
  }
  return true;
}

// Looks up ids into out with the GIL released. REQUIRES: out holds
// count * row_bytes() writable bytes that stay valid during the call.
void LookupInto(EmbeddingTable& table, const int64_t* ids, size_t count, void* out) {
  Status status;
  {
    py::gil_scoped_release release;
    status = table.Lookup(ids, count, out);
  }
  ThrowIfError(status);
}

void LookupBuffer(EmbeddingTable& table, const py::buffer& ids_object,
                  const py::buffer& out_object) {
  py::buffer_info ids = ids_object.request();
  const int64_t* id_data = CheckedIds(ids);
  const size_t count = ids.ndim == 1 ? static_cast<size_t>(ids.shape[0]) : 0;
  py::buffer_info out = out_object.request(/*writable=*/true);
  const size_t out_bytes = static_cast<size_t>(out.size) * static_cast<size_t>(out.itemsize);
  if (out_bytes != count * table.row_bytes()) {
    throw py::value_error("EmbeddingTable.lookup: out has " + std::to_string(out_bytes) +
                          " bytes; " + std::to_string(count) + " rows of " +
                          std::to_string(table.row_bytes()) + " bytes need " +
                          std::to_string(count * table.row_bytes()));
  }
  if (!IsCContiguous(out)) {
    throw py::value_error("EmbeddingTable.lookup: out must be C-contiguous");
  }
  // The Py_buffer views (ids, out) keep both objects exported, so their
  // memory stays put while the GIL is released.
  LookupInto(table, id_data, count, out.ptr);
}

void LookupAddress(EmbeddingTable& table, const py::buffer& ids_object, uintptr_t address,
                   size_t out_bytes) {
  py::buffer_info ids = ids_object.request();
  const int64_t* id_data = CheckedIds(ids);
  const size_t count = static_cast<size_t>(ids.shape[0]);
  if (out_bytes != count * table.row_bytes()) {
    throw py::value_error("EmbeddingTable.lookup: out_bytes is " + std::to_string(out_bytes) +
                          "; " + std::to_string(count) + " rows of " +
                          std::to_string(table.row_bytes()) + " bytes need " +
                          std::to_string(count * table.row_bytes()));
  }
  if (count > 0 && address == 0) {
    throw py::value_error("EmbeddingTable.lookup: out_address is null");
  }
  LookupInto(table, id_data, count, reinterpret_cast<void*>(address));
}

void BindEmbeddingTableClass(py::module_& module) {
  py::class_<EmbeddingTable, std::shared_ptr<EmbeddingTable>> table(
      module, "EmbeddingTable", "Rows of an embedding table by id (gpufeed.EmbeddingTable).");
  table
      .def(py::init([](const std::string& path, const EmbeddingTableOptions& options) {
             std::shared_ptr<EmbeddingTable> opened;
             Status status;
             {
               py::gil_scoped_release release;
               status = EmbeddingTable::Open(path, options, &opened);
             }
             ThrowIfError(status);
             return opened;
           }),
           py::arg("path"), py::arg("options") = EmbeddingTableOptions())
      .def_property_readonly("path",
                             [](const EmbeddingTable& self) { return LossyStr(self.path()); })
      .def_property_readonly("rows", &EmbeddingTable::rows)
      .def_property_readonly("dim", &EmbeddingTable::dim)
      .def_property_readonly("dtype", &EmbeddingTable::dtype)
      .def_property_readonly("row_bytes", &EmbeddingTable::row_bytes)
      .def("lookup", &LookupBuffer, py::arg("ids"), py::arg("out"),
           "Rows ids[i] into out (C-contiguous, writable, len(ids) * row_bytes bytes); ids a "
           "1-D contiguous int64 buffer. The GIL is released during the lookup.")
      .def("lookup", &LookupAddress, py::arg("ids"), py::arg("out_address"), py::arg("out_bytes"),
           "As lookup(ids, out), into out_bytes bytes at the address out_address (the caller "
           "keeps that memory alive and unmoved during the call).")
      .def("stats", [](const EmbeddingTable& self) { return self.Stats(); })
      .def("reset_stats", [](EmbeddingTable& self) { self.ResetStats(); });
}

}  // namespace

void BindEmbedding(py::module_& module) {
  BindEmbeddingOptions(module);
  BindEmbeddingStats(module);
  BindEmbeddingTableClass(module);
}

}  // namespace gpufeed::python
