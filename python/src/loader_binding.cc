// _core.Loader: the C++ Loader for the Python DataLoader, with batches
// handed out through DLPack (zero copy). A DLPack tensor keeps its Batch
// (and so its batch buffer) alive; the deleter may run on any thread and
// needs no GIL: it only drops a C++ shared_ptr.
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "binding_util.h"
#include "gpufeed/loader.h"

namespace py = pybind11;

namespace gpufeed::python {

// dataset_binding.cc: the cache_* keywords as CacheOptions.
CacheOptions CacheOptionsFromDict(const py::dict& cache);
WebDatasetOptions WebDatasetOptionsFromDict(const py::dict& webdataset);

namespace {

DLDataType ToDLType(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8: return {kDLUInt, 8, 1};
    case TensorDtype::kInt32: return {kDLInt, 32, 1};
    case TensorDtype::kInt64: return {kDLInt, 64, 1};
    case TensorDtype::kFloat16: return {kDLFloat, 16, 1};
    case TensorDtype::kBfloat16: return {kDLBfloat, 16, 1};
    case TensorDtype::kFloat32: return {kDLFloat, 32, 1};
  }
  return {kDLUInt, 8, 1};
}

struct DLContext {
  std::shared_ptr<Batch> batch;
  std::vector<int64_t> shape;
  DLManagedTensor managed;
};

void DeleteManaged(DLManagedTensor* managed) {
  delete static_cast<DLContext*>(managed->manager_ctx);
}

void CapsuleDestructor(PyObject* capsule) {
  // Not consumed (still named "dltensor"): nobody took ownership, free it.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
}

// One tensor of a batch, exposing the DLPack protocol.
class BatchTensor {
 public:
  enum class Part : int { kData, kLabels, kLabelLengths };
  BatchTensor(std::shared_ptr<Batch> batch, Part part) : batch_(std::move(batch)), part_(part) {}

