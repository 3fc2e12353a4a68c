// The Criteo TSV line (Kaggle's train.txt, the Terabyte dataset's day_N):
//   label \t I1 .. I13 \t C1 .. C26
// 40 tab-separated fields: the label, an integer (0 or 1); 13 integer
// features, each possibly empty (missing) or negative; 26 categorical
// features, each a hex string (Criteo's 8 digits, at most 16) or empty
// (missing). A trailing '\n' (and '\r' before it) is not part of the line.
#ifndef GPUFEED_FORMAT_CRITEO_LINE_H_
#define GPUFEED_FORMAT_CRITEO_LINE_H_

#include <cstddef>
#include <cstdint>

#include "gpufeed/status.h"

namespace gpufeed {

constexpr uint32_t kCriteoDense = 13;
constexpr uint32_t kCriteoSparse = 26;

// One line, parsed. Missing values are 0 (dense_missing/sparse_missing say
// which were empty).
struct CriteoRow {
  int64_t label = 0;
  int64_t dense[kCriteoDense] = {};
  uint64_t sparse[kCriteoSparse] = {};
  uint32_t dense_missing = 0;   // bit i: I(i+1) was empty
  uint32_t sparse_missing = 0;  // bit i: C(i+1) was empty
};

// Parses `line` (`length` bytes; a trailing "\n" or "\r\n" is ignored).
// Corruption with a message naming the field ("field I3 (column 4):
// 'x1' is not an integer", "41 fields, expected 40", "field C7 (column
// 21): 'zz' is not hexadecimal") and nothing else: the caller adds the
// file and the line number. Never reads outside [line, line + length).
Status ParseCriteoLine(const char* line, size_t length, CriteoRow* row);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_CRITEO_LINE_H_
