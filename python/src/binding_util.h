// Helpers shared by the binding files: Status -> Python exception.
#ifndef GPUFEED_PYTHON_BINDING_UTIL_H_
#define GPUFEED_PYTHON_BINDING_UTIL_H_

#include <pybind11/pybind11.h>

#include "gpufeed/status.h"

namespace gpufeed::python {

// Raises the gpufeed exception matching status.code() (classes defined in
// gpufeed/_errors.py). REQUIRES: the GIL is held and !status.ok().
[[noreturn]] void RaiseStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) RaiseStatus(status);
}

void BindDataset(pybind11::module_& module);

}  // namespace gpufeed::python

#endif  // GPUFEED_PYTHON_BINDING_UTIL_H_