  // The array API's __dlpack__(stream, max_version, dl_device, copy); torch
  // 2.x passes max_version first. The capsule is always the unversioned
  // "dltensor" (allowed for any max_version), on the tensor's own device,
  // never a copy: dl_device naming another device and copy=True are
  // BufferErrors, as the standard asks of a producer that cannot do them.
  py::object DLPack(py::object stream, py::object max_version, py::object dl_device,
                    py::object copy) const {
    (void)max_version;
    const Tensor& tensor = Get();
    if (!copy.is_none() && copy.cast<bool>()) {
      throw py::buffer_error("__dlpack__(copy=True): gpufeed hands out its batch buffers "
                             "without copying; copy the tensor after from_dlpack");
    }
    if (!dl_device.is_none()) {
      py::tuple wanted = dl_device.cast<py::tuple>();
      py::tuple own = Device();
      if (wanted.size() != 2 || wanted[0].cast<int>() != own[0].cast<int>() ||
          wanted[1].cast<int>() != own[1].cast<int>()) {
        throw py::buffer_error("__dlpack__(dl_device=" + py::str(dl_device).cast<std::string>() +
                               "): the batch lives on " + py::str(own).cast<std::string>() +
                               " and is not copied");
      }
    }
    if (tensor.device == DeviceKind::kCuda) {
      // The consumer's stream (DLPack/array API: None or 1 = the legacy
      // default stream, 2 = the per-thread default stream, -1 = do not
      // synchronize, else a cudaStream_t) waits on the GPU for the copy and
      // is recorded as a user of the buffer (reuse waits for it). With -1
      // the consumer synchronizes itself, and reuse is ordered against the
      // legacy default stream only.
      int64_t value = stream.is_none() ? 1 : stream.cast<int64_t>();
      if (value == 0) {
        throw py::value_error("__dlpack__: stream 0 is ambiguous for CUDA; pass 1 for the legacy "
                              "default stream or 2 for the per-thread one");
      }
      if (value != -1) {
        void* cuda_stream = value == 1 ? nullptr : reinterpret_cast<void*>(value);
        ThrowIfError(batch_->WaitOn(cuda_stream));
      }
    }
    auto* context = new DLContext();
    context->batch = batch_;
    context->shape = tensor.shape;
    DLTensor& dl = context->managed.dl_tensor;
    dl.data = tensor.data;
    dl.device = tensor.device == DeviceKind::kCuda
                    ? DLDevice{kDLCUDA, static_cast<int32_t>(tensor.device_id)}
                    : DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(context->shape.size());
    dl.dtype = ToDLType(tensor.dtype);
    dl.shape = context->shape.data();
    dl.strides = nullptr;  // compact, row-major
    dl.byte_offset = 0;
    context->managed.manager_ctx = context;
    context->managed.deleter = DeleteManaged;
    PyObject* capsule = PyCapsule_New(&context->managed, "dltensor", CapsuleDestructor);
    if (capsule == nullptr) {
      delete context;
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
  }

  // Declares `stream` (a cudaStream_t as int; 0 or 1 the legacy default
  // stream, 2 the per-thread one) as a user of the batch: its buffer is
  // reused only after that stream passed the point where the batch was
  // released. For CUDA batches and pinned host batches (pin_memory, where
  // x.cuda(non_blocking=True) reads it asynchronously); a no-op otherwise.
  void RecordStream(int64_t stream) const {
    void* cuda_stream = stream == 0 || stream == 1 ? nullptr : reinterpret_cast<void*>(stream);
    ThrowIfError(batch_->RecordStream(cuda_stream));
  }

  py::tuple Device() const {
    const Tensor& tensor = Get();
    if (tensor.device == DeviceKind::kCuda) {
      return py::make_tuple(static_cast<int>(kDLCUDA), tensor.device_id);
    }
    return py::make_tuple(static_cast<int>(kDLCPU), 0);
  }
  std::vector<int64_t> shape() const { return Get().shape; }
  std::string dtype() const {
    return TensorDtypeName(Get().dtype);
  }

 private:
  const Tensor& Get() const {
    return part_ == Part::kData     ? batch_->data()
           : part_ == Part::kLabels ? batch_->labels()
                                    : batch_->label_lengths();
  }

  std::shared_ptr<Batch> batch_;
  Part part_;
};

class PyLoader {
 public:
  PyLoader(py::object dataset_path, const std::string& format, py::dict options) {
    DatasetOptions dataset_options;
    ThrowIfError(ParseFormat(format, &dataset_options.format));
    if (options.contains("cache")) {
      dataset_options.cache = CacheOptionsFromDict(options["cache"].cast<py::dict>());
    }
    if (options.contains("webdataset")) {
      dataset_options.webdataset = WebDatasetOptionsFromDict(options["webdataset"].cast<py::dict>());
    }
    std::string path = py::str(dataset_path);
    LoaderOptions o;
    o.batch_size = options["batch_size"].cast<uint32_t>();
    std::string shuffle = options["shuffle"].cast<std::string>();
    o.shuffle = shuffle == "global" ? ShuffleMode::kGlobal
                : shuffle == "block" ? ShuffleMode::kBlock
                : shuffle == "node"  ? ShuffleMode::kNode
                                     : ShuffleMode::kNone;
    o.seed = options["seed"].cast<uint64_t>();
    o.shuffle_window_shards = options["shuffle_window_shards"].cast<uint32_t>();
    o.drop_last = options["drop_last"].cast<bool>();
    o.rank = options["rank"].cast<uint32_t>();
    o.world_size = options["world_size"].cast<uint32_t>();
    if (options.contains("num_nodes")) o.num_nodes = options["num_nodes"].cast<uint32_t>();
    if (options.contains("node_rank")) o.node_rank = options["node_rank"].cast<uint32_t>();
    o.num_threads = options["num_threads"].cast<int>();
    o.prefetch = options["prefetch"].cast<int>();
    if (options.contains("stats_window_seconds") && !options["stats_window_seconds"].is_none()) {
      o.stats_window_seconds = options["stats_window_seconds"].cast<double>();
    }
    o.on_error = options["on_error"].cast<std::string>() == "skip" ? OnError::kSkip : OnError::kRaise;
    std::string label_dtype = options["label_dtype"].cast<std::string>();
    o.label_type = label_dtype == "int64" ? LoaderOptions::LabelType::kInt64
                                          : LoaderOptions::LabelType::kFloat32;
    o.label_count = options["label_count"].cast<int>();
    if (options.contains("label_lengths")) {
      o.label_lengths = options["label_lengths"].cast<bool>();
      o.label_pad = options["label_pad"].cast<float>();
    }
    if (options.contains("max_held_bytes") && !options["max_held_bytes"].is_none()) {
      o.max_held_bytes = options["max_held_bytes"].cast<uint64_t>();
    }
    std::string backend = options["io_backend"].cast<std::string>();
    o.io.backend = backend == "io_uring" ? IoBackend::kIoUring
                   : backend == "pread"  ? IoBackend::kPread
                                         : IoBackend::kAuto;
    o.io.direct_io = options["direct_io"].cast<bool>();
    if (options.contains("device")) {
      o.device.kind = options["device"].cast<std::string>() == "cuda" ? DeviceKind::kCuda
                                                                      : DeviceKind::kCpu;
    }
    if (options.contains("device_id")) o.device.device_id = options["device_id"].cast<int>();
    if (options.contains("normalize_on_device")) {
      o.device.normalize_on_device = options["normalize_on_device"].cast<bool>();
    }
    if (options.contains("pin_memory")) o.device.pin_memory = options["pin_memory"].cast<bool>();
    py::dict transform = options["transform"].cast<py::dict>();
    if (transform["kind"].cast<std::string>() == "tokens") {
      o.transform = TransformKind::kTokenWindows;
      o.tokens.seq_len = transform["seq_len"].cast<uint32_t>();
      o.tokens.dtype = transform["dtype"].cast<std::string>() == "int32" ? TensorDtype::kInt32
                                                                          : TensorDtype::kInt64;
      o.tokens.block_bytes = transform["block_bytes"].cast<uint32_t>();
      dataset_options.tokens.seq_len = o.tokens.seq_len;
      ThrowIfError(ParseTokenDtype(transform["token_dtype"].cast<std::string>(),
                                   &dataset_options.tokens.token_dtype));
    } else if (transform["kind"].cast<std::string>() == "raw") {
      o.transform = TransformKind::kRaw;
      std::string element = transform["dtype"].cast<std::string>();
      using Element = RawTransformOptions::Element;
      o.raw.element = element == "int32"     ? Element::kInt32
                      : element == "int64"   ? Element::kInt64
                      : element == "float32" ? Element::kFloat32
                                             : Element::kUint8;
      o.raw.length = transform["length"].cast<int64_t>();
      o.raw.pad = transform["pad"].cast<int64_t>();
    } else {
      ImageTransformOptions& image = o.image;
      image.size = transform["size"].cast<int>();
      image.train = transform["train"].cast<bool>();
      auto scale = transform["scale"].cast<std::vector<double>>();
      auto ratio = transform["ratio"].cast<std::vector<double>>();
      image.scale_min = scale.at(0);
      image.scale_max = scale.at(1);
      image.ratio_min = ratio.at(0);
      image.ratio_max = ratio.at(1);
      image.flip = transform["flip"].cast<bool>();
      auto mean = transform["mean"].cast<std::vector<float>>();
      auto std = transform["std"].cast<std::vector<float>>();
      for (int c = 0; c < 3; ++c) {
        image.mean[c] = mean.at(c);
        image.std[c] = std.at(c);
      }
      std::string dtype = transform["dtype"].cast<std::string>();
      image.dtype = dtype == "uint8"      ? OutputDtype::kUint8
                    : dtype == "float16"  ? OutputDtype::kFloat16
                    : dtype == "bfloat16" ? OutputDtype::kBfloat16
                                          : OutputDtype::kFloat32;
      image.layout = transform["layout"].cast<std::string>() == "NHWC" ? OutputLayout::kNHWC
                                                                         : OutputLayout::kNCHW;
      if (transform.contains("max_pixels")) image.max_pixels = transform["max_pixels"].cast<uint64_t>();
    }
    Status status;
    {
      py::gil_scoped_release release;
      std::unique_ptr<Dataset> dataset;
      status = Dataset::Open(path, dataset_options, &dataset);
      if (status.ok()) {
        std::shared_ptr<const Dataset> shared = std::move(dataset);
        status = Loader::Open(shared, o, &loader_);
      }
    }
    ThrowIfError(status);
  }

