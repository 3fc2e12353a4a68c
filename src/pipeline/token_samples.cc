// The token-window kind: sample i of a token corpus is the window of
// seq_len + 1 tokens at i * seq_len; x (its first seq_len tokens) goes into
// the data row and y (its last seq_len, the next-token targets) into the
// label row, both widened to tokens.dtype.
#include <algorithm>
#include <string>
#include <utility>

#include "format/token_corpus.h"
#include "pipeline/sample_kind.h"

namespace gpufeed {
namespace {

// Windows a worker claims at once, across batches (up to half the prefetch
// window, so that two workers overlap): one lock round trip, one read-ahead
// submission and one wake-up of the consumer serve the whole run, since a
// window takes microseconds to widen.
constexpr uint64_t kTokenRun = 128;
// Block reads (block shuffle, no shuffle): tasks submitted to the
// read-ahead at once, a small part of its window (thousands of windows).
constexpr uint64_t kTokenSubmitChunk = 256;

// The read buffers block reads need (WorkSchedule::min_read_budget): the
// windows of `window_blocks` blocks are consumed interleaved, so all of
// them stay held, and a run crossing into the next window waits for that
// window's blocks, queued behind the current ones: two windows' blocks and
// one more, or every block of a smaller corpus and one more. A block read
// is block_bytes plus the next block's first token (at most 4 bytes),
// rounded up to 4 KiB and one more 4 KiB for an O_DIRECT read's alignment.
uint64_t BlockReadBudget(uint64_t block_bytes, uint64_t window_blocks, uint64_t corpus_blocks) {
  const uint64_t read_bytes = (block_bytes + 4 + 4095) / 4096 * 4096 + 4096;
  return (std::min(2 * window_blocks, corpus_blocks) + 1) * read_bytes;
}

class TokenSamples final : public SampleKind {
 public:
  explicit TokenSamples(const LoaderOptions& options) : SampleKind(options) {}

  const char* name() const override { return "tokens"; }

  Status Validate() const override {
    const TokenWindowOptions& tokens = options_.tokens;
    if (tokens.seq_len == 0 ||
        (tokens.dtype != TensorDtype::kInt32 && tokens.dtype != TensorDtype::kInt64)) {
      return Status::InvalidArgument("token windows need seq_len >= 1 and dtype int32 or int64");
    }
    return Status::OK();
  }

  // Windows of the transform's length; a shuffle that keeps blocks together
  // reads whole blocks (one large read for many windows).
  Status Prepare(std::shared_ptr<const Dataset> opened,
                 std::shared_ptr<const Dataset>* prepared) override {
    const uint32_t block_bytes =
        options_.shuffle == ShuffleMode::kGlobal ? 0 : options_.tokens.block_bytes;
    GPUFEED_RETURN_IF_ERROR(
        TokenWindowsOf(opened, options_.tokens.seq_len, block_bytes, prepared));
    windows_ = AsTokenWindows(**prepared);
    token_dtype_ = (*prepared)->token_info()->token_dtype;
    return Status::OK();
  }

  Status Layout(const Dataset& dataset, BatchLayout* layout) const override {
    if (dataset.token_info() == nullptr) {
      return Status::InvalidArgument(dataset.path() + " is not a token corpus");
    }
    const TensorDtype dtype = options_.tokens.dtype;
    const int64_t length = options_.tokens.seq_len;
    layout->data_dtype = dtype;
    layout->sample_shape = {length};
    layout->sample_bytes = TensorDtypeSize(dtype) * static_cast<size_t>(length);
    layout->label_dtype = dtype;
    layout->label_shape = {length};  // y: the next-token targets
    layout->label_bytes_per_sample = layout->sample_bytes;
    layout->lengths_bytes = 0;
    return Status::OK();
  }

