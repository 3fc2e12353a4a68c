// TorchRec's Criteo layout ("criteo_npy"): a directory of NumPy .npy
// triplets <stem>_dense.npy (rows, D), <stem>_sparse.npy (rows, S) and
// <stem>_labels.npy (rows,) or (rows, 1), the stems concatenated in natural
// order (day_2 before day_10). Every dtype format/npy.h accepts is read (the
// loader converts); D, S and the dtypes come from the files and must be the
// same in every triplet. Each triplet is one TabularSegment whose parts are
// its three files in that order (dense, sparse, labels), their rows read in
// place after the .npy headers (format/tabular.h).
//
// Thread safety: the functions keep no state; a CriteoTriplet's files are
// safe to read from many threads.
#ifndef GPUFEED_FORMAT_CRITEO_NPY_H_
#define GPUFEED_FORMAT_CRITEO_NPY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/npy.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

// criteo_npy's format value (docs/extending.md: values from 20 up).
constexpr DatasetFormat kCriteoNpyFormat = DatasetFormat{20};

// A triplet's members, in part order.
enum CriteoMember : int { kCriteoDense = 0, kCriteoSparse = 1, kCriteoLabels = 2 };
constexpr int kCriteoMembers = 3;
// "_dense.npy", "_sparse.npy", "_labels.npy", by CriteoMember.
extern const char* const kCriteoSuffixes[kCriteoMembers];


// A stem of a directory's triplet files and which members it has.
struct CriteoStem {
  std::string stem;
  bool present[kCriteoMembers] = {false, false, false};
  bool complete() const { return present[0] && present[1] && present[2]; }
};

// The stems of the regular files in `entries` named <stem>_dense.npy,
// <stem>_sparse.npy or <stem>_labels.npy, in natural order of the stems.
// Other names (TorchRec's *_contig_freq.npy, READMEs) are passed over.
std::vector<CriteoStem> FindCriteoStems(const std::vector<DirectoryEntry>& entries);

// One member opened through the store, its header parsed and its size and
// shape checked: rows and columns (labels: 1) from the shape.
struct CriteoNpyFile {
  std::shared_ptr<const StoreFile> file;
  NpyHeader header;
  FieldType type = FieldType::kInt32;
  uint64_t rows = 0;
  uint64_t columns = 0;
};

struct CriteoTriplet {
  std::string stem;
  CriteoNpyFile members[kCriteoMembers];
  uint64_t rows() const { return members[kCriteoDense].rows; }
};

// What ScanCriteoNpy found: the triplets that passed every check, in
// natural order of their stems, and a problem for each that did not.
struct CriteoScan {
  size_t stems = 0;  // stems looked at (complete or not)
  std::vector<CriteoTriplet> triplets;
  std::vector<Status> problems;
};

// Lists `directory` and checks each stem's triplet, opening its files
// through `store`: a missing member (NotFound naming it), a header that
// does not parse or a dtype npy.h refuses (Fortran order, big-endian:
// NotSupported), a truncated or extended file, a shape that is not (rows,
// columns) / (rows,) or (rows, 1) for labels, unequal row counts in the
// triplet (Corruption naming the three files and their rows), a dtype or
// column count unlike the first good triplet's (Corruption naming both
// files). With `first_only` it stops at the first problem. The returned
// Status is an error only when the directory cannot be listed or a member
// leads outside it (allow_external_paths false).
Status ScanCriteoNpy(const std::string& directory, bool allow_external_paths, Store* store,
                     bool first_only, CriteoScan* scan);

// The dataset of `directory`'s triplets (Dataset::Open's factory): the
// first problem of a scan, NotFound when there is no triplet, and
// InvalidArgument when they hold no rows. Blocks of
// options.tabular.block_bytes.
Status OpenCriteoNpyDataset(const std::string& directory, const DatasetOptions& options,
                            const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_CRITEO_NPY_H_
