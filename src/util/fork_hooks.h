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
#include <new>
#include <string>

#include "gpufeed/status.h"

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

// For a `child` hook: makes *object anew (a default-constructed T) without
// destroying the old one, which may be held or waited on by a thread of the
// parent that does not exist here (a mutex's or condition variable's
// destructor could wait for it) or torn by one mid-change. The old one's
// resources, if any, are leaked.
template <class T>
void RenewInChild(T* object) {
  new (object) T();
}

// The error of an object whose threads a fork() left in the parent, used in
// a child that inherited it: `what` (e.g. "this Loader") names it, `remedy`
// says what to do instead (e.g. "create a new Loader here").
Status InheritedByFork(const std::string& what, int owner_process, const std::string& remedy);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_FORK_HOOKS_H_
