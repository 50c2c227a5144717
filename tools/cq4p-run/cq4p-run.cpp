//===- cq4p-run.cpp - runs a bundle's tensors through compiled kernels ----===//
//
//   cq4p-run --bundle B --library libmodel.so [--tensor NAME] [--rows M]
//            [--threads T] [--input x.f32 --output y.f32] [--repeat R]
//            [--backend auto|neon|sme2] [--sme2-library libmodel-sme2.so]
//            [--sme-workers N]
//
// Maps the bundle (zero-copy), opens the kernel library (checked against
// the CPU), binds every packed-panel CQ4 tensor to its kernels (a linear
// layer; the token embedding to its embedding kernel) and runs it: on the
// rows of --input (raw little-endian fp32, [M][K]; embeddings: int64 ids)
// writing --output, or on deterministic random activations, printing the
// time per call. Any refusal (a tensor without kernels, a library for
// another CPU, a file that does not validate) is one line on stderr and
// exit status 2.
//
// --library is the NEON library (the host library off AArch64): it always
// quantizes and runs the matmuls of the threads that are not SME workers.
// With the sme2 backend, the SME2 library (--sme2-library) is attached to
// every linear layer and its matmul kernels run on the first --sme-workers
// threads (Linear.h has the rule). `auto` takes SME2 where this CPU runs
// it (KernelLibrary::openForBackend) and NEON otherwise; forcing sme2 where
// the CPU cannot run it is a refusal. The backend chosen, and why SME2 was
// declined, go to stderr before the table.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/CpuFeatures.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Linear.h"
#include "cq4p/runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace cq4p::runtime;

namespace {

struct Options {
  std::string bundle, library, sme2Library, tensor, input, output;
  Backend backend = Backend::Auto;
  int64_t rows = 1;
  int threads = 1;
  int repeat = 5;
  int smeWorkers = LinearLayer::kDefaultSmeWorkers;
};

int usage(const char *message) {
  std::fprintf(stderr,
               "cq4p-run: %s\nusage: cq4p-run --bundle DIR --library LIB "
               "[--tensor NAME] [--rows M] [--threads T] [--repeat R] "
               "[--input FILE --output FILE] [--backend auto|neon|sme2] "
               "[--sme2-library LIB] [--sme-workers N]\n",
               message);
  return 2;
}

bool parseBackend(const std::string &text, Backend &out) {
  for (Backend backend : {Backend::Auto, Backend::Neon, Backend::Sme2})
    if (text == backendName(backend)) {
      out = backend;
      return true;
    }
  return false;
}

int refuse(const std::string &message) {
  std::fprintf(stderr, "cq4p-run: error: %s\n", message.c_str());
  return 2;
}

bool parseInt(const char *text, long long low, long long high, long long &out) {
  char *end = nullptr;
  errno = 0;
  out = std::strtoll(text, &end, 10);
  return errno == 0 && end && *end == '\0' && end != text && out >= low &&
         out <= high;
}

template <typename T>
bool readRaw(const std::string &path, size_t count, std::vector<T> &out,
             std::string &error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = path + ": cannot open";
    return false;
  }
  uint64_t size = uint64_t(in.tellg());
  if (size != count * sizeof(T)) {
    error = path + ": expected " + std::to_string(count * sizeof(T)) +
            " bytes (" + std::to_string(count) + " values), found " +
            std::to_string(size);
    return false;
  }
  out.resize(count);
  in.seekg(0);
  in.read(reinterpret_cast<char *>(out.data()), std::streamsize(size));
  return bool(in);
}

