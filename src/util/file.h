// POSIX file helpers. errno is converted to a Status here, once, at the OS
// edge; callers above this layer only see Status.
#ifndef GPUFEED_UTIL_FILE_H_
#define GPUFEED_UTIL_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Opens a regular file read-only (O_CLOEXEC). A FIFO, socket, device or
// directory is refused with InvalidArgument instead of blocking or failing
// later; a path with a NUL byte likewise.
Status OpenForRead(const std::string& path, UniqueFd* fd);
// The same, with the size and mtime of the file from the same fstat.
Status OpenForRead(const std::string& path, UniqueFd* fd, uint64_t* size, int64_t* mtime_ns);

// Reads up to `length` bytes at `offset`, retrying short reads and EINTR;
// stops early only at end of file. *bytes_read gets the count.
Status PreadFull(int fd, void* buffer, size_t length, uint64_t offset, const std::string& path,
                 size_t* bytes_read);

// Writes all of [data, data+length), retrying short writes and EINTR.
Status WriteFull(int fd, const void* data, size_t length, const std::string& path);

Status FileSizeOf(int fd, const std::string& path, uint64_t* size);
Status FileSizeOf(const std::string& path, uint64_t* size);

// Reads a whole regular file. InvalidArgument when it is larger than
// `max_size` (the default is no practical limit).
Status ReadFileToString(const std::string& path, std::string* contents,
                        uint64_t max_size = uint64_t{1} << 40);

// Writes `contents` to a temporary file beside `path`, fsyncs it, renames it
// over `path` and fsyncs the directory: readers see the old or the new file,
// never a torn one.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

// fsync on the directory, so that a rename or create inside it is durable.
Status SyncDirectory(const std::string& directory);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);     // follows symlinks
bool IsRegularFile(const std::string& path);   // follows symlinks

struct DirectoryEntry {
  std::string name;
  bool is_directory = false;  // after following symlinks
  bool is_regular_file = false;
};
// Entries of `directory` except "." and "..", sorted by name (byte order).
Status ListDirectory(const std::string& directory, std::vector<DirectoryEntry>* entries);

// mkdir -p.
Status CreateDirectories(const std::string& path);
// rm -r of one file or directory tree; OK when it does not exist.
Status RemoveRecursively(const std::string& path);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_FILE_H_
