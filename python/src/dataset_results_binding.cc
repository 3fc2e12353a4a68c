// What the dataset-side calls return, as read-only Python classes: a
// Record (Dataset.read), TokenCorpusInfo, ShardInfo, StorageStats,
// VerifyReport, PackSummary, CacheReport with its CacheDatasetReport
// entries, and CacheWarmSummary (include/gpufeed/dataset.h, cache.h and
// writer.h document the fields).
//
// The Python package returns several of these as dicts made from the
// properties in the order bound here (gpufeed._native.struct_dict), so each
// class binds its fields in the order of the dict the package has always
// returned, and binds nothing else as a property (VerifyReport.ok is a
// method). Texts from disk are decoded leniently (DefText); a format is its
// registered name.
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

// shape: a tuple, or None for encoded records; data: bytes.
void BindRecord(py::module_& module) {
  py::class_<Record> record(module, "Record", "Dataset.read(): one sample as stored.");
  record.def_property_readonly("data", [](const Record& self) { return py::bytes(self.data); })
      .def_readonly("labels", &Record::labels);
  DefText(record, "key", &Record::key);
  record.def_readonly("id", &Record::id)
      .def_property_readonly("shape",
                             [](const Record& self) -> py::object {
                               if (self.shape.empty()) return py::none();
                               return py::tuple(py::cast(self.shape));
                             })
      .def_readonly("encoded", &Record::encoded);
}

void BindDatasetFacts(py::module_& module) {
  py::class_<TokenCorpusInfo>(module, "TokenCorpusInfo", "Dataset.tokens (token corpora).")
      .def_readonly("token_dtype", &TokenCorpusInfo::token_dtype)
      .def_readonly("tokens", &TokenCorpusInfo::tokens)
      .def_readonly("documents", &TokenCorpusInfo::documents)
      .def_readonly("sequences", &TokenCorpusInfo::sequences)
      .def_readonly("seq_len", &TokenCorpusInfo::seq_len)
      .def_readonly("windows", &TokenCorpusInfo::windows);

  py::class_<TabularInfo>(module, "TabularInfo", "Dataset.tabular (tabular datasets).")
      .def_readonly("label", &TabularInfo::label)
      .def_readonly("dense", &TabularInfo::dense)
      .def_readonly("dense_count", &TabularInfo::dense_count)
      .def_readonly("sparse", &TabularInfo::sparse)
      .def_readonly("sparse_count", &TabularInfo::sparse_count)
      .def_readonly("text", &TabularInfo::text)
      .def_readonly("rows", &TabularInfo::rows)
      .def_readonly("blocks", &TabularInfo::blocks)
      .def_readonly("row_bytes", &TabularInfo::row_bytes);

  py::class_<ShardInfo> shard(module, "ShardInfo", "Dataset.shards: one shard file.");
  DefText(shard, "path", &ShardInfo::path);
  shard.def_readonly("first_record", &ShardInfo::first_record)
      .def_readonly("records", &ShardInfo::records)
      .def_readonly("bytes", &ShardInfo::bytes)
      .def_property_readonly("xxh64", [](const ShardInfo& self) -> py::object {
        if (self.xxh64.empty()) return py::none();  // the manifest records none
        return py::str(self.xxh64);
      });

  py::class_<StorageStats>(module, "StorageStats", "Dataset.storage_stats().")
      .def_readonly("source_opens", &StorageStats::source_opens)
      .def_readonly("source_stats", &StorageStats::source_stats)
      .def_readonly("source_reads", &StorageStats::source_reads)
      .def_readonly("source_bytes", &StorageStats::source_bytes)
      .def_readonly("cache_reads", &StorageStats::cache_reads)
      .def_readonly("open_files", &StorageStats::open_files);
}

void BindToolResults(py::module_& module) {
  py::class_<VerifyReport>(module, "VerifyReport", "verify(): what was checked, every problem.")
      .def_property_readonly(
          "format", [](const VerifyReport& self) { return std::string(FormatName(self.format)); })
      .def_readonly("records_checked", &VerifyReport::records_checked)
      .def_readonly("shards_checked", &VerifyReport::shards_checked)
      .def_readonly("checksums_checked", &VerifyReport::checksums_checked)
      .def_property_readonly("problems",
                             [](const VerifyReport& self) { return LossyList(self.problems); })
      .def("ok", &VerifyReport::ok, "True when no problem was found.");

  py::class_<PackSummary>(module, "PackSummary", "pack(): what was written.")
      .def_readonly("records", &PackSummary::records)
      .def_readonly("shards", &PackSummary::shards)
      .def_readonly("bytes", &PackSummary::bytes)
      .def_readonly("rewritten", &PackSummary::rewritten)
      .def_readonly("seconds", &PackSummary::seconds);
}

void BindCacheResults(py::module_& module) {
  py::class_<CacheDatasetReport> dataset(module, "CacheDatasetReport",
                                         "CacheReport.datasets: one dataset's entries.");
  DefText(dataset, "dataset", &CacheDatasetReport::dataset);
  dataset.def_readonly("policy", &CacheDatasetReport::policy)
      .def_readonly("entries", &CacheDatasetReport::entries)
      .def_readonly("bytes", &CacheDatasetReport::bytes)
      .def_readonly("hits", &CacheDatasetReport::hits)
      .def_readonly("misses", &CacheDatasetReport::misses)
      .def_readonly("fills", &CacheDatasetReport::fills)
      .def_readonly("fill_bytes", &CacheDatasetReport::fill_bytes)
      .def_readonly("evictions", &CacheDatasetReport::evictions);

  py::class_<CacheReport> report(module, "CacheReport", "cache_stat(): a cache directory.");
  DefText(report, "cache_dir", &CacheReport::cache_dir);
  report.def_readonly("entries", &CacheReport::entries)
      .def_readonly("bytes", &CacheReport::bytes)
      .def_readonly("fills_in_progress", &CacheReport::fills_in_progress)
      .def_readonly("fill_bytes_in_progress", &CacheReport::fill_bytes_in_progress)
      .def_readonly("leased_entries", &CacheReport::leased_entries)
      .def_readonly("datasets", &CacheReport::datasets);

  py::class_<CacheWarmSummary>(module, "CacheWarmSummary", "cache_warm(): what was copied.")
      .def_readonly("shards", &CacheWarmSummary::shards)
      .def_readonly("filled", &CacheWarmSummary::filled)
      .def_readonly("already_cached", &CacheWarmSummary::already_cached)
      .def_readonly("skipped", &CacheWarmSummary::skipped)
      .def_readonly("bytes_copied", &CacheWarmSummary::bytes_copied);
}

}  // namespace

void BindDatasetResults(py::module_& module) {
  BindRecord(module);
  BindDatasetFacts(module);
  BindToolResults(module);
  BindCacheResults(module);
}

}  // namespace gpufeed::python
