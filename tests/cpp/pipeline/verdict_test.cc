// The bottleneck verdict: each kind from synthetic figures (the shares it
// is judged on, the expected gain of its advice and the sentence), and the
// figures of a span computed from two points (StatsBetween).
#include "pipeline/verdict.h"

#include <gtest/gtest.h>

#include <string>

#include "pipeline/stats_window.h"

namespace gpufeed {
namespace {

// 10 s with 2 worker threads (20 worker-seconds) on 2 CPUs, 100 batches
// delivered: the tests set the seconds each share took. Decode runs on a
// CPU unless decode_cpu says otherwise.
LoaderStats Figures(double read, double decode, double blocked, double consumer_wait,
                    double decode_cpu = -1) {
  LoaderStats stats;
  stats.batches = 100;
  stats.samples = 3200;
  stats.threads = 2;
  stats.cores = 2;
  stats.elapsed_seconds = 10;
  stats.read_seconds = read;
  stats.decode_seconds = decode;
  stats.decode_cpu_seconds = decode_cpu < 0 ? decode : decode_cpu;
  stats.blocked_seconds = blocked;
  stats.consumer_wait_seconds = consumer_wait;
  stats.process_cpu_cores = stats.decode_cpu_seconds / 10;
  return stats;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}
bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(VerdictTest, NamesAreStable) {
  EXPECT_STREQ(BottleneckName(Bottleneck::kNone), "none");
  EXPECT_STREQ(BottleneckName(Bottleneck::kConsumer), "consumer");
  EXPECT_STREQ(BottleneckName(Bottleneck::kRead), "read");
  EXPECT_STREQ(BottleneckName(Bottleneck::kDecode), "decode");
  EXPECT_STREQ(BottleneckName(Bottleneck::kCopy), "copy");
  EXPECT_STREQ(BottleneckName(Bottleneck::kCpuContention), "cpu-contention");
  EXPECT_STREQ(BottleneckName(Bottleneck::kLookup), "lookup");
  EXPECT_STREQ(BottleneckName(static_cast<Bottleneck>(99)), "unknown");
}

TEST(VerdictTest, EveryWorkerSecondIsInOneShare) {
  LoaderStats stats = Figures(6, 8, 2, 3, 6);  // 4 s left over: other
  JudgeBottleneck(&stats);
  EXPECT_DOUBLE_EQ(stats.read_share, 0.3);
  EXPECT_DOUBLE_EQ(stats.decode_share, 0.4);
  EXPECT_DOUBLE_EQ(stats.decode_cpu_share, 0.3);
  EXPECT_NEAR(stats.cpu_wait_share, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(stats.blocked_share, 0.1);
  EXPECT_DOUBLE_EQ(stats.other_share, 0.2);
  EXPECT_NEAR(stats.read_share + stats.decode_share + stats.blocked_share + stats.other_share, 1,
              1e-12);
}

TEST(VerdictTest, NoBatchesIsNone) {
  LoaderStats stats = Figures(15, 2, 0, 9);
  stats.batches = 0;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kNone);
  EXPECT_EQ(stats.verdict, "no batches delivered yet");
  EXPECT_DOUBLE_EQ(stats.read_share, 0.75);  // the shares are reported anyway
}

TEST(VerdictTest, ConsumerWaitingUnderFivePercentIsConsumerBound) {
  LoaderStats stats = Figures(4, 6, 9, 0.4);  // waited 4%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kConsumer);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share, 0.04);
  EXPECT_EQ(stats.expected_gain, 0);
  EXPECT_TRUE(StartsWith(stats.verdict, "consumer-bound: Next() waited 4% of the time; workers: "
                                        "read 20%, decode 30%"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict, "the training step sets the pace")) << stats.verdict;
  stats.device = "cuda:0";
  stats.device_copy_seconds = 3;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kConsumer);
  EXPECT_TRUE(Has(stats.verdict, "; copy stream 30% busy")) << stats.verdict;
}

// The case the old rule ("read share > decode share") got wrong: storage
// moderately slow, decode threads 65% busy, the rest waiting for reads.
TEST(VerdictTest, ModeratelySlowStorageIsReadBoundThoughDecodeShareIsLarger) {
  LoaderStats stats = Figures(7, 13, 0, 3);  // read 35%, decode 65%, waited 30%
  stats.io_backend = "io_uring";
  stats.io_bytes = 400'000'000;
  stats.io_mean_inflight = 31.5;
  stats.io_queue_depth = 64;
  stats.disk = "loop3";
  stats.disk_util = 0.98;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kRead);
  // Without the read waits, busy time per sample goes from 100% to 65%
  // (+54%), within what the consumer's 30% wait allows (+43%).
  EXPECT_NEAR(stats.expected_gain, 1 / 0.7 - 1, 1e-9);
  EXPECT_TRUE(StartsWith(stats.verdict, "read-bound: the consumer waited 30%; workers: read 35%"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict, "the read engine (io_uring) delivered 40.0 MB/s with 31.5 of 64 "
                                 "reads in flight, device loop3 98% busy"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict, "would remove the read waits: about +43%")) << stats.verdict;
}

