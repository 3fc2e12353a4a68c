#include "embedding/row_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace gpufeed {
namespace {

// The longest coalesced request, and a Scan piece.
constexpr uint64_t kMaxRequest = 256 << 10;
constexpr uint64_t kScanPiece = 4 << 20;

}  // namespace

Status RowReader::Create(std::shared_ptr<Store> store, std::shared_ptr<const StoreFile> file,
                         const TableLayout& layout, const EmbeddingTableOptions& options,
                         std::unique_ptr<RowReader>* reader) {
  std::unique_ptr<RowReader> made(new RowReader());
  made->store_ = std::move(store);
  made->file_ = std::move(file);
  made->layout_ = layout;
  made->gap_ = options.coalesce_gap_bytes;
  made->max_request_ = std::max<uint64_t>(
      layout.row_bytes, std::min<uint64_t>(kMaxRequest, options.io.inflight_bytes / 4));
  GPUFEED_RETURN_IF_ERROR(ReadEngine::Create(options.io, &made->engine_));
  *reader = std::move(made);
  return Status::OK();
}

RowReader::~RowReader() {
  // The engine goes first: it waits for its reads, which use the descriptors.
  engine_.reset();
}

Status RowReader::EngineFile(uint64_t offset, uint64_t length, uint64_t bytes, FileId* id,
                             bool* local) {
  FileView view;
  GPUFEED_RETURN_IF_ERROR(file_->View(offset, length, &view));
  *local = view.local;
  file_->Count(view, bytes);
  std::lock_guard<std::mutex> lock(files_mutex_);
  const void* key = view.hold ? view.hold.get() : file_.get();
  auto found = files_.find(key);
  if (found == files_.end()) {
    Handle handle;
    GPUFEED_RETURN_IF_ERROR(engine_->AdoptFile(view.fd, view.shown, &handle.id));
    handle.hold = view.hold;
    found = files_.emplace(key, std::move(handle)).first;
  }
  *id = found->second.id;
  return Status::OK();
}

Status RowReader::Fail(const Range& range, const ReadCompletion& read) const {
  const std::string& path = file_->path();
  const uint64_t first_row = (range.offset - layout_.data_offset) / layout_.row_bytes;
  if (!read.status.ok()) return read.status.WithContext("embedding table " + path);
  return Status::Corruption(
      "embedding table " + path + ": rows " + std::to_string(first_row) + " to " +
      std::to_string(first_row + range.length / layout_.row_bytes - 1) + " at byte offset " +
      std::to_string(range.offset) + " came back short (" + std::to_string(read.buffer.size()) +
      " of " + std::to_string(range.length) +
      " bytes): the file was truncated or replaced after it was opened");
}

void RowReader::Note(const Range& range, RowReadFigures* figures) {
  if (range.local) {
    figures->nvme_rows += range.count;
    figures->nvme_reads += 1;
    figures->nvme_bytes += range.length;
  } else {
    figures->source_rows += range.count;
    figures->source_reads += 1;
    figures->source_bytes += range.length;
  }
}

Status RowReader::Read(const int64_t* rows, size_t count, char* out, RowReadFigures* figures) {
  const uint64_t row_bytes = layout_.row_bytes;
  std::vector<Range> ranges;
  for (size_t j = 0; j < count; ++j) {
    const uint64_t offset = layout_.data_offset + static_cast<uint64_t>(rows[j]) * row_bytes;
    if (!ranges.empty()) {
      Range& last = ranges.back();
      const uint64_t end = last.offset + last.length;
      if (offset - end <= gap_ && offset + row_bytes - last.offset <= max_request_) {
        last.length = offset + row_bytes - last.offset;
        ++last.count;
        continue;
      }
    }
    Range range;
    range.offset = offset;
    range.length = row_bytes;
    range.first = j;
    range.count = 1;
    ranges.push_back(range);
  }
  if (ranges.empty()) return Status::OK();
  // One view for the call's whole span: one descriptor lookup (and for a
  // node cache one lease) per call, not per request; a copy that does not
  // cover the span yet leaves the call to the source.
  FileId file = 0;
  bool local = false;
  const uint64_t span_end = ranges.back().offset + ranges.back().length;
  uint64_t bytes = 0;
  for (const Range& range : ranges) bytes += range.length;
  GPUFEED_RETURN_IF_ERROR(EngineFile(ranges.front().offset, span_end - ranges.front().offset,
                                     bytes, &file, &local));
  std::vector<ReadRequest> requests(ranges.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    ranges[r].local = local;
    requests[r].file = file;
    requests[r].offset = ranges[r].offset;
    requests[r].length = ranges[r].length;
    requests[r].tag = r;
  }
  return SubmitAndTake(std::move(requests), ranges, figures,
                       [&](const Range& range, const char* bytes) {
                         for (size_t k = 0; k < range.count; ++k) {
                           const size_t j = range.first + k;
                           const uint64_t at =
                               layout_.data_offset + static_cast<uint64_t>(rows[j]) * row_bytes;
                           std::memcpy(out + j * row_bytes, bytes + (at - range.offset), row_bytes);
                         }
                       });
}

Status RowReader::Scan(const std::function<void(uint64_t, uint64_t, const char*)>& consume,
                       RowReadFigures* figures) {
  const uint64_t row_bytes = layout_.row_bytes;
  const uint64_t piece_rows = std::max<uint64_t>(1, kScanPiece / row_bytes);
  std::vector<Range> ranges;
  std::vector<ReadRequest> requests;
  for (uint64_t first = 0; first < layout_.rows; first += piece_rows) {
    Range range;
    range.count = static_cast<size_t>(std::min(piece_rows, layout_.rows - first));
    range.first = static_cast<size_t>(first);
    range.offset = layout_.data_offset + first * row_bytes;
    range.length = range.count * row_bytes;
    ReadRequest request;
    GPUFEED_RETURN_IF_ERROR(
        EngineFile(range.offset, range.length, range.length, &request.file, &range.local));
    request.offset = range.offset;
    request.length = range.length;
    request.tag = ranges.size();
    ranges.push_back(range);
    requests.push_back(request);
  }
  return SubmitAndTake(std::move(requests), ranges, figures,
                       [&](const Range& range, const char* bytes) {
                         consume(range.first, range.count, bytes);
                       });
}

// Every completion is taken (the engine's buffers come back) even after a
// failure; `use` sees each range read whole until the first failure, which
// is returned.
Status RowReader::SubmitAndTake(std::vector<ReadRequest> requests,
                                const std::vector<Range>& ranges, RowReadFigures* figures,
                                const std::function<void(const Range&, const char*)>& use) {
  CompletionQueue queue;
  GPUFEED_RETURN_IF_ERROR(engine_->Submit(std::move(requests), &queue));
  Status failed;
  std::vector<ReadCompletion> done;
  for (size_t received = 0; received < ranges.size();) {
    done.clear();
    queue.Wait(1, &done);
    received += done.size();
    for (ReadCompletion& read : done) {
      const Range& range = ranges[read.tag];
      if (!read.status.ok() || read.buffer.size() != range.length) {
        if (failed.ok()) failed = Fail(range, read);
        continue;
      }
      if (failed.ok()) use(range, read.buffer.data());
      Note(range, figures);
    }
  }
  return failed;
}

}  // namespace gpufeed