  WorkSchedule Schedule(const std::vector<uint64_t>& block_sizes,
                        bool read_engine) const override {
    WorkSchedule schedule;
    schedule.run_tasks = kTokenRun;
    schedule.max_run_batches = static_cast<size_t>(std::max(1, options_.prefetch / 2));
    schedule.time_per_run = true;
    schedule.random_read_ahead = true;
    if (read_engine && options_.shuffle != ShuffleMode::kGlobal && !block_sizes.empty()) {
      // Block reads: the next window of blocks is submitted while this one
      // is consumed, so the disk never waits for the consumer. Submission
      // lags the window by up to a chunk; the window covers that too, so
      // the windows of a block are all submitted before the last of the
      // earlier ones is released (a block read is shared only while held:
      // a window submitted after that would read its block again).
      const uint64_t blocks = options_.shuffle == ShuffleMode::kBlock
                                  ? std::max<uint32_t>(1, options_.shuffle_window_shards)
                                  : 4;
      const uint64_t block_windows = *std::max_element(block_sizes.begin(), block_sizes.end());
      if (block_windows > 0) {
        schedule.read_ahead_tasks = block_windows * blocks + kTokenSubmitChunk;
        schedule.submit_chunk = kTokenSubmitChunk;
      }
      schedule.min_read_budget =
          BlockReadBudget(options_.tokens.block_bytes, blocks, block_sizes.size());
    }
    return schedule;
  }

  void DescribeState(LoaderState* state) const override {
    state->seq_len = options_.tokens.seq_len;
    state->token_block_bytes = options_.tokens.block_bytes;
  }

  Status CheckState(const LoaderState& state) const override {
    const TokenWindowOptions& tokens = options_.tokens;
    if (state.seq_len == 0 ||
        (state.seq_len == tokens.seq_len && state.token_block_bytes == tokens.block_bytes)) {
      return Status::OK();
    }
    return Status::InvalidArgument(
        "the state was saved by a token-window loader with seq_len " +
        std::to_string(state.seq_len) + " and block_bytes " +
        std::to_string(state.token_block_bytes) + "; this loader has seq_len " +
        std::to_string(tokens.seq_len) + " and block_bytes " + std::to_string(tokens.block_bytes) +
        ": its positions would name other tokens");
  }

  // A window read directly (one spanning two files, or no read engine).
  Status Write(uint64_t sample, uint64_t, const Record& record, const BatchLayout& layout,
               const SampleRow& row, SampleScratch*) const override {
    const size_t length = options_.tokens.seq_len;
    if (record.data.size() != (length + 1) * TokenDtypeSize(token_dtype_)) {
      return Status::Internal("sample " + std::to_string(sample) + " (" + record.source + "): " +
                              std::to_string(record.data.size()) +
                              " bytes, not a window of " + std::to_string(length + 1) +
                              " tokens");
    }
    const size_t item = TokenDtypeSize(token_dtype_);
    WriteWindow(TokenWindowBytes{record.data.data(), record.data.data() + length * item}, layout,
                row);
    return Status::OK();
  }

  // Widened straight from the engine's buffer (a block shared by many
  // windows): no copy into a Record.
  Status WriteFetched(const DatasetBase&, uint64_t sample, const RecordLocation& location,
                      const char* data, size_t size, const BatchLayout& layout,
                      const SampleRow& row, bool* handled, uint64_t* bytes) const override {
    *handled = true;
    TokenWindowBytes window;
    GPUFEED_RETURN_IF_ERROR(windows_->WindowIn(sample, location, data, size, &window));
    WriteWindow(window, layout, row);
    *bytes = TokenDtypeSize(token_dtype_) * options_.tokens.seq_len;
    return Status::OK();
  }

 private:
  // x (the first seq_len tokens) into the data row, y (the last seq_len)
  // into the label row, widened to the output dtype.
  void WriteWindow(const TokenWindowBytes& window, const BatchLayout& layout,
                   const SampleRow& row) const {
    const size_t length = options_.tokens.seq_len;
    const size_t item = TokenDtypeSize(token_dtype_);
    WidenTokens(token_dtype_, window.tokens, length, layout.data_dtype, row.data);
    if (window.last == window.tokens + length * item) {
      WidenTokens(token_dtype_, window.tokens + item, length, layout.label_dtype, row.labels);
      return;
    }
    // The last token came from the heads.
    WidenTokens(token_dtype_, window.tokens + item, length - 1, layout.label_dtype, row.labels);
    WidenTokens(token_dtype_, window.last, 1, layout.label_dtype,
                row.labels + (length - 1) * TensorDtypeSize(layout.label_dtype));
  }

  // Set by Prepare (the prepared dataset outlives the kind's use).
  const TokenWindows* windows_ = nullptr;
  TokenDtype token_dtype_ = TokenDtype::kAuto;
};

}  // namespace

std::shared_ptr<SampleKind> NewTokenSamples(const LoaderOptions& options) {
  return std::make_shared<TokenSamples>(options);
}

}  // namespace gpufeed
