#include "util/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "util/path.h"

namespace gpufeed {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status OpenForRead(const std::string& path, UniqueFd* fd) {
  return OpenForRead(path, fd, nullptr, nullptr);
}

Status OpenForRead(const std::string& path, UniqueFd* fd, uint64_t* size, int64_t* mtime_ns) {
  if (path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("path contains a NUL byte: " + path.substr(0, path.find('\0')));
  }
  // O_NONBLOCK: opening a FIFO must not wait for a writer that never comes.
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) return Status::FromErrno(errno, path);
  UniqueFd owned(raw);
  struct stat st;
  if (::fstat(raw, &st) != 0) return Status::FromErrno(errno, path);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + ": not a regular file (" +
                                   (S_ISDIR(st.st_mode) ? "a directory" : "a FIFO, socket or device") +
                                   ")");
  }
  int flags = ::fcntl(raw, F_GETFL);
  if (flags >= 0) ::fcntl(raw, F_SETFL, flags & ~O_NONBLOCK);
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  if (mtime_ns != nullptr) *mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  *fd = std::move(owned);
  return Status::OK();
}

Status PreadFull(int fd, void* buffer, size_t length, uint64_t offset, const std::string& path,
                 size_t* bytes_read) {
  char* out = static_cast<char*>(buffer);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, path + " (read of " + std::to_string(length) +
                                          " bytes at offset " + std::to_string(offset) + ")");
    }
    if (n == 0) break;  // end of file
    done += static_cast<size_t>(n);
  }
  *bytes_read = done;
  return Status::OK();
}

Status WriteFull(int fd, const void* data, size_t length, const std::string& path) {
  const char* in = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t n = ::write(fd, in, length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, path + " (write)");
    }
    in += n;
    length -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status FileSizeOf(int fd, const std::string& path, uint64_t* size) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, path);
  *size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

Status FileSizeOf(const std::string& path, uint64_t* size) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  *size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

Status ReadFileToString(const std::string& path, std::string* contents, uint64_t max_size) {
  UniqueFd fd;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd));
  uint64_t size = 0;
  GPUFEED_RETURN_IF_ERROR(FileSizeOf(fd.get(), path, &size));
  if (size > max_size) {
    return Status::InvalidArgument(path + ": " + std::to_string(size) + " bytes, more than the " +
                                   std::to_string(max_size) + " allowed here");
  }
  try {
    contents->resize(size);
  } catch (const std::bad_alloc&) {
    return Status::IOError(path + ": out of memory for " + std::to_string(size) + " bytes");
  }
  size_t got = 0;
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), contents->data(), size, 0, path, &got));
  contents->resize(got);
  return Status::OK();
}

Status SyncDirectory(const std::string& directory) {
  int raw = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0) return Status::FromErrno(errno, directory);
  UniqueFd fd(raw);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) return Status::FromErrno(errno, directory);
  return Status::OK();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  static std::atomic<uint64_t> counter{0};
  std::string temporary = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  int raw = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (raw < 0) return Status::FromErrno(errno, temporary);
  UniqueFd fd(raw);
  Status status = WriteFull(fd.get(), contents.data(), contents.size(), temporary);
  if (status.ok() && ::fsync(fd.get()) != 0) status = Status::FromErrno(errno, temporary);
  fd.reset();
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = Status::FromErrno(errno, path);
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  return SyncDirectory(Dirname(path));
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Status ListDirectory(const std::string& directory, std::vector<DirectoryEntry>* entries) {
  entries->clear();
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return Status::FromErrno(errno, directory);
  errno = 0;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    DirectoryEntry out;
    out.name = name;
    unsigned char type = entry->d_type;
    if (type == DT_UNKNOWN || type == DT_LNK) {
      // Follow symlinks, as os.walk(followlinks=True) in torchvision does.
      struct stat st;
      if (::stat(JoinPath(directory, name).c_str(), &st) == 0) {
        out.is_directory = S_ISDIR(st.st_mode);
        out.is_regular_file = S_ISREG(st.st_mode);
      }
    } else {
      out.is_directory = type == DT_DIR;
      out.is_regular_file = type == DT_REG;
    }
    entries->push_back(std::move(out));
    errno = 0;
  }
  int read_errno = errno;
  ::closedir(dir);
  if (read_errno != 0) return Status::FromErrno(read_errno, directory);
  std::sort(entries->begin(), entries->end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  return Status::OK();
}

Status CreateDirectories(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return Status::FromErrno(error.value(), path);
  return Status::OK();
}

Status RemoveRecursively(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) return Status::FromErrno(error.value(), path);
  return Status::OK();
}

}  // namespace gpufeed
