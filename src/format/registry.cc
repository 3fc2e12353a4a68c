// The one list of dataset formats, and the names Python and C++ share.
#include "format/registry.h"

namespace gpufeed {

const std::vector<const FormatEntry*>& RegisteredFormats() {
  // The order format=auto tries them in: on a directory, RecordIO shards
  // before an LMDB (a Caffe one before a gpufeed one), tars, and an
  // ImageFolder last (it takes any directory that is not empty); before a
  // path is stat'ed, a list or pattern of tars before the token corpora.
  // Never destroyed: a thread still opening a dataset at exit reads it.
  static const std::vector<const FormatEntry*>& formats = *new std::vector<const FormatEntry*>{
      &RecordIOFormat(),    &CaffeLmdbFormat(), &LmdbFormat(), &WebDatasetFormat(),
      &ImageFolderFormat(), &MegatronFormat(),  &LlmcFormat(), &TokensFormat(),
  };
  return formats;
}

const FormatEntry* FindFormat(DatasetFormat format) {
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->format == format) return entry;
  }
  return nullptr;
}

const char* FormatName(DatasetFormat format) {
  if (format == DatasetFormat::kAuto) return "auto";
  const FormatEntry* entry = FindFormat(format);
  return entry != nullptr ? entry->name : "unknown";
}

std::vector<std::string> FormatNames() {
  std::vector<std::string> names = {"auto"};
  for (const FormatEntry* entry : RegisteredFormats()) names.push_back(entry->name);
  return names;
}

Status ParseFormat(const std::string& name, DatasetFormat* format) {
  if (name == "auto") {
    *format = DatasetFormat::kAuto;
    return Status::OK();
  }
  std::string expected = "auto";
  const std::vector<const FormatEntry*>& formats = RegisteredFormats();
  for (size_t i = 0; i < formats.size(); ++i) {
    if (name == formats[i]->name) {
      *format = formats[i]->format;
      return Status::OK();
    }
    expected += (i + 1 == formats.size() ? " or " : ", ") + std::string(formats[i]->name);
  }
  return Status::InvalidArgument("unknown format \"" + name + "\" (expected " + expected + ")");
}

}  // namespace gpufeed
