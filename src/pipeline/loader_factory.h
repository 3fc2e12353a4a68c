// LoaderFactory: Loader::Open with the settings that are not the user's
// (include/gpufeed/loader.h stays what a trainer sets). Tests reach the
// read path's alternatives through it.
#ifndef GPUFEED_PIPELINE_LOADER_FACTORY_H_
#define GPUFEED_PIPELINE_LOADER_FACTORY_H_

#include <memory>

#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"

namespace gpufeed {

struct LoaderInternals {
  // false: every sample is read by the decode threads (Dataset::Read),
  // never through the read engine.
  bool use_read_engine = true;
};

class LoaderFactory {
 public:
  // As Loader::Open, with `internals`.
  static Status Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                     const LoaderInternals& internals, std::unique_ptr<Loader>* loader);
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_LOADER_FACTORY_H_
