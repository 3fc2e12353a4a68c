// Fuzz target: the caffe.Datum wire decoder. An accepted raw Datum's shape
// must match its data length exactly (the loader sizes its pixel buffer
// from the shape), and the data must point inside the message.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "format/caffe_datum.h"
#include "fuzz_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view message(reinterpret_cast<const char*>(data), size);
  CaffeDatum datum;
  if (!DecodeCaffeDatum(message, &datum).ok()) return 0;
  if (!datum.data.empty() && (datum.data.data() < message.data() ||
                              datum.data.data() + datum.data.size() > message.data() + size)) {
    std::abort();
  }
  if (datum.encoded) {
    if (datum.data.empty()) std::abort();
    return 0;
  }
  if (datum.channels < 0 || datum.height < 0 || datum.width < 0) std::abort();
  unsigned __int128 pixels = static_cast<unsigned __int128>(datum.channels) * datum.height *
                             static_cast<unsigned __int128>(datum.width);
  if (!datum.data.empty() && pixels != datum.data.size()) std::abort();
  if (datum.data.empty() && pixels != datum.float_data_count) std::abort();
  return 0;
}
