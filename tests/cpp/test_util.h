// Helpers shared by the C++ tests: real temporary directories on disk.
#ifndef GPUFEED_TESTS_TEST_UTIL_H_
#define GPUFEED_TESTS_TEST_UTIL_H_

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "util/file.h"

namespace gpufeed {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/gpufeed-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    path_ = made ? made : "";
  }
  ~TempDir() { (void)RemoveRecursively(path_); }  // best effort
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `body` in a forked child, whose exit code is body's return value; a
// child still running after `alarm_seconds` is killed by SIGALRM (a hang is
// a failure, never a hang of the test). Returns the child's wait status, -1
// when fork or waitpid fails.
inline int RunInForkedChild(const std::function<int()>& body, unsigned alarm_seconds) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::alarm(alarm_seconds);
    ::_exit(body());
  }
  int status = 0;
  return ::waitpid(child, &status, 0) == child ? status : -1;
}

// A forked child that does nothing but keep its copies of the parent's
// descriptors (and the locks they carry) until Finish, or until its alarm:
// for what a child that lives on keeps held.
class IdleChild {
 public:
  explicit IdleChild(unsigned alarm_seconds) {
    int gate[2];
    if (::pipe(gate) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::alarm(alarm_seconds);
      ::close(gate[1]);
      char byte;
      (void)!::read(gate[0], &byte, 1);  // returns once the parent closes its end
      ::_exit(0);
    }
    ::close(gate[0]);
    gate_ = gate[1];
  }
  IdleChild(const IdleChild&) = delete;
  IdleChild& operator=(const IdleChild&) = delete;
  ~IdleChild() { (void)Finish(); }

  bool started() const { return pid_ > 0; }
  // Lets the child exit and waits for it: its wait status, -1 when it never
  // ran or was already waited for.
  int Finish() {
    if (gate_ >= 0) ::close(gate_);
    gate_ = -1;
    if (pid_ <= 0) return -1;
    int status = 0;
    const bool waited = ::waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return waited ? status : -1;
  }

 private:
  pid_t pid_ = -1;
  int gate_ = -1;
};

// Whether a wait status is a normal exit with code 0.
inline bool ExitedWithZero(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  std::string bytes;
  (void)ReadFileToString(path, &bytes);  // empty when missing: the comparison fails
  return bytes;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_TEST_UTIL_H_