TEST(VerdictTest, BusyDecodeThreadsAreDecodeBoundWithThreadAdvice) {
  // Light throttling: decode 95% busy on a CPU, reads 3%.
  LoaderStats stats = Figures(0.6, 19, 0, 4);
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
  EXPECT_EQ(stats.expected_gain, 0);  // 1.9 of 2 CPUs busy: no idle CPU
  EXPECT_TRUE(Has(stats.verdict, "the CPUs are saturated")) << stats.verdict;
  // On 8 CPUs with 6 idle, 6 more threads: +300%, capped by the consumer
  // (waited 40%: +67% at most).
  stats.cores = 8;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
  EXPECT_NEAR(stats.expected_gain, 1 / 0.6 - 1, 1e-9);
  EXPECT_TRUE(Has(stats.verdict, "6.1 CPUs are idle: 6 more decode threads (num_threads=8) would "
                                 "give about +67%"))
      << stats.verdict;
}

TEST(VerdictTest, MoreThreadsThanCpusIsDecodeBoundNotContention) {
  // 4 threads on 2 CPUs: each on a CPU half the time, waiting the rest.
  LoaderStats stats = Figures(0.4, 38, 0, 4, 19);
  stats.threads = 4;
  stats.elapsed_seconds = 10;
  stats.process_cpu_cores = 1.95;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
  EXPECT_TRUE(Has(stats.verdict, "4 threads share 2 CPUs")) << stats.verdict;
}

TEST(VerdictTest, OtherProcessesTakingTheCpusIsContentionNotDecode) {
  LoaderStats stats = Figures(0.4, 18, 0, 5, 10);  // busy 90%, on a CPU 50%
  stats.external_cpu_cores = 0.9;
  stats.process_cpu_cores = 1.0;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kCpuContention);
  EXPECT_NEAR(stats.expected_gain, 0.8, 1e-9);  // 18 s of decode would take 10
  EXPECT_TRUE(StartsWith(stats.verdict, "cpu-contention-bound: decode threads were busy 90% of the time "
                                        "but on a CPU only 50%"))
      << stats.verdict;
  // The same wait without outside load is the loader's own: decode.
  stats.external_cpu_cores = 0;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
  // Steal counts as outside load.
  stats.steal_share = 0.3;  // 0.6 of 2 CPUs
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kCpuContention);
}

TEST(VerdictTest, WorkersBlockedOnAFullWindowWhileTheConsumerWaitsIsBursts) {
  LoaderStats stats = Figures(3, 9, 7, 1);  // blocked 35%, waited 10%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kConsumer);
  EXPECT_TRUE(Has(stats.verdict, "raise prefetch")) << stats.verdict;
}

// In-order delivery: the window fills behind the batch the consumer waits
// for, so "blocked" is not the consumer's doing when the consumer starves.
TEST(VerdictTest, StarvingConsumerWithAFullWindowIsTheHeadBatchsStage) {
  LoaderStats stats = Figures(4, 6, 6, 9);  // read 20%, decode 30%, blocked 30%, waited 90%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kRead) << stats.verdict;
  EXPECT_FALSE(Has(stats.verdict, "keeps up")) << stats.verdict;
  stats = Figures(1, 8, 7, 9);  // read 5%: the head batch is being computed
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode) << stats.verdict;
}

