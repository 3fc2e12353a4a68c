// ShardWriter::Open: the writer of the format registry's entry that writes
// the ShardFormat asked for (FormatEntry::writer).
#include "format/registry.h"
#include "gpufeed/writer.h"

namespace gpufeed {

ShardWriter::~ShardWriter() = default;

Status ShardWriter::Open(const std::string& path, ShardFormat format,
                         std::unique_ptr<ShardWriter>* writer) {
  const FormatEntry* entry = FindWriter(format);
  if (entry == nullptr) {
    return Status::InvalidArgument(path + ": no format writes shard format " +
                                   std::to_string(static_cast<int>(format)));
  }
  return entry->writer.open(path, writer);
}

}  // namespace gpufeed
