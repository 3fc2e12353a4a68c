// gpufeed._core: the module definition and Status -> exception mapping.
// Only this layer turns a Status into an exception; the GIL is released
// around every call that may block on I/O.
#include <pybind11/pybind11.h>

#include "binding_util.h"
#include "gpufeed/dataset.h"

namespace py = pybind11;

namespace gpufeed::python {

void RaiseStatus(const Status& status) {
  const char* name = "Error";
  switch (status.code()) {
    case Status::Code::kCorruption: name = "CorruptRecordError"; break;
    case Status::Code::kNotFound: name = "NotFoundError"; break;
    case Status::Code::kPermissionDenied: name = "PermissionDeniedError"; break;
    case Status::Code::kInvalidArgument: name = "InvalidArgumentError"; break;
    case Status::Code::kOutOfRange: name = "OutOfRangeError"; break;
    case Status::Code::kNotSupported: name = "NotSupportedError"; break;
    case Status::Code::kAlreadyExists: name = "AlreadyExistsError"; break;
    case Status::Code::kIOError: name = "StorageIOError"; break;
    case Status::Code::kCancelled: name = "CancelledError"; break;
    default: break;
  }
  py::object errors = py::module_::import("gpufeed._errors");
  py::object type = errors.attr(name);
  if (status.error_number() != 0 &&
      PyObject_IsSubclass(type.ptr(), PyExc_OSError) == 1) {
    // OSError(errno, message): the exception's .errno is the system call's.
    py::tuple args = py::make_tuple(status.error_number(), LossyStr(status.message()));
    PyErr_SetObject(type.ptr(), args.ptr());
  } else {
    PyErr_SetObject(type.ptr(), LossyStr(status.message()).ptr());
  }
  throw py::error_already_set();
}

}  // namespace gpufeed::python

PYBIND11_MODULE(_core, module) {
  module.doc() = "gpufeed native core (private: use the gpufeed package)";
  module.def("build_info", [] {
    gpufeed::BuildInfo info = gpufeed::GetBuildInfo();
    py::dict out;
    out["version"] = info.version;
    out["with_cuda"] = info.with_cuda;
    out["with_io_uring"] = info.with_io_uring;
    out["with_webp"] = info.with_webp;
    out["with_tiff"] = info.with_tiff;
    return out;
  });
  gpufeed::python::BindEnums(module);
  gpufeed::python::BindOptions(module);
  gpufeed::python::BindDatasetOptions(module);
  gpufeed::python::BindDatasetResults(module);
  gpufeed::python::BindDataset(module);
  gpufeed::python::BindTransform(module);
  gpufeed::python::BindStats(module);
  gpufeed::python::BindBatch(module);
  gpufeed::python::BindEmbedding(module);
  gpufeed::python::BindLoader(module);
}
