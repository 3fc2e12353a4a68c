// Status: the outcome of a gpufeed call. No exception crosses the C++ API;
// every fallible call returns a Status (or a Result<T>, a Status or a value).
//
// An OK status holds no allocation, so returning one is as cheap as returning
// an int. A failed status holds a code and a message that names what failed:
// for bad input the file, the byte offset and the sample.
//
// Thread safety: a Status is a value. Distinct objects may be used from
// different threads freely; one object needs external synchronisation.
#ifndef GPUFEED_STATUS_H_
#define GPUFEED_STATUS_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "gpufeed/export.h"

namespace gpufeed {

class [[nodiscard]] GPUFEED_EXPORT Status {
 public:
  enum class Code : int {
    kOk = 0,
    kNotFound = 1,          // a file, shard, key or class does not exist
    kCorruption = 2,        // bytes on disk do not follow the format
    kInvalidArgument = 3,   // the caller asked for something malformed
    kIOError = 4,           // the operating system failed a call
    kNotSupported = 5,      // a backend not compiled in or not available
    kPermissionDenied = 6,  // EACCES / EPERM
    kOutOfRange = 7,        // an index past the end
    kAlreadyExists = 8,     // refusing to overwrite
    kCancelled = 9,         // the operation was stopped on request
    kInternal = 10,         // a bug in gpufeed: please report it
  };

  Status() noexcept = default;
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string message) { return Status(Code::kNotFound, std::move(message)); }
  static Status Corruption(std::string message) {
    return Status(Code::kCorruption, std::move(message));
  }
  static Status InvalidArgument(std::string message) {
    return Status(Code::kInvalidArgument, std::move(message));
  }
  static Status IOError(std::string message) { return Status(Code::kIOError, std::move(message)); }
  static Status NotSupported(std::string message) {
    return Status(Code::kNotSupported, std::move(message));
  }
  static Status PermissionDenied(std::string message) {
    return Status(Code::kPermissionDenied, std::move(message));
  }
  static Status OutOfRange(std::string message) {
    return Status(Code::kOutOfRange, std::move(message));
  }
  static Status AlreadyExists(std::string message) {
    return Status(Code::kAlreadyExists, std::move(message));
  }
  static Status Cancelled(std::string message) {
    return Status(Code::kCancelled, std::move(message));
  }
  static Status Internal(std::string message) { return Status(Code::kInternal, std::move(message)); }

  // Converts an errno value from a failed system call made on `context`
  // (usually a path) into the matching code: ENOENT -> NotFound,
  // EACCES/EPERM -> PermissionDenied, everything else -> IOError. The
  // status keeps the errno (error_number()).
  static Status FromErrno(int error_number, const std::string& context);

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // The message without the code's name; empty for OK.
  const std::string& message() const;
  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsCorruption() const { return code() == Code::kCorruption; }
  bool IsInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool IsIOError() const { return code() == Code::kIOError; }
  bool IsNotSupported() const { return code() == Code::kNotSupported; }
  bool IsPermissionDenied() const { return code() == Code::kPermissionDenied; }
  bool IsOutOfRange() const { return code() == Code::kOutOfRange; }
  // The errno of the system call that failed (FromErrno), kept through
  // WithContext and copies; 0 when the failure did not come from one.
  int error_number() const { return state_ ? state_->error_number : 0; }

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  static const char* CodeName(Code code);

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithContext(const std::string& prefix) const;

 private:
  struct State {
    Code code;
    std::string message;
    int error_number = 0;
  };
  Status(Code code, std::string message);
  static Status FromErrnoCode(int error_number, std::string message);

  std::unique_ptr<State> state_;
};

// Result<T>: either a value or a failed Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gpufeed

// Returns from the enclosing function when `expr` yields a failed Status.
#define GPUFEED_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::gpufeed::Status _gpufeed_status = (expr);        \
    if (!_gpufeed_status.ok()) return _gpufeed_status; \
  } while (0)

#endif  // GPUFEED_STATUS_H_
