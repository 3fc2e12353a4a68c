// gpufeed_loader_bench: images/s through the C++ Loader, and a decode-only
// ceiling measured on the same records in the same run.
//
//   gpufeed_loader_bench PATH [--threads N] [--dtype float32|uint8] [--batch 64]
//                        [--epochs 2] [--size 224] [--prefetch 2] [--decode-only]
//
// Loader mode prints per epoch images/s and RSS, then
//   RESULT mode=loader threads=N dtype=D images_per_s=... peak_rss_mb=... batch_mb=... verdict="..."
// --decode-only decodes every record at full size on one thread (gpufeed's
// DecodeRegion, as the loader decodes: libjpeg-turbo with gpufeed's entropy
// decoder for baseline JPEGs; no crop, no resize) and prints
// RESULT mode=decode images_per_s=...
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "decode/image_decoder.h"
#include "gpufeed/loader.h"

using namespace gpufeed;
using Clock = std::chrono::steady_clock;

static double RssMb() {
  long pages = 0, resident = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

static double PeakRssMb() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH [--threads N] [--dtype float32|uint8] [--batch B] "
                 "[--epochs E] [--size S] [--prefetch P] [--decode-only]\n", argv[0]);
    return 2;
  }
  std::string path = argv[1];
  int threads = 1, batch_size = 64, epochs = 2, size = 224, prefetch = 2;
  std::string dtype = "float32";
  bool decode_only = false;
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (flag == "--threads") threads = std::atoi(value().c_str());
    else if (flag == "--dtype") dtype = value();
    else if (flag == "--batch") batch_size = std::atoi(value().c_str());
    else if (flag == "--epochs") epochs = std::atoi(value().c_str());
    else if (flag == "--size") size = std::atoi(value().c_str());
    else if (flag == "--prefetch") prefetch = std::atoi(value().c_str());
    else if (flag == "--decode-only") decode_only = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::unique_ptr<Dataset> opened;
  Status status = Dataset::Open(path, {}, &opened);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::shared_ptr<Dataset> dataset = std::move(opened);

  if (decode_only) {
    // Warm the records first, so that only decoding is timed.
    std::vector<std::string> records(dataset->size());
    Record record;
    for (uint64_t i = 0; i < dataset->size(); ++i) {
      if (!dataset->Read(i, &record).ok()) return 1;
      records[i] = record.data;
    }
    Image image;
    auto started = Clock::now();
    for (const std::string& data : records) {
      status = DecodeRegion(reinterpret_cast<const uint8_t*>(data.data()), data.size(), {}, 0, 0,
                            &image);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
    }
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    std::printf("RESULT mode=decode images=%zu images_per_s=%.1f\n", records.size(),
                records.size() / seconds);
    return 0;
  }

  LoaderOptions options;
  options.batch_size = static_cast<uint32_t>(batch_size);
  options.num_threads = threads;
  options.prefetch = prefetch;
  options.image.size = size;
  options.image.dtype = dtype == "uint8" ? OutputDtype::kUint8 : OutputDtype::kFloat32;
  std::unique_ptr<Loader> loader;
  status = Loader::Open(dataset, options, &loader);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  double batch_mb = 0;
  double best = 0;
  std::vector<double> rates;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    status = loader->SetEpoch(epoch);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    Batch batch;
    uint64_t images = 0;
    auto started = Clock::now();
    while (true) {
      status = loader->Next(&batch);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
      if (batch.end_of_epoch()) break;
      images += static_cast<uint64_t>(batch.size());
      batch_mb = std::max(batch_mb, batch.data().bytes() / double(1 << 20));
    }
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    rates.push_back(images / seconds);
    best = std::max(best, images / seconds);
    std::printf("epoch %d: %llu images in %.2f s = %.1f images/s, RSS %.1f MiB\n", epoch,
                static_cast<unsigned long long>(images), seconds, images / seconds, RssMb());
  }
  std::sort(rates.begin(), rates.end());
  LoaderStats stats = loader->Stats();
  std::printf("%s\n", stats.ToString().c_str());
  std::printf("RESULT mode=loader threads=%d dtype=%s images_per_s=%.1f peak_rss_mb=%.1f "
              "batch_mb=%.2f prefetch=%d verdict=\"%s\"\n",
              threads, dtype.c_str(), rates[rates.size() / 2], PeakRssMb(), batch_mb, prefetch,
              stats.verdict.c_str());
  return 0;
}
