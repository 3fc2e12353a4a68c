// Locks a forked child must not inherit held: fork() copies only the
// calling thread, so a lock another thread held at that moment stays held in
// the child forever. An object registers hooks that pthread_atfork handlers
// (installed once per process) run around every fork(): `prepare` before it
// in the forking thread (take the object's locks, so that no other thread is
// inside them), `parent` and `child` after it (release them; the child also
// drops what belonged to the parent's threads).
//
// Contract for a registrant: `prepare` takes only locks that no thread holds
// while waiting for another lock taken by a later `prepare` (leaf locks, or
// in the order every thread takes them), so that it cannot deadlock; hooks do
// not register or unregister hooks.
//
// Thread safety: Register and Unregister may be called from any thread.
#ifndef GPUFEED_UTIL_FORK_HOOKS_H_
#define GPUFEED_UTIL_FORK_HOOKS_H_

#include <cstdint>
#include <functional>

namespace gpufeed {

struct ForkHooks {
  std::function<void()> prepare;
  std::function<void()> parent;
  std::function<void()> child;
};

// Registers `hooks` (run in registration order before a fork, in reverse
// order after it); the id returned unregisters them. Unregister returns
// only when no fork is running the hooks.
uint64_t RegisterForkHooks(ForkHooks hooks);
void UnregisterForkHooks(uint64_t id);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_FORK_HOOKS_H_
