// The bottleneck verdict: which stage limits a loader's throughput, judged
// from the figures of a LoaderStats.
//
// Two steps, so that the decision and its wording cannot drift apart:
// JudgeBottleneck turns the figures (batches, threads, elapsed, read,
// decode, consumer wait and device copy seconds) into the shares and the
// Bottleneck; VerdictSentence turns those into the English sentence. The
// sentence is made nowhere else; programs (the Python binding, bench,
// diagnose) read the enum and the shares, never the sentence.
//
// The rules, in order:
//   no batch delivered                         -> kNone
//   the consumer waited < 5% of the time       -> kConsumer
//   CUDA batches, the copy stream busy > 80%
//   and more than the workers read or decode   -> kCopy
//   workers read more than they decode         -> kRead
//   otherwise                                  -> kDecode
//
// Thread safety: pure functions of their argument.
#ifndef GPUFEED_PIPELINE_VERDICT_H_
#define GPUFEED_PIPELINE_VERDICT_H_

#include <string>

#include "gpufeed/loader.h"

namespace gpufeed {

// Sets stats->read_share, decode_share, consumer_wait_share, copy_share and
// bottleneck from the figures in *stats, then stats->verdict to
// VerdictSentence(*stats). Called by Loader::Stats() once the figures of
// every stage are in.
void JudgeBottleneck(LoaderStats* stats);

// The verdict sentence for stats.bottleneck and the shares: the limiting
// stage, the evidence and a hint (the read engine's figures for a read-bound
// loader, the copy stream's for a consumer-bound one with CUDA batches).
std::string VerdictSentence(const LoaderStats& stats);

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_VERDICT_H_
