// The loader's options as Python classes: _core.LoaderOptions and the
// structs it holds, field for field (include/gpufeed/loader.h and options.h
// document each). Enum fields take the enums of enum_binding.cc; nested
// structs are views (options.image.size = 160 changes `options`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "binding_util.h"
#include "gpufeed/embedding.h"
#include "gpufeed/loader.h"
#include "gpufeed/options.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

// A float[3] member as a list of 3 floats; another length is a ValueError.
void DefChannels(py::class_<ImageTransformOptions>& bound, const char* name,
                 float (ImageTransformOptions::*field)[3]) {
  bound.def_property(
      name,
      [field](const ImageTransformOptions& options) {
        const float* values = options.*field;
        return std::vector<float>(values, values + 3);
      },
      [field, name](ImageTransformOptions& options, const std::vector<float>& values) {
        if (values.size() != 3) {
          throw py::value_error(std::string(name) + " takes 3 values (one per channel), not " +
                                std::to_string(values.size()));
        }
        for (int c = 0; c < 3; ++c) (options.*field)[c] = values[c];
      });
}

void BindTransformOptions(py::module_& module) {
  py::class_<ImageTransformOptions> image(module, "ImageTransformOptions");
  image.def(py::init<>())
      .def_readwrite("size", &ImageTransformOptions::size)
      .def_readwrite("train", &ImageTransformOptions::train)
      .def_readwrite("scale_min", &ImageTransformOptions::scale_min)
      .def_readwrite("scale_max", &ImageTransformOptions::scale_max)
      .def_readwrite("ratio_min", &ImageTransformOptions::ratio_min)
      .def_readwrite("ratio_max", &ImageTransformOptions::ratio_max)
      .def_readwrite("flip", &ImageTransformOptions::flip)
      .def_readwrite("crop_fraction", &ImageTransformOptions::crop_fraction);
  DefChannels(image, "mean", &ImageTransformOptions::mean);
  DefChannels(image, "std", &ImageTransformOptions::std);
  image.def_readwrite("dtype", &ImageTransformOptions::dtype)
      .def_readwrite("layout", &ImageTransformOptions::layout)
      .def_readwrite("max_pixels", &ImageTransformOptions::max_pixels)
      .def_readwrite("exact", &ImageTransformOptions::exact);
  DefValueMethods(image);

  py::class_<RawTransformOptions> raw(module, "RawTransformOptions");
  raw.def(py::init<>())
      .def_readwrite("element", &RawTransformOptions::element)
      .def_readwrite("length", &RawTransformOptions::length)
      .def_readwrite("pad", &RawTransformOptions::pad);
  DefValueMethods(raw);

  py::class_<TokenWindowOptions> tokens(module, "TokenWindowOptions");
  tokens.def(py::init<>())
      .def_readwrite("seq_len", &TokenWindowOptions::seq_len)
      .def_readwrite("dtype", &TokenWindowOptions::dtype)
      .def_readwrite("block_bytes", &TokenWindowOptions::block_bytes);
  DefValueMethods(tokens);

  py::class_<TabularTransformOptions> tabular(module, "TabularTransformOptions");
  tabular.def(py::init<>())
      .def_readwrite("dense_log1p", &TabularTransformOptions::dense_log1p)
      .def_readwrite("hash_sizes", &TabularTransformOptions::hash_sizes)
      .def_readwrite("sparse_dtype", &TabularTransformOptions::sparse_dtype);
  DefValueMethods(tabular);
}