  // (data, labels, sample_ids, epoch, index, label_lengths or None) or None
  // at the end of the epoch.
  // timeout_seconds > 0: RuntimeError when no batch came within it (as
  // torch's DataLoader(timeout=)).
  py::object Next(double timeout_seconds) {
    auto batch = std::make_shared<Batch>();
    const auto started = std::chrono::steady_clock::now();
    while (true) {
      Status status;
      bool ready = false;
      {
        py::gil_scoped_release release;
        int wait_ms = 100;
        if (timeout_seconds > 0) {
          double left = timeout_seconds - std::chrono::duration<double>(
                                              std::chrono::steady_clock::now() - started)
                                              .count();
          wait_ms = static_cast<int>(std::max(1.0, std::min(100.0, left * 1e3)));
        }
        status = Native().NextFor(batch.get(), wait_ms, &ready);
      }
      ThrowIfError(status);
      if (ready) break;
      // Ctrl-C (or any pending signal) surfaces within 100 ms.
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (timeout_seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >=
              timeout_seconds) {
        char message[96];
        std::snprintf(message, sizeof(message), "DataLoader timed out after %g seconds",
                      timeout_seconds);
        throw std::runtime_error(message);
      }
    }
    if (batch->end_of_epoch()) return py::none();
    py::object lengths = py::none();
    if (batch->label_lengths().data != nullptr) {
      lengths = py::cast(BatchTensor(batch, BatchTensor::Part::kLabelLengths));
    }
    return py::make_tuple(BatchTensor(batch, BatchTensor::Part::kData),
                          BatchTensor(batch, BatchTensor::Part::kLabels),
                          py::cast(batch->sample_ids()), batch->epoch(), batch->index(), lengths);
  }

