// Fuzz target: the Criteo TSV line parser (src/format/criteo_line.h). The
// input is one line. Properties: the parser reads only the bytes given (the
// input is copied to a buffer of exactly its size, so ASan sees a read past
// it); an accepted line has exactly 39 tabs once its "\n" / "\r\n" is
// stripped; the parsed row, written back as text (decimal, lowercase hex,
// empty for missing), parses to the same row; every error is Corruption
// with a message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "format/criteo_line.h"
#include "fuzz_util.h"

using namespace gpufeed;

namespace {

std::string Format(const CriteoRow& row) {
  std::string line = std::to_string(row.label);
  for (uint32_t i = 0; i < kCriteoDense; ++i) {
    line += '\t';
    if (!((row.dense_missing >> i) & 1)) line += std::to_string(row.dense[i]);
  }
  for (uint32_t i = 0; i < kCriteoSparse; ++i) {
    line += '\t';
    if ((row.sparse_missing >> i) & 1) continue;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%llx", static_cast<unsigned long long>(row.sparse[i]));
    line += hex;
  }
  return line + "\n";
}

bool Same(const CriteoRow& a, const CriteoRow& b) {
  return a.label == b.label && a.dense_missing == b.dense_missing &&
         a.sparse_missing == b.sparse_missing &&
         std::memcmp(a.dense, b.dense, sizeof(a.dense)) == 0 &&
         std::memcmp(a.sparse, b.sparse, sizeof(a.sparse)) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietLogs();
  std::unique_ptr<char[]> exact(new char[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(exact.get(), data, size);
  CriteoRow row;
  Status status = ParseCriteoLine(exact.get(), size, &row);
  if (!status.ok()) {
    if (!status.IsCorruption() || status.message().empty()) std::abort();
    return 0;
  }
  size_t length = size;
  if (length > 0 && exact[length - 1] == '\n') {
    --length;
    if (length > 0 && exact[length - 1] == '\r') --length;
  }
  size_t tabs = 0;
  for (size_t i = 0; i < length; ++i) tabs += exact[i] == '\t';
  if (tabs != kCriteoDense + kCriteoSparse) std::abort();
  for (uint32_t i = 0; i < kCriteoDense; ++i) {
    if (((row.dense_missing >> i) & 1) && row.dense[i] != 0) std::abort();
  }
  for (uint32_t i = 0; i < kCriteoSparse; ++i) {
    if (((row.sparse_missing >> i) & 1) && row.sparse[i] != 0) std::abort();
  }
  if ((row.dense_missing >> kCriteoDense) != 0 || (row.sparse_missing >> kCriteoSparse) != 0) {
    std::abort();
  }
  const std::string again = Format(row);
  CriteoRow reparsed;
  if (!ParseCriteoLine(again.data(), again.size(), &reparsed).ok() || !Same(row, reparsed)) {
    std::abort();
  }
  return 0;
}
