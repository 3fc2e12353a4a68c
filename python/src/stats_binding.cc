// _core.LoaderStats: Loader::Stats() as read-only fields, in the order of
// include/gpufeed/loader.h, then `report` (LoaderStats::ToString). The
// Python DataLoader.stats() dict is made from these properties in this
// order, so a field bound here reaches it with no other change.
#include <pybind11/pybind11.h>

#include <string>

#include "binding_util.h"
#include "gpufeed/loader.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

using Stats = py::class_<LoaderStats>;

void BindPipelineFigures(Stats& bound) {
  bound.def_readonly("span", &LoaderStats::span)
      .def_readonly("batches", &LoaderStats::batches)
      .def_readonly("samples", &LoaderStats::samples)
      .def_readonly("bytes_read", &LoaderStats::bytes_read)
      .def_readonly("skipped", &LoaderStats::skipped)
      .def_readonly("threads", &LoaderStats::threads)
      .def_readonly("elapsed_seconds", &LoaderStats::elapsed_seconds)
      .def_readonly("read_seconds", &LoaderStats::read_seconds)
      .def_readonly("decode_seconds", &LoaderStats::decode_seconds)
      .def_readonly("decode_cpu_seconds", &LoaderStats::decode_cpu_seconds)
      .def_readonly("blocked_seconds", &LoaderStats::blocked_seconds)
      .def_readonly("other_seconds", &LoaderStats::other_seconds)
      .def_readonly("lookup_seconds", &LoaderStats::lookup_seconds)
      .def_readonly("lookup_cpu_seconds", &LoaderStats::lookup_cpu_seconds)
      .def_readonly("lookup_rows", &LoaderStats::lookup_rows)
      .def_readonly("lookup_ram_hit_rate", &LoaderStats::lookup_ram_hit_rate)
      .def_readonly("consumer_wait_seconds", &LoaderStats::consumer_wait_seconds)
      .def_readonly("mean_ready_batches", &LoaderStats::mean_ready_batches);
  DefText(bound, "io_backend", &LoaderStats::io_backend);
  DefText(bound, "sample_kind", &LoaderStats::sample_kind);
  bound.def_readonly("io_requests", &LoaderStats::io_requests)
      .def_readonly("io_bytes", &LoaderStats::io_bytes)
      .def_readonly("io_queue_depth", &LoaderStats::io_queue_depth)
      .def_readonly("io_mean_inflight", &LoaderStats::io_mean_inflight)
      .def_readonly("io_busy_share", &LoaderStats::io_busy_share);
}

void BindStorageAndMachine(Stats& bound) {
  bound.def_readonly("source_opens", &LoaderStats::source_opens)
      .def_readonly("source_stats", &LoaderStats::source_stats)
      .def_readonly("source_bytes", &LoaderStats::source_bytes)
      .def_readonly("cache_reads", &LoaderStats::cache_reads)
      .def_readonly("open_files", &LoaderStats::open_files)
      .def_readonly("cores", &LoaderStats::cores)
      .def_readonly("process_cpu_cores", &LoaderStats::process_cpu_cores)
      .def_readonly("external_cpu_cores", &LoaderStats::external_cpu_cores)
      .def_readonly("steal_share", &LoaderStats::steal_share);
  DefText(bound, "disk", &LoaderStats::disk);
  DefText(bound, "disk_note", &LoaderStats::disk_note);
  bound.def_readonly("disk_util", &LoaderStats::disk_util)
      .def_readonly("disk_read_bytes_per_second", &LoaderStats::disk_read_bytes_per_second);
  DefText(bound, "device", &LoaderStats::device);
  bound.def_readonly("device_batches", &LoaderStats::device_batches)
      .def_readonly("device_bytes", &LoaderStats::device_bytes)
      .def_readonly("device_copy_seconds", &LoaderStats::device_copy_seconds)
      .def_readonly("device_wait_buffer_seconds", &LoaderStats::device_wait_buffer_seconds);
}

// `bottleneck` is what programs branch on; `verdict` and `report` are the
// same judgement for people.
void BindVerdict(Stats& bound) {
  bound.def_readonly("bottleneck", &LoaderStats::bottleneck)
      .def_readonly("read_share", &LoaderStats::read_share)
      .def_readonly("decode_share", &LoaderStats::decode_share)
      .def_readonly("decode_cpu_share", &LoaderStats::decode_cpu_share)
      .def_readonly("cpu_wait_share", &LoaderStats::cpu_wait_share)
      .def_readonly("lookup_share", &LoaderStats::lookup_share)
      .def_readonly("blocked_share", &LoaderStats::blocked_share)
      .def_readonly("other_share", &LoaderStats::other_share)
      .def_readonly("consumer_wait_share", &LoaderStats::consumer_wait_share)
      .def_readonly("copy_share", &LoaderStats::copy_share)
      .def_readonly("expected_gain", &LoaderStats::expected_gain);
  DefText(bound, "verdict", &LoaderStats::verdict);
  bound.def_property_readonly("report",
                              [](const LoaderStats& stats) { return LossyStr(stats.ToString()); });
  bound.def("__str__", [](const LoaderStats& stats) { return LossyStr(stats.ToString()); });
}

}  // namespace

void BindStats(py::module_& module) {
  Stats bound(module, "LoaderStats",
              "Loader.stats(): per-stage figures and the verdict over a span (read-only).");
  BindPipelineFigures(bound);
  BindStorageAndMachine(bound);
  BindVerdict(bound);
}

}  // namespace gpufeed::python