bool isEmbedding(const std::string &name) {
  return name.find("embed_tokens") != std::string::npos;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char * {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    long long number = 0;
    if (arg == "--bundle" || arg == "--library" || arg == "--tensor" ||
        arg == "--input" || arg == "--output" || arg == "--sme2-library") {
      const char *text = value();
      if (!text)
        return usage((arg + " needs a value").c_str());
      (arg == "--bundle"         ? options.bundle
       : arg == "--library"      ? options.library
       : arg == "--sme2-library" ? options.sme2Library
       : arg == "--tensor"       ? options.tensor
       : arg == "--input"        ? options.input
                                 : options.output) = text;
    } else if (arg == "--backend") {
      const char *text = value();
      if (!text || !parseBackend(text, options.backend))
        return usage("--backend must be auto, neon or sme2");
    } else if (arg == "--sme-workers") {
      const char *text = value();
      if (!text || !parseInt(text, 0, ThreadPool::kMaxThreads, number))
        return usage("--sme-workers must be an integer in [0, 1024] (0 "
                     "disables the SME workers)");
      options.smeWorkers = int(number);
    } else if (arg == "--rows") {
      const char *text = value();
      if (!text || !parseInt(text, 1, 1 << 20, number))
        return usage("--rows must be an integer in [1, 1048576]");
      options.rows = number;
    } else if (arg == "--threads") {
      const char *text = value();
      if (!text || !parseInt(text, 1, ThreadPool::kMaxThreads, number))
        return usage("--threads must be an integer in [1, 1024]");
      options.threads = int(number);
    } else if (arg == "--repeat") {
      const char *text = value();
      if (!text || !parseInt(text, 1, 1000, number))
        return usage("--repeat must be an integer in [1, 1000]");
      options.repeat = int(number);
    } else {
      return usage(("unknown argument '" + arg + "'").c_str());
    }
  }
  if (options.bundle.empty() || options.library.empty())
    return usage("--bundle and --library are required");
  if ((!options.input.empty() || !options.output.empty()) &&
      options.tensor.empty())
    return usage("--input and --output need --tensor");

  std::unique_ptr<Bundle> bundle;
  if (Status status = Bundle::open(options.bundle, bundle); !status)
    return refuse(status.message());
  if (options.backend == Backend::Sme2 && options.sme2Library.empty())
    return usage("--backend sme2 needs --sme2-library");

  // The NEON library always; the SME2 one as well when it is chosen.
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> library, sme2Library;
  Backend chosen = Backend::Neon;
  std::string declined;
  if (Status status = KernelLibrary::openForBackend(
          options.backend, options.library, options.sme2Library, cpu,
          sme2Library, chosen, &declined);
      !status)
    return refuse(std::string("backend ") + backendName(options.backend) +
                  ": " + status.message());
  if (chosen == Backend::Neon)
    library = std::move(sme2Library);
  else if (Status status = KernelLibrary::open(options.library, cpu, library);
           !status)
    return refuse(status.message());

  int smeThreads =
      chosen == Backend::Sme2
          ? LinearLayer::smeThreadCount(options.smeWorkers, options.threads)
          : 0;
  if (chosen == Backend::Sme2 && smeThreads == 0)
    std::fprintf(stderr, "cq4p-run: backend sme2 with --sme-workers 0: NEON "
                         "on every thread\n");
  else if (chosen == Backend::Sme2)
    std::fprintf(stderr,
                 "cq4p-run: backend sme2: SME2 matmuls on %d of %d thread(s), "
                 "NEON matmuls on %d; quantizing on NEON\n",
                 smeThreads, options.threads, options.threads - smeThreads);
  else if (options.backend == Backend::Neon)
    std::fprintf(stderr, "cq4p-run: backend neon (as asked)\n");
  else if (options.sme2Library.empty())
    std::fprintf(stderr, "cq4p-run: backend neon: no --sme2-library given\n");
  else
    std::fprintf(stderr, "cq4p-run: backend neon: SME2 declined: %s\n",
                 declined.c_str());
  std::unique_ptr<ThreadPool> pool;
  if (Status status = ThreadPool::create(options.threads, pool); !status)
    return refuse(status.message());

  std::vector<const BundleTensor *> selected;
  for (const BundleTensor &tensor : bundle->tensors()) {
    bool panels = tensor.file->layout() == CQ4P_LAYOUT_PANELS;
    if (options.tensor.empty() ? panels : tensor.name == options.tensor)
      selected.push_back(&tensor);
  }
  if (selected.empty())
    return refuse(options.tensor.empty()
                      ? options.bundle + ": no packed-panel CQ4 tensor"
                      : options.bundle + ": no tensor '" + options.tensor + "'");

  std::printf("%-48s %-12s %5s %6s %12s %10s\n", "tensor", "N x K", "gs",
              "rows", "ms/call", "SME2 tasks");
  ActivationScratch scratch;
  std::mt19937 rng(1);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  for (const BundleTensor *tensor : selected) {
    const TensorFile &file = *tensor->file;
    uint64_t n = file.n(), k = file.k();
    std::vector<float> out;
    // The last call's phase-2 tasks run by SME2, of all (linear layers).
    std::string sme2Tasks = "-";
    LinearRunTrace trace;
    auto timeCalls = [&](auto &&call) -> Status {
      double best = 1e30;
      for (int r = 0; r < options.repeat; ++r) {
        auto start = std::chrono::steady_clock::now();
        if (Status status = call(); !status)
          return status;
        best = std::min(best, secondsSince(start));
      }
      if (!trace.matmulTasks.empty())
        sme2Tasks = std::to_string(trace.tasksOn(Backend::Sme2)) + "/" +
                    std::to_string(trace.matmulTasks.size());
      std::printf("%-48s %-12s %5u %6lld %12.3f %10s\n", tensor->name.c_str(),
                  (std::to_string(n) + "x" + std::to_string(k)).c_str(),
                  file.info().group_size, (long long)options.rows, best * 1e3,
                  sme2Tasks.c_str());
      return Status::ok();
    };
    Status status;
    if (isEmbedding(tensor->name)) {
      std::unique_ptr<EmbeddingLayer> layer;
      if (status = EmbeddingLayer::bind(*library, file, layer); !status)
        return refuse(status.message());
      std::vector<int64_t> ids(size_t(options.rows));
      std::string error;
      if (!options.input.empty()) {
        if (!readRaw(options.input, ids.size(), ids, error))
          return refuse(error);
      } else {
        for (int64_t &id : ids)
          id = int64_t(rng() % n);
      }
      out.assign(ids.size() * k, 0.0f);
      status = timeCalls([&] {
        return layer->run(ids.data(), out.data(), int64_t(ids.size()));
      });
    } else {
      std::unique_ptr<LinearLayer> layer;
      if (status = LinearLayer::bind(*library, file, layer); !status)
        return refuse(status.message());
      if (sme2Library != nullptr) {
        if (status = layer->attachSme2(*sme2Library); !status)
          return refuse(status.message());
      }
      if (status = layer->setSmeWorkers(options.smeWorkers); !status)
        return refuse(status.message());
      std::vector<float> x;
      std::string error;
      if (!options.input.empty()) {
        if (!readRaw(options.input, size_t(options.rows) * k, x, error))
          return refuse(error);
      } else {
        x.resize(size_t(options.rows) * k);
        for (float &v : x)
          v = gaussian(rng);
      }
      out.assign(size_t(options.rows) * n, 0.0f);
      status = timeCalls([&] {
        return layer->run(*pool, x.data(), out.data(), options.rows, scratch,
                          &trace);
      });
    }
    if (!status)
      return refuse(status.message());
    if (!options.output.empty()) {
      std::ofstream stream(options.output, std::ios::binary);
      stream.write(reinterpret_cast<const char *>(out.data()),
                   std::streamsize(out.size() * sizeof(float)));
      if (!stream)
        return refuse(options.output + ": cannot write");
    }
  }
  return 0;
}
