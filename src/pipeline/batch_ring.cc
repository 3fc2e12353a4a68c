#include "pipeline/batch_ring.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "util/system_stats.h"

namespace gpufeed {

BatchRing::BatchRing(std::shared_ptr<BatchAllocator> allocator, size_t data_bytes,
                     size_t label_bytes, uint64_t max_held_bytes, uint32_t batch_size)
    : allocator_(std::move(allocator)),
      data_bytes_(data_bytes),
      label_bytes_(label_bytes),
      max_held_bytes_(max_held_bytes),
      batch_size_(batch_size),
      owner_(CurrentProcessId()) {}

BatchRing::~BatchRing() {
  for (Slot& slot : slots_) {
    if (slot.data) allocator_->Free(slot.data, data_bytes_);
    if (slot.labels) allocator_->Free(slot.labels, label_bytes_);
  }
}

Status BatchRing::Allocate(size_t count) {
  std::lock_guard<std::mutex> lock(mutex);
  slots_.resize(count);
  size_t next_index = 0;
  for (Slot& slot : slots_) {
    slot.index = next_index++;
    // Allocated once, never on the hot path.
    slot.data = allocator_->Allocate(data_bytes_);
    slot.labels = allocator_->Allocate(label_bytes_);
    if (!slot.data || !slot.labels) return Status::IOError("cannot allocate batch buffers");
    slot.sample_ids.resize(batch_size_);
  }
  return Status::OK();
}

void BatchRing::Release(size_t index, std::shared_ptr<HostReleaseFence> fence) {
  if (CurrentProcessId() != owner_) return;  // an inherited Batch in a forked child: left alone
  void* data = nullptr;
  void* labels = nullptr;
  bool wake = false;
  {
    std::lock_guard<std::mutex> guard(mutex);
    wake = wanted_free_slot;
    wanted_free_slot = false;
    Slot& slot = slots_[index];
    slot.held = false;
    slot.batch = kNoBatch;
    if (slot.extra) {
      std::swap(data, slot.data);
      std::swap(labels, slot.labels);
      slot.fence.reset();
    } else {
      slot.fence = fence;
    }
  }
  if (wake) changed.notify_all();
  if (data != nullptr) {
    if (fence) fence->Wait();
    allocator_->Free(data, data_bytes_);
    allocator_->Free(labels, label_bytes_);
  }
}

Slot* BatchRing::Find(uint64_t k) {
  for (Slot& slot : slots_) {
    if (slot.batch == k && !slot.held) return &slot;
  }
  return nullptr;
}

Slot* BatchRing::Free() {
  for (Slot& slot : slots_) {
    if (slot.batch == kNoBatch && !slot.held && slot.data != nullptr) return &slot;
  }
  return nullptr;
}

bool BatchRing::AllHeld() const {
  return std::none_of(slots_.begin(), slots_.end(),
                      [](const Slot& s) { return !s.held && s.data != nullptr; });
}

int BatchRing::Ready(uint64_t delivered) const {
  int ready = 0;
  for (const Slot& slot : slots_) {
    if (!slot.held && slot.batch != kNoBatch && slot.batch >= delivered &&
        slot.done == slot.samples) {
      ready += 1;
    }
  }
  return ready;
}

void BatchRing::Unassign() {
  for (Slot& slot : slots_) {
    // A held slot stays held until its Batch goes; it is free after that.
    slot.batch = kNoBatch;
    slot.done = 0;
    slot.error = Status::OK();
  }
}

Status BatchRing::GrowLocked() {
  const uint64_t slot_bytes = data_bytes_ + label_bytes_;
  uint64_t held = 0;
  for (const Slot& slot : slots_) held += slot.held ? 1 : 0;
  if ((held + 1) * slot_bytes > max_held_bytes_) {
    return Status::InvalidArgument(
        "the consumer holds " + std::to_string(held) + " batches (" +
        std::to_string(held * slot_bytes) + " bytes) and one more would pass max_held_bytes (" +
        std::to_string(max_held_bytes_) +
        " bytes): release the batches you no longer need (or copy those you keep), or raise "
        "max_held_bytes");
  }
  Slot* slot = nullptr;
  for (Slot& candidate : slots_) {
    if (candidate.extra && candidate.data == nullptr && !candidate.held) {
      slot = &candidate;
      break;
    }
  }
  if (slot == nullptr) {
    slots_.emplace_back();
    slot = &slots_.back();
    slot->index = slots_.size() - 1;
    slot->extra = true;
    slot->sample_ids.resize(batch_size_);
  }
  slot->batch = kNoBatch;
  slot->fence.reset();
  slot->data = allocator_->Allocate(data_bytes_);
  slot->labels = allocator_->Allocate(label_bytes_);
  if (slot->data == nullptr || slot->labels == nullptr) {
    if (slot->data) allocator_->Free(slot->data, data_bytes_);
    if (slot->labels) allocator_->Free(slot->labels, label_bytes_);
    slot->data = slot->labels = nullptr;
    return Status::IOError("cannot allocate another batch buffer (" +
                           std::to_string(slot_bytes) + " bytes) for the batches held");
  }
  return Status::OK();
}

}  // namespace gpufeed
