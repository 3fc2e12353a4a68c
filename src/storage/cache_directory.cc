// CacheDirectory: opening a cache directory and assembling its parts
// (cache_directory.h).
#include "storage/cache_directory.h"

namespace gpufeed {

CacheDirectory::CacheDirectory(std::shared_ptr<const CacheLayout> layout)
    : layout_(std::move(layout)),
      index_(std::make_shared<const CacheIndex>(layout_)),
      filler_(index_),
      reader_(index_) {}

Status CacheDirectory::Open(const std::string& path, const std::string& group, bool create,
                            std::shared_ptr<CacheDirectory>* directory, bool* unsafe) {
  std::unique_ptr<CacheLayout> layout;
  GPUFEED_RETURN_IF_ERROR(CacheLayout::Open(path, group, create, &layout, unsafe));
  std::shared_ptr<CacheDirectory> result(new CacheDirectory(std::move(layout)));
  // Remove what crashed fills left behind, so usage counts start right.
  GPUFEED_RETURN_IF_ERROR(result->index_->RemoveLeftovers());
  *directory = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
