// The bottleneck verdict (see verdict.h) and the LoaderStats report.
#include "pipeline/verdict.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace gpufeed {

const char* BottleneckName(Bottleneck bottleneck) {
  switch (bottleneck) {
    case Bottleneck::kNone:
      return "none";
    case Bottleneck::kConsumer:
      return "consumer";
    case Bottleneck::kRead:
      return "read";
    case Bottleneck::kDecode:
      return "decode";
    case Bottleneck::kCopy:
      return "copy";
  }
  return "unknown";
}

void JudgeBottleneck(LoaderStats* stats) {
  double capacity = std::max(1e-9, stats->elapsed_seconds * std::max(1, stats->threads));
  double elapsed = std::max(1e-9, stats->elapsed_seconds);
  stats->read_share = stats->read_seconds / capacity;
  stats->decode_share = stats->decode_seconds / capacity;
  stats->consumer_wait_share = stats->consumer_wait_seconds / elapsed;
  stats->copy_share = stats->device_copy_seconds / elapsed;
  if (stats->batches == 0) {
    stats->bottleneck = Bottleneck::kNone;
  } else if (stats->consumer_wait_share < 0.05) {
    stats->bottleneck = Bottleneck::kConsumer;
  } else if (!stats->device.empty() && stats->copy_share > 0.8 &&
             stats->copy_share > std::max(stats->read_share, stats->decode_share)) {
    stats->bottleneck = Bottleneck::kCopy;
  } else if (stats->read_share > stats->decode_share) {
    stats->bottleneck = Bottleneck::kRead;
  } else {
    stats->bottleneck = Bottleneck::kDecode;
  }
  stats->verdict = VerdictSentence(*stats);
}

std::string VerdictSentence(const LoaderStats& stats) {
  const double read = 100 * stats.read_share;
  const double decode = 100 * stats.decode_share;
  const double wait = 100 * stats.consumer_wait_share;
  const double copy = 100 * stats.copy_share;
  char text[512];
  switch (stats.bottleneck) {
    case Bottleneck::kNone:
      return "no batches delivered yet";
    case Bottleneck::kConsumer: {
      std::snprintf(text, sizeof(text),
                    "consumer-bound: Next() waited %.0f%% of the time, workers %.0f%% busy "
                    "(read %.0f%%, decode %.0f%%); the loader keeps up, the training step sets "
                    "the pace",
                    wait, read + decode, read, decode);
      std::string sentence = text;
      if (!stats.device.empty()) {
        std::snprintf(text, sizeof(text), "; copy stream %.0f%% busy", copy);
        sentence += text;
      }
      return sentence;
    }
    case Bottleneck::kCopy:
      std::snprintf(text, sizeof(text),
                    "copy-bound: the host-to-device copy stream was busy %.0f%% of the time, the "
                    "consumer waited %.0f%%; ship uint8 and normalize on the GPU "
                    "(normalize_on_device), lower the output size, or check the PCIe link and "
                    "that the process runs on the GPU's NUMA node",
                    copy, wait);
      return text;
    case Bottleneck::kRead: {
      std::snprintf(text, sizeof(text),
                    "read-bound: workers spent %.0f%% of their time reading and %.0f%% "
                    "decoding, the consumer waited %.0f%%; pack small files into shards, cache "
                    "them on local NVMe, or raise the read engine's queue depth for a parallel "
                    "filesystem",
                    read, decode, wait);
      std::string sentence = text;
      if (!stats.io_backend.empty()) {
        std::snprintf(text, sizeof(text),
                      "; read engine %s: %llu reads, %.1f in flight on average",
                      stats.io_backend.c_str(), static_cast<unsigned long long>(stats.io_requests),
                      stats.io_mean_inflight);
        sentence += text;
      }
      return sentence;
    }
    case Bottleneck::kDecode:
      std::snprintf(text, sizeof(text),
                    "decode-bound: decode threads %.0f%% busy (reading %.0f%%), the consumer "
                    "waited %.0f%%; add decode threads, or output uint8 and normalize on the "
                    "GPU, or lower the output size",
                    decode, read, wait);
      return text;
  }
  return "unknown bottleneck";
}

std::string LoaderStats::ToString() const {
  std::ostringstream out;
  out << "batches " << batches << ", samples " << samples << ", " << bytes_read / 1e6
      << " MB read, " << skipped << " skipped, " << threads << " threads, " << elapsed_seconds
      << " s\n"
      << "  read " << read_seconds << " s, decode " << decode_seconds << " s, workers blocked (window full) "
      << blocked_seconds << " s, consumer waited " << consumer_wait_seconds
      << " s, ready batches at Next() " << mean_ready_batches << "\n"
      << (io_backend.empty() ? std::string()
                             : "  read engine " + io_backend + ": " + std::to_string(io_requests) +
                                   " reads, " + std::to_string(io_mean_inflight) +
                                   " in flight on average\n")
      << "  verdict: " << verdict;
  return out.str();
}

}  // namespace gpufeed
