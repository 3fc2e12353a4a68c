#include "gpufeed/status.h"

#include <cerrno>
#include <cstring>

namespace gpufeed {

Status::Status(Code code, std::string message)
    : state_(code == Code::kOk ? nullptr : new State{code, std::move(message), 0}) {}

Status::Status(const Status& other)
    : state_(other.state_ ? new State(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_.reset(other.state_ ? new State(*other.state_) : nullptr);
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kIOError: return "IOError";
    case Code::kNotSupported: return "NotSupported";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kCancelled: return "Cancelled";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(state_->code)) + ": " + state_->message;
}

Status Status::WithContext(const std::string& prefix) const {
  if (ok()) return Status();
  Status out(state_->code, prefix + ": " + state_->message);
  out.state_->error_number = state_->error_number;
  return out;
}

Status Status::FromErrno(int error_number, const std::string& context) {
  Status status = FromErrnoCode(error_number, context + ": " + std::strerror(error_number));
  if (!status.ok()) status.state_->error_number = error_number;
  return status;
}

Status Status::FromErrnoCode(int error_number, std::string message) {
  switch (error_number) {
    case ENOENT:
    case ENOTDIR:
      return NotFound(std::move(message));
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDenied(std::move(message));
    case EEXIST:
      return AlreadyExists(std::move(message));
    case ENOSYS:
    case EOPNOTSUPP:
      return NotSupported(std::move(message));
    default:
      return IOError(std::move(message));
  }
}

}  // namespace gpufeed
