//===- host_driver.cpp - host kernels timed against the machine -----------===//
//
//   cq4p-bench-host DIR LIBRARY [BASELINE] [--reps R] [--dram-factor F]
//                   [--ggml GGML_DIR [--ggml-buffer plain|NAME]...]
//
// Times the host kernels of LIBRARY (built by cq4p-compile --target=host
// from bench/host/shapes.mlir) through the runtime, and BASELINE's (the
// same shapes built by another compiler, e.g. main's) side by side. Every
// measurement of a section is repeated R times, the candidates interleaved
// within each repetition (probe, library, baseline, probe, ...), and the
// medians reported with their ratios, as a markdown table on stdout. DIR
// holds the tensor files it writes (realistic panel files, LayerFiles.h).
//
// With --ggml, ggml's CPU Q4_0 mat-mul (ggml_baseline.h: loaded at run time
// from GGML_DIR, fp32 activations) is one more candidate per weight layout
// (--ggml-buffer; by default plain row-major Q4_0 and CPU_REPACK's) in the
// same rounds of the GEMV from DRAM and the GEMV and GEMM rows, after a
// check of each product against an fp64 oracle.
//
// Sections (the targets are issue 10's):
//   - GEMV from DRAM, 1 thread: copies of the weight filling F times the
//     last-level cache, each call reading a different copy, against a
//     vector read of the same bytes (the read-bandwidth probe);
//   - GEMV in cache (weights/ns), GEMM (GFLOP/s, 1 and 2 threads);
//   - a prefill chunk's GEMMs, 1 thread: 128 rows against each of the
//     8 B model's FFN and attention shapes, the weights in two copies that
//     calls take in turn (the FFN shapes' 58 MiB pass a 32 MiB last-level
//     cache, as a model step's weights do; 4096 x 4096's 16 MiB may stay
//     in it), in multiply-adds per second: what a change to the x86 GEMM
//     moves, without the model's other kernels around it;
//   - the activation transform + quantization alone (ns per activation);
//   - the orthogonal lm_head against a Hadamard GEMV of K x K, embedding
//     rows (16 against 1);
//   - thread scaling of a 512-channel GEMV in cache (2 and 4 threads
//     against 1; 4 is more threads than this 2-core machine has).
//
//===----------------------------------------------------------------------===//

#include "LayerFiles.h"
#include "ReadProbe.h"
#include "ggml_baseline.h"

#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Linear.h"
#include "cq4p/runtime/TensorFile.h"
#include "cq4p/runtime/ThreadPool.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace cq4p::runtime;
using namespace cq4p::test;
using namespace cq4p::bench;

namespace {

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "cq4p-bench-host: %s\n", message.c_str());
  std::exit(1);
}

