// _core._transform_image: one sample through the decode pool's transform,
// for tests that compare gpufeed's transforms with torchvision's (and for
// users who want to see what the loader does to an image).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "binding_util.h"
#include "gpufeed/transform.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

OutputDtype DtypeFromName(const std::string& name) {
  if (name == "uint8") return OutputDtype::kUint8;
  if (name == "float32") return OutputDtype::kFloat32;
  if (name == "float16") return OutputDtype::kFloat16;
  if (name == "bfloat16") return OutputDtype::kBfloat16;
  ThrowIfError(Status::InvalidArgument("dtype must be uint8, float32, float16 or bfloat16, not " + name));
  return OutputDtype::kUint8;
}

py::tuple TransformImageBinding(py::bytes data, int size, bool train, uint64_t seed,
                                uint64_t epoch, uint64_t sample_id, const std::string& dtype,
                                const std::string& layout, bool flip,
                                std::vector<double> scale, std::vector<double> ratio,
                                std::vector<float> mean, std::vector<float> std, bool exact) {
  ImageTransformOptions options;
  options.exact = exact;
  if (size <= 0 || size > 16384) ThrowIfError(Status::InvalidArgument("size must be in 1..16384"));
  options.size = size;
  options.train = train;
  options.flip = flip;
  options.dtype = DtypeFromName(dtype);
  if (layout != "NCHW" && layout != "NHWC") ThrowIfError(Status::InvalidArgument("layout must be NCHW or NHWC"));
  options.layout = layout == "NCHW" ? OutputLayout::kNCHW : OutputLayout::kNHWC;
  if (scale.size() != 2 || ratio.size() != 2 || mean.size() != 3 || std.size() != 3) {
    ThrowIfError(Status::InvalidArgument("scale and ratio take 2 values, mean and std 3"));
  }
  options.scale_min = scale[0];
  options.scale_max = scale[1];
  options.ratio_min = ratio[0];
  options.ratio_max = ratio[1];
  for (int c = 0; c < 3; ++c) {
    options.mean[c] = mean[c];
    options.std[c] = std[c];
  }
  std::string bytes = data;
  std::string output(ImageTransformBytes(options), '\0');
  CropInfo parameters;
  Status status;
  {
    py::gil_scoped_release release;
    status = TransformOneImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                               options, seed, epoch, sample_id, output.data(), &parameters);
  }
  ThrowIfError(status);
  py::dict crop;
  crop["x"] = parameters.x;
  crop["y"] = parameters.y;
  crop["width"] = parameters.width;
  crop["height"] = parameters.height;
  crop["flip"] = parameters.flip;
  return py::make_tuple(py::bytes(output), crop);
}

}  // namespace

void BindTransform(py::module_& module) {
  module.def("_transform_image", &TransformImageBinding, py::arg("data"), py::arg("size"),
             py::arg("train"), py::arg("seed"), py::arg("epoch"), py::arg("sample_id"),
             py::arg("dtype"), py::arg("layout"), py::arg("flip"), py::arg("scale"),
             py::arg("ratio"), py::arg("mean"), py::arg("std"), py::arg("exact") = true);
}

}  // namespace gpufeed::python
