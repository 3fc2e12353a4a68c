// criteo_npy (format/criteo_npy.h): the triplets of a directory found,
// their headers and sizes checked, and described as a TabularTable.
#include "format/criteo_npy.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "format/datasets.h"
#include "format/tabular.h"
#include "util/path.h"

namespace gpufeed {

const char* const kCriteoSuffixes[kCriteoMembers] = {"_dense.npy", "_sparse.npy", "_labels.npy"};

namespace {

const char* const kMemberNames[kCriteoMembers] = {"dense", "sparse", "labels"};

// A first read that holds every header NumPy writes for 2-D arrays; a
// longer header is read again whole.
constexpr size_t kHeaderProbeBytes = 4096;


// The FieldType of an accepted .npy dtype (kind and item size).
bool NpyFieldType(const NpyHeader& header, FieldType* type) {
  struct Mapping {
    char kind;
    size_t size;
    FieldType type;
  };
  static const Mapping kMappings[] = {
      {'b', 1, FieldType::kBool},    {'i', 1, FieldType::kInt8},    {'u', 1, FieldType::kUint8},
      {'i', 2, FieldType::kInt16},   {'u', 2, FieldType::kUint16},  {'i', 4, FieldType::kInt32},
      {'u', 4, FieldType::kUint32},  {'i', 8, FieldType::kInt64},   {'u', 8, FieldType::kUint64},
      {'f', 2, FieldType::kFloat16}, {'f', 4, FieldType::kFloat32}, {'f', 8, FieldType::kFloat64},
  };
  for (const Mapping& mapping : kMappings) {
    if (mapping.kind == header.kind && mapping.size == header.item_size) {
      *type = mapping.type;
      return true;
    }
  }
  return false;
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  }
  return text + ")";
}

// Reads the header of `file` (a first probe, then up to the longest header
// npy.h accepts when the probe cut it short).
Status ReadNpyHeader(const StoreFile& file, NpyHeader* header) {
  std::string bytes;
  Status parsed;
  for (size_t want : {kHeaderProbeBytes, kNpyMaxHeaderBytes + 16}) {
    const size_t length = static_cast<size_t>(std::min<uint64_t>(file.size(), want));
    bytes.resize(length);
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(file.ReadAt(0, length, &bytes[0], &done));
    parsed = ParseNpyHeader(bytes.data(), done, file.path(), header);
    if (parsed.ok() || done < want) break;
  }
  return parsed;
}

// Opens member `member` at `path` and checks it alone (CriteoNpyFile).
Status OpenMember(Store* store, const std::string& path, int member, CriteoNpyFile* out) {
  GPUFEED_RETURN_IF_ERROR(store->Open(path, "", &out->file));
  GPUFEED_RETURN_IF_ERROR(ReadNpyHeader(*out->file, &out->header));
  GPUFEED_RETURN_IF_ERROR(CheckNpyFileSize(out->header, out->file->size(), path));
  if (!NpyFieldType(out->header, &out->type)) {
    return Status::NotSupported(path + ": .npy dtype '" + out->header.descr +
                                "' is not one criteo_npy reads");
  }
  const std::vector<uint64_t>& shape = out->header.shape;
  const bool labels = member == kCriteoLabels;
  const bool shaped = labels ? (shape.size() == 1 || (shape.size() == 2 && shape[1] == 1))
                             : (shape.size() == 2 && shape[1] > 0);
  if (!shaped) {
    return Status::Corruption(path + ": " + kMemberNames[member] + " .npy has shape " +
                              ShapeText(shape) + "; criteo_npy expects " +
                              (labels ? "(rows,) or (rows, 1)" : "(rows, columns)"));
  }
  out->rows = shape[0];
  out->columns = labels ? 1 : shape[1];
  return Status::OK();
}

Status CheckRowCounts(const CriteoTriplet& triplet) {
  const CriteoNpyFile* m = triplet.members;
  if (m[0].rows == m[1].rows && m[0].rows == m[2].rows) return Status::OK();
  std::string text = "criteo_npy triplet \"" + triplet.stem + "\": row counts differ:";
  for (int i = 0; i < kCriteoMembers; ++i) {
    text += std::string(i == 0 ? " " : ", ") + m[i].file->path() + " has " +
            std::to_string(m[i].rows) + " rows";
  }
  return Status::Corruption(text);
}

// Every triplet shares one schema: the first good triplet's dtypes and
// column counts.
Status CheckAgainstFirst(const CriteoTriplet& triplet, const CriteoTriplet& first) {
  for (int i = 0; i < kCriteoMembers; ++i) {
    const CriteoNpyFile& mine = triplet.members[i];
    const CriteoNpyFile& theirs = first.members[i];
    if (mine.type == theirs.type && mine.columns == theirs.columns) continue;
    return Status::Corruption(
        mine.file->path() + ": " + kMemberNames[i] + " of dtype " + FieldTypeName(mine.type) +
        " with " + std::to_string(mine.columns) + " columns, but " + theirs.file->path() +
        " has dtype " + FieldTypeName(theirs.type) + " with " + std::to_string(theirs.columns) +
        " columns; every triplet of a criteo_npy directory must agree");
  }
  return Status::OK();
}

// Opens and checks the triplet of `stem` (complete).
Status CheckTriplet(const std::string& directory, bool allow_external_paths, Store* store,
                    const CriteoScan& scan, CriteoTriplet* triplet) {
  for (int i = 0; i < kCriteoMembers; ++i) {
    const std::string name = triplet->stem + kCriteoSuffixes[i];
    std::string path;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, name, allow_external_paths,
                                                   JoinPath(directory, name), &path));
    GPUFEED_RETURN_IF_ERROR(OpenMember(store, path, i, &triplet->members[i]));
  }
  GPUFEED_RETURN_IF_ERROR(CheckRowCounts(*triplet));
  if (!scan.triplets.empty()) {
    GPUFEED_RETURN_IF_ERROR(CheckAgainstFirst(*triplet, scan.triplets.front()));
  }
  return Status::OK();
}

