#include "util/fork_hooks.h"

#include <pthread.h>

#include <mutex>
#include <utility>
#include <vector>

namespace gpufeed {

namespace {

struct Registry {
  std::mutex mutex;  // held from a fork's prepare to its parent / child hooks
  std::vector<std::pair<uint64_t, ForkHooks>> hooks;
  uint64_t next_id = 1;
};

// Never destroyed: a fork may run the handlers while statics are destroyed
// at exit.
Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

void Prepare() {
  Registry& registry = TheRegistry();
  registry.mutex.lock();
  for (auto& entry : registry.hooks) {
    if (entry.second.prepare) entry.second.prepare();
  }
}

void InParent() {
  Registry& registry = TheRegistry();
  for (auto it = registry.hooks.rbegin(); it != registry.hooks.rend(); ++it) {
    if (it->second.parent) it->second.parent();
  }
  registry.mutex.unlock();
}

void InChild() {
  Registry& registry = TheRegistry();
  for (auto it = registry.hooks.rbegin(); it != registry.hooks.rend(); ++it) {
    if (it->second.child) it->second.child();
  }
  registry.mutex.unlock();
}

}  // namespace

uint64_t RegisterForkHooks(ForkHooks hooks) {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(Prepare, InParent, InChild); });
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  const uint64_t id = registry.next_id++;
  registry.hooks.emplace_back(id, std::move(hooks));
  return id;
}

Status InheritedByFork(const std::string& what, int owner_process, const std::string& remedy) {
  return Status::InvalidArgument(what + " was created in process " + std::to_string(owner_process) +
                                 " and inherited by fork: its threads do not exist in this "
                                 "process; " + remedy + " (the parent's keeps working)");
}

void UnregisterForkHooks(uint64_t id) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (auto it = registry.hooks.begin(); it != registry.hooks.end(); ++it) {
    if (it->first == id) {
      registry.hooks.erase(it);
      return;
    }
  }
}

}  // namespace gpufeed
