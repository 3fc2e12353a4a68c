// The dtype functions of include/gpufeed/options.h (TensorDtype): in util,
// the bottom component, because the decode pool and the batches both use them.
#include "gpufeed/options.h"

namespace gpufeed {

size_t TensorDtypeSize(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8:
    case TensorDtype::kInt8: return 1;
    case TensorDtype::kFloat16:
    case TensorDtype::kBfloat16: return 2;
    case TensorDtype::kInt32:
    case TensorDtype::kFloat32: return 4;
    case TensorDtype::kInt64: return 8;
  }
  return 1;
}

const char* TensorDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8: return "uint8";
    case TensorDtype::kInt32: return "int32";
    case TensorDtype::kInt64: return "int64";
    case TensorDtype::kFloat16: return "float16";
    case TensorDtype::kBfloat16: return "bfloat16";
    case TensorDtype::kFloat32: return "float32";
    case TensorDtype::kInt8: return "int8";
  }
  return "unknown";
}

}  // namespace gpufeed
