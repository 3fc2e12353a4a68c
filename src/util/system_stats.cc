#include "util/system_stats.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace gpufeed {

namespace {

bool ReadText(const char* path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream out;
  out << in.rdbuf();
  *text = out.str();
  return true;
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

namespace {
std::atomic<pid_t> cached_pid{0};
void ForgetPid() { cached_pid.store(0, std::memory_order_relaxed); }
}  // namespace

pid_t CurrentProcessId() {
  pid_t pid = cached_pid.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, ForgetPid); });
  pid = ::getpid();
  cached_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

double ThreadCpuSeconds() {
  timespec now{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) return 0;
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

double ProcessCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

bool ParseMachineCpu(const std::string& proc_stat, double ticks_per_second, MachineCpu* cpu) {
  std::istringstream in(proc_stat);
  std::string label;
  in >> label;
  if (label != "cpu" || ticks_per_second <= 0) return false;
  // user nice system idle iowait irq softirq steal (guest time is in user).
  uint64_t field[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int read = 0;
  for (; read < 8 && (in >> field[read]); ++read) {
  }
  if (read < 4) return false;
  double busy = static_cast<double>(field[0] + field[1] + field[2] + field[5] + field[6] + field[7]);
  double idle = static_cast<double>(field[3] + field[4]);
  cpu->busy = busy / ticks_per_second;
  cpu->total = (busy + idle) / ticks_per_second;
  cpu->steal = static_cast<double>(field[7]) / ticks_per_second;
  return true;
}

bool ReadMachineCpu(MachineCpu* cpu) {
  std::string text;
  if (!ReadText("/proc/stat", &text)) return false;
  return ParseMachineCpu(text, static_cast<double>(sysconf(_SC_CLK_TCK)), cpu);
}

bool ParseDiskCounters(const std::string& diskstats, const std::string& device,
                       DiskCounters* counters) {
  std::istringstream in(diskstats);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    unsigned major = 0, minor = 0;
    std::string name;
    if (!(fields >> major >> minor >> name) || name != device) continue;
    // reads, merged, sectors, ms reading, writes, merged, sectors, ms
    // writing, in progress, io ticks (ms), ...
    uint64_t value[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int read = 0;
    for (; read < 10 && (fields >> value[read]); ++read) {
    }
    if (read < 10) return false;
    counters->reads = value[0];
    counters->sectors_read = value[2];
    counters->io_ticks_ms = value[9];
    return true;
  }
  return false;
}

bool ReadDiskCounters(const std::string& device, DiskCounters* counters) {
  std::string text;
  if (device.empty() || !ReadText("/proc/diskstats", &text)) return false;
  return ParseDiskCounters(text, device, counters);
}

std::string BlockDeviceForPath(const std::string& path, std::string* why) {
  struct stat info{};
  if (stat(path.c_str(), &info) != 0) {
    *why = "cannot stat " + path;
    return "";
  }
  unsigned major_number = major(info.st_dev), minor_number = minor(info.st_dev);
  std::string wanted = std::to_string(major_number) + ":" + std::to_string(minor_number);
  // The mount's source names the device also where st_dev is anonymous
  // (btrfs subvolumes): "ID PARENT MAJ:MIN ROOT MOUNTPOINT ... - TYPE SOURCE".
  std::string mounts;
  std::string source, type;
  if (ReadText("/proc/self/mountinfo", &mounts)) {
    std::istringstream in(mounts);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string id, parent, numbers;
      if (!(fields >> id >> parent >> numbers) || numbers != wanted) continue;
      size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream tail(line.substr(dash + 3));
      tail >> type >> source;
    }
  }
  if (source.compare(0, 5, "/dev/") == 0) {
    char resolved[PATH_MAX];
    std::string device = realpath(source.c_str(), resolved) ? BaseName(resolved) : BaseName(source);
    DiskCounters probe;
    if (ReadDiskCounters(device, &probe)) return device;
  }
  if (major_number != 0) {
    char target[PATH_MAX];
    std::string link = "/sys/dev/block/" + wanted;
    ssize_t length = readlink(link.c_str(), target, sizeof(target) - 1);
    if (length > 0) {
      target[length] = '\0';
      std::string device = BaseName(target);
      DiskCounters probe;
      if (ReadDiskCounters(device, &probe)) return device;
    }
  }
  *why = path + " is on " + (type.empty() ? "a filesystem" : type) +
         (source.empty() ? "" : " (" + source + ")") + " without a block device in /proc/diskstats";
  return "";
}

}  // namespace gpufeed