void check(const Status &status) {
  if (!status)
    die(status.message());
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// A layer file written once, then copied so that the copies are distinct
/// pages; each copy mapped and bound to every library.
struct Layer {
  std::vector<std::unique_ptr<TensorFile>> files;
  std::vector<std::vector<std::unique_ptr<LinearLayer>>> bound; // [library][copy]
};

struct Bench {
  std::string dir;
  std::vector<std::unique_ptr<KernelLibrary>> libraries;
  std::vector<std::string> names;
  int reps = 9;
  double dramFactor = 4;
  std::vector<std::unique_ptr<ThreadPool>> pools; // index = threads
  ActivationScratch scratch;
  std::unique_ptr<Ggml> ggml;
  std::vector<std::string> ggmlBuffers; // one candidate each

  std::string ggmlName(const std::string &buffer) const {
    return "ggml Q4_0 " + buffer;
  }

  /// Each ggml candidate's products of one shape, built outside the timed
  /// region with x as their input, run once and compared with the first's
  /// (the checked plain layout when it is in the list): a repacked layout
  /// computing something else on this shape stops the run.
  std::vector<std::unique_ptr<GgmlMatMul>>
  ggmlProducts(uint64_t n, uint64_t k, int64_t m, size_t copies,
               const std::vector<int> &threads, const std::vector<float> &x) {
    std::vector<std::unique_ptr<GgmlMatMul>> out;
    for (auto &buffer : ggmlBuffers) {
      out.push_back(ggml->matMul(buffer, n, k, m, copies, 7, threads));
      out.back()->setInput(x.data());
      out.back()->run(0, threads[0]);
      const float *first = out[0]->output(0), *y = out.back()->output(0);
      double largest = 0, worst = 0;
      for (size_t i = 0; i < size_t(m) * n; ++i) {
        largest = std::max(largest, std::fabs(double(first[i])));
        worst = std::max(worst, std::fabs(double(y[i]) - double(first[i])));
      }
      if (!(worst <= 1e-3 * largest))
        die(ggmlName(buffer) + " disagrees with " + ggmlName(ggmlBuffers[0]) + " on " +
            std::to_string(n) + "x" + std::to_string(k) + ", M = " + std::to_string(m) +
            ": largest difference " + std::to_string(worst) + ", largest |y| " +
            std::to_string(largest));
    }
    return out;
  }

  ThreadPool &pool(int threads) {
    if (pools.size() <= size_t(threads))
      pools.resize(size_t(threads) + 1);
    if (!pools[size_t(threads)])
      check(ThreadPool::create(threads, pools[size_t(threads)]));
    return *pools[size_t(threads)];
  }

  Layer layer(uint64_t n, uint64_t k, bool orthogonal, size_t copies) {
    std::string base = dir + "/w" + std::to_string(n) + "x" + std::to_string(k) +
                       (orthogonal ? "o" : "h");
    std::string first = base + "_0.cq4p.weights";
    if (!std::filesystem::exists(first) &&
        !writeBytes(first, realisticLayerFile(n, k, 128, orthogonal, 7).bytes))
      die("cannot write " + first);
    Layer out;
    for (size_t c = 0; c < copies; ++c) {
      std::string path = base + "_" + std::to_string(c) + ".cq4p.weights";
      if (c > 0 && !std::filesystem::exists(path))
        std::filesystem::copy_file(first, path);
      std::unique_ptr<TensorFile> file;
      check(TensorFile::open(path, file));
      out.files.push_back(std::move(file));
    }
    out.bound.resize(libraries.size());
    for (size_t l = 0; l < libraries.size(); ++l)
      for (auto &file : out.files) {
        std::unique_ptr<LinearLayer> linear;
        check(LinearLayer::bind(*libraries[l], *file, linear));
        out.bound[l].push_back(std::move(linear));
      }
    return out;
  }

  /// The medians of `cases` timed interleaved, each sample `calls` calls.
  std::vector<double> interleaved(const std::vector<std::function<void()>> &cases,
                                  int calls) {
    std::vector<std::vector<double>> samples(cases.size());
    for (auto &run : cases) // warm-up
      run();
    for (int r = 0; r < reps; ++r)
      for (size_t c = 0; c < cases.size(); ++c) {
        double start = now();
        for (int i = 0; i < calls; ++i)
          cases[c]();
        samples[c].push_back((now() - start) / calls);
      }
    std::vector<double> medians;
    for (auto &s : samples)
      medians.push_back(median(s));
    return medians;
  }

  /// Calls per sample so that one sample takes about 20 ms.
  int callsFor(const std::function<void()> &run) {
    double start = now();
    run();
    double once = std::max(now() - start, 1e-7);
    return int(std::clamp(0.02 / once, 1.0, 100000.0));
  }

  std::function<void()> linearCall(LinearLayer &linear, const std::vector<float> &x,
                                   std::vector<float> &y, int64_t rows, int threads) {
    return [&, rows, threads] {
      check(linear.run(pool(threads), x.data(), y.data(), rows, scratch));
    };
  }

  /// One table row: the candidates' values (the libraries', then ggml's in
  /// a section with it), the first's ratio to each other, and the target.
  void row(const std::string &what, const std::vector<double> &values,
           const char *unit, const std::string &target) {
    std::printf("| %s |", what.c_str());
    for (double v : values)
      std::printf(" %.3g %s |", v, unit);
    for (size_t i = 1; i < values.size(); ++i)
      std::printf(" %.2fx |", values[0] / values[i]);
    std::printf(" %s |\n", target.c_str());
  }

  /// The columns of row(): the libraries, ggml when `withGgml` and loaded.
  void header(const char *title, bool withGgml = false) {
    std::vector<std::string> columns = names;
    if (withGgml && ggml)
      for (auto &buffer : ggmlBuffers)
        columns.push_back(ggmlName(buffer));
    std::printf("\n### %s\n\n| measurement |", title);
    for (auto &name : columns)
      std::printf(" %s |", name.c_str());
    for (size_t i = 1; i < columns.size(); ++i)
      std::printf(" %s / %s |", columns[0].c_str(), columns[i].c_str());
    std::printf(" target |\n|---|");
    for (size_t i = 0; i < 2 * columns.size(); ++i)
      std::printf("---:|");
    std::printf("\n");
  }

  void dram() {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
      llc = 32l << 20;
    std::printf("\n### GEMV from DRAM, 1 thread (working set %.1fx the %ld MiB LLC)\n\n"
                "| shape (N x K) | read probe |",
                dramFactor, llc >> 20);
    for (auto &name : names)
      std::printf(" %s | %s / probe |", name.c_str(), name.c_str());
    if (ggml)
      for (auto &buffer : ggmlBuffers)
        std::printf(" %s | %s / probe | %s / %s |", ggmlName(buffer).c_str(),
                    ggmlName(buffer).c_str(), names[0].c_str(), ggmlName(buffer).c_str());
    std::printf(" target |\n|---|---:|");
    for (size_t i = 0; i < names.size(); ++i)
      std::printf("---:|---:|");
    if (ggml)
      for (size_t i = 0; i < ggmlBuffers.size(); ++i)
        std::printf("---:|---:|---:|");
    std::printf("---|\n");
    for (auto [n, k] : {std::pair<uint64_t, uint64_t>{4096, 4096},
                        {14336, 4096},
                        {4096, 14336}}) {
      uint64_t bytes = n * k / 2;
      size_t copies = size_t(std::ceil(dramFactor * double(llc) / double(bytes)));
      Layer l = layer(n, k, false, copies);
      std::vector<float> x = gaussianRows(1, k, 3), y(n);
      size_t next = 0;
      volatile uint64_t sink = 0;
      std::vector<std::function<void()>> cases;
      cases.push_back([&] {
        for (auto &file : l.files) {
          ByteSpan panels = file->region(CQ4P_REGION_DATA);
          sink = sink + readProbe(panels.data, size_t(panels.size));
        }
      });
      for (size_t lib = 0; lib < libraries.size(); ++lib)
        cases.push_back([&, lib] {
          for (size_t c = 0; c < copies; ++c) {
            LinearLayer &linear = *l.bound[lib][(next + c) % copies];
            check(linear.run(pool(1), x.data(), y.data(), 1, scratch));
          }
          next += 1;
        });
      // ggml's own copies of the same weight count (its Q4_0 blocks are 18
      // bytes per 32 weights), each call a different copy too.
      std::vector<std::unique_ptr<GgmlMatMul>> g;
      size_t ggmlCopies = 0, ggmlNext = 0;
      if (ggml) {
        ggmlCopies = size_t(std::ceil(dramFactor * double(llc) /
                                      (double(n) * double(k) * 18 / 32)));
        g = ggmlProducts(n, k, 1, ggmlCopies, {1}, x);
        for (auto &product : g)
          cases.push_back([&] {
            for (size_t c = 0; c < ggmlCopies; ++c)
              product->run((ggmlNext + c) % ggmlCopies, 1);
            ggmlNext += 1;
          });
      }
      std::vector<double> t = interleaved(cases, 1);
      double probe = double(bytes) * double(copies) / t[0] / 1e9;
      std::printf("| %llux%llu | %.1f GB/s |", (unsigned long long)n,
                  (unsigned long long)k, probe);
      for (size_t lib = 0; lib < libraries.size(); ++lib) {
        double rate = double(bytes) * double(copies) / t[1 + lib] / 1e9;
        std::printf(" %.1f GB/s | %.0f%% |", rate, 100 * rate / probe);
      }
      for (size_t i = 0; i < g.size(); ++i) {
        double seconds = t[1 + libraries.size() + i];
        double rate = g[i]->bytes() * double(ggmlCopies) / seconds / 1e9;
        // Weights per second, cq4p's over ggml's: the bytes differ.
        double ratio = seconds / double(ggmlCopies) / (t[1] / double(copies));
        std::printf(" %.1f GB/s | %.0f%% | %.2fx |", rate, 100 * rate / probe, ratio);
      }
      std::printf(" >= 90%% of the probe |\n");
    }
    if (ggml)
      std::printf("\nGB/s count each candidate's own weight bytes: cq4p's 4-bit "
                  "panels, ggml's Q4_0 blocks (18 bytes per 32 weights); %s / ggml "
                  "is the ratio of weights per second.\n",
                  names[0].c_str());
  }

  void cache() {
    header("GEMV in cache and GEMM", true);
    for (auto [n, k] : {std::pair<uint64_t, uint64_t>{1536, 512}, {512, 1536}}) {
      Layer l = layer(n, k, false, 1);
      std::vector<float> x = gaussianRows(1, k, 3), y(n);
      std::vector<std::function<void()>> cases;
      for (size_t lib = 0; lib < libraries.size(); ++lib)
        cases.push_back(linearCall(*l.bound[lib][0], x, y, 1, 1));
      std::vector<std::unique_ptr<GgmlMatMul>> g;
      if (ggml)
        g = ggmlProducts(n, k, 1, 1, {1}, x);
      for (auto &product : g)
        cases.push_back([&] { product->run(0, 1); });
      std::vector<double> t = interleaved(cases, callsFor(cases[0]));
      std::vector<double> rates;
      for (double s : t)
        rates.push_back(double(n * k) / s / 1e9);
      row("GEMV " + std::to_string(n) + "x" + std::to_string(k) + ", 1 thread",
          rates, "weights/ns", ">= 40");
    }
    for (uint64_t size : {1024, 4096}) {
      Layer l = layer(size, size, false, 1);
      for (int64_t m : {16, 256}) {
        std::vector<float> x = gaussianRows(uint64_t(m), size, 3),
                           y(size_t(m) * size);
        std::vector<std::unique_ptr<GgmlMatMul>> g;
        if (ggml)
          g = ggmlProducts(size, size, m, 1, {1, 2}, x);
        for (int threads : {1, 2}) {
          std::vector<std::function<void()>> cases;
          for (size_t lib = 0; lib < libraries.size(); ++lib)
            cases.push_back(linearCall(*l.bound[lib][0], x, y, m, threads));
          for (auto &product : g)
            cases.push_back([&, threads] { product->run(0, threads); });
          std::vector<double> t = interleaved(cases, callsFor(cases[0]));
          std::vector<double> rates;
          for (double s : t)
            rates.push_back(2.0 * double(m) * double(size * size) / s / 1e9);
          row("GEMM M=" + std::to_string(m) + " " + std::to_string(size) + "^2, " +
                  std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""),
              rates, "GFLOP/s",
              threads == 1 ? ">= 140 (aim 200)" : ">= 140 per thread");
        }
      }
    }
  }

  void prefill() {
    header("Prefill-chunk GEMMs");
    constexpr int64_t kRows = 128; // a prefill chunk (cq4p-compile's default)
    constexpr size_t kCopies = 2;  // taken in turn (see the header)
    for (auto [n, k] : {std::pair<uint64_t, uint64_t>{14336, 4096}, {4096, 14336},
                        {4096, 4096}}) {
      Layer l = layer(n, k, false, kCopies);
      std::vector<float> x = gaussianRows(uint64_t(kRows), k, 3),
                         y(size_t(kRows) * n);
      std::vector<size_t> next(libraries.size(), 0);
      std::vector<std::function<void()>> cases;
      for (size_t lib = 0; lib < libraries.size(); ++lib)
        cases.push_back([&, lib] {
          LinearLayer &linear = *l.bound[lib][next[lib]++ % kCopies];
          check(linear.run(pool(1), x.data(), y.data(), kRows, scratch));
        });
      std::vector<double> t = interleaved(cases, callsFor(cases[0]));
      std::vector<double> rates;
      for (double s : t)
        rates.push_back(double(kRows) * double(n * k) / s / 1e9);
      row("GEMM M=128 " + std::to_string(n) + "x" + std::to_string(k) + ", 1 thread",
          rates, "GMAC/s", "");
    }
  }

  void transform() {
    header("Activation transform + quantization (K = 4096, 1 thread)");
    Layer l = layer(4096, 4096, false, 1);
    for (int64_t m : {1, 16}) {
      std::vector<float> x = gaussianRows(uint64_t(m), 4096, 3);
      std::vector<int8_t> act(size_t(m) * 4096);
      std::vector<float> scales(size_t(m) * 32);
      std::vector<std::function<void()>> cases;
      for (size_t lib = 0; lib < libraries.size(); ++lib) {
        LinearLayer &linear = *l.bound[lib][0];
        auto fn = reinterpret_cast<cq4p_quantize_fn>(
            const_cast<void *>(linear.quantizeKernelFor(m)->entry));
        cases.push_back([&, fn, m] {
          fn(&linear.view(), x.data(), act.data(), scales.data(), m, 0, 32);
        });
      }
      std::vector<double> t = interleaved(cases, callsFor(cases[0]));
      std::vector<double> ns;
      for (double s : t)
        ns.push_back(s / double(m * 4096) * 1e9);
      row("M=" + std::to_string(m), ns, "ns/activation", "<= 0.6");
    }
  }

  void orthogonal() {
    header("Orthogonal tensors (K = 4096, 1 thread)");
    Layer head = layer(1024, 4096, true, 1);
    Layer hadamard = layer(4096, 4096, false, 1);
    std::vector<float> x = gaussianRows(1, 4096, 3), y(4096);
    std::vector<std::function<void()>> cases;
    for (size_t lib = 0; lib < libraries.size(); ++lib) {
      cases.push_back(linearCall(*head.bound[lib][0], x, y, 1, 1));
      cases.push_back(linearCall(*hadamard.bound[lib][0], x, y, 1, 1));
    }
    std::vector<double> t = interleaved(cases, callsFor(cases[0]));
    std::vector<double> ms, ratio;
    for (size_t lib = 0; lib < libraries.size(); ++lib) {
      ms.push_back(t[2 * lib] * 1e3);
      ratio.push_back(t[2 * lib] / t[2 * lib + 1]);
    }
    row("lm_head 1024x4096", ms, "ms", "");
    row("lm_head / Hadamard GEMV 4096x4096", ratio, "x", "<= 2");
    // What each call must read: the lm_head a K x K fp16 rotation besides
    // its panels and norm panels, the Hadamard GEMV its panels and norm
    // panels. At equal bandwidth their ratio is the least time ratio.
    auto bytesOf = [](const TensorFile &file, std::initializer_list<int> regions) {
      double bytes = 0;
      for (int region : regions)
        bytes += double(file.region(cq4p_region(region)).size);
      return bytes;
    };
    double headBytes = bytesOf(*head.files[0], {CQ4P_REGION_ROTATION,
                                                CQ4P_REGION_DATA,
                                                CQ4P_REGION_NORM_PANELS});
    double hadamardBytes =
        bytesOf(*hadamard.files[0], {CQ4P_REGION_DATA, CQ4P_REGION_NORM_PANELS});
    std::printf("| lm_head / Hadamard GEMV, bytes read |");
    for (size_t lib = 0; lib < libraries.size(); ++lib)
      std::printf(" %.2f x |", headBytes / hadamardBytes);
    if (libraries.size() > 1)
      std::printf(" |");
    std::printf(" the least time ratio at equal bandwidth |\n");

    std::vector<std::unique_ptr<EmbeddingLayer>> embeddings;
    for (auto &library : libraries) {
      std::unique_ptr<EmbeddingLayer> e;
      check(EmbeddingLayer::bind(*library, *head.files[0], e));
      embeddings.push_back(std::move(e));
    }
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 16; ++i)
      ids.push_back((i * 389) % 1024);
    std::vector<float> out(16 * 4096);
    cases.clear();
    for (auto &e : embeddings)
      for (int64_t count : {1, 16})
        cases.push_back([&, count] { check(e->run(ids.data(), out.data(), count)); });
    t = interleaved(cases, callsFor(cases[1]));
    std::vector<double> one, sixteen, rowsRatio;
    for (size_t lib = 0; lib < libraries.size(); ++lib) {
      one.push_back(t[2 * lib] * 1e3);
      sixteen.push_back(t[2 * lib + 1] * 1e3);
      rowsRatio.push_back(t[2 * lib + 1] / t[2 * lib]);
    }
    row("embedding, 1 row", one, "ms", "");
    row("embedding, 16 rows", sixteen, "ms", "");
    row("16 rows / 1 row", rowsRatio, "x", "<= 4");
  }

  void threads() {
    header("Thread scaling, GEMV 512x1536 in cache (this machine: 2 cores)");
    Layer l = layer(512, 1536, false, 1);
    std::vector<float> x = gaussianRows(1, 1536, 3), y(512);
    std::vector<std::function<void()>> cases;
    for (size_t lib = 0; lib < libraries.size(); ++lib)
      for (int threads : {1, 2, 4})
        cases.push_back(linearCall(*l.bound[lib][0], x, y, 1, threads));
    std::vector<double> t = interleaved(cases, callsFor(cases[0]));
    std::vector<double> two, four, us;
    for (size_t lib = 0; lib < libraries.size(); ++lib) {
      us.push_back(t[3 * lib] * 1e6);
      two.push_back(t[3 * lib] / t[3 * lib + 1]);
      four.push_back(t[3 * lib] / t[3 * lib + 2]);
    }
    row("1 thread", us, "us", "");
    row("2 threads: speed-up", two, "x", ">= 1.6");
    row("4 threads: speed-up", four, "x", ">= 1");
  }
};

