// One batch of the loader as Python sees it: BatchTensor (a tensor of a
// batch, exported through DLPack without a copy) and BatchView (what
// _core.Loader.next() returns: the tensors and where the batch stands).
// A BatchTensor keeps its Batch, and so its batch buffer, alive; the
// DLPack deleter may run on any thread and needs no GIL: it only drops a
// C++ shared_ptr.
#ifndef GPUFEED_PYTHON_BATCH_BINDING_H_
#define GPUFEED_PYTHON_BATCH_BINDING_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpufeed/batch.h"

namespace gpufeed::python {

class BatchTensor {
 public:
  enum class Part : int { kData, kLabels, kLabelLengths, kExtra };
  // kExtra: Batch::extras()[extra].
  BatchTensor(std::shared_ptr<Batch> batch, Part part, size_t extra = 0)
      : batch_(std::move(batch)), part_(part), extra_(extra) {}

  // The array API's __dlpack__(stream, max_version, dl_device, copy); torch
  // 2.x passes max_version first. The capsule is always the unversioned
  // "dltensor" (allowed for any max_version), on the tensor's own device,
  // never a copy: dl_device naming another device and copy=True are
  // BufferErrors, as the standard asks of a producer that cannot do them.
  pybind11::object DLPack(pybind11::object stream, pybind11::object max_version,
                          pybind11::object dl_device, pybind11::object copy) const;

  // Declares `stream` (a cudaStream_t as int; 0 or 1 the legacy default
  // stream, 2 the per-thread one) as a user of the batch: its buffer is
  // reused only after that stream passed the point where the batch was
  // released. For CUDA batches and pinned host batches (pin_memory, where
  // x.cuda(non_blocking=True) reads it asynchronously); a no-op otherwise.
  void RecordStream(int64_t stream) const;

  // (DLPack device type, device id).
  pybind11::tuple Device() const;
  std::vector<int64_t> shape() const { return Get().shape; }
  std::string dtype() const { return TensorDtypeName(Get().dtype); }

 private:
  const Tensor& Get() const {
    return part_ == Part::kData     ? batch_->data()
           : part_ == Part::kLabels ? batch_->labels()
           : part_ == Part::kExtra  ? batch_->extras()[extra_]
                                    : batch_->label_lengths();
  }

  std::shared_ptr<Batch> batch_;
  Part part_;
  size_t extra_ = 0;
};

// A delivered batch: its tensors by name instead of positions.
struct BatchView {
  BatchTensor data;
  BatchTensor labels;
  std::vector<uint64_t> sample_ids;  // dataset indices, in batch order
  uint64_t epoch = 0;
  uint64_t index = 0;  // batch number within the epoch
  // Variable-length labels only (LoaderOptions::label_lengths).
  std::optional<BatchTensor> label_lengths;
  // The kind's further tensors (Batch::extras: tabular rows' sparse ids).
  std::vector<BatchTensor> extras;
};

// REQUIRES: batch is not an end-of-epoch marker.
BatchView ViewOf(const std::shared_ptr<Batch>& batch);

void BindBatch(pybind11::module_& module);

}  // namespace gpufeed::python

#endif  // GPUFEED_PYTHON_BATCH_BINDING_H_
