// BatchTensor's DLPack export and the Python classes of a batch.
#include "batch_binding.h"

#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include "binding_util.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

DLDataType ToDLType(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8: return {kDLUInt, 8, 1};
    case TensorDtype::kInt32: return {kDLInt, 32, 1};
    case TensorDtype::kInt64: return {kDLInt, 64, 1};
    case TensorDtype::kFloat16: return {kDLFloat, 16, 1};
    case TensorDtype::kBfloat16: return {kDLBfloat, 16, 1};
    case TensorDtype::kFloat32: return {kDLFloat, 32, 1};
    case TensorDtype::kInt8: return {kDLInt, 8, 1};
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

}  // namespace

py::object BatchTensor::DLPack(py::object stream, py::object max_version, py::object dl_device,
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

void BatchTensor::RecordStream(int64_t stream) const {
  void* cuda_stream = stream == 0 || stream == 1 ? nullptr : reinterpret_cast<void*>(stream);
  ThrowIfError(batch_->RecordStream(cuda_stream));
}

py::tuple BatchTensor::Device() const {
  const Tensor& tensor = Get();
  if (tensor.device == DeviceKind::kCuda) {
    return py::make_tuple(static_cast<int>(kDLCUDA), tensor.device_id);
  }
  return py::make_tuple(static_cast<int>(kDLCPU), 0);
}

BatchView ViewOf(const std::shared_ptr<Batch>& batch) {
  BatchView view{BatchTensor(batch, BatchTensor::Part::kData),
                 BatchTensor(batch, BatchTensor::Part::kLabels),
                 batch->sample_ids(),
                 batch->epoch(),
                 batch->index(),
                 std::nullopt};
  if (batch->label_lengths().data != nullptr) {
    view.label_lengths = BatchTensor(batch, BatchTensor::Part::kLabelLengths);
  }
  for (size_t i = 0; i < batch->extras().size(); ++i) {
    view.extras.emplace_back(batch, BatchTensor::Part::kExtra, i);
  }
  return view;
}

void BindBatch(py::module_& module) {
  py::class_<BatchTensor>(module, "BatchTensor")
      .def("__dlpack__", &BatchTensor::DLPack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("record_stream", &BatchTensor::RecordStream, py::arg("stream"))
      .def("__dlpack_device__", &BatchTensor::Device)
      .def_property_readonly("shape", &BatchTensor::shape)
      .def_property_readonly("dtype", &BatchTensor::dtype);
  py::class_<BatchView>(module, "Batch", "A batch from Loader.next(): tensors and position.")
      .def_readonly("data", &BatchView::data)
      .def_readonly("labels", &BatchView::labels)
      .def_readonly("sample_ids", &BatchView::sample_ids)
      .def_readonly("epoch", &BatchView::epoch)
      .def_readonly("index", &BatchView::index)
      .def_readonly("label_lengths", &BatchView::label_lengths)
      .def_readonly("extras", &BatchView::extras);
}

}  // namespace gpufeed::python