  void SetEpoch(uint64_t epoch) {
    Loader& loader = Native();
    Status status;
    {
      py::gil_scoped_release release;
      status = loader.SetEpoch(epoch);
    }
    ThrowIfError(status);  // with the GIL: it raises
  }

  py::dict State() const {
    LoaderState state = Native().State();
    py::dict out;
    out["seed"] = state.seed;
    out["epoch"] = state.epoch;
    out["consumed"] = state.consumed;
    out["shuffle"] = static_cast<int>(state.shuffle);
    out["shuffle_window_shards"] = state.shuffle_window_shards;
    out["num_nodes"] = state.split.num_nodes;
    out["world_size"] = state.split.world_size;
    out["split_batch_size"] = state.split.batch_size;
    out["drop_last"] = state.split.drop_last;
    py::list earlier;
    for (const NodeSplitSegment& segment : state.earlier_splits) {
      earlier.append(py::make_tuple(segment.until, segment.split.num_nodes,
                                    segment.split.world_size, segment.split.batch_size,
                                    segment.split.drop_last));
    }
    out["earlier_splits"] = earlier;
    out["samples"] = state.samples;
    if (state.seq_len != 0) {
      out["seq_len"] = state.seq_len;
      out["token_block_bytes"] = state.token_block_bytes;
    }
    return out;
  }

  void Restore(py::dict state) {
    LoaderState restored;
    restored.seed = state["seed"].cast<uint64_t>();
    restored.epoch = state["epoch"].cast<uint64_t>();
    restored.consumed = state["consumed"].cast<uint64_t>();
    restored.shuffle = static_cast<ShuffleMode>(state["shuffle"].cast<int>());
    restored.shuffle_window_shards = state["shuffle_window_shards"].cast<uint32_t>();
    // Absent from older states: unchecked.
    if (state.contains("samples")) restored.samples = state["samples"].cast<uint64_t>();
    if (state.contains("seq_len")) {
      restored.seq_len = state["seq_len"].cast<uint32_t>();
      restored.token_block_bytes = state["token_block_bytes"].cast<uint32_t>();
    }
    // States from before node-partitioned shuffle lack the split: this
    // loader's own (only kNode orders depend on it).
    restored.split = Native().State().split;
    if (state.contains("num_nodes")) {
      restored.split.num_nodes = state["num_nodes"].cast<uint32_t>();
      restored.split.world_size = state["world_size"].cast<uint32_t>();
      restored.split.batch_size = state["split_batch_size"].cast<uint32_t>();
      restored.split.drop_last = state["drop_last"].cast<bool>();
    }
    if (state.contains("earlier_splits")) {
      for (py::handle item : state["earlier_splits"]) {
        py::sequence segment = item.cast<py::sequence>();
        if (segment.size() != 5) throw py::value_error("earlier_splits entries have 5 fields");
        NodeSplitSegment parsed;
        parsed.until = segment[0].cast<uint64_t>();
        parsed.split.num_nodes = segment[1].cast<uint32_t>();
        parsed.split.world_size = segment[2].cast<uint32_t>();
        parsed.split.batch_size = segment[3].cast<uint32_t>();
        parsed.split.drop_last = segment[4].cast<bool>();
        restored.earlier_splits.push_back(parsed);
      }
    }
    Status status;
    {
      py::gil_scoped_release release;
      status = Native().Restore(restored);
    }
    ThrowIfError(status);
  }

