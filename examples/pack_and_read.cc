// Packs an ImageFolder into RecordIO shards and reads every record back.
//
// Build against an installed gpufeed:
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=$PREFIX && cmake --build build-examples
// Run:
//   build-examples/pack_and_read /data/train /scratch/train-packed
#include <cstdio>
#include <memory>

#include "gpufeed/gpufeed.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IMAGE_FOLDER OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  gpufeed::PackOptions pack_options;
  pack_options.overwrite = true;
  gpufeed::PackSummary summary;
  gpufeed::Status status = gpufeed::Pack(argv[1], argv[2], pack_options, &summary);
  if (!status.ok()) {
    std::fprintf(stderr, "pack failed: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("packed %llu records into %llu shard(s), %llu bytes, %.2f s\n",
              static_cast<unsigned long long>(summary.records),
              static_cast<unsigned long long>(summary.shards),
              static_cast<unsigned long long>(summary.bytes), summary.seconds);

  std::unique_ptr<gpufeed::Dataset> dataset;
  status = gpufeed::Dataset::Open(argv[2], gpufeed::DatasetOptions(), &dataset);
  if (!status.ok()) {
    std::fprintf(stderr, "open failed: %s\n", status.ToString().c_str());
    return 1;
  }
  gpufeed::Record record;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    status = dataset->Read(i, &record);
    if (!status.ok()) {
      std::fprintf(stderr, "read failed: %s\n", status.ToString().c_str());
      return 1;
    }
    std::printf("%llu: key=%s label=%g bytes=%zu\n", static_cast<unsigned long long>(i),
                record.key.c_str(), record.labels.empty() ? 0.0 : record.labels[0],
                record.data.size());
  }
  return 0;
}
