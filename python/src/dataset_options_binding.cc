// The datasets' options as Python classes: _core.DatasetOptions and the
// structs it holds (CacheOptions, TokenCorpusOptions, WebDatasetOptions,
// TabularDatasetOptions with its RecordSchema),
// and _core.PackOptions, field for field (include/gpufeed/dataset.h,
// cache.h and writer.h document each). Enum fields take the enums of
// enum_binding.cc (TokenDtype, CachePolicy, FieldType). A format is a registered name
// ("recordio", "webdataset", ...; registry values have no fixed enum): the
// `format` fields take and give that text, and an unknown one raises the
// library's InvalidArgumentError (a ValueError) listing the accepted names.
// Nested structs are views (options.cache.capacity = 1 changes `options`);
// list fields (image_keys, tars) are copies: assign a whole list.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "binding_util.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

void BindCacheOptions(py::module_& module) {
  py::class_<CacheOptions> cache(module, "CacheOptions");
  cache.def(py::init<>())
      .def_readwrite("cache_dir", &CacheOptions::cache_dir)
      .def_readwrite("capacity", &CacheOptions::capacity)
      .def_readwrite("policy", &CacheOptions::policy)
      .def_readwrite("prefetch_shards", &CacheOptions::prefetch_shards)
      .def_readwrite("high_watermark", &CacheOptions::high_watermark)
      .def_readwrite("low_watermark", &CacheOptions::low_watermark)
      .def_readwrite("wait_for_fill", &CacheOptions::wait_for_fill)
      .def_readwrite("max_leased_shards", &CacheOptions::max_leased_shards)
      .def_readwrite("cache_group", &CacheOptions::cache_group);
  DefValueMethods(cache);
}

void BindFormatOptions(py::module_& module) {
  py::class_<TokenCorpusOptions> tokens(module, "TokenCorpusOptions");
  tokens.def(py::init<>())
      .def_readwrite("token_dtype", &TokenCorpusOptions::token_dtype)
      .def_readwrite("seq_len", &TokenCorpusOptions::seq_len);
  DefValueMethods(tokens);

  py::class_<WebDatasetOptions> webdataset(module, "WebDatasetOptions");
  webdataset.def(py::init<>())
      .def_readwrite("image_keys", &WebDatasetOptions::image_keys)
      .def_readwrite("label_key", &WebDatasetOptions::label_key)
      .def_readwrite("label_field", &WebDatasetOptions::label_field)
      .def_readwrite("tars", &WebDatasetOptions::tars)
      .def_readwrite("index_dir", &WebDatasetOptions::index_dir);
  DefValueMethods(webdataset);

  py::class_<RecordSchema> schema(module, "RecordSchema");
  schema.def(py::init<>())
      .def_readwrite("label", &RecordSchema::label)
      .def_readwrite("dense", &RecordSchema::dense)
      .def_readwrite("dense_count", &RecordSchema::dense_count)
      .def_readwrite("sparse", &RecordSchema::sparse)
      .def_readwrite("sparse_count", &RecordSchema::sparse_count)
      .def_property_readonly("record_bytes", &RecordSchema::record_bytes);
  DefValueMethods(schema);

  py::class_<TabularDatasetOptions> tabular(module, "TabularDatasetOptions");
  tabular.def(py::init<>())
      .def_readwrite("record_schema", &TabularDatasetOptions::record_schema)
      .def_readwrite("block_bytes", &TabularDatasetOptions::block_bytes)
      .def_readwrite("index_dir", &TabularDatasetOptions::index_dir);
  DefValueMethods(tabular);
}

void BindDatasetOptionsStruct(py::module_& module) {
  py::class_<DatasetOptions> options(module, "DatasetOptions");
  options.def(py::init<>())
      .def_property(
          "format", [](const DatasetOptions& self) { return std::string(FormatName(self.format)); },
          [](DatasetOptions& self, const std::string& name) {
            ThrowIfError(ParseFormat(name, &self.format));
          },
          "A name of format_names(): \"auto\" or a registered format.")
      .def_readwrite("allow_external_paths", &DatasetOptions::allow_external_paths)
      .def_readwrite("cache", &DatasetOptions::cache)
      .def_readwrite("tokens", &DatasetOptions::tokens)
      .def_readwrite("webdataset", &DatasetOptions::webdataset)
      .def_readwrite("tabular", &DatasetOptions::tabular);
  DefValueMethods(options);
}

// Pack's progress callback and cancel flag are the pack call's own
// (dataset_binding.cc sets them): not fields here.
void BindPackOptions(py::module_& module) {
  // pack's jpeg_restart_interval leaves smaller JPEGs without markers
  // (diagnose's JPEG survey counts against the same figure).
  module.attr("MIN_RESTART_PIXELS") = kMinRestartPixels;
  py::class_<PackOptions> pack(module, "PackOptions");
  pack.def(py::init<>())
      .def_property(
          "format",
          [](const PackOptions& self) { return std::string(ShardFormatName(self.format)); },
          [](PackOptions& self, const std::string& name) {
            ThrowIfError(ParseShardFormat(name, &self.format));
          },
          "A name of pack_format_names().")
      .def_readwrite("shard_size", &PackOptions::shard_size)
      .def_readwrite("workers", &PackOptions::workers)
      .def_readwrite("overwrite", &PackOptions::overwrite)
      .def_readwrite("allow_external_paths", &PackOptions::allow_external_paths)
      .def(
          "set_jpeg_rewrite",
          [](PackOptions& self, bool baseline, int restart_interval) {
            if (restart_interval < 0 || restart_interval > kMaxRestartInterval) {
              throw py::value_error("jpeg_restart_interval must be 0 (none) or 1.." +
                                    std::to_string(kMaxRestartInterval) + " MCUs, not " +
                                    std::to_string(restart_interval));
            }
            if (restart_interval > 0) {
              self.rewrite = [restart_interval](std::string* data) {
                return RewriteJpegWithRestarts(data, restart_interval);
              };
            } else {
              self.rewrite = baseline ? std::function<bool(std::string*)>(
                                            RewriteProgressiveJpegAsBaseline)
                                      : nullptr;
            }
          },
          py::arg("baseline"), py::arg("restart_interval"),
          "The JPEG rewrite: restart_interval > 0, every JPEG rewritten as baseline with a "
          "restart marker every restart_interval MCUs (RewriteJpegWithRestarts); else "
          "progressive ones rewritten as baseline when `baseline`, or none.");
  DefValueMethods(pack);
}

}  // namespace

void BindDatasetOptions(py::module_& module) {
  BindCacheOptions(module);
  BindFormatOptions(module);
  BindDatasetOptionsStruct(module);
  BindPackOptions(module);
}

}  // namespace gpufeed::python
