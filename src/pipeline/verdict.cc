// The bottleneck verdict (see verdict.h) and the LoaderStats report.
#include "pipeline/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <sstream>

namespace gpufeed {

namespace {

std::string Format(const char* format, ...) {
  char text[640];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

double Percent(double share) { return 100 * share; }

// CPUs taken from the process by others: processes and the hypervisor.
double OthersCores(const LoaderStats& s) { return s.external_cpu_cores + s.steal_share * s.cores; }

double FreeCores(const LoaderStats& s) {
  return std::max(0.0, s.cores - s.process_cpu_cores - OthersCores(s));
}

// The largest gain any loader change can bring: the consumer's waits gone.
double ConsumerCap(const LoaderStats& s) {
  return 1 / std::max(0.02, 1 - s.consumer_wait_share) - 1;
}

// Decode threads that free CPUs would let run (0 when none).
int ExtraThreads(const LoaderStats& s) {
  if (s.cores == 0 || s.decode_cpu_share < 0.7) return 0;
  return static_cast<int>(std::floor(FreeCores(s) + 0.25));
}

// Lookups waiting for their tables' reads (misses), not on a CPU: what
// rows held in RAM would remove.
double LookupWaitShare(const LoaderStats& s) {
  const double capacity = std::max(1e-9, s.elapsed_seconds * std::max(1, s.threads));
  return std::max(0.0, s.lookup_share - s.lookup_cpu_seconds / capacity);
}

// Misses set the lookups' pace: the tables' RAM tiers served under
// kLookupRamHits of the ids; without the tables' counters, the lookups
// waited more than they ran on a CPU.
bool LookupsMiss(const LoaderStats& s) {
  if (s.lookup_ram_hit_rate >= 0) return s.lookup_ram_hit_rate < kLookupRamHits;
  return LookupWaitShare(s) >= 0.5 * s.lookup_share;
}

// The workers' time that rows in RAM would save: the lookups' waits, and
// at least the misses' part of the lookup time (a miss costs more than a
// hit, so its share of the ids is a floor on its share of the time).
double MissShare(const LoaderStats& s) {
  const double by_count =
      s.lookup_ram_hit_rate >= 0 ? (1 - s.lookup_ram_hit_rate) * s.lookup_share : 0;
  return std::max(LookupWaitShare(s), by_count);
}

// Threads that free CPUs would let run, for lookups on a CPU (RAM hits).
int ExtraLookupThreads(const LoaderStats& s) {
  if (s.cores == 0) return 0;
  return static_cast<int>(std::floor(FreeCores(s) + 0.25));
}

double ExpectedGain(const LoaderStats& s) {
  const double cap = ConsumerCap(s);
  switch (s.bottleneck) {
    case Bottleneck::kLookup: {
      if (LookupsMiss(s)) {
        // Every row in RAM: the workers' busy time loses the misses'.
        const double busy = s.read_share + s.decode_share + s.lookup_share + s.other_share;
        return std::min(cap, busy / std::max(0.01, busy - MissShare(s)) - 1);
      }
      const int extra = ExtraLookupThreads(s);
      return extra > 0 ? std::min(cap, static_cast<double>(extra) / std::max(1, s.threads)) : 0;
    }
    case Bottleneck::kDecode: {
      int extra = ExtraThreads(s);
      return extra > 0 ? std::min(cap, static_cast<double>(extra) / std::max(1, s.threads)) : 0;
    }
    case Bottleneck::kCpuContention:
      // The same work on idle CPUs: decode wall time shrinks to its CPU time.
      return std::min(cap, s.decode_share / std::max(0.01, s.decode_cpu_share) - 1);
    case Bottleneck::kRead: {
      // Without the waits for reads, the workers' busy time per sample
      // shrinks to decode + other.
      double busy = s.read_share + s.decode_share + s.other_share;
      return std::min(cap, busy / std::max(0.01, s.decode_share + s.other_share) - 1);
    }
    default:
      return 0;
  }
}

std::string Others(const LoaderStats& s) {
  if (OthersCores(s) < kExternalCores) return "";
  return Format("; other processes kept %.1f of %d CPUs busy%s", s.external_cpu_cores, s.cores,
                s.steal_share >= 0.05 ? Format(", the hypervisor stole %.0f%%",
                                               Percent(s.steal_share)).c_str()
                                      : "");
}

std::string Storage(const LoaderStats& s) {
  std::string text;
  double seconds = std::max(1e-9, s.elapsed_seconds);
  if (!s.io_backend.empty()) {
    text = Format("the read engine (%s) delivered %.1f MB/s with %.1f of %d reads in flight",
                  s.io_backend.c_str(), s.io_bytes / seconds / 1e6, s.io_mean_inflight,
                  s.io_queue_depth);
  } else {
    text = Format("the workers read %.1f MB/s themselves", s.bytes_read / seconds / 1e6);
  }
  if (s.disk_util >= 0) {
    text += Format(", device %s %.0f%% busy", s.disk.c_str(), Percent(s.disk_util));
  }
  return text;
}

}  // namespace

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
    case Bottleneck::kCpuContention:
      return "cpu-contention";
    case Bottleneck::kLookup:
      return "lookup";
  }
  return "unknown";
}

