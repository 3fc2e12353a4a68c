// The default BatchAllocator: page-aligned host memory straight from the
// kernel. Freeing a buffer gives its memory back at once. Through malloc,
// glibc's dynamic mmap threshold would serve multi-MB buffers from the heap
// after the first free, and the extra buffers of held batches would stay
// resident after their release.
//
// Thread safety: Allocate and Free may be called from any thread.
#ifndef GPUFEED_BATCH_HOST_ALLOCATOR_H_
#define GPUFEED_BATCH_HOST_ALLOCATOR_H_

#include <memory>

#include "gpufeed/batch.h"

namespace gpufeed {

std::shared_ptr<BatchAllocator> MakeHostAllocator();

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_HOST_ALLOCATOR_H_