Status MissingMember(const std::string& directory, const CriteoStem& stem) {
  std::string missing, present;
  for (int i = 0; i < kCriteoMembers; ++i) {
    const std::string path = JoinPath(directory, stem.stem + kCriteoSuffixes[i]);
    std::string& list = stem.present[i] ? present : missing;
    list += (list.empty() ? "" : ", ") + path;
  }
  return Status::NotFound(missing + ": missing; the criteo_npy triplet of stem \"" + stem.stem +
                          "\" has " + present + " but needs all three of " + stem.stem +
                          "_dense.npy, " + stem.stem + "_sparse.npy and " + stem.stem +
                          "_labels.npy");
}

class CriteoNpyDataset : public TabularDatasetBase {
 public:
  CriteoNpyDataset(std::string path, std::shared_ptr<Store> store, TabularTable table,
                   uint64_t block_bytes)
      : TabularDatasetBase(kCriteoNpyFormat, std::move(path), std::move(store), std::move(table),
                           block_bytes) {}
};

// The table of `triplets` (their schema the first one's); empty triplets
// make no segment.
TabularTable BuildTable(const std::vector<CriteoTriplet>& triplets) {
  TabularTable table;
  const CriteoTriplet& first = triplets.front();
  TabularField* fields[kCriteoMembers] = {&table.schema.dense, &table.schema.sparse,
                                          &table.schema.label};
  for (int i = 0; i < kCriteoMembers; ++i) {
    fields[i]->type = first.members[i].type;
    fields[i]->count = static_cast<uint32_t>(first.members[i].columns);
    fields[i]->part = i;
    fields[i]->offset = 0;
  }
  table.schema.text = false;
  for (const CriteoTriplet& triplet : triplets) {
    if (triplet.rows() == 0) continue;
    TabularSegment segment;
    segment.first_row = table.rows;
    segment.rows = triplet.rows();
    for (const CriteoNpyFile& member : triplet.members) {
      table.files.push_back(member.file);
      segment.parts.push_back(TabularPart{table.files.size() - 1, member.header.data_offset,
                                          member.columns * member.header.item_size});
    }
    table.rows += segment.rows;
    table.segments.push_back(std::move(segment));
  }
  return table;
}

}  // namespace

std::vector<CriteoStem> FindCriteoStems(const std::vector<DirectoryEntry>& entries) {
  std::map<std::string, CriteoStem> stems;
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_regular_file) continue;
    for (int i = 0; i < kCriteoMembers; ++i) {
      if (!EndsWith(entry.name, kCriteoSuffixes[i])) continue;
      const std::string stem =
          entry.name.substr(0, entry.name.size() - std::string(kCriteoSuffixes[i]).size());
      CriteoStem& found = stems[stem];
      found.stem = stem;
      found.present[i] = true;
    }
  }
  std::vector<CriteoStem> sorted;
  for (auto& [name, stem] : stems) sorted.push_back(std::move(stem));
  std::sort(sorted.begin(), sorted.end(),
            [](const CriteoStem& a, const CriteoStem& b) { return NaturalLess(a.stem, b.stem); });
  return sorted;
}

Status ScanCriteoNpy(const std::string& directory, bool allow_external_paths, Store* store,
                     bool first_only, CriteoScan* scan) {
  *scan = CriteoScan();
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  for (const CriteoStem& stem : FindCriteoStems(entries)) {
    if (first_only && !scan->problems.empty()) break;
    scan->stems += 1;
    if (!stem.complete()) {
      scan->problems.push_back(MissingMember(directory, stem));
      continue;
    }
    CriteoTriplet triplet;
    triplet.stem = stem.stem;
    Status checked = CheckTriplet(directory, allow_external_paths, store, *scan, &triplet);
    if (checked.IsPermissionDenied()) return checked;  // a member leading outside
    if (!checked.ok()) {
      scan->problems.push_back(std::move(checked));
      continue;
    }
    scan->triplets.push_back(std::move(triplet));
  }
  return Status::OK();
}

Status OpenCriteoNpyDataset(const std::string& directory, const DatasetOptions& options,
                            const std::shared_ptr<Store>& store,
                            std::unique_ptr<Dataset>* dataset) {
  CriteoScan scan;
  GPUFEED_RETURN_IF_ERROR(ScanCriteoNpy(directory, options.allow_external_paths, store.get(),
                                        /*first_only=*/true, &scan));
  if (!scan.problems.empty()) return scan.problems.front();
  if (scan.triplets.empty()) {
    return Status::NotFound(directory +
                            ": no criteo_npy triplets (<stem>_dense.npy, "
                            "<stem>_sparse.npy and <stem>_labels.npy)");
  }
  TabularTable table = BuildTable(scan.triplets);
  if (table.rows == 0) {
    return Status::InvalidArgument(directory + ": the criteo_npy triplets hold no rows (" +
                                   std::to_string(scan.triplets.size()) + " triplets of 0 rows)");
  }
  *dataset = std::make_unique<CriteoNpyDataset>(directory, store, std::move(table),
                                                options.tabular.block_bytes);
  return Status::OK();
}

}  // namespace gpufeed