void JudgeBottleneck(LoaderStats* stats) {
  LoaderStats& s = *stats;
  const double capacity = std::max(1e-9, s.elapsed_seconds * std::max(1, s.threads));
  const double elapsed = std::max(1e-9, s.elapsed_seconds);
  if (s.other_seconds <= 0) {
    s.other_seconds = std::max(
        0.0, capacity - s.read_seconds - s.decode_seconds - s.lookup_seconds - s.blocked_seconds);
  }
  s.read_share = s.read_seconds / capacity;
  s.decode_share = s.decode_seconds / capacity;
  s.decode_cpu_share = std::min(s.decode_seconds, s.decode_cpu_seconds) / capacity;
  s.cpu_wait_share = s.decode_share - s.decode_cpu_share;
  s.lookup_share = s.lookup_seconds / capacity;
  s.blocked_share = s.blocked_seconds / capacity;
  s.other_share = s.other_seconds / capacity;
  s.consumer_wait_share = s.consumer_wait_seconds / elapsed;
  s.copy_share = s.device_copy_seconds / elapsed;
  if (s.batches == 0) {
    s.bottleneck = Bottleneck::kNone;
  } else if (s.consumer_wait_share < kConsumerWaitFloor) {
    s.bottleneck = Bottleneck::kConsumer;
  } else if (!s.device.empty() && s.copy_share > kCopyBusy) {
    s.bottleneck = Bottleneck::kCopy;
  } else if (s.lookup_share > 0 &&
             s.read_share + s.decode_share + s.lookup_share + s.other_share >= kDecodeBusy &&
             s.lookup_share >= std::max({s.read_share, s.decode_share, s.other_share})) {
    // Busy, not blocked on a full window, and mostly looking rows up.
    s.bottleneck = Bottleneck::kLookup;
  } else if (s.decode_share + s.lookup_share + s.other_share >= kDecodeBusy) {
    // The workers neither wait for bytes nor for room: they compute.
    bool contended = s.cpu_wait_share >= kCpuWaitShare && OthersCores(s) >= kExternalCores &&
                     (s.cores == 0 || s.threads <= s.cores);
    s.bottleneck = contended ? Bottleneck::kCpuContention : Bottleneck::kDecode;
  } else if (s.read_share >= s.blocked_share) {
    s.bottleneck = Bottleneck::kRead;
  } else if (s.consumer_wait_share >= kConsumerStarved) {
    // Not bursts: the consumer starves while finished batches queue behind
    // the one it waits for, the head batch's read late (a modest read
    // share with a starving consumer is still read-bound).
    s.bottleneck = s.read_share >= kHeadReadShare ? Bottleneck::kRead : Bottleneck::kDecode;
  } else {
    s.bottleneck = Bottleneck::kConsumer;  // idle on a full window: bursts
  }
  s.expected_gain = std::max(0.0, ExpectedGain(s));
  s.verdict = VerdictSentence(s);
}