void BindStageOptions(py::module_& module) {
  py::class_<IoOptions> io(module, "IoOptions");
  io.def(py::init<>())
      .def_readwrite("backend", &IoOptions::backend)
      .def_readwrite("queue_depth", &IoOptions::queue_depth)
      .def_readwrite("threads", &IoOptions::threads)
      .def_readwrite("inflight_bytes", &IoOptions::inflight_bytes)
      .def_readwrite("direct_io", &IoOptions::direct_io)
      .def_readwrite("register_buffers", &IoOptions::register_buffers)
      .def_readwrite("register_files", &IoOptions::register_files)
      .def_readwrite("retries", &IoOptions::retries)
      .def_readwrite("retry_backoff_ms", &IoOptions::retry_backoff_ms)
      .def_readwrite("timeout_seconds", &IoOptions::timeout_seconds);
  DefValueMethods(io);

  py::class_<DeviceOptions> device(module, "DeviceOptions");
  device.def(py::init<>())
      .def_readwrite("kind", &DeviceOptions::kind)
      .def_readwrite("device_id", &DeviceOptions::device_id)
      .def_readwrite("normalize_on_device", &DeviceOptions::normalize_on_device)
      .def_readwrite("pin_memory", &DeviceOptions::pin_memory);
  DefValueMethods(device);
}

void BindLoaderOptionsStruct(py::module_& module) {
  py::class_<LoaderOptions> options(module, "LoaderOptions");
  options.def(py::init<>())
      .def_readwrite("batch_size", &LoaderOptions::batch_size)
      .def_readwrite("shuffle", &LoaderOptions::shuffle)
      .def_readwrite("seed", &LoaderOptions::seed)
      .def_readwrite("shuffle_window_shards", &LoaderOptions::shuffle_window_shards)
      .def_readwrite("drop_last", &LoaderOptions::drop_last)
      .def_readwrite("rank", &LoaderOptions::rank)
      .def_readwrite("world_size", &LoaderOptions::world_size)
      .def_readwrite("num_nodes", &LoaderOptions::num_nodes)
      .def_readwrite("node_rank", &LoaderOptions::node_rank)
      .def_readwrite("num_threads", &LoaderOptions::num_threads)
      .def_readwrite("prefetch", &LoaderOptions::prefetch)
      .def_readwrite("stats_window_seconds", &LoaderOptions::stats_window_seconds)
      .def_readwrite("transform", &LoaderOptions::transform)
      .def_readwrite("image", &LoaderOptions::image)
      .def_readwrite("raw", &LoaderOptions::raw)
      .def_readwrite("tokens", &LoaderOptions::tokens)
      .def_readwrite("tabular", &LoaderOptions::tabular)
      .def_readwrite("label_count", &LoaderOptions::label_count)
      .def_readwrite("label_lengths", &LoaderOptions::label_lengths)
      .def_readwrite("label_pad", &LoaderOptions::label_pad)
      .def_readwrite("label_type", &LoaderOptions::label_type)
      .def_readwrite("on_error", &LoaderOptions::on_error)
      .def_readwrite("max_skipped", &LoaderOptions::max_skipped)
      .def_readwrite("max_held_bytes", &LoaderOptions::max_held_bytes)
      .def_readwrite("io", &LoaderOptions::io)
      .def_readwrite("device", &LoaderOptions::device);
  // (column, table) pairs, the tables _core.EmbeddingTable objects
  // (embedding_binding.cc, held by std::shared_ptr, as LoaderOptions holds
  // them); a copy both ways, as the other list fields.
  using Pairs = std::vector<std::pair<uint32_t, std::shared_ptr<EmbeddingTable>>>;
  options.def_property(
      "embeddings",
      [](const LoaderOptions& o) {
        Pairs pairs;
        for (const EmbeddingLookup& lookup : o.embeddings) {
          pairs.emplace_back(lookup.column, lookup.table);
        }
        return pairs;
      },
      [](LoaderOptions& o, const Pairs& pairs) {
        o.embeddings.clear();
        for (const auto& pair : pairs)
          o.embeddings.push_back(EmbeddingLookup{pair.first, pair.second});
      });
  DefValueMethods(options);
}

}  // namespace

void BindOptions(py::module_& module) {
  BindTransformOptions(module);
  BindStageOptions(module);
  BindLoaderOptionsStruct(module);
}

}  // namespace gpufeed::python
