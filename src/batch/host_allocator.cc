#include "batch/host_allocator.h"

#include <sys/mman.h>

#include <algorithm>

namespace gpufeed {

namespace {

class HostAllocator final : public BatchAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* data = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return data == MAP_FAILED ? nullptr : data;
  }
  void Free(void* data, size_t bytes) override { munmap(data, std::max<size_t>(bytes, 1)); }
};

}  // namespace

std::shared_ptr<BatchAllocator> MakeHostAllocator() { return std::make_shared<HostAllocator>(); }

}  // namespace gpufeed
