// Helpers shared by the binding files: Status -> Python exception, lenient
// text, value semantics for the bound structs.
#ifndef GPUFEED_PYTHON_BINDING_UTIL_H_
#define GPUFEED_PYTHON_BINDING_UTIL_H_

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed::python {

// Raises the gpufeed exception matching status.code() (classes defined in
// gpufeed/_errors.py). REQUIRES: the GIL is held and !status.ok().
[[noreturn]] void RaiseStatus(const Status& status);

// A Python str from bytes that may not be UTF-8 (paths, keys and messages
// come from disk): invalid bytes become backslash escapes, never an error.
inline pybind11::str LossyStr(const std::string& text) {
  return pybind11::reinterpret_steal<pybind11::str>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace"));
}
inline pybind11::list LossyList(const std::vector<std::string>& texts) {
  pybind11::list out;
  for (const std::string& text : texts) out.append(LossyStr(text));
  return out;
}

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

// A read-only text field of a bound struct, decoded leniently (LossyStr):
// paths, keys and messages come from disk or the machine, never a
// UnicodeDecodeError.
template <typename Struct>
void DefText(pybind11::class_<Struct>& bound, const char* name, std::string Struct::*field) {
  bound.def_property_readonly(name,
                              [field](const Struct& value) { return LossyStr(value.*field); });
}

// copy.copy and copy.deepcopy of a bound options struct: the structs are
// plain values.
template <typename Options>
void DefValueMethods(pybind11::class_<Options>& bound) {
  bound.def("__copy__", [](const Options& options) { return Options(options); })
      .def("__deepcopy__", [](const Options& options, pybind11::dict) { return Options(options); },
           pybind11::arg("memo"));
}

// The parts of gpufeed._core, one per file; core.cc calls them in this
// order (signatures and default arguments name the enums and the option,
// result and batch types, which must be bound before them).
void BindEnums(pybind11::module_& module);           // enum_binding.cc
void BindOptions(pybind11::module_& module);         // options_binding.cc
void BindDatasetOptions(pybind11::module_& module);  // dataset_options_binding.cc
void BindDatasetResults(pybind11::module_& module);  // dataset_results_binding.cc
void BindDataset(pybind11::module_& module);
void BindTransform(pybind11::module_& module);
void BindStats(pybind11::module_& module);    // stats_binding.cc
void BindBatch(pybind11::module_& module);    // batch_binding.cc
void BindEmbedding(pybind11::module_& module);  // embedding_binding.cc
void BindLoader(pybind11::module_& module);

}  // namespace gpufeed::python

#endif  // GPUFEED_PYTHON_BINDING_UTIL_H_
