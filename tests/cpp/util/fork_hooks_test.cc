// util/fork_hooks.h: hooks run around fork(), in order, in the forking
// thread; unregistered hooks do not run.
#include "util/fork_hooks.h"

#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

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
  int status = RunInForkedChild(
      [&] { return calls == "p1p2c2c1" && held_by_prepare.try_lock() ? 0 : 1; }, 5);
  EXPECT_TRUE(ExitedWithZero(status)) << "wait status " << status;
  EXPECT_EQ(calls, "p1p2a2a1");
  EXPECT_TRUE(held_by_prepare.try_lock());
  held_by_prepare.unlock();

  UnregisterForkHooks(first);
  UnregisterForkHooks(second);
  calls.clear();
  status = RunInForkedChild([&] { return calls.empty() ? 0 : 1; }, 5);
  EXPECT_TRUE(ExitedWithZero(status)) << "wait status " << status;
  EXPECT_EQ(calls, "");
}

}  // namespace
}  // namespace gpufeed
