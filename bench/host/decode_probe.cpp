//===- decode_probe.cpp - the bytes a decode step reads, read alone -------===//
//
// bench/model's roofline for decode: opens every tensor file of a bundle
// through the runtime (the same mappings, page sizes included, that a model
// reads its weights through), and times a plain vector read of the bytes one
// decode step reads: every file whole, except the embedding tables' data, of
// which a step reads one row (the token embedding's, and Gemma 4's per-layer
// table's). A bundle without an lm_head file has its lm_head tied to the
// token embedding, which then streams that table's data whole every step:
// it is counted whole. 1 thread reads them all; n threads each read a
// contiguous share of the bytes, as a step's dispatches split them.
//
//   cq4p-bench-decode-probe BUNDLE THREADS REPS [LIBRARY]
//
// Prints "bytes B" and then "probe T GB/s" per thread count 1..THREADS
// (median of REPS full reads after one warm-up read).
//
// With LIBRARY (the bundle's compiled model), the probe and the model's
// decode steps alternate, one read of the bytes then one decode step (a
// greedy sample and its step, as cq4p-run times them), REPS pairs per
// thread count after one warm-up pair; prints per thread count
//
//   pairs T decode D GB/s probe P GB/s ratio R% (Rmin-Rmax)
//
// D and P the medians of each, R the median over the pairs of the step's
// bytes per second over the probe's just before it. On a machine whose
// memory bandwidth drifts with its neighbours' load, the ratio of
// neighbouring measurements is what stays put.
//
//===----------------------------------------------------------------------===//

#include "ReadProbe.h"

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Model.h"
#include "cq4p/runtime/TensorFile.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace cq4p::runtime;

