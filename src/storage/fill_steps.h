// FillSteps: what one fill of a cache entry (a whole file, cache_fill.cc, or
// a bundle of members, cache_bundle_fill.cc) carries from step to step after
// its reservation, and how it stops.
#ifndef GPUFEED_STORAGE_FILL_STEPS_H_
#define GPUFEED_STORAGE_FILL_STEPS_H_

#include <utility>

#include "storage/cache_filler.h"

namespace gpufeed {

class FillSteps {
 public:
  const Status& status() const { return status_; }

 protected:
  FillSteps(const CacheIndex& index, const CacheSource& source, PendingFill* fill,
            FillResult* result)
      : index_(index), source_(source), fill_(*fill), result_(*result) {}

  // Ends the fill: the reservation is abandoned (its temporary file
  // removed), result->outcome and status() say why. Returns false, so that a
  // step can `return Stop(...)`.
  bool Stop(Status status, FillOutcome why) {
    index_.AbandonFill(fill_);
    result_.outcome = why;
    status_ = std::move(status);
    return false;
  }

  const CacheIndex& index_;
  const CacheSource& source_;
  PendingFill& fill_;
  FillResult& result_;
  Status status_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_FILL_STEPS_H_
