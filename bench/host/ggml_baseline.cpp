//===- ggml_baseline.cpp - ggml's Q4_0 mat-mul, loaded at run time --------===//

#include "ggml_baseline.h"

#include "LayerFiles.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace cq4p::bench {

namespace {

// The slice of ggml's C ABI called here, declared by hand so that cq4p
// builds without ggml's headers. Tensors, graphs, contexts and threadpools
// stay opaque; enums are passed as int.
constexpr int kTypeF32 = 0;
constexpr int kTypeQ4_0 = 2;

struct InitParams {
  size_t memSize;
  void *memBuffer;
  bool noAlloc;
};

// ggml_graph_plan returns its plan by value and ggml_threadpool_params_default
// its parameters: both are large enough to come back through a caller-supplied
// buffer, so these are their known leading fields padded well past ggml's size
// (fields ggml appends land in the padding). Only workSize and workData are
// touched here.
struct PlanStorage {
  size_t workSize;
  uint8_t *workData;
  alignas(16) unsigned char rest[1024];
};

struct ThreadpoolParamsStorage {
  alignas(16) unsigned char bytes[8192];
};

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "cq4p-bench-host: ggml: %s\n", message.c_str());
  std::exit(1);
}

} // namespace

struct Ggml::Api {
  void *(*init)(InitParams);
  void (*free)(void *);
  void *(*newTensor2d)(void *, int, int64_t, int64_t);
  void *(*getData)(const void *);
  size_t (*rowSize)(int, int64_t);
  size_t (*tensorOverhead)();
  size_t (*graphOverhead)();
  size_t (*quantizeChunk)(int, const float *, void *, int64_t, int64_t, int64_t,
                          const float *);
  void *(*mulMat)(void *, void *, void *);
  void *(*newGraph)(void *);
  void (*buildForwardExpand)(void *, void *);
  ThreadpoolParamsStorage (*threadpoolParamsDefault)(int);
  void *(*threadpoolNew)(ThreadpoolParamsStorage *);
  void (*threadpoolFree)(void *);
  PlanStorage (*graphPlan)(const void *, int, void *);
  int (*graphCompute)(void *, PlanStorage *);
};

struct GgmlMatMul::Plan {
  PlanStorage plan;
  std::vector<uint8_t> work;
};

Ggml::Ggml() : api_(std::make_unique<Api>()) {}

Ggml::~Ggml() {
  for (auto &[threads, pool] : threadpools_)
    api_->threadpoolFree(pool);
  // The libraries stay loaded: libgomp's worker threads, started by ggml,
  // run its code until the process exits.
}

std::unique_ptr<Ggml> Ggml::load(const std::string &dir, std::string &error) {
  std::unique_ptr<Ggml> ggml(new Ggml());
  auto open = [&](const char *name, void *&handle) {
    std::string path = dir + "/" + name;
    // RTLD_GLOBAL: libggml-cpu.so resolves libggml-base.so's symbols from it.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle)
      error = "cannot load " + path + ": " + dlerror() +
              " (--ggml names the directory of a ggml build's shared libraries)";
    return handle != nullptr;
  };
  if (!open("libggml-base.so", ggml->base_) || !open("libggml-cpu.so", ggml->cpu_))
    return nullptr;
  auto find = [&](void *handle, const char *library, const char *name, auto &fn) {
    if (!error.empty())
      return;
    void *symbol = dlsym(handle, name);
    if (!symbol)
      error = dir + "/" + library + " has no symbol " + name +
              " (a ggml build older or newer than this harness knows)";
    else
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
  };
  Api &a = *ggml->api_;
  const char *base = "libggml-base.so", *cpu = "libggml-cpu.so";
  find(ggml->base_, base, "ggml_init", a.init);
  find(ggml->base_, base, "ggml_free", a.free);
  find(ggml->base_, base, "ggml_new_tensor_2d", a.newTensor2d);
  find(ggml->base_, base, "ggml_get_data", a.getData);
  find(ggml->base_, base, "ggml_row_size", a.rowSize);
  find(ggml->base_, base, "ggml_tensor_overhead", a.tensorOverhead);
  find(ggml->base_, base, "ggml_graph_overhead", a.graphOverhead);
  find(ggml->base_, base, "ggml_quantize_chunk", a.quantizeChunk);
  find(ggml->base_, base, "ggml_mul_mat", a.mulMat);
  find(ggml->base_, base, "ggml_new_graph", a.newGraph);
  find(ggml->base_, base, "ggml_build_forward_expand", a.buildForwardExpand);
  find(ggml->base_, base, "ggml_threadpool_params_default", a.threadpoolParamsDefault);
  find(ggml->cpu_, cpu, "ggml_threadpool_new", a.threadpoolNew);
  find(ggml->cpu_, cpu, "ggml_threadpool_free", a.threadpoolFree);
  find(ggml->cpu_, cpu, "ggml_graph_plan", a.graphPlan);
  find(ggml->cpu_, cpu, "ggml_graph_compute", a.graphCompute);
  if (!error.empty())
    return nullptr;
  return ggml;
}

