#include "format/tabular.h"

#include <algorithm>
#include <string>
#include <utility>

#include "format/criteo_line.h"
#include "format/tabular_field.h"

namespace gpufeed {

namespace {

struct FieldTypeInfo {
  FieldType type;
  const char* name;
  size_t size;
};

constexpr FieldTypeInfo kFieldTypes[] = {
    {FieldType::kBool, "bool", 1},       {FieldType::kInt8, "int8", 1},
    {FieldType::kUint8, "uint8", 1},     {FieldType::kInt16, "int16", 2},
    {FieldType::kUint16, "uint16", 2},   {FieldType::kInt32, "int32", 4},
    {FieldType::kUint32, "uint32", 4},   {FieldType::kInt64, "int64", 8},
    {FieldType::kUint64, "uint64", 8},   {FieldType::kFloat16, "float16", 2},
    {FieldType::kFloat32, "float32", 4}, {FieldType::kFloat64, "float64", 8},
};

// Rows sampled per segment by ExpectReads: enough to see every segment in
// the order (a segment holds at least one sampled position) without
// visiting each of millions of samples.
constexpr uint64_t kExpectStride = 1024;

}  // namespace

const char* FieldTypeName(FieldType type) {
  for (const FieldTypeInfo& info : kFieldTypes) {
    if (info.type == type) return info.name;
  }
  return "unknown";
}

size_t FieldTypeSize(FieldType type) {
  for (const FieldTypeInfo& info : kFieldTypes) {
    if (info.type == type) return info.size;
  }
  return 0;
}

Status ParseFieldType(const std::string& name, FieldType* type) {
  std::string accepted;
  for (const FieldTypeInfo& info : kFieldTypes) {
    if (name == info.name) {
      *type = info.type;
      return Status::OK();
    }
    accepted += accepted.empty() ? "" : ", ";
    accepted += info.name;
  }
  return Status::InvalidArgument("unknown field type '" + name + "' (accepted: " + accepted + ")");
}

uint64_t TabularRowBytes(const TabularTable&, const TabularSegment& segment) {
  if (segment.line_offsets) {
    const auto& lines = *segment.line_offsets;
    const uint64_t span = lines.back() - lines.front();
    return std::max<uint64_t>(1, span / std::max<uint64_t>(1, segment.rows));
  }
  uint64_t bytes = 0;
  for (const TabularPart& part : segment.parts) bytes += part.stride;
  return std::max<uint64_t>(1, bytes);
}

std::vector<TabularBlock> CutTabularBlocks(const TabularTable& table, uint64_t block_bytes) {
  std::vector<TabularBlock> blocks;
  for (size_t s = 0; s < table.segments.size(); ++s) {
    const TabularSegment& segment = table.segments[s];
    const uint64_t per_block =
        std::max<uint64_t>(1, block_bytes / TabularRowBytes(table, segment));
    for (uint64_t first = 0; first < segment.rows; first += per_block) {
      blocks.push_back(TabularBlock{s, segment.first_row + first,
                                    std::min(per_block, segment.rows - first)});
    }
  }
  return blocks;
}

void TabularRanges(const TabularSegment& segment, uint64_t first, uint64_t count,
                   std::vector<TabularRange>* ranges) {
  ranges->clear();
  const uint64_t begin = first - segment.first_row;
  if (segment.line_offsets) {
    const auto& lines = *segment.line_offsets;
    ranges->push_back(TabularRange{segment.parts[0].file, lines[begin],
                                   lines[begin + count] - lines[begin]});
    return;
  }
  for (const TabularPart& part : segment.parts) {
    ranges->push_back(TabularRange{part.file, part.data_offset + begin * part.stride,
                                   count * part.stride});
  }
}

size_t TabularRows::BlockOf(uint64_t row) const {
  const std::vector<TabularBlock>& all = blocks();
  auto after = std::upper_bound(all.begin(), all.end(), row, [](uint64_t r, const TabularBlock& b) {
    return r < b.first_row;
  });
  return static_cast<size_t>(after - all.begin()) - 1;
}

const TabularRows* AsTabularRows(const Dataset& dataset) {
  return dynamic_cast<const TabularRows*>(&dataset);
}

TabularDatasetBase::TabularDatasetBase(DatasetFormat format, std::string path,
                                       std::shared_ptr<Store> store, TabularTable table,
                                       uint64_t block_bytes)
    : DatasetBase(format, std::move(path), std::move(store)), table_(std::move(table)) {
  blocks_ = CutTabularBlocks(table_, block_bytes);
  const TabularSchema& schema = table_.schema;
  info_.label = schema.label.type;
  info_.dense = schema.dense.type;
  info_.dense_count = schema.dense.count;
  info_.sparse = schema.sparse.type;
  info_.sparse_count = schema.sparse.count;
  info_.text = schema.text;
  info_.rows = table_.rows;
  info_.blocks = blocks_.size();
  info_.row_bytes = table_.segments.empty() ? 0 : TabularRowBytes(table_, table_.segments[0]);
  for (const TabularSegment& segment : table_.segments) {
    const StoreFile& file = *table_.files[segment.parts[0].file];
    ShardInfo shard;
    shard.path = file.path();
    shard.first_record = segment.first_row;
    shard.records = segment.rows;
    for (const TabularPart& part : segment.parts) shard.bytes += table_.files[part.file]->size();
    shard.xxh64 = file.xxh64();
    shards_.push_back(std::move(shard));
  }
}

size_t TabularRows::SegmentOf(uint64_t row) const {
  const auto& segments = table().segments;
  auto after = std::upper_bound(segments.begin(), segments.end(), row,
                                [](uint64_t r, const TabularSegment& s) { return r < s.first_row; });
  return static_cast<size_t>(after - segments.begin()) - 1;
}

std::vector<uint64_t> TabularDatasetBase::BlockSizes() const {
  std::vector<uint64_t> sizes;
  sizes.reserve(blocks_.size());
  for (const TabularBlock& block : blocks_) sizes.push_back(block.rows);
  return sizes;
}

const StoreFile* TabularDatasetBase::FileOf(uint64_t index) const {
  if (index >= table_.rows) return nullptr;
  return table_.files[table_.segments[SegmentOf(index)].parts[0].file].get();
}

// Every part file of the segments, in the order the samples first reach
// them; the bytes in use at once: the largest segment's files (a loader
// reads a few blocks of one or two segments at a time).
void TabularDatasetBase::ExpectReads(const std::vector<uint64_t>& samples) const {
  std::vector<char> seen(table_.segments.size(), 0);
  std::vector<const StoreUnit*> order;
  uint64_t live = 0;
  uint64_t stride = kExpectStride;
  for (const TabularSegment& segment : table_.segments) stride = std::min(stride, segment.rows);
  stride = std::max<uint64_t>(1, stride / 2);
  for (uint64_t position = 0; position < samples.size(); position += stride) {
    if (samples[position] >= table_.rows) continue;
    const size_t s = SegmentOf(samples[position]);
    if (seen[s]) continue;
    seen[s] = 1;
    uint64_t bytes = 0;
    for (const TabularPart& part : table_.segments[s].parts) {
      order.push_back(table_.files[part.file].get());
      bytes += table_.files[part.file]->size();
    }
    live = std::max(live, bytes);
  }
  store_->ExpectUnits(order, 2 * live);
}

Status TabularDatasetBase::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  const TabularSegment& segment = table_.segments[SegmentOf(index)];
  const TabularSchema& schema = table_.schema;
  std::vector<TabularRange> ranges;
  TabularRanges(segment, index, 1, &ranges);
  std::vector<std::string> parts(ranges.size());
  for (size_t p = 0; p < ranges.size(); ++p) {
    const StoreFile& file = *table_.files[ranges[p].file];
    parts[p].resize(ranges[p].length);
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(file.ReadAt(ranges[p].offset, ranges[p].length, &parts[p][0], &done));
    if (done != ranges[p].length) {
      return Status::Corruption(file.path() + ": row " + std::to_string(index) + " at byte offset " +
                                std::to_string(ranges[p].offset) + " is cut short (" +
                                std::to_string(done) + " of " + std::to_string(ranges[p].length) +
                                " bytes): the file was truncated after it was opened");
    }
  }
  const std::string& shown = table_.files[ranges[0].file]->path();
  const uint64_t row = index - segment.first_row;
  record->key = shown + ":" + std::to_string(row);
  record->id = index;
  record->shape.clear();
  record->encoded = false;
  if (schema.text) {
    std::string& line = parts[0];
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    record->source = shown + " line " + std::to_string(row + 1);
    CriteoRow parsed;
    Status status = ParseCriteoLine(line.data(), line.size(), &parsed);
    if (!status.ok()) {
      return Status::Corruption(record->source + " (sample " + std::to_string(index) +
                                "): " + status.message());
    }
    record->data = std::move(line);
    record->labels.assign(1, static_cast<float>(parsed.label));
    return Status::OK();
  }
  record->data.clear();
  const char* bytes[3] = {nullptr, nullptr, nullptr};
  for (size_t p = 0; p < parts.size() && p < 3; ++p) bytes[p] = parts[p].data();
  for (const TabularField* field : {&schema.label, &schema.dense, &schema.sparse}) {
    record->data.append(TabularFieldAt(*field, segment, bytes, 0),
                        FieldTypeSize(field->type) * field->count);
  }
  record->labels.assign(1, static_cast<float>(FieldAsDouble(
                               schema.label.type, TabularFieldAt(schema.label, segment, bytes, 0))));
  record->source = shown + " at byte offset " + std::to_string(ranges[0].offset);
  return Status::OK();
}

}  // namespace gpufeed