/// ggml's product on a small shape against an fp64 dot of its Q4_0 weights
/// decoded here (blocks of 32: an fp16 scale d, then 16 bytes whose low
/// nibbles are weights 0-15 and high nibbles 16-31, each (q - 8) * d), so
/// the timed path is known to compute y = x W^T. ggml rounds the
/// activations to Q8_0 blocks (scale amax / 127 in fp16) before the dot:
/// the bound is half a step (plus the scale's rounding) of each block's
/// activations times its weights' absolute sum, and 1e-5 relative slack for
/// fp32 accumulation. Exits naming the worst element if it is exceeded;
/// returns the line reporting the check.
std::string checkGgml(Ggml &ggml, const std::string &buffer) {
  const uint64_t n = 64, k = 512;
  double worst = 0, worstBound = 0;
  for (int64_t m : {1, 3})
    for (int threads : {1, 2}) {
      std::unique_ptr<GgmlMatMul> g = ggml.matMul(buffer, n, k, m, 1, 11, {threads});
      std::vector<float> x = gaussianRows(uint64_t(m), k, 5);
      g->setInput(x.data());
      g->run(0, threads);
      for (int64_t r = 0; r < m; ++r)
        for (uint64_t row = 0; row < n; ++row) {
          const uint8_t *blocks = g->weights() + row * g->rowBytes();
          const float *xr = x.data() + uint64_t(r) * k;
          double dot = 0, bound = 0, magnitude = 0;
          for (uint64_t b = 0; b < k / 32; ++b) {
            const uint8_t *block = blocks + b * 18;
            double d = halfToFloat(uint16_t(block[0] | block[1] << 8));
            double amax = 0, wsum = 0;
            for (int i = 0; i < 32; ++i) {
              int q = i < 16 ? block[2 + i] & 15 : block[2 + i - 16] >> 4;
              double w = (q - 8) * d, xi = xr[b * 32 + uint64_t(i)];
              dot += w * xi;
              magnitude += std::fabs(w * xi);
              wsum += std::fabs(w);
              amax = std::max(amax, std::fabs(xi));
            }
            bound += amax * (0.5 / 127 + 1.0 / 1024) * wsum;
          }
          bound += 1e-5 * magnitude;
          double got = g->output(0)[uint64_t(r) * n + row];
          double error = std::fabs(got - dot);
          if (!(error <= bound))
            die("ggml's Q4_0 product (" + buffer + ") is wrong: " + std::to_string(n) + "x" +
                std::to_string(k) + ", M = " + std::to_string(m) + ", " +
                std::to_string(threads) + " threads, y[" + std::to_string(r) + "][" +
                std::to_string(row) + "] = " + std::to_string(got) + ", the fp64 dot of " +
                "its decoded weights " + std::to_string(dot) + " (bound " +
                std::to_string(bound) + ")");
          if (error / bound > worst / std::max(worstBound, 1e-300)) {
            worst = error;
            worstBound = bound;
          }
        }
    }
  char line[256];
  std::snprintf(line, sizeof line,
                "%s: checked on %llux%llu (M = 1, 3; 1, 2 threads) against an fp64 dot of "
                "its decoded Q4_0 weights, worst error %.3g against a bound of %.3g.",
                buffer.c_str(), (unsigned long long)n, (unsigned long long)k, worst,
                worstBound);
  return line;
}

} // namespace

