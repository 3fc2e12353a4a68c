// Internal: how the stages fill the Batches they hand out (Batch's private
// members are theirs to set; the consumer only reads them).
#ifndef GPUFEED_BATCH_BATCH_ACCESS_H_
#define GPUFEED_BATCH_BATCH_ACCESS_H_

#include <memory>
#include <utility>
#include <vector>

#include "gpufeed/batch.h"

namespace gpufeed {

class BatchAccess {
 public:
  static void Fill(Batch* batch, Tensor data, Tensor labels, std::vector<uint64_t> ids,
                   uint64_t epoch, uint64_t index, bool end, std::shared_ptr<void> hold,
                   std::shared_ptr<DeviceBatchHandle> device = nullptr) {
    batch->reset();
    batch->data_ = std::move(data);
    batch->labels_ = std::move(labels);
    batch->sample_ids_ = std::move(ids);
    batch->epoch_ = epoch;
    batch->index_ = index;
    batch->end_of_epoch_ = end;
    batch->hold_ = std::move(hold);
    batch->device_ = std::move(device);
  }
  // The empty batch that marks the end of `epoch` (after `index` batches).
  static void FillEndOfEpoch(Batch* batch, uint64_t epoch, uint64_t index) {
    Fill(batch, Tensor(), Tensor(), {}, epoch, index, true, nullptr);
  }
  // After Fill: the kind's further tensors (Batch::extras).
  static void SetExtras(Batch* batch, std::vector<Tensor> extras) {
    batch->extras_ = std::move(extras);
  }
  // After Fill: the (B,) int32 label counts (LoaderOptions::label_lengths).
  static void SetLabelLengths(Batch* batch, Tensor lengths) {
    batch->label_lengths_ = std::move(lengths);
  }
};

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_BATCH_ACCESS_H_
