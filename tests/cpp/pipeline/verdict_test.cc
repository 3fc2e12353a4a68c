// The bottleneck verdict: each kind from synthetic figures, the shares it is
// judged on, and the sentence derived from them.
#include "pipeline/verdict.h"

#include <gtest/gtest.h>

#include <string>

namespace gpufeed {
namespace {

// 10 s with 4 worker threads (40 worker-seconds), 100 batches delivered:
// the tests set the seconds each stage took.
LoaderStats Figures(double read_seconds, double decode_seconds, double consumer_wait_seconds) {
  LoaderStats stats;
  stats.batches = 100;
  stats.samples = 3200;
  stats.threads = 4;
  stats.elapsed_seconds = 10;
  stats.read_seconds = read_seconds;
  stats.decode_seconds = decode_seconds;
  stats.consumer_wait_seconds = consumer_wait_seconds;
  return stats;
}

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

TEST(VerdictTest, NamesAreStable) {
  EXPECT_STREQ(BottleneckName(Bottleneck::kNone), "none");
  EXPECT_STREQ(BottleneckName(Bottleneck::kConsumer), "consumer");
  EXPECT_STREQ(BottleneckName(Bottleneck::kRead), "read");
  EXPECT_STREQ(BottleneckName(Bottleneck::kDecode), "decode");
  EXPECT_STREQ(BottleneckName(Bottleneck::kCopy), "copy");
  EXPECT_STREQ(BottleneckName(static_cast<Bottleneck>(99)), "unknown");
}

TEST(VerdictTest, NoBatchesIsNone) {
  LoaderStats stats = Figures(30, 5, 9);
  stats.batches = 0;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kNone);
  EXPECT_EQ(stats.verdict, "no batches delivered yet");
  // The shares are figures, reported even before the first batch.
  EXPECT_DOUBLE_EQ(stats.read_share, 0.75);
}

TEST(VerdictTest, ConsumerWaitingUnderFivePercentIsConsumerBound) {
  LoaderStats stats = Figures(8, 12, 0.4);  // waited 4%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kConsumer);
  EXPECT_DOUBLE_EQ(stats.read_share, 0.2);
  EXPECT_DOUBLE_EQ(stats.decode_share, 0.3);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share, 0.04);
  EXPECT_DOUBLE_EQ(stats.copy_share, 0);
  EXPECT_EQ(stats.verdict,
            "consumer-bound: Next() waited 4% of the time, workers 50% busy (read 20%, decode "
            "30%); the loader keeps up, the training step sets the pace");
  // With CUDA batches the copy stream's share is added.
  stats.device = "cuda:0";
  stats.device_copy_seconds = 3;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kConsumer);
  EXPECT_DOUBLE_EQ(stats.copy_share, 0.3);
  EXPECT_TRUE(StartsWith(stats.verdict, "consumer-bound: "));
  EXPECT_NE(stats.verdict.find("; copy stream 30% busy"), std::string::npos) << stats.verdict;
}

TEST(VerdictTest, ReadingMoreThanDecodingIsReadBound) {
  LoaderStats stats = Figures(32, 4, 6);  // read 80%, decode 10%, waited 60%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kRead);
  EXPECT_DOUBLE_EQ(stats.read_share, 0.8);
  EXPECT_DOUBLE_EQ(stats.decode_share, 0.1);
  EXPECT_DOUBLE_EQ(stats.consumer_wait_share, 0.6);
  EXPECT_TRUE(StartsWith(stats.verdict,
                         "read-bound: workers spent 80% of their time reading and 10% decoding, "
                         "the consumer waited 60%;"))
      << stats.verdict;
  EXPECT_EQ(stats.verdict.find("; read engine "), std::string::npos);
  // The read engine's figures close a read-bound sentence.
  stats.io_backend = "io_uring";
  stats.io_requests = 1234;
  stats.io_mean_inflight = 7.5;
  JudgeBottleneck(&stats);
  EXPECT_NE(stats.verdict.find("; read engine io_uring: 1234 reads, 7.5 in flight on average"),
            std::string::npos)
      << stats.verdict;
}

