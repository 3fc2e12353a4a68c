// util/logging.h across fork(): a child logs although a thread of the
// parent was stuck inside the sink, writing a line to a full pipe, when the
// child was forked.
#include "util/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace gpufeed {
namespace {

TEST(LoggingTest, AForkedChildLogsWhileAParentThreadIsStuckWritingALine) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with running threads under a sanitizer runtime";
#endif
  // In a process of its own: its stderr becomes a pipe nobody reads.
  const int status = RunInForkedChild(
      [] {
        int pipe_fds[2];
        if (::pipe(pipe_fds) != 0 || ::dup2(pipe_fds[1], 2) < 0) return 3;
        std::thread writer([] {
          const std::string line(4096, 'x');
          for (;;) Log().critical("{}", line);  // blocks once the pipe is full, in the sink
        });
        writer.detach();
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const int child = RunInForkedChild(
            [] {
              const int null = ::open("/dev/null", O_WRONLY);
              if (null < 0 || ::dup2(null, 2) < 0) return 3;
              Log().critical("a line from the child");
              return 0;
            },
            /*alarm_seconds=*/5);
        return ExitedWithZero(child) ? 0 : 1;  // _exit: the writer stays stuck
      },
      /*alarm_seconds=*/20);
  EXPECT_TRUE(ExitedWithZero(status)) << "the child hung at its log line (wait status " << status
                                      << ")";
}

}  // namespace
}  // namespace gpufeed
