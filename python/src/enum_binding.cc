// The C++ enums of the loader's and the datasets' options and figures as
// Python enums (_core.ShuffleMode.GLOBAL, ...). Each value also has a text
// name: the string the Python keywords take ("global", "io_uring",
// "cpu-contention"). str(value) gives it, and Enum("text") parses it; an
// unknown text is a ValueError naming it and listing the accepted ones,
// never a default.
#include <pybind11/pybind11.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "binding_util.h"
#include "gpufeed/batch.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "gpufeed/options.h"

namespace py = pybind11;

namespace gpufeed::python {

namespace {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* attribute;  // the Python attribute: ShuffleMode.GLOBAL
  const char* text;       // the keyword's string: "global"
};

constexpr EnumName<ShuffleMode> kShuffleModes[] = {
    {ShuffleMode::kNone, "NONE", "none"},
    {ShuffleMode::kGlobal, "GLOBAL", "global"},
    {ShuffleMode::kBlock, "BLOCK", "block"},
    {ShuffleMode::kNode, "NODE", "node"},
};
constexpr EnumName<OnError> kOnErrors[] = {
    {OnError::kRaise, "RAISE", "raise"},
    {OnError::kSkip, "SKIP", "skip"},
};
constexpr EnumName<TransformKind> kTransformKinds[] = {
    {TransformKind::kImage, "IMAGE", "image"},
    {TransformKind::kRaw, "RAW", "raw"},
    {TransformKind::kTokenWindows, "TOKEN_WINDOWS", "tokens"},
    {TransformKind::kTabular, "TABULAR", "tabular"},
};
constexpr EnumName<LoaderOptions::LabelType> kLabelTypes[] = {
    {LoaderOptions::LabelType::kAuto, "AUTO", "auto"},
    {LoaderOptions::LabelType::kInt64, "INT64", "int64"},
    {LoaderOptions::LabelType::kFloat32, "FLOAT32", "float32"},
};
constexpr EnumName<IoBackend> kIoBackends[] = {
    {IoBackend::kAuto, "AUTO", "auto"},
    {IoBackend::kIoUring, "IO_URING", "io_uring"},
    {IoBackend::kPread, "PREAD", "pread"},
};
constexpr EnumName<DeviceKind> kDeviceKinds[] = {
    {DeviceKind::kCpu, "CPU", "cpu"},
    {DeviceKind::kCuda, "CUDA", "cuda"},
};
constexpr EnumName<TensorDtype> kTensorDtypes[] = {
    {TensorDtype::kUint8, "UINT8", "uint8"},       {TensorDtype::kInt32, "INT32", "int32"},
    {TensorDtype::kInt64, "INT64", "int64"},       {TensorDtype::kFloat16, "FLOAT16", "float16"},
    {TensorDtype::kBfloat16, "BFLOAT16", "bfloat16"}, {TensorDtype::kFloat32, "FLOAT32", "float32"},
    {TensorDtype::kInt8, "INT8", "int8"},
};
constexpr EnumName<OutputLayout> kOutputLayouts[] = {
    {OutputLayout::kNCHW, "NCHW", "NCHW"},
    {OutputLayout::kNHWC, "NHWC", "NHWC"},
};
constexpr EnumName<RawTransformOptions::Element> kRawElements[] = {
    {RawTransformOptions::Element::kUint8, "UINT8", "uint8"},
    {RawTransformOptions::Element::kInt32, "INT32", "int32"},
    {RawTransformOptions::Element::kInt64, "INT64", "int64"},
    {RawTransformOptions::Element::kFloat32, "FLOAT32", "float32"},
};
// The texts are BottleneckName's (the stable names programs branch on).
constexpr EnumName<Bottleneck> kBottlenecks[] = {
    {Bottleneck::kNone, "NONE", "none"},
    {Bottleneck::kConsumer, "CONSUMER", "consumer"},
    {Bottleneck::kRead, "READ", "read"},
    {Bottleneck::kDecode, "DECODE", "decode"},
    {Bottleneck::kCopy, "COPY", "copy"},
    {Bottleneck::kCpuContention, "CPU_CONTENTION", "cpu-contention"},
    {Bottleneck::kLookup, "LOOKUP", "lookup"},
};
constexpr EnumName<StatsSpan> kStatsSpans[] = {
    {StatsSpan::kSinceOpen, "SINCE_OPEN", "open"},
    {StatsSpan::kRecent, "RECENT", "recent"},
    {StatsSpan::kEpoch, "EPOCH", "epoch"},
};
// The texts are TokenDtypeName's and CachePolicyName's.
constexpr EnumName<TokenDtype> kTokenDtypes[] = {
    {TokenDtype::kAuto, "AUTO", "auto"},       {TokenDtype::kUint8, "UINT8", "uint8"},
    {TokenDtype::kInt8, "INT8", "int8"},       {TokenDtype::kInt16, "INT16", "int16"},
    {TokenDtype::kUint16, "UINT16", "uint16"}, {TokenDtype::kInt32, "INT32", "int32"},
    {TokenDtype::kUint32, "UINT32", "uint32"}, {TokenDtype::kInt64, "INT64", "int64"},
};
// The texts are FieldTypeName's.
constexpr EnumName<FieldType> kFieldTypes[] = {
    {FieldType::kBool, "BOOL", "bool"},          {FieldType::kInt8, "INT8", "int8"},
    {FieldType::kUint8, "UINT8", "uint8"},       {FieldType::kInt16, "INT16", "int16"},
    {FieldType::kUint16, "UINT16", "uint16"},    {FieldType::kInt32, "INT32", "int32"},
    {FieldType::kUint32, "UINT32", "uint32"},    {FieldType::kInt64, "INT64", "int64"},
    {FieldType::kUint64, "UINT64", "uint64"},    {FieldType::kFloat16, "FLOAT16", "float16"},
    {FieldType::kFloat32, "FLOAT32", "float32"}, {FieldType::kFloat64, "FLOAT64", "float64"},
};
constexpr EnumName<CachePolicy> kCachePolicies[] = {
    {CachePolicy::kTrain, "TRAIN", "train"},
    {CachePolicy::kPinned, "PINNED", "pinned"},
    {CachePolicy::kCheckpoint, "CHECKPOINT", "checkpoint"},
};

// The library's own parser of an enum's texts (ParseTokenDtype, ...). Its
// InvalidArgument (InvalidArgumentError, a ValueError) lists the accepted
// names; it is the error the public Python functions (open_dataset,
// verify, ...) raise for an unknown name, and the enum raises the same.
template <typename Enum>
using ParseText = Status (*)(const std::string&, Enum*);

// Binds `Enum` as module.<name>, with the values of `names` (a static
// table), construction from a text name (ValueError "<what> must be one of
// ..., not ..."; with `parse`, the InvalidArgumentError of that parser, also
// a ValueError listing the accepted names) and str() giving the text name.
template <typename Enum, size_t N>
void BindEnum(py::module_& module, const char* name, const char* what,
              const EnumName<Enum> (&names)[N], const char* doc, ParseText<Enum> parse = nullptr) {
  py::enum_<Enum> bound(module, name, doc);
  for (const EnumName<Enum>& entry : names) bound.value(entry.attribute, entry.value);
  const EnumName<Enum>* table = names;
  bound.def(py::init([table, what, parse](const std::string& text) {
              if (parse != nullptr) {
                Enum value{};
                ThrowIfError(parse(text, &value));
                return value;
              }
              std::string accepted;
              for (size_t i = 0; i < N; ++i) {
                if (text == table[i].text) return table[i].value;
                accepted += std::string(i == 0 ? "\"" : ", \"") + table[i].text + "\"";
              }
              throw py::value_error(std::string(what) + " must be one of " + accepted +
                                    ", not \"" + text + "\"");
            }),
            py::arg("name"));
  // Replaces pybind11's "Name.ATTRIBUTE": a value prints as the keyword it
  // stands for.
  bound.attr("__str__") = py::cpp_function(
      [table](Enum value) -> std::string {
        for (size_t i = 0; i < N; ++i) {
          if (table[i].value == value) return table[i].text;
        }
        return "unknown";
      },
      py::name("__str__"), py::is_method(bound));
}

// The tables whose texts C++ also names (BottleneckName, IoBackendName,
// TensorDtypeName, TokenDtypeName, CachePolicyName) must agree with it: a
// mismatch fails the import.
template <typename Enum, size_t N>
void CheckTexts(const EnumName<Enum> (&names)[N], const char* (*name_of)(Enum)) {
  for (const EnumName<Enum>& entry : names) {
    if (std::string(entry.text) != name_of(entry.value)) {
      throw std::logic_error(std::string("gpufeed._core: enum text \"") + entry.text +
                             "\" differs from the C++ name \"" + name_of(entry.value) + "\"");
    }
  }
}

}  // namespace

