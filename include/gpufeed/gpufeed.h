// Umbrella header: everything a C++ trainer needs.
#ifndef GPUFEED_GPUFEED_H_
#define GPUFEED_GPUFEED_H_

#include "gpufeed/batch.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"
#include "gpufeed/writer.h"

#endif  // GPUFEED_GPUFEED_H_
