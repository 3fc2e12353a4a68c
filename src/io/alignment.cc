// O_DIRECT alignment of a file. Kept apart: <linux/stat.h> (for
// STATX_DIOALIGN) and glibc's <sys/stat.h> cannot share a translation unit.
#include <fcntl.h>
#include <linux/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace gpufeed {

uint32_t DirectIoAlignment(int fd, const std::string& path) {
  struct statx info;
  std::memset(&info, 0, sizeof(info));
  // 1. statx(STATX_DIOALIGN) where the kernel reports it (Linux 6.1+).
  if (::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN | STATX_BASIC_STATS, &info) ==
      0) {
    if ((info.stx_mask & STATX_DIOALIGN) && info.stx_dio_offset_align > 0) {
      uint32_t alignment = info.stx_dio_offset_align;
      if (info.stx_dio_mem_align > alignment) alignment = info.stx_dio_mem_align;
      return alignment;
    }
    // 2. The block device's logical block size, from sysfs.
    char sysfs[128];
    std::snprintf(sysfs, sizeof(sysfs), "/sys/dev/block/%u:%u/queue/logical_block_size",
                  info.stx_dev_major, info.stx_dev_minor);
    if (FILE* file = std::fopen(sysfs, "r")) {
      unsigned size = 0;
      int parsed = std::fscanf(file, "%u", &size);
      std::fclose(file);
      if (parsed == 1 && size >= 512 && (size & (size - 1)) == 0) return size;
    }
  }
  // 3. A safe default for every common device.
  return 4096;
}

}  // namespace gpufeed
