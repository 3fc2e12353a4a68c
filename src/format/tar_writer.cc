// ShardWriter for WebDataset tar shards: KEY.jpg (or KEY.png) then KEY.cls
// per sample, ustar headers, the member index written beside the tar.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "format/datasets.h"
#include "format/tar_index.h"
#include "gpufeed/writer.h"
#include "util/file.h"

namespace gpufeed {

namespace {

// Output is buffered and written in large sequential chunks, as RecordIO's.
constexpr size_t kWriteBufferSize = 8 << 20;
// tar(1) and Python's tarfile pad an archive to whole 10 KiB records.
constexpr uint64_t kTarRecordSize = 20 * kTarBlockSize;
// The largest size an 11-digit octal field holds (8 GiB - 1).
constexpr uint64_t kMaxUstarSize = (uint64_t{1} << 33) - 1;

void Octal(char* field, size_t width, uint64_t value) {
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(value));
}

// A POSIX ustar header for a regular file `name` (under 100 bytes).
void UstarHeader(const std::string& name, uint64_t size, int64_t mtime, char* block) {
  std::memset(block, 0, kTarBlockSize);
  std::memcpy(block, name.data(), name.size());
  Octal(block + 100, 8, 0644);
  Octal(block + 108, 8, 0);
  Octal(block + 116, 8, 0);
  Octal(block + 124, 12, size);
  Octal(block + 136, 12, static_cast<uint64_t>(mtime));
  block[156] = '0';
  std::memcpy(block + 257,
              "ustar\0"
              "00",
              8);
  std::memset(block + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) sum += static_cast<unsigned char>(block[i]);
  std::snprintf(block + 148, 8, "%06o", sum);  // six digits, NUL, then the space kept
  block[155] = ' ';
}

class TarShardWriter final : public ShardWriter {
 public:
  TarShardWriter(std::string tar_path, UniqueFd fd)
      : tar_path_(std::move(tar_path)), fd_(std::move(fd)), mtime_(std::time(nullptr)) {
    index_.extensions = {"jpg", "png", "cls"};
  }

  ~TarShardWriter() override {
    if (fd_.valid()) (void)Finish();  // a destructor cannot report; call Finish to see errors
  }

  Status Append(const SampleToWrite& sample) override {
    if (!fd_.valid()) return Status::InvalidArgument(tar_path_ + ": writer already finished");
    float label = sample.labels.empty() ? 0.0f : sample.labels[0];
    if (sample.labels.size() != 1 || std::floor(label) != label || std::fabs(label) > 1e9f) {
      return Status::InvalidArgument(
          tar_path_ + ": sample " + std::to_string(sample.index) +
          ": a WebDataset shard holds one integer class label per sample (KEY.cls); pack "
          "float or multiple labels as recordio or lmdb");
    }
    if (sample.data.size() > kMaxUstarSize) {
      return Status::InvalidArgument(tar_path_ + ": sample " + std::to_string(sample.index) +
                                     " is larger than a ustar member can be (8 GiB)");
    }
    char key[32];
    std::snprintf(key, sizeof(key), "%09llu", static_cast<unsigned long long>(sample.index));
    bool png = sample.data.size() >= 4 && std::memcmp(sample.data.data(), "\x89PNG", 4) == 0;
    TarSample entry;
    entry.key = key;
    entry.first_member = static_cast<uint32_t>(index_.members.size());
    entry.member_count = 2;
    AddMember(entry.key, png ? 1 : 0, sample.data);
    AddMember(entry.key, 2, std::to_string(static_cast<long long>(label)));
    index_.samples.push_back(std::move(entry));
    bytes_ = offset_;
    records_ += 1;
    if (buffer_.size() >= kWriteBufferSize) return Flush();
    return Status::OK();
  }

  Status Finish() override {
    if (!fd_.valid()) return Status::OK();
    // The end of the archive: two zero blocks, then zeros to a whole record.
    uint64_t end = offset_ + 2 * kTarBlockSize;
    end = (end + kTarRecordSize - 1) / kTarRecordSize * kTarRecordSize;
    buffer_.append(end - offset_, '\0');
    offset_ = end;
    bytes_ = offset_;
    Status status = Flush();
    if (status.ok() && ::fsync(fd_.get()) != 0) status = Status::FromErrno(errno, tar_path_);
    struct stat st;
    if (status.ok() && ::fstat(fd_.get(), &st) != 0) status = Status::FromErrno(errno, tar_path_);
    fd_.reset();
    if (!status.ok()) return status;
    index_.tar_size = offset_;
    index_.tar_mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    std::string encoded;
    EncodeTarIndex(index_, &encoded);
    return WriteFileAtomically(TarIndexPathBeside(tar_path_), encoded);
  }

 private:
  void AddMember(const std::string& key, uint32_t extension, std::string_view data) {
    char block[kTarBlockSize];
    UstarHeader(key + "." + index_.extensions[extension], data.size(), mtime_, block);
    TarMember member;
    member.extension = extension;
    member.header_offset = offset_;
    member.offset = offset_ + kTarBlockSize;
    member.size = data.size();
    index_.members.push_back(member);
    buffer_.append(block, kTarBlockSize);
    buffer_.append(data.data(), data.size());
    uint64_t padded = (data.size() + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize;
    buffer_.append(padded - data.size(), '\0');
    offset_ += kTarBlockSize + padded;
  }

  Status Flush() {
    Status status = WriteFull(fd_.get(), buffer_.data(), buffer_.size(), tar_path_);
    buffer_.clear();
    return status;
  }

  std::string tar_path_;
  UniqueFd fd_;
  int64_t mtime_;
  std::string buffer_;
  uint64_t offset_ = 0;
  TarIndex index_;
};

}  // namespace

Status NewTarShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer) {
  int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (raw < 0) return Status::FromErrno(errno, path);
  *writer = std::make_unique<TarShardWriter>(path, UniqueFd(raw));
  return Status::OK();
}

}  // namespace gpufeed