TEST(VerdictTest, BusyCopyStreamIsCopyBound) {
  LoaderStats stats = Figures(4, 6, 0, 7);
  stats.device = "cuda:0";
  stats.device_copy_seconds = 9;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kCopy);
  EXPECT_TRUE(StartsWith(stats.verdict, "copy-bound: the host-to-device copy stream was busy 90% "
                                        "of the time, the consumer waited 70%;"))
      << stats.verdict;
  // Copy seconds without a device (host batches) never make it copy-bound.
  stats.device.clear();
  JudgeBottleneck(&stats);
  EXPECT_NE(stats.bottleneck, Bottleneck::kCopy);
}

// Embedding lookups (LoaderOptions::embeddings) are a share of their own.
TEST(VerdictTest, LookupsAreAShareOfTheWorkersTime) {
  LoaderStats stats = Figures(2, 6, 2, 5, 6);  // lookups 8 s: other 2 s
  stats.lookup_seconds = 8;
  stats.lookup_cpu_seconds = 3;
  stats.lookup_rows = 4'000'000;
  JudgeBottleneck(&stats);
  EXPECT_DOUBLE_EQ(stats.lookup_share, 0.4);
  EXPECT_DOUBLE_EQ(stats.other_share, 0.1);
  EXPECT_NEAR(stats.read_share + stats.decode_share + stats.lookup_share + stats.blocked_share +
                  stats.other_share,
              1, 1e-12);
  EXPECT_TRUE(Has(stats.verdict, "waiting for one 0%), lookup 40%, blocked 10%")) << stats.verdict;
  // Without lookups the sentence does not mention them.
  LoaderStats plain = Figures(2, 6, 2, 5, 6);
  JudgeBottleneck(&plain);
  EXPECT_FALSE(Has(plain.verdict, "lookup")) << plain.verdict;
}

TEST(VerdictTest, LookupsWaitingForTheirTablesReadsAreLookupBound) {
  // read 5%, decode 20%, lookup 60% (on a CPU 10%), blocked 2.5%, other
  // 12.5%; the consumer waited 60%.
  LoaderStats stats = Figures(1, 4, 0.5, 6);
  stats.lookup_seconds = 12;
  stats.lookup_cpu_seconds = 2;
  stats.lookup_rows = 3'000'000;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kLookup) << stats.verdict;
  // Rows in RAM remove the 50% the lookups waited: 97.5% -> 47.5% busy.
  EXPECT_NEAR(stats.expected_gain, 0.975 / 0.475 - 1, 1e-9);
  EXPECT_TRUE(StartsWith(stats.verdict, "lookup-bound: the consumer waited 60%; workers: read 5%"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict,
                  "embedding lookups took 4.0 us per id (3.00 M ids), off a CPU "
                  "50% of the workers' time; misses set the pace"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict,
                  "a larger cache_bytes, cache_dir (the node's NVMe tier), or "
                  "preload=True when a table fits in cache_bytes"))
      << stats.verdict;
  EXPECT_TRUE(Has(stats.verdict, "about +105% or more")) << stats.verdict;
  // With an idle CPU, more threads keep more reads in flight meanwhile.
  stats.cores = 4;
  stats.process_cpu_cores = 1;
  JudgeBottleneck(&stats);
  EXPECT_TRUE(Has(stats.verdict, "3 more threads (num_threads=5) keep more reads in flight"))
      << stats.verdict;
}

// The tables' own counters decide between misses and hits when the loader
// has them: a lookup off a CPU may be waiting for a CPU, not for a read.
TEST(VerdictTest, TheTablesHitRateTellsMissesFromHits) {
  LoaderStats stats = Figures(1, 4, 0.5, 6);
  stats.lookup_seconds = 12;
  stats.lookup_cpu_seconds = 2;  // off a CPU 50%: on a loaded machine
  stats.process_cpu_cores = 2;
  stats.lookup_ram_hit_rate = 1;  // preloaded: every id a RAM hit
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kLookup);
  EXPECT_EQ(stats.expected_gain, 0);
  EXPECT_TRUE(Has(stats.verdict,
                  "the tables' RAM tiers served 100% of the ids; the lookups run "
                  "on a CPU (RAM hits) and the CPUs are saturated"))
      << stats.verdict;
  // 30% hits, lookups on a CPU (misses from the page cache): the misses'
  // share of the ids is a floor on their share of the time (70% of 60%).
  stats.lookup_cpu_seconds = 12;
  stats.lookup_ram_hit_rate = 0.3;
  JudgeBottleneck(&stats);
  EXPECT_NEAR(stats.expected_gain, 0.975 / (0.975 - 0.42) - 1, 1e-9);
  EXPECT_TRUE(Has(stats.verdict, "served 30% of the ids; misses set the pace")) << stats.verdict;
}