namespace {

struct Span {
  const uint8_t *data;
  size_t bytes;
};

/// readProbe over every span.
uint64_t readAll(const Span *spans, size_t count) {
  uint64_t sum = 0;
  for (size_t s = 0; s < count; ++s)
    sum += readProbe(spans[s].data, spans[s].bytes);
  return sum;
}

/// `spans` cut into `parts` runs of nearly equal bytes.
std::vector<std::vector<Span>> split(const std::vector<Span> &spans, size_t total,
                                     int parts) {
  std::vector<std::vector<Span>> out(static_cast<size_t>(parts));
  size_t share = (total + size_t(parts) - 1) / size_t(parts), filled = 0;
  size_t part = 0;
  for (Span span : spans) {
    while (span.bytes > 0) {
      size_t room = share - filled;
      size_t take = std::min(room, span.bytes);
      out[part].push_back({span.data, take});
      span.data += take;
      span.bytes -= take;
      filled += take;
      if (filled == share && part + 1 < out.size()) {
        ++part;
        filled = 0;
      }
    }
  }
  return out;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// The read of `parts` (one per thread), timed.
double timedRead(const std::vector<std::vector<Span>> &parts, volatile uint64_t &sink) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  std::vector<uint64_t> sums(parts.size());
  for (size_t t = 1; t < parts.size(); ++t)
    workers.emplace_back([&, t] { sums[t] = readAll(parts[t].data(), parts[t].size()); });
  sums[0] = readAll(parts[0].data(), parts[0].size());
  for (std::thread &worker : workers)
    worker.join();
  double elapsed = secondsSince(start);
  for (uint64_t sum : sums)
    sink = sink + sum;
  return elapsed;
}

/// Probe reads and decode steps in alternation (the LIBRARY mode above).
int pairs(const char *bundlePath, const char *libraryPath, const std::vector<Span> &spans,
          size_t total, int maxThreads, int reps, volatile uint64_t &sink) {
  auto fail = [](const Status &status) {
    std::fprintf(stderr, "cq4p-bench-decode-probe: %s\n", status.message().c_str());
    return 1;
  };
  std::unique_ptr<Bundle> bundle;
  if (Status status = Bundle::open(bundlePath, bundle); !status)
    return fail(status);
  std::unique_ptr<KernelLibrary> library;
  if (Status status = KernelLibrary::open(libraryPath, library); !status)
    return fail(status);
  const int64_t prompt[] = {1, 2, 3, 4};
  for (int threads = 1; threads <= maxThreads; ++threads) {
    ModelOptions options;
    options.threads = threads;
    options.context = 4 + reps + 2;
    std::unique_ptr<Model> model;
    if (Status status = Model::open(*bundle, *library, options, model); !status)
      return fail(status);
    if (Status status = model->prefill(prompt, 4); !status)
      return fail(status);
    std::vector<std::vector<Span>> parts = split(spans, total, threads);
    Rng rng;
    std::vector<double> probeSeconds, stepSeconds, ratios;
    for (int rep = 0; rep <= reps; ++rep) {
      double probe = timedRead(parts, sink);
      auto start = std::chrono::steady_clock::now();
      int64_t id = 0;
      if (Status status = model->sample(SamplingOptions{}, rng, id); !status)
        return fail(status);
      if (Status status = model->decode(id); !status)
        return fail(status);
      double step = secondsSince(start);
      if (rep == 0) // the first pair warms the caches and the TLB
        continue;
      probeSeconds.push_back(probe);
      stepSeconds.push_back(step);
      ratios.push_back(probe / step);
    }
    auto [lowest, highest] = std::minmax_element(ratios.begin(), ratios.end());
    std::printf("pairs %d decode %.2f GB/s probe %.2f GB/s ratio %.1f%% (%.1f-%.1f)\n",
                threads, double(total) / median(stepSeconds) / 1e9,
                double(total) / median(probeSeconds) / 1e9, 100.0 * median(ratios),
                100.0 * *lowest, 100.0 * *highest);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: cq4p-bench-decode-probe BUNDLE THREADS REPS [LIBRARY]\n");
    return 2;
  }
  int maxThreads = std::atoi(argv[2]), reps = std::atoi(argv[3]);
  if (maxThreads < 1 || reps < 1) {
    std::fprintf(stderr, "cq4p-bench-decode-probe: THREADS and REPS must be at least 1\n");
    return 2;
  }
  std::vector<std::unique_ptr<TensorFile>> files;
  std::vector<Span> spans;
  size_t total = 0;
  std::vector<std::string> paths;
  for (const auto &entry : std::filesystem::directory_iterator(argv[1]))
    if (entry.is_regular_file() && entry.path().extension() == ".weights")
      paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  auto named = [](const std::string &path, const char *tensor) {
    std::string file = std::filesystem::path(path).filename().string();
    return file.rfind(tensor, 0) == 0;
  };
  bool tiedHead = std::none_of(paths.begin(), paths.end(), [&](const std::string &p) {
    return named(p, "lm_head.weight.");
  });
  for (const std::string &path : paths) {
    std::unique_ptr<TensorFile> file;
    if (Status status = TensorFile::open(path, file); !status) {
      std::fprintf(stderr, "cq4p-bench-decode-probe: %s\n", status.message().c_str());
      return 1;
    }
    const uint8_t *base = file->region(CQ4P_REGION_DATA).data - file->info().data_offset;
    size_t size = size_t(file->info().data_offset + file->region(CQ4P_REGION_DATA).size);
    bool table = path.find("embed_tokens") != std::string::npos;
    bool streamedWhole = tiedHead && named(path, "model.embed_tokens.weight.");
    if (table && !streamedWhole) {
      // Its headers and scales, and one row of data.
      size = size_t(file->info().data_offset) + size_t(file->k() / 2);
    }
    spans.push_back({base, size});
    total += size;
    files.push_back(std::move(file));
  }
  std::printf("bytes %zu\n", total);
  std::printf("lm_head %s\n", tiedHead ? "tied to the token embedding (its data whole)"
                                      : "its own file (the token embedding: one row)");
  volatile uint64_t sink = 0;
  if (argc == 5)
    return pairs(argv[1], argv[4], spans, total, maxThreads, reps, sink);
  for (int threads = 1; threads <= maxThreads; ++threads) {
    std::vector<std::vector<Span>> parts = split(spans, total, threads);
    std::vector<double> seconds;
    for (int rep = 0; rep <= reps; ++rep) {
      double elapsed = timedRead(parts, sink);
      if (rep > 0) // the first read warms the page cache and the TLB
        seconds.push_back(elapsed);
    }
    std::printf("probe %d %.2f GB/s\n", threads, double(total) / median(seconds) / 1e9);
  }
  return 0;
}
