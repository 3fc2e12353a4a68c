// What the machine around a loader is doing: CPU time of this thread and
// process, the machine's CPUs (busy, stolen by the hypervisor), and the
// block device under a path with its /proc/diskstats counters. The verdict
// (src/pipeline/verdict.h) judges saturation from these.
//
// Every reader returns false (or an empty name with the reason) when the
// figure cannot be had here (no /proc, a network filesystem without a block
// device); callers report "unknown" then, never a guess.
//
// Thread safety: free functions; CurrentProcessId's cache is an atomic.
#ifndef GPUFEED_UTIL_SYSTEM_STATS_H_
#define GPUFEED_UTIL_SYSTEM_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace gpufeed {

// getpid(), without a system call after the first: cached, and forgotten in
// a forked child (pthread_atfork). The loader asks on every batch whether it
// runs in the process that created it, so the answer must not cost a system
// call.
pid_t CurrentProcessId();

// CPU time the calling thread has run (CLOCK_THREAD_CPUTIME_ID), seconds.
double ThreadCpuSeconds();
// CPU time of the whole process (user + system), seconds.
double ProcessCpuSeconds();
// CPUs this process may run on (its affinity mask), at least 1.
int AvailableCores();

// The machine's CPU time from the first line of /proc/stat, in seconds
// summed over all CPUs.
struct MachineCpu {
  double busy = 0;   // user, nice, system, irq, softirq and steal
  double total = 0;  // busy + idle + iowait
  double steal = 0;  // taken by the hypervisor for other guests
};
bool ReadMachineCpu(MachineCpu* cpu);
// Parses the text of /proc/stat (exposed for tests).
bool ParseMachineCpu(const std::string& proc_stat, double ticks_per_second, MachineCpu* cpu);

// One block device's counters from /proc/diskstats.
struct DiskCounters {
  uint64_t reads = 0;          // reads completed
  uint64_t sectors_read = 0;   // 512-byte sectors
  uint64_t io_ticks_ms = 0;    // time the device had I/O in progress
};
bool ReadDiskCounters(const std::string& device, DiskCounters* counters);
// Parses the text of /proc/diskstats for `device` (exposed for tests).
bool ParseDiskCounters(const std::string& diskstats, const std::string& device,
                       DiskCounters* counters);

// The block device that holds `path` ("vda", "nvme0n1p2", "loop3"), found
// through the filesystem's device number and /proc/self/mountinfo. "" with
// *why set when there is none (a network or parallel filesystem, tmpfs,
// overlay without a block device) or it cannot be found.
std::string BlockDeviceForPath(const std::string& path, std::string* why);

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_SYSTEM_STATS_H_
