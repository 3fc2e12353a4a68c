// RecordIO's ShardWriter (part-NNNNN.rec, its .idx written at Finish) and
// the .idx of an existing .rec (`gpufeed index FILE.rec`).
#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/recordio.h"
#include "gpufeed/writer.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// Output is buffered and written in large sequential chunks: parallel
// filesystems want few, big writes.
constexpr size_t kWriteBufferSize = 8 << 20;

class RecordIOShardWriter final : public ShardWriter {
 public:
  RecordIOShardWriter(std::string rec_path, UniqueFd fd)
      : rec_path_(std::move(rec_path)), idx_path_(IndexPathFor(rec_path_)), fd_(std::move(fd)) {}

  ~RecordIOShardWriter() override {
    if (fd_.valid()) (void)Finish();  // a destructor cannot report; call Finish to see errors
  }

  Status Append(const SampleToWrite& sample) override {
    if (!fd_.valid()) return Status::InvalidArgument(rec_path_ + ": writer already finished");
    payload_.clear();
    AppendIRPayload(sample, &payload_);
    if (payload_.size() > kRecordIOMaxLength) {
      return Status::InvalidArgument(rec_path_ + ": sample " + std::to_string(sample.index) +
                                     " is " + std::to_string(payload_.size()) +
                                     " bytes; RecordIO records must be under 2^29 bytes");
    }
    index_text_ += std::to_string(sample.id.value_or(sample.index)) + "\t" +
                   std::to_string(offset_) + "\n";
    size_t before = buffer_.size();
    EncodeRecordIO(payload_, &buffer_);
    offset_ += buffer_.size() - before;
    bytes_ = offset_;
    records_ += 1;
    if (buffer_.size() >= kWriteBufferSize) return Flush();
    return Status::OK();
  }

  Status Finish() override {
    if (!fd_.valid()) return Status::OK();
    Status status = Flush();
    if (status.ok() && ::fsync(fd_.get()) != 0) status = Status::FromErrno(errno, rec_path_);
    fd_.reset();
    if (status.ok()) status = WriteFileAtomically(idx_path_, index_text_);
    return status;
  }

 private:
  Status Flush() {
    Status status = WriteFull(fd_.get(), buffer_.data(), buffer_.size(), rec_path_);
    buffer_.clear();
    return status;
  }

  std::string rec_path_;
  std::string idx_path_;
  UniqueFd fd_;
  std::string buffer_;
  std::string payload_;
  std::string index_text_;
  uint64_t offset_ = 0;
};

}  // namespace

Status NewRecordIOShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer) {
  int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (raw < 0) return Status::FromErrno(errno, path);
  *writer = std::make_unique<RecordIOShardWriter>(path, UniqueFd(raw));
  return Status::OK();
}

Status WriteRecordIOIndex(const std::string& rec_path, const std::string& idx_path,
                          uint64_t* records) {
  UniqueFd fd;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(rec_path, &fd));
  uint64_t size = 0;
  GPUFEED_RETURN_IF_ERROR(FileSizeOf(fd.get(), rec_path, &size));
  std::string text;
  uint64_t count = 0;
  GPUFEED_RETURN_IF_ERROR(ScanRecordIO(fd.get(), rec_path, size,
                                       [&](uint64_t offset, const std::string&) {
                                         text += std::to_string(count++) + "\t" +
                                                 std::to_string(offset) + "\n";
                                         return Status::OK();
                                       }));
  GPUFEED_RETURN_IF_ERROR(WriteFileAtomically(idx_path, text));
  if (records != nullptr) *records = count;
  return Status::OK();
}

}  // namespace gpufeed