TEST(VerdictTest, LookupsOnACpuAskForThreadsAndDecodeLargestStaysDecode) {
  // RAM hits: the lookups compute. One CPU of 2 idle: one more thread.
  LoaderStats stats = Figures(1, 4, 0.5, 6);
  stats.lookup_seconds = 12;
  stats.lookup_cpu_seconds = 12;
  stats.process_cpu_cores = 1;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kLookup);
  EXPECT_NEAR(stats.expected_gain, 0.5, 1e-9);
  EXPECT_TRUE(Has(stats.verdict,
                  "the lookups run on a CPU (RAM hits): 1 more thread "
                  "(num_threads=3) would give about +50%"))
      << stats.verdict;
  stats.process_cpu_cores = 2;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.expected_gain, 0);
  EXPECT_TRUE(Has(stats.verdict, "the CPUs are saturated")) << stats.verdict;
  // Lookups count as computing, but decode is the larger share: decode.
  stats = Figures(0.5, 10, 0, 6);
  stats.lookup_seconds = 6;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode) << stats.verdict;
  // Blocked on a full window most of the time: not lookup-bound however
  // large the lookup share is among the rest.
  stats = Figures(0.5, 1, 12, 3);
  stats.lookup_seconds = 5;
  JudgeBottleneck(&stats);
  EXPECT_NE(stats.bottleneck, Bottleneck::kLookup) << stats.verdict;
}

TEST(VerdictTest, ZeroElapsedAndThreadsDoNotDivideByZero) {
  LoaderStats stats;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kNone);
  EXPECT_EQ(stats.read_share, 0);
  EXPECT_EQ(stats.consumer_wait_share, 0);
}

TEST(StatsBetweenTest, TheSpanIsTheDifferenceOfTwoPoints) {
  StatsPoint from, to;
  from.at = std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  to.at = from.at + std::chrono::seconds(10);
  from.stages.threads = to.stages.threads = 2;
  from.stages.batches = 50;
  to.stages.batches = 150;
  from.stages.read_seconds = 100;  // start-up, outside the span
  to.stages.read_seconds = 107;
  to.stages.decode_seconds = 13;
  to.stages.decode_cpu_seconds = 12;
  from.stages.consumer_wait_seconds = 40;
  to.stages.consumer_wait_seconds = 43;
  to.stages.io_busy_seconds = 10;
  to.stages.io_inflight_seconds = 320;
  to.stages.io_queue_depth = 64;
  from.process_cpu = 5;
  to.process_cpu = 17;
  from.have_machine = to.have_machine = true;
  to.machine.busy = 16;  // 12 of them the process's, 1 stolen
  to.machine.steal = 1;
  to.machine.total = 20;
  from.have_disk = to.have_disk = true;
  to.disk.io_ticks_ms = 9000;
  to.disk.sectors_read = 1'000'000;
  LoaderStats stats = StatsBetween(from, to, StatsSpan::kRecent, 2, "loop3", "");
  EXPECT_EQ(stats.span, StatsSpan::kRecent);
  EXPECT_EQ(stats.batches, 100u);
  EXPECT_DOUBLE_EQ(stats.elapsed_seconds, 10);
  EXPECT_DOUBLE_EQ(stats.read_seconds, 7);
  EXPECT_DOUBLE_EQ(stats.other_seconds, 0);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share, 0.3);
  EXPECT_DOUBLE_EQ(stats.io_mean_inflight, 32);
  EXPECT_DOUBLE_EQ(stats.io_busy_share, 1);
  EXPECT_DOUBLE_EQ(stats.process_cpu_cores, 1.2);
  EXPECT_NEAR(stats.external_cpu_cores, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(stats.steal_share, 0.05);
  EXPECT_DOUBLE_EQ(stats.disk_util, 0.9);
  EXPECT_DOUBLE_EQ(stats.disk_read_bytes_per_second, 51.2e6);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kRead);
}

}  // namespace
}  // namespace gpufeed
