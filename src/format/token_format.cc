// The registry entries of the token corpora: Megatron-LM indexed datasets,
// llm.c shards and headerless token files, read as windows of tokens. One
// finder (OpenTokenCorpus) tells the three apart, so they share one hook.
#include "format/registry.h"
#include "format/token_corpus.h"

namespace gpufeed {

namespace {

// A corpus at the path (a Megatron prefix names no file of its own), with a
// gpufeed.json from `gpufeed index` or by its files.
Status OpenCorpus(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::shared_ptr<const TokenCorpus> corpus;
  bool recognised = false;
  GPUFEED_RETURN_IF_ERROR(
      OpenTokenCorpus(request.path, request.options, request.store, &corpus, &recognised));
  if (!recognised) return Status::OK();
  return NewTokenWindowDataset(request.path, request.store, corpus,
                               request.options.tokens.seq_len, 0, dataset);
}

// OpenCorpus opens a token manifest that identifies its files; one that
// does not (hand-written) reaches here, after the files were not recognised.
Status OpenManifest(const std::string& manifest_path, const Manifest& manifest,
                    const OpenRequest&, std::unique_ptr<Dataset>*) {
  return Status::InvalidArgument(manifest_path + " describes a " + FormatName(manifest.format) +
                                 " corpus but not every file's bytes, xxh64 and token_dtype: "
                                 "run `gpufeed index` on it again");
}

FormatEntry TokenEntry(DatasetFormat format, const char* name) {
  FormatEntry e;
  e.format = format;
  e.name = name;
  e.open_before_stat = OpenCorpus;
  e.open_manifest = OpenManifest;
  return e;
}

}  // namespace

const FormatEntry& MegatronFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kMegatron, "megatron");
  return entry;
}

const FormatEntry& LlmcFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kLlmc, "llmc");
  return entry;
}

const FormatEntry& TokensFormat() {
  static const FormatEntry entry = TokenEntry(DatasetFormat::kTokens, "tokens");
  return entry;
}

}  // namespace gpufeed