void BindEnums(py::module_& module) {
  CheckTexts(kBottlenecks, &BottleneckName);
  CheckTexts(kIoBackends, &IoBackendName);
  CheckTexts(kTensorDtypes, &TensorDtypeName);
  CheckTexts(kTokenDtypes, &TokenDtypeName);
  CheckTexts(kCachePolicies, &CachePolicyName);
  CheckTexts(kFieldTypes, &FieldTypeName);
  BindEnum(module, "ShuffleMode", "shuffle", kShuffleModes, "LoaderOptions.shuffle");
  BindEnum(module, "OnError", "on_error", kOnErrors, "LoaderOptions.on_error");
  BindEnum(module, "TransformKind", "transform", kTransformKinds, "LoaderOptions.transform");
  BindEnum(module, "LabelType", "label_dtype", kLabelTypes, "LoaderOptions.label_type");
  BindEnum(module, "IoBackend", "io_backend", kIoBackends, "IoOptions.backend");
  BindEnum(module, "DeviceKind", "device", kDeviceKinds, "DeviceOptions.kind");
  BindEnum(module, "TensorDtype", "dtype", kTensorDtypes,
           "ImageTransformOptions.dtype, TokenWindowOptions.dtype");
  BindEnum(module, "OutputLayout", "layout", kOutputLayouts, "ImageTransformOptions.layout");
  BindEnum(module, "RawElement", "dtype", kRawElements, "RawTransformOptions.element");
  BindEnum(module, "Bottleneck", "bottleneck", kBottlenecks, "LoaderStats.bottleneck");
  BindEnum(module, "StatsSpan", "span", kStatsSpans, "Loader.stats(span)");
  BindEnum(module, "TokenDtype", "token_dtype", kTokenDtypes,
           "TokenCorpusOptions.token_dtype, TokenCorpusInfo.token_dtype", &ParseTokenDtype);
  BindEnum(module, "CachePolicy", "cache_policy", kCachePolicies, "CacheOptions.policy",
           &ParseCachePolicy);
  BindEnum(module, "FieldType", "field type", kFieldTypes,
           "RecordSchema.label, RecordSchema.dense, RecordSchema.sparse", &ParseFieldType);
}

}  // namespace gpufeed::python