TEST(VerdictTest, DecodingAtLeastAsMuchAsReadingIsDecodeBound) {
  LoaderStats stats = Figures(0.8, 38, 4);  // decode 95%, read 2%, waited 40%
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
  EXPECT_DOUBLE_EQ(stats.decode_share, 0.95);
  EXPECT_TRUE(StartsWith(stats.verdict, "decode-bound: decode threads 95% busy (reading 2%), "
                                        "the consumer waited 40%;"))
      << stats.verdict;
  // A tie goes to decode, as it always has.
  stats = Figures(10, 10, 4);
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kDecode);
}

TEST(VerdictTest, BusyCopyStreamIsCopyBound) {
  LoaderStats stats = Figures(8, 12, 7);  // workers 20% + 30%, waited 70%
  stats.device = "cuda:0";
  stats.device_copy_seconds = 9;  // 90% of the time
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kCopy);
  EXPECT_DOUBLE_EQ(stats.copy_share, 0.9);
  EXPECT_TRUE(StartsWith(stats.verdict, "copy-bound: the host-to-device copy stream was busy 90% "
                                        "of the time, the consumer waited 70%;"))
      << stats.verdict;
  EXPECT_NE(stats.verdict.find("normalize_on_device"), std::string::npos);
}

TEST(VerdictTest, CopyNeedsCudaBatchesAndTheLargestShare) {
  // Copy seconds without a device (host batches) never make it copy-bound.
  LoaderStats host = Figures(8, 12, 7);
  host.device_copy_seconds = 9;
  JudgeBottleneck(&host);
  EXPECT_EQ(host.bottleneck, Bottleneck::kDecode);
  // 80% is not enough: the rule is "more than 80%".
  LoaderStats at_limit = Figures(8, 12, 7);
  at_limit.device = "cuda:0";
  at_limit.device_copy_seconds = 8;
  JudgeBottleneck(&at_limit);
  EXPECT_EQ(at_limit.bottleneck, Bottleneck::kDecode);
  // Workers busier than the copy stream: theirs is the limit.
  LoaderStats decode = Figures(1, 38, 7);
  decode.device = "cuda:0";
  decode.device_copy_seconds = 9;
  JudgeBottleneck(&decode);
  EXPECT_EQ(decode.bottleneck, Bottleneck::kDecode);
  // The consumer rule comes first: a busy copy stream the consumer never
  // waits for is not the limit.
  LoaderStats consumer = Figures(8, 12, 0.1);
  consumer.device = "cuda:0";
  consumer.device_copy_seconds = 9;
  JudgeBottleneck(&consumer);
  EXPECT_EQ(consumer.bottleneck, Bottleneck::kConsumer);
}

TEST(VerdictTest, SentenceIsDerivedFromTheEnumAndShares) {
  // VerdictSentence reads only the judgement: the seconds do not matter.
  LoaderStats stats;
  stats.batches = 1;
  stats.bottleneck = Bottleneck::kRead;
  stats.read_share = 0.5;
  stats.decode_share = 0.25;
  stats.consumer_wait_share = 0.125;
  EXPECT_TRUE(StartsWith(VerdictSentence(stats),
                         "read-bound: workers spent 50% of their time reading and 25% decoding, "
                         "the consumer waited 12%;"))
      << VerdictSentence(stats);
  stats.bottleneck = Bottleneck::kNone;
  EXPECT_EQ(VerdictSentence(stats), "no batches delivered yet");
}

TEST(VerdictTest, ZeroElapsedAndThreadsDoNotDivideByZero) {
  LoaderStats stats;
  JudgeBottleneck(&stats);
  EXPECT_EQ(stats.bottleneck, Bottleneck::kNone);
  EXPECT_EQ(stats.read_share, 0);
  EXPECT_EQ(stats.consumer_wait_share, 0);
}

}  // namespace
}  // namespace gpufeed