int main(int argc, char **argv) {
  Bench bench;
  std::vector<std::string> positional;
  std::vector<std::string> only;
  std::string ggmlDir;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc)
      bench.reps = std::atoi(argv[++i]);
    else if (arg == "--dram-factor" && i + 1 < argc)
      bench.dramFactor = std::atof(argv[++i]);
    else if (arg == "--only" && i + 1 < argc)
      only.push_back(argv[++i]);
    else if (arg == "--ggml" && i + 1 < argc)
      ggmlDir = argv[++i];
    else if (arg == "--ggml-buffer" && i + 1 < argc)
      bench.ggmlBuffers.push_back(argv[++i]);
    else
      positional.push_back(arg);
  }
  if (positional.size() < 2 || positional.size() > 3 || bench.reps < 1 ||
      bench.dramFactor <= 0)
    die("usage: cq4p-bench-host DIR LIBRARY [BASELINE] [--reps R] "
        "[--dram-factor F] [--only dram|cache|prefill|transform|orthogonal|threads] "
        "[--ggml DIR [--ggml-buffer plain|NAME]...]");
  bench.dir = positional[0];
  std::filesystem::create_directories(bench.dir);
  for (size_t i = 1; i < positional.size(); ++i) {
    std::unique_ptr<KernelLibrary> library;
    check(KernelLibrary::open(positional[i], library));
    bench.libraries.push_back(std::move(library));
    bench.names.push_back(i == 1 ? "cq4p" : "baseline");
  }
  auto wanted = [&](const char *section) {
    return only.empty() || std::find(only.begin(), only.end(), section) != only.end();
  };
  std::vector<std::string> ggmlChecks;
  if (!ggmlDir.empty()) {
    std::string error;
    bench.ggml = Ggml::load(ggmlDir, error);
    if (!bench.ggml)
      die(error);
    // By default the plain layout and, where the build has it, CPU_REPACK
    // (llama.cpp's choice for Q4_0 on x86 without AMX). AMX only when asked:
    // its tiles need the kernel's permission, and a virtual machine that
    // hides them ends the process on an illegal instruction.
    if (bench.ggmlBuffers.empty()) {
      bench.ggmlBuffers.push_back("plain");
      for (auto &name : bench.ggml->extraBuffers())
        if (name == "CPU_REPACK")
          bench.ggmlBuffers.push_back(name);
    }
    for (auto &buffer : bench.ggmlBuffers)
      ggmlChecks.push_back(checkGgml(*bench.ggml, buffer));
  } else if (!bench.ggmlBuffers.empty()) {
    die("--ggml-buffer needs --ggml DIR");
  }
  std::printf("Medians of %d interleaved repetitions.\n", bench.reps);
  if (bench.ggml) {
    std::printf("\nggml Q4_0: ggml's CPU mul_mat of Q4_0 weights and fp32 activations, "
                "one graph built and planned once per shape, each call one "
                "ggml_graph_compute; the weights row-major in the context (plain) or "
                "stored through the named extra buffer type, which repacks them. ggml's "
                "products:\n\n");
    for (auto &line : ggmlChecks)
      std::printf("- %s\n", line.c_str());
  }
  if (wanted("dram"))
    bench.dram();
  if (wanted("cache"))
    bench.cache();
  if (wanted("prefill"))
    bench.prefill();
  if (wanted("transform"))
    bench.transform();
  if (wanted("orthogonal"))
    bench.orthogonal();
  if (wanted("threads"))
    bench.threads();
  return 0;
}
