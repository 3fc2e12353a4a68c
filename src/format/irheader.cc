#include "format/irheader.h"

#include <cstring>

namespace gpufeed {

Status ParseIRPayload(std::string_view payload, std::vector<float>* labels, ParsedPayload* parsed) {
  if (payload.size() < kIRHeaderSize) {
    return Status::Corruption("payload of " + std::to_string(payload.size()) +
                              " bytes is shorter than the 24-byte IRHeader");
  }
  float label;
  std::memcpy(&parsed->flag, payload.data(), 4);
  std::memcpy(&label, payload.data() + 4, 4);
  std::memcpy(&parsed->id, payload.data() + 8, 8);
  std::memcpy(&parsed->id2, payload.data() + 16, 8);
  size_t label_bytes = static_cast<size_t>(parsed->flag) * 4;
  if (parsed->flag > 0 && label_bytes > payload.size() - kIRHeaderSize) {
    return Status::Corruption("IRHeader flag " + std::to_string(parsed->flag) +
                              " announces more float32 labels than the " +
                              std::to_string(payload.size()) + "-byte payload holds");
  }
  if (parsed->flag == 0) {
    labels->assign(1, label);
  } else {
    labels->resize(parsed->flag);
    std::memcpy(labels->data(), payload.data() + kIRHeaderSize, label_bytes);
  }
  parsed->data_offset = kIRHeaderSize + (parsed->flag > 0 ? label_bytes : 0);
  return Status::OK();
}

void AppendIRPayload(const SampleToWrite& sample, std::string* out) {
  uint32_t flag = sample.labels.size() > 1 ? static_cast<uint32_t>(sample.labels.size()) : 0;
  float label = sample.labels.size() == 1 ? sample.labels[0] : 0.0f;
  char header[kIRHeaderSize];
  std::memcpy(header, &flag, 4);
  std::memcpy(header + 4, &label, 4);
  uint64_t id = sample.id.value_or(sample.index);
  std::memcpy(header + 8, &id, 8);
  std::memcpy(header + 16, &sample.id2, 8);
  out->append(header, kIRHeaderSize);
  if (flag > 0) {
    out->append(reinterpret_cast<const char*>(sample.labels.data()), sample.labels.size() * 4);
  }
  out->append(sample.data.data(), sample.data.size());
}

}  // namespace gpufeed
