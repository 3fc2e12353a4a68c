// HostStage's on_error=skip at delivery (host_stage.h): a batch holding
// failed samples is handed out with their rows removed, every plane of the
// layout moved down so the good rows are contiguous; its tasks still count
// in the epoch's position (the cursor), so a resume delivers exactly the
// rest and every rank steps through the same number of batches.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "pipeline/host_stage.h"
#include "pipeline/sampler.h"

namespace gpufeed {

namespace {

// `message` with the code of `like` (Status's constructor is private).
Status WithCodeOf(const Status& like, std::string message) {
  using Code = Status::Code;
  switch (like.code()) {
    case Code::kNotFound: return Status::NotFound(std::move(message));
    case Code::kCorruption: return Status::Corruption(std::move(message));
    case Code::kInvalidArgument: return Status::InvalidArgument(std::move(message));
    case Code::kIOError: return Status::IOError(std::move(message));
    case Code::kNotSupported: return Status::NotSupported(std::move(message));
    case Code::kPermissionDenied: return Status::PermissionDenied(std::move(message));
    case Code::kOutOfRange: return Status::OutOfRange(std::move(message));
    case Code::kAlreadyExists: return Status::AlreadyExists(std::move(message));
    case Code::kCancelled: return Status::Cancelled(std::move(message));
    default: return Status::Internal(std::move(message));
  }
}

// Moves the rows of one plane (`bytes` each, from `base`) whose bad[i] is
// 0 down to the front, in order.
void CompactPlane(char* base, size_t bytes, const std::vector<char>& bad) {
  if (base == nullptr || bytes == 0) return;
  size_t to = 0;
  for (size_t from = 0; from < bad.size(); ++from) {
    if (bad[from]) continue;
    if (to != from) std::memmove(base + to * bytes, base + from * bytes, bytes);
    to += 1;
  }
}

}  // namespace

std::vector<SkippedSample> HostStage::SkippedSamples() const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  return skipped_;
}

Status HostStage::TakeSkipped(Slot& slot, int* rows) {
  *rows = slot.samples;
  if (slot.skipped.empty()) return Status::OK();
  std::sort(slot.skipped.begin(), slot.skipped.end(),
            [](const SkippedRow& a, const SkippedRow& b) { return a.task < b.task; });
  std::vector<char> bad(static_cast<size_t>(slot.samples), 0);
  for (const SkippedRow& row : slot.skipped) {
    bad[row.task % options_.batch_size] = 1;
    skipped_.push_back(row.sample);
  }
  stats_.skipped += slot.skipped.size();
  const Status last = slot.skipped.back().status;
  slot.skipped.clear();
  *rows = static_cast<int>(std::count(bad.begin(), bad.end(), 0));
  if (static_cast<double>(skipped_.size()) > max_skipped_) {
    std::ostringstream message;
    message << skipped_.size() << " samples skipped in epoch " << epoch_
            << ", more than max_skipped=" << options_.max_skipped
            << "; the last: " << last.ToString();
    return WithCodeOf(last, message.str());
  }
  CompactRows(slot, bad);
  return Status::OK();
}

// Every plane of the layout: the data, the extra tensors, the labels (in the
// data buffer or after the counts), the label counts, and the sample ids.
void HostStage::CompactRows(Slot& slot, const std::vector<char>& bad) {
  char* data = static_cast<char*>(slot.data);
  CompactPlane(data, layout_.sample_bytes, bad);
  for (size_t i = 0; i < layout_.extras.size(); ++i) {
    CompactPlane(data + layout_.plane_offset(i, options_.batch_size),
                 layout_.extras[i].bytes_per_sample, bad);
  }
  char* labels = layout_.labels_in_data
                     ? data + layout_.plane_offset(layout_.extras.size(), options_.batch_size)
                     : static_cast<char*>(slot.labels) + layout_.lengths_bytes;
  CompactPlane(labels, layout_.label_bytes_per_sample, bad);
  if (layout_.lengths_bytes > 0) {
    CompactPlane(static_cast<char*>(slot.labels), sizeof(int32_t), bad);
  }
  CompactPlane(reinterpret_cast<char*>(slot.sample_ids.data()), sizeof(uint64_t), bad);
}

}  // namespace gpufeed