namespace {

// How the verdict names the workers' work and its remedies, by sample kind:
// tabular rows are parsed and converted, not decoded, and take other advice.
struct Words {
  const char* work;
  const char* cpu_advice;
  const char* copy_advice;
  const char* read_advice;
};

Words WordsFor(const std::string& sample_kind) {
  if (sample_kind == "tabular") {
    return {"parse",
            "use more CPUs; sparse_dtype=\"int32\" halves the ids written, and a binary copy "
            "(records or .npy) of a TSV dataset parses far faster than its text",
            "sparse_dtype=\"int32\" halves the ids copied",
            "shuffle=\"block\" (large sequential block reads; per-row reads under a global "
            "shuffle wait for every row), direct_io, a larger block_bytes, or the node cache on "
            "local NVMe"};
  }
  return {"decode",
          "output uint8 and normalize on the GPU, lower the output size, or use more CPUs",
          "ship uint8 and normalize on the GPU (normalize_on_device), lower the output size",
          "the node cache on local NVMe or packing small files into shards"};
}

// kLookup: the evidence (time per id, how much of it on a CPU) and the
// remedy that fits it: rows nearer (RAM, NVMe) when lookups wait for
// reads, more threads when they compute on RAM hits.
std::string LookupSentence(const LoaderStats& s, const std::string& workers) {
  const double per_id_us = s.lookup_rows > 0 ? 1e6 * s.lookup_seconds / s.lookup_rows : 0;
  std::string text = Format(
      "lookup-bound: the consumer waited %.0f%%; %s; embedding lookups took %.1f us per id "
      "(%.2f M ids), off a CPU %.0f%% of the workers' time",
      Percent(s.consumer_wait_share), workers.c_str(), per_id_us, s.lookup_rows / 1e6,
      Percent(LookupWaitShare(s)));
  if (s.lookup_ram_hit_rate >= 0) {
    text +=
        Format(", the tables' RAM tiers served %.0f%% of the ids", Percent(s.lookup_ram_hit_rate));
  }
  const int extra = ExtraLookupThreads(s);
  if (LookupsMiss(s)) {
    text += Format(
        "; misses set the pace: a larger cache_bytes, cache_dir (the node's NVMe "
        "tier), or preload=True when a table fits in cache_bytes would bring the "
        "rows nearer: about +%.0f%% or more",
        Percent(s.expected_gain));
    if (extra > 0) {
      text += Format("; meanwhile %d more thread%s (num_threads=%d) keep more reads in flight",
                     extra, extra == 1 ? "" : "s", s.threads + extra);
    }
  } else if (extra > 0) {
    text += Format(
        "; the lookups run on a CPU (RAM hits): %d more thread%s (num_threads=%d) "
        "would give about +%.0f%%",
        extra, extra == 1 ? "" : "s", s.threads + extra, Percent(s.expected_gain));
  } else {
    text += Format(
        "; the lookups run on a CPU (RAM hits) and the CPUs are saturated (%.1f of %d "
        "in use): fewer or smaller tables per batch, or more CPUs",
        s.process_cpu_cores, s.cores);
  }
  return text;
}

}  // namespace

