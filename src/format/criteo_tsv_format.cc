// The registry entry of raw Criteo TSV: a file or a directory of files,
// only when format="criteo_tsv" is asked for (text has no name or magic to
// detect); no manifest, no writer; verify parses every line; a cache warm
// copies the TSV files (their line indexes stay beside them, or are built
// again from the copy).
#include <algorithm>
#include <string>
#include <vector>

#include "format/criteo_line.h"
#include "format/criteo_tsv.h"
#include "format/registry.h"
#include "format/tabular.h"

namespace gpufeed {

namespace {

// Problems listed by verify; the rest are counted in one last line.
constexpr uint64_t kMaxListedProblems = 100;

Status Open(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenCriteoTsvDataset(request.path, request.options, request.store, dataset);
}

// Parses every line of `block` (read whole) into the report.
void VerifyBlock(const TabularTable& table, const TabularBlock& block, std::string* buffer,
                 VerifyReport* report, uint64_t* problems) {
  const TabularSegment& segment = table.segments[block.segment];
  const StoreFile& file = *table.files[segment.parts[0].file];
  auto note = [&](const std::string& problem) {
    if ((*problems)++ < kMaxListedProblems) report->problems.push_back(problem);
  };
  std::vector<TabularRange> ranges;
  TabularRanges(segment, block.first_row, block.rows, &ranges);
  buffer->resize(ranges[0].length);
  size_t done = 0;
  Status read = file.ReadAt(ranges[0].offset, ranges[0].length, &(*buffer)[0], &done);
  if (read.ok() && done != ranges[0].length) {
    read = Status::Corruption(file.path() + ": ends at byte offset " +
                              std::to_string(ranges[0].offset + done) +
                              ", inside its indexed lines (the file shrank)");
  }
  if (!read.ok()) {
    note(read.ToString());
    return;
  }
  const std::vector<uint64_t>& lines = *segment.line_offsets;
  const uint64_t first = block.first_row - segment.first_row;
  CriteoRow row;
  for (uint64_t r = first; r < first + block.rows; ++r) {
    Status parsed =
        ParseCriteoLine(buffer->data() + (lines[r] - lines[first]), lines[r + 1] - lines[r], &row);
    if (!parsed.ok()) {
      note(file.path() + " line " + std::to_string(r + 1) + " (sample " +
           std::to_string(segment.first_row + r) + "): " + parsed.message());
    }
    report->records_checked += 1;
  }
}

// Every line of every file parses as a Criteo row (read block by block).
void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::unique_ptr<Dataset> opened;
  const Dataset* dataset = request.dataset;
  if (dataset == nullptr) {
    DatasetOptions options = request.options;
    options.format = kCriteoTsvFormat;
    Status status = Dataset::Open(request.path, options, &opened);
    if (!status.ok()) {
      report->problems.push_back(status.ToString());
      return;
    }
    dataset = opened.get();
  }
  const TabularRows* rows = AsTabularRows(*dataset);
  if (rows == nullptr) {
    report->problems.push_back(request.path + ": not a criteo_tsv dataset");
    return;
  }
  std::string buffer;
  uint64_t problems = 0;
  for (const TabularBlock& block : rows->blocks()) {
    VerifyBlock(rows->table(), block, &buffer, report, &problems);
  }
  if (problems > kMaxListedProblems) {
    report->problems.push_back(std::to_string(problems - kMaxListedProblems) +
                               " more lines that do not parse (not listed)");
  }
  report->shards_checked += rows->table().segments.size();
}

// The store reads each TSV file as it is.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  return WarmEachShardFile(dataset, nullptr, sources);
}

}  // namespace

const FormatEntry& CriteoTsvFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = kCriteoTsvFormat;
    e.name = "criteo_tsv";
    e.open_directory = Open;
    e.open_file = Open;
    e.reads_manifest = false;
    e.verify = Verify;
    e.warm_sources = WarmSources;
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
