// The bottleneck verdict: which stage limits a loader's throughput, judged
// from saturation over a span of LoaderStats (StatsWindow makes the spans).
//
// Two steps, so that the decision and its wording cannot drift apart:
// JudgeBottleneck turns the figures into the shares, the Bottleneck and the
// expected gain of the advice; VerdictSentence turns those into the English
// sentence. The sentence is made nowhere else; programs (the Python
// binding, bench, diagnose) read the enum and the shares.
//
// Every second of the decode threads (threads x elapsed) is in one share:
// read (waiting for bytes: locating, submitting, waiting for the read
// engine or reading), decode (on a CPU + waiting for one), lookup (in
// embedding tables' Lookup: RAM hits and waiting for misses' reads),
// blocked (the window of batches full), other (the rest: locks,
// bookkeeping, the scheduler between samples). The workers are saturated
// when they neither wait for bytes nor for room: decode + lookup + other.
// The rules, in order:
//   no batch delivered                              -> kNone
//   the consumer waited < 5% of the span            -> kConsumer
//   CUDA batches, the copy stream busy > 80%        -> kCopy
//   workers busy (not blocked) >= 80% and lookup the
//   largest of read, decode, lookup, other          -> kLookup
//   workers computing (decode + lookup + other) >= 80%:
//     decode waiting for a CPU >= 20% while other processes or the
//     hypervisor take >= 0.5 CPU and threads <= cores -> kCpuContention
//     otherwise                                     -> kDecode
//   workers waiting for reads at least as long as
//   blocked on a full window                        -> kRead
//   blocked on a full window while the consumer waited >= 50%: the window
//   is full behind the batch the consumer waits for (batches are delivered
//   in order), held up by its slowest samples: waiting for their bytes
//   (read >= 10% of worker time)                    -> kRead
//   or computing them                               -> kDecode
//   otherwise (idle on a full window, the consumer
//   waits now and then: batches come in bursts)     -> kConsumer
//
// Thread safety: pure functions of their argument.
#ifndef GPUFEED_PIPELINE_VERDICT_H_
#define GPUFEED_PIPELINE_VERDICT_H_

#include <string>

#include "gpufeed/loader.h"

namespace gpufeed {

// Thresholds of the rules above (docs/tuning.md quotes them).
constexpr double kConsumerWaitFloor = 0.05;
constexpr double kCopyBusy = 0.8;
constexpr double kDecodeBusy = 0.8;
constexpr double kCpuWaitShare = 0.2;
constexpr double kExternalCores = 0.5;
constexpr double kConsumerStarved = 0.5;
constexpr double kHeadReadShare = 0.1;
// kLookup: misses set the lookups' pace below this RAM hit rate.
constexpr double kLookupRamHits = 0.95;

// Sets the shares, bottleneck and expected_gain from the figures in *stats
// (other_seconds is derived when 0), then stats->verdict.
void JudgeBottleneck(LoaderStats* stats);

// The verdict sentence for stats.bottleneck and the shares: the limiting
// stage, the evidence and quantified advice.
std::string VerdictSentence(const LoaderStats& stats);

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_VERDICT_H_
