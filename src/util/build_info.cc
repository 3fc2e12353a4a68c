#include "gpufeed/dataset.h"

namespace gpufeed {

BuildInfo GetBuildInfo() {
  BuildInfo info;
  info.version = GPUFEED_VERSION_STRING;
#ifdef GPUFEED_HAVE_CUDA
  info.with_cuda = true;
#endif
#ifdef GPUFEED_HAVE_IO_URING
  info.with_io_uring = true;
#endif
#ifdef GPUFEED_HAVE_WEBP
  info.with_webp = true;
#endif
#ifdef GPUFEED_HAVE_TIFF
  info.with_tiff = true;
#endif
  return info;
}

}  // namespace gpufeed
