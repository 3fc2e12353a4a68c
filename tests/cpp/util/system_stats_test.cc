// The machine's figures the verdict is judged on: parsers on the kernels'
// text formats, and the live readers on this machine.
#include "util/system_stats.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace gpufeed {
namespace {

TEST(SystemStatsTest, ParsesProcStat) {
  const std::string text =
      "cpu  1000 20 300 5000 100 10 20 50 0 0\n"
      "cpu0 500 10 150 2500 50 5 10 25 0 0\n";
  MachineCpu cpu;
  ASSERT_TRUE(ParseMachineCpu(text, 100, &cpu));
  EXPECT_DOUBLE_EQ(cpu.busy, 14);   // user + nice + system + irq + softirq + steal
  EXPECT_DOUBLE_EQ(cpu.total, 65);  // + idle + iowait
  EXPECT_DOUBLE_EQ(cpu.steal, 0.5);
  EXPECT_FALSE(ParseMachineCpu("intr 1 2 3\n", 100, &cpu));
  EXPECT_FALSE(ParseMachineCpu("", 100, &cpu));
}

TEST(SystemStatsTest, ParsesDiskstats) {
  const std::string text =
      " 253       0 vda 1200 30 96000 800 50 0 400 90 0 1500 900 0 0 0 0\n"
      "   7       3 loop3 77 0 2048 12 0 0 0 0 2 345 12\n";
  DiskCounters disk;
  ASSERT_TRUE(ParseDiskCounters(text, "loop3", &disk));
  EXPECT_EQ(disk.reads, 77u);
  EXPECT_EQ(disk.sectors_read, 2048u);
  EXPECT_EQ(disk.io_ticks_ms, 345u);
  ASSERT_TRUE(ParseDiskCounters(text, "vda", &disk));
  EXPECT_EQ(disk.io_ticks_ms, 1500u);
  EXPECT_FALSE(ParseDiskCounters(text, "vd", &disk));
  EXPECT_FALSE(ParseDiskCounters("   7 3 loop3 77 0\n", "loop3", &disk));  // truncated
}

TEST(SystemStatsTest, LiveReadersOnThisMachine) {
  EXPECT_GE(AvailableCores(), 1);
  double started = ThreadCpuSeconds();
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + i * 0.5;
  EXPECT_GT(ThreadCpuSeconds(), started);
  EXPECT_GE(ProcessCpuSeconds(), ThreadCpuSeconds() - started);
  MachineCpu cpu;
  EXPECT_TRUE(ReadMachineCpu(&cpu));
  EXPECT_GT(cpu.total, 0);
  // "/" may be on a block device or not (a container's overlay): either a
  // device with counters, or the reason.
  std::string why;
  std::string device = BlockDeviceForPath("/", &why);
  if (device.empty()) {
    EXPECT_FALSE(why.empty());
  } else {
    DiskCounters disk;
    EXPECT_TRUE(ReadDiskCounters(device, &disk)) << device;
  }
  EXPECT_EQ(BlockDeviceForPath("/no/such/path", &why), "");
  EXPECT_NE(why.find("/no/such/path"), std::string::npos);
  // /proc is not on a block device.
  EXPECT_EQ(BlockDeviceForPath("/proc", &why), "");
}

}  // namespace
}  // namespace gpufeed
