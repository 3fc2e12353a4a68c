// Raw Criteo TSV (format "criteo_tsv"): Kaggle's train.txt, the Terabyte
// dataset's day_N files, one sample per line (format/criteo_line.h), read
// in place through a line index: the byte offset of every line, built by
// one sequential pass on first open and kept in a small binary file beside
// the TSV file (or in a cache directory when the file's directory is not
// writable), so that a row is then one pread at a known offset and the
// loader's shuffles and resume work on text (docs/formats.md, "Criteo
// TSV").
//
// A line is the bytes up to and including a '\n'; a last line without one
// counts. An empty line (or "\r\n" alone) is indexed as a line: reading it
// fails with Corruption naming the file and the line, as any line that
// does not parse does, so that on_error="skip" can pass over it.
//
// Thread safety: free functions, no shared state.
#ifndef GPUFEED_FORMAT_CRITEO_TSV_H_
#define GPUFEED_FORMAT_CRITEO_TSV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

constexpr DatasetFormat kCriteoTsvFormat = DatasetFormat{22};

// The line index of one file. offsets: lines() + 1 byte offsets, the first
// 0, strictly increasing, the last file_size.
struct LineIndex {
  uint64_t file_size = 0;
  int64_t file_mtime_ns = 0;
  std::shared_ptr<const std::vector<uint64_t>> offsets;
  uint64_t lines() const { return offsets ? offsets->size() - 1 : 0; }
};

// Reads [offset, offset + length) of the file into `destination`; *done is
// less than `length` only at the end of the file.
using LineReader =
    std::function<Status(uint64_t offset, size_t length, char* destination, size_t* done)>;

// Finds every line of a file of `file_size` bytes in one sequential pass
// through `read`, in windows of `window` bytes. Corruption naming `path`
// when the file ends before `file_size` (it shrank while being indexed).
[[nodiscard]] Status ScanLines(const std::string& path, uint64_t file_size, const LineReader& read,
                               LineIndex* index, size_t window = 8 << 20);

// The index file (docs/formats.md): "GFLINIX1", file size, file mtime
// (ns), line count, the offsets, xxh64 of all the bytes before it; every
// number a little-endian uint64 (the mtime an int64).
[[nodiscard]] Status SaveLineIndex(const LineIndex& index, const std::string& index_path);
// Corruption naming `index_path` for a file that is not a whole, valid
// index (magic, size, checksum, offsets not increasing from 0 to the file
// size); IOError and the like when it cannot be read.
[[nodiscard]] Status LoadLineIndex(const std::string& index_path, LineIndex* index);

// "<file>.gpufeed-lines": the index's place beside the file.
std::string LineIndexPathBeside(const std::string& path);
// True for a name LineIndexPathBeside makes (or its temporary file while
// it is written): a directory's listing passes over them.
bool IsLineIndexName(const std::string& name);
// Where an index goes when the file's directory is not writable:
// options.tabular.index_dir, else <cache.cache_dir>/line-index, else
// $XDG_CACHE_HOME/gpufeed/line-index (~/.cache/gpufeed/line-index); empty
// when none can be named.
std::string LineIndexFallbackDirectory(const DatasetOptions& options);
// The index of `path` in `directory`: its base name, the xxh64 of the whole
// path (two train.txt of different directories never share an index).
std::string LineIndexPathInDirectory(const std::string& path, const std::string& directory);

// The index of `file`, from beside it or `fallback_dir`, else built by
// ScanLines and saved beside it (or in `fallback_dir` when that fails; a
// save that fails everywhere is logged, and the index is used unsaved). An
// index whose recorded size or mtime differs from the file's, or that is
// not valid, is built again.
[[nodiscard]] Status LoadOrBuildLineIndex(const StoreFile& file, const std::string& fallback_dir,
                                          LineIndex* index);

// The TSV files `path` names: the file itself, or the regular files of a
// directory in natural order (NaturalLess, util/path.h: day_2 before
// day_10), passing over hidden names, line indexes and a gpufeed.json, each
// resolved inside the directory (ResolveInsideDirectory). NotSupported for
// a compressed file (.gz, .bz2, .xz, .zst, .lz4, .zip: decompress it
// first); NotFound for a directory without files.
[[nodiscard]] Status ListCriteoTsvFiles(const std::string& path, const DatasetOptions& options,
                                        std::vector<std::string>* files);
// Opens `path` (absolute: a TSV file or a directory of them) as a
// TabularDatasetBase: one segment per file with lines (an empty file is
// passed over), each file's line index loaded or built
// (LoadOrBuildLineIndex). InvalidArgument when no file has a line.
[[nodiscard]] Status OpenCriteoTsvDataset(const std::string& path, const DatasetOptions& options,
                                          const std::shared_ptr<Store>& store,
                                          std::unique_ptr<Dataset>* dataset);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_CRITEO_TSV_H_