std::string VerdictSentence(const LoaderStats& s) {
  const double wait = Percent(s.consumer_wait_share);
  const double gain = Percent(s.expected_gain);
  const Words words = WordsFor(s.sample_kind);
  const std::string lookups = s.lookup_rows > 0 || s.lookup_share > 0
                                  ? Format(", lookup %.0f%%", Percent(s.lookup_share))
                                  : std::string();
  const std::string workers = Format(
      "workers: read %.0f%%, %s %.0f%% (on a CPU %.0f%%, waiting for one %.0f%%)%s, "
      "blocked %.0f%%, other %.0f%%",
      Percent(s.read_share), words.work, Percent(s.decode_share), Percent(s.decode_cpu_share),
      Percent(s.cpu_wait_share), lookups.c_str(), Percent(s.blocked_share), Percent(s.other_share));
  switch (s.bottleneck) {
    case Bottleneck::kNone:
      return "no batches delivered yet";
    case Bottleneck::kConsumer: {
      std::string text = Format("consumer-bound: Next() waited %.0f%% of the time; %s",
                                wait, workers.c_str());
      if (s.consumer_wait_share >= kConsumerWaitFloor) {
        text += "; the loader keeps up on average and the waits come in bursts: raise prefetch";
      } else {
        text += "; the loader keeps up, the training step sets the pace";
      }
      if (!s.device.empty()) text += Format("; copy stream %.0f%% busy", Percent(s.copy_share));
      return text + Others(s);
    }
    case Bottleneck::kCopy:
      return Format("copy-bound: the host-to-device copy stream was busy %.0f%% of the time, the "
                    "consumer waited %.0f%%; %s, or check the PCIe link and that the process "
                    "runs on the GPU's NUMA node",
                    Percent(s.copy_share), wait, words.copy_advice);
    case Bottleneck::kDecode: {
      std::string text = Format("%s-bound: the consumer waited %.0f%%; %s; the process used "
                                "%.1f of %d CPUs",
                                words.work, wait, workers.c_str(), s.process_cpu_cores, s.cores);
      int extra = ExtraThreads(s);
      if (extra > 0) {
        text += Format("; %.1f CPUs are idle: %d more %s thread%s (num_threads=%d) would give "
                       "about +%.0f%%",
                       FreeCores(s), extra, words.work, extra == 1 ? "" : "s", s.threads + extra,
                       gain);
      } else if (s.cores > 0 && s.threads > s.cores) {
        text += Format("; %d threads share %d CPUs, which are saturated: %s", s.threads, s.cores,
                       words.cpu_advice);
      } else {
        text += Format("; the CPUs are saturated: %s", words.cpu_advice);
      }
      return text + Others(s);
    }
    case Bottleneck::kCpuContention:
      return Format("cpu-contention-bound: %s threads were busy %.0f%% of the time but on a CPU only "
                    "%.0f%% (waiting for one %.0f%%): other processes kept %.1f of %d CPUs busy, "
                    "the hypervisor stole %.0f%%; the consumer waited %.0f%%; on idle CPUs the "
                    "loader would run about +%.0f%% faster: move the other work away or pin the "
                    "loader to its own CPUs",
                    words.work, Percent(s.decode_share), Percent(s.decode_cpu_share),
                    Percent(s.cpu_wait_share), s.external_cpu_cores, s.cores,
                    Percent(s.steal_share), wait, gain);
    case Bottleneck::kLookup:
      return LookupSentence(s, workers) + Others(s);
    case Bottleneck::kRead: {
      std::string text = Format("read-bound: the consumer waited %.0f%%; %s; %s is not "
                                "saturated; %s",
                                wait, workers.c_str(), words.work, Storage(s).c_str());
      bool device_saturated = s.disk_util >= 0.9 ||
                              (s.io_queue_depth > 0 && s.io_mean_inflight >= 0.8 * s.io_queue_depth);
      if (!device_saturated && s.io_queue_depth > 0 &&
          s.io_mean_inflight < 0.5 * s.io_queue_depth && s.disk_util >= 0 && s.disk_util < 0.6) {
        text += "; the device has room: more reads in flight (prefetch) may help";
      }
      text += Format("; %s would remove the read waits: about +%.0f%%", words.read_advice, gain);
      return text + Others(s);
    }
  }
  return "unknown bottleneck";
}

std::string LoaderStats::ToString() const {
  std::ostringstream out;
  const char* spans[] = {"since open", "recent", "epoch"};
  int span_index = static_cast<int>(span);
  out << "batches " << batches << ", samples " << samples << ", " << bytes_read / 1e6
      << " MB read, " << skipped << " skipped, " << threads << " threads, " << elapsed_seconds
      << " s (" << (span_index >= 0 && span_index < 3 ? spans[span_index] : "?") << ")\n"
      << "  workers: read " << read_seconds << " s, decode " << decode_seconds << " s (CPU "
      << decode_cpu_seconds << " s), blocked (window full) " << blocked_seconds << " s, other "
      << other_seconds << " s"
      << (lookup_rows > 0 ? ", lookup " + std::to_string(lookup_seconds) + " s (CPU " +
                                std::to_string(lookup_cpu_seconds) + " s, " +
                                std::to_string(lookup_rows) + " ids)"
                          : std::string())
      << "; consumer waited " << consumer_wait_seconds << " s, ready batches at Next() "
      << mean_ready_batches << "\n"
      << (io_backend.empty()
              ? std::string()
              : "  read engine " + io_backend + ": " + std::to_string(io_requests) + " reads, " +
                    std::to_string(io_mean_inflight) + " in flight on average\n")
      << "  CPUs: process " << process_cpu_cores << " of " << cores << ", others "
      << external_cpu_cores << ", steal " << steal_share * 100 << "%"
      << (disk_util >= 0 ? "; device " + disk + " " + std::to_string(disk_util * 100) + "% busy"
                         : std::string())
      << "\n  verdict: " << verdict;
  return out.str();
}

}  // namespace gpufeed
