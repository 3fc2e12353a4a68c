// util/fork_hooks.h: hooks run around fork(), in order, in the forking
// thread; unregistered hooks do not run.
#include "util/fork_hooks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include <gtest/gtest.h>

namespace gpufeed {
namespace {

TEST(ForkHooksTest, HooksRunAroundForkInOrderAndAChildFindsTheLockFree) {
  std::string calls;
  std::mutex held_by_prepare;  // as a registrant's lock: taken before the fork, freed after
  const uint64_t first = RegisterForkHooks({[&] { calls += "p1"; held_by_prepare.lock(); },
                                            [&] { calls += "a1"; held_by_prepare.unlock(); },
                                            [&] { calls += "c1"; held_by_prepare.unlock(); }});
  const uint64_t second = RegisterForkHooks({[&] { calls += "p2"; }, [&] { calls += "a2"; },
                                             [&] { calls += "c2"; }});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(5);
    const bool free = held_by_prepare.try_lock();
    _exit(calls == "p1p2c2c1" && free ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_EQ(calls, "p1p2a2a1");
  EXPECT_TRUE(held_by_prepare.try_lock());
  held_by_prepare.unlock();

  UnregisterForkHooks(first);
  UnregisterForkHooks(second);
  calls.clear();
  const pid_t again = fork();
  ASSERT_GE(again, 0);
  if (again == 0) _exit(calls.empty() ? 0 : 1);
  ASSERT_EQ(waitpid(again, &status, 0), again);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(calls, "");
}

}  // namespace
}  // namespace gpufeed