  py::dict Stats(const std::string& span_name) const {
    StatsSpan span = span_name == "recent"  ? StatsSpan::kRecent
                     : span_name == "epoch" ? StatsSpan::kEpoch
                                            : StatsSpan::kSinceOpen;
    if (span_name != "recent" && span_name != "epoch" && span_name != "open") {
      throw py::value_error("span must be \"open\", \"recent\" or \"epoch\", not \"" +
                            span_name + "\"");
    }
    LoaderStats stats = Native().Stats(span);
    py::dict out;
    out["span"] = span_name;
    out["batches"] = stats.batches;
    out["samples"] = stats.samples;
    out["bytes_read"] = stats.bytes_read;
    out["skipped"] = stats.skipped;
    out["threads"] = stats.threads;
    out["elapsed_seconds"] = stats.elapsed_seconds;
    out["read_seconds"] = stats.read_seconds;
    out["decode_seconds"] = stats.decode_seconds;
    out["decode_cpu_seconds"] = stats.decode_cpu_seconds;
    out["blocked_seconds"] = stats.blocked_seconds;
    out["other_seconds"] = stats.other_seconds;
    out["consumer_wait_seconds"] = stats.consumer_wait_seconds;
    out["mean_ready_batches"] = stats.mean_ready_batches;
    out["io_backend"] = stats.io_backend;
    out["io_requests"] = stats.io_requests;
    out["io_bytes"] = stats.io_bytes;
    out["io_queue_depth"] = stats.io_queue_depth;
    out["io_mean_inflight"] = stats.io_mean_inflight;
    out["io_busy_share"] = stats.io_busy_share;
    out["source_opens"] = stats.source_opens;
    out["source_stats"] = stats.source_stats;
    out["source_bytes"] = stats.source_bytes;
    out["cache_reads"] = stats.cache_reads;
    out["open_files"] = stats.open_files;
    out["cores"] = stats.cores;
    out["process_cpu_cores"] = stats.process_cpu_cores;
    out["external_cpu_cores"] = stats.external_cpu_cores;
    out["steal_share"] = stats.steal_share;
    out["disk"] = stats.disk;
    out["disk_note"] = LossyStr(stats.disk_note);
    out["disk_util"] = stats.disk_util;
    out["disk_read_bytes_per_second"] = stats.disk_read_bytes_per_second;
    out["device"] = stats.device;
    out["device_batches"] = stats.device_batches;
    out["device_bytes"] = stats.device_bytes;
    out["device_copy_seconds"] = stats.device_copy_seconds;
    out["device_wait_buffer_seconds"] = stats.device_wait_buffer_seconds;
    // The judgement: `bottleneck` is what programs branch on (one of
    // "none", "consumer", "read", "decode", "copy", "cpu-contention");
    // `verdict` is the same judgement as a sentence for people.
    out["bottleneck"] = BottleneckName(stats.bottleneck);
    out["read_share"] = stats.read_share;
    out["decode_share"] = stats.decode_share;
    out["decode_cpu_share"] = stats.decode_cpu_share;
    out["cpu_wait_share"] = stats.cpu_wait_share;
    out["blocked_share"] = stats.blocked_share;
    out["other_share"] = stats.other_share;
    out["consumer_wait_share"] = stats.consumer_wait_share;
    out["copy_share"] = stats.copy_share;
    out["expected_gain"] = stats.expected_gain;
    out["verdict"] = LossyStr(stats.verdict);
    out["report"] = LossyStr(stats.ToString());
    return out;
  }

  uint64_t batches_per_epoch() const { return Native().batches_per_epoch(); }
  uint64_t epoch() const { return Native().epoch(); }

  void Close() {
    py::gil_scoped_release release;
    loader_.reset();
  }

 private:
  // The loader, or ValueError once close() ran (never a null dereference).
  Loader& Native() const {
    if (!loader_) throw py::value_error("the loader is closed");
    return *loader_;
  }
  std::unique_ptr<Loader> loader_;
};

}  // namespace

void BindLoader(py::module_& module) {
  module.def(
      "cuda_status",
      [](int device_id) {
        Status status = CudaDeviceStatus(device_id);
        return status.ok() ? std::string() : status.message();
      },
      py::arg("device_id") = 0,
      "'' when CUDA device `device_id` is usable by gpufeed, else the reason.");
  py::class_<BatchTensor>(module, "BatchTensor")
      .def("__dlpack__", &BatchTensor::DLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("record_stream", &BatchTensor::RecordStream, py::arg("stream"))
      .def("__dlpack_device__", &BatchTensor::Device)
      .def_property_readonly("shape", &BatchTensor::shape)
      .def_property_readonly("dtype", &BatchTensor::dtype);
  py::class_<PyLoader>(module, "Loader")
      .def(py::init<py::object, const std::string&, py::dict>(), py::arg("path"),
           py::arg("format"), py::arg("options"))
      .def("next", &PyLoader::Next, py::arg("timeout") = 0.0)
      .def("set_epoch", &PyLoader::SetEpoch)
      .def("state", &PyLoader::State)
      .def("restore", &PyLoader::Restore)
      .def("stats", &PyLoader::Stats, py::arg("span") = "open")
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("epoch", &PyLoader::epoch)
      .def("close", &PyLoader::Close);
}

}  // namespace gpufeed::python
