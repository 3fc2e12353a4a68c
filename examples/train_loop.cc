// A C++ trainer's input loop: a Loader over a packed dataset, one epoch,
// then the loader's statistics and its bottleneck verdict.
//
// Build against an installed gpufeed:
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=$PREFIX && cmake --build build-examples
// Run (images, RandomResizedCrop 224 + flip, uint8 output):
//   build-examples/train_loop /scratch/train-packed
// Run on non-image records (the first 16 bytes of each, as uint8):
//   build-examples/train_loop /scratch/packed --raw
#include <cstdio>
#include <cstring>
#include <memory>

#include "gpufeed/gpufeed.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [--raw]\n", argv[0]);
    return 2;
  }
  std::unique_ptr<gpufeed::Dataset> opened;
  gpufeed::Status status = gpufeed::Dataset::Open(argv[1], gpufeed::DatasetOptions(), &opened);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::shared_ptr<gpufeed::Dataset> dataset = std::move(opened);
  gpufeed::LoaderOptions options;
  options.batch_size = 64;
  options.image.dtype = gpufeed::OutputDtype::kUint8;
  if (argc > 2 && std::strcmp(argv[2], "--raw") == 0) {
    options.transform = gpufeed::TransformKind::kRaw;
    options.raw.length = 16;
  }
  std::unique_ptr<gpufeed::Loader> loader;
  status = gpufeed::Loader::Open(dataset, options, &loader);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  loader->SetEpoch(0);
  gpufeed::Batch batch;
  int64_t samples = 0;
  while (true) {
    status = loader->Next(&batch);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    if (batch.end_of_epoch()) break;
    samples += batch.size();  // a real trainer copies batch.data() to the GPU here
  }
  std::printf("epoch 0: %lld samples in %llu batches\n%s\n", static_cast<long long>(samples),
              static_cast<unsigned long long>(loader->batches_per_epoch()),
              loader->Stats().ToString().c_str());
  return 0;
}