void *Ggml::threadpool(int threads) {
  void *&pool = threadpools_[threads];
  if (!pool) {
    ThreadpoolParamsStorage params = api_->threadpoolParamsDefault(threads);
    pool = api_->threadpoolNew(&params);
    if (!pool)
      fail("ggml_threadpool_new failed for " + std::to_string(threads) + " threads");
  }
  return pool;
}

std::unique_ptr<GgmlMatMul> Ggml::matMul(uint64_t n, uint64_t k, int64_t m,
                                         size_t copies, uint32_t seed,
                                         const std::vector<int> &threads) {
  if (k % 32 != 0 || copies == 0)
    fail("a Q4_0 product needs K a multiple of 32 and a copy (K = " +
         std::to_string(k) + ", " + std::to_string(copies) + " copies)");
  Api &a = *api_;
  std::unique_ptr<GgmlMatMul> mm(new GgmlMatMul(*this));
  mm->n_ = n;
  mm->k_ = k;
  mm->m_ = m;
  mm->rowBytes_ = a.rowSize(kTypeQ4_0, int64_t(k));
  // Each tensor's bytes and header, padded; the graphs' headers.
  size_t pad = 256;
  size_t perCopy = mm->rowBytes_ * n + sizeof(float) * n * uint64_t(m) +
                   2 * (a.tensorOverhead() + pad) + a.graphOverhead();
  size_t memSize = copies * perCopy + sizeof(float) * k * uint64_t(m) +
                   a.tensorOverhead() + pad;
  mm->context_ = a.init(InitParams{memSize, nullptr, false});
  if (!mm->context_)
    fail("ggml_init failed for " + std::to_string(memSize) + " bytes");
  mm->input_ = a.newTensor2d(mm->context_, kTypeF32, int64_t(k), m);
  for (size_t c = 0; c < copies; ++c) {
    void *w = a.newTensor2d(mm->context_, kTypeQ4_0, int64_t(k), int64_t(n));
    auto *bytes = static_cast<uint8_t *>(a.getData(w));
    if (c == 0) {
      // Drawn and quantized a block of rows at a time: the fp32 matrix of
      // the largest shape would be 235 MB.
      const uint64_t chunk = 256;
      for (uint64_t row = 0; row < n; row += chunk) {
        uint64_t rows = std::min(chunk, n - row);
        std::vector<float> x = test::gaussianRows(rows, k, seed + uint32_t(row / chunk));
        a.quantizeChunk(kTypeQ4_0, x.data(), bytes + row * mm->rowBytes_, 0,
                        int64_t(rows), int64_t(k), nullptr);
      }
    } else {
      std::memcpy(bytes, mm->weights(), mm->rowBytes_ * n);
    }
    void *y = a.mulMat(mm->context_, w, mm->input_);
    void *graph = a.newGraph(mm->context_);
    a.buildForwardExpand(graph, y);
    mm->weights_.push_back(w);
    mm->outputs_.push_back(y);
    mm->graphs_.push_back(graph);
  }
  // Every copy's graph is the same computation on other weights: one plan
  // per thread count serves them all.
  for (int t : threads) {
    auto plan = std::make_unique<GgmlMatMul::Plan>();
    plan->plan = a.graphPlan(mm->graphs_[0], t, threadpool(t));
    plan->work.resize(plan->plan.workSize);
    plan->plan.workData = plan->work.empty() ? nullptr : plan->work.data();
    mm->plans_[t] = std::move(plan);
  }
  return mm;
}

GgmlMatMul::GgmlMatMul(Ggml &ggml) : ggml_(ggml) {}

GgmlMatMul::~GgmlMatMul() {
  if (context_)
    ggml_.api_->free(context_);
}

void GgmlMatMul::setInput(const float *x) {
  std::memcpy(ggml_.api_->getData(input_), x, sizeof(float) * k_ * uint64_t(m_));
}

void GgmlMatMul::run(size_t copy, int threads) {
  auto plan = plans_.find(threads);
  if (plan == plans_.end())
    fail("no plan for " + std::to_string(threads) + " threads");
  int status = ggml_.api_->graphCompute(graphs_[copy], &plan->second->plan);
  if (status != 0)
    fail("ggml_graph_compute returned status " + std::to_string(status) + " on " +
         std::to_string(n_) + "x" + std::to_string(k_) + ", M = " + std::to_string(m_));
}

const float *GgmlMatMul::output(size_t copy) const {
  return static_cast<const float *>(ggml_.api_->getData(outputs_[copy]));
}

const uint8_t *GgmlMatMul::weights() const {
  return static_cast<const uint8_t *>(ggml_.api_->getData(weights_[0]));
}

} // namespace cq4p::bench
