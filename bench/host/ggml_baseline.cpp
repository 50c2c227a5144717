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
constexpr int kLogWarn = 3;
constexpr int kLogError = 4;

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
  void *(*cpuReg)();
  void *(*regDevGet)(void *, size_t);
  void *(*regGetProcAddress)(void *, const char *);
  const char *(*bufferTypeName)(void *);
  void *(*allocContextTensors)(void *, void *);
  void (*tensorSet)(void *, const void *, size_t, size_t);
  void (*bufferFree)(void *);
  void (*logSet)(void (*)(int, const char *, void *), void *);
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
  find(ggml->cpu_, cpu, "ggml_backend_cpu_reg", a.cpuReg);
  find(ggml->base_, base, "ggml_backend_reg_dev_get", a.regDevGet);
  find(ggml->base_, base, "ggml_backend_reg_get_proc_address", a.regGetProcAddress);
  find(ggml->base_, base, "ggml_backend_buft_name", a.bufferTypeName);
  find(ggml->base_, base, "ggml_backend_alloc_ctx_tensors_from_buft",
       a.allocContextTensors);
  find(ggml->base_, base, "ggml_backend_tensor_set", a.tensorSet);
  find(ggml->base_, base, "ggml_backend_buffer_free", a.bufferFree);
  find(ggml->base_, base, "ggml_log_set", a.logSet);
  if (!error.empty())
    return nullptr;
  // Warnings and errors only: ggml reports every repacked tensor, one line
  // for each of the hundreds of copies the GEMV from DRAM makes.
  a.logSet(
      [](int level, const char *text, void *) {
        if (level == kLogWarn || level == kLogError)
          std::fputs(text, stderr);
      },
      nullptr);
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

std::vector<std::string> Ggml::extraBuffers() {
  std::vector<std::string> names;
  void *reg = api_->cpuReg();
  auto get = reinterpret_cast<void **(*)(void *)>(
      api_->regGetProcAddress(reg, "ggml_backend_dev_get_extra_bufts"));
  if (get)
    for (void **type = get(api_->regDevGet(reg, 0)); type && *type; ++type)
      names.push_back(api_->bufferTypeName(*type));
  return names;
}

void *Ggml::extraBuffer(const std::string &name) {
  void *reg = api_->cpuReg();
  auto get = reinterpret_cast<void **(*)(void *)>(
      api_->regGetProcAddress(reg, "ggml_backend_dev_get_extra_bufts"));
  std::string known;
  if (get)
    for (void **type = get(api_->regDevGet(reg, 0)); type && *type; ++type) {
      if (name == api_->bufferTypeName(*type))
        return *type;
      known += std::string(" ") + api_->bufferTypeName(*type);
    }
  fail("this ggml build's CPU backend has no buffer type " + name +
       " (it has: plain" + known + ")");
}

std::unique_ptr<GgmlMatMul> Ggml::matMul(const std::string &buffer, uint64_t n,
                                         uint64_t k, int64_t m, size_t copies,
                                         uint32_t seed, const std::vector<int> &threads) {
  if (k % 32 != 0 || copies == 0)
    fail("a Q4_0 product needs K a multiple of 32 and a copy (K = " +
         std::to_string(k) + ", " + std::to_string(copies) + " copies)");
  Api &a = *api_;
  std::unique_ptr<GgmlMatMul> mm(new GgmlMatMul(*this));
  mm->n_ = n;
  mm->k_ = k;
  mm->m_ = m;
  mm->rowBytes_ = a.rowSize(kTypeQ4_0, int64_t(k));
  // Drawn and quantized a block of rows at a time: the fp32 matrix of the
  // largest shape would be 235 MB.
  mm->quantized_.resize(mm->rowBytes_ * n);
  const uint64_t chunk = 256;
  for (uint64_t row = 0; row < n; row += chunk) {
    uint64_t rows = std::min(chunk, n - row);
    std::vector<float> x = test::gaussianRows(rows, k, seed + uint32_t(row / chunk));
    a.quantizeChunk(kTypeQ4_0, x.data(), mm->quantized_.data() + row * mm->rowBytes_,
                    0, int64_t(rows), int64_t(k), nullptr);
  }

  // Plain weights live in the context with everything else; an extra buffer
  // type's in a context of headers only, allocated from that type.
  bool plain = buffer == "plain";
  void *bufferType = plain ? nullptr : extraBuffer(buffer);
  size_t pad = 256;
  size_t weightBytes = plain ? mm->rowBytes_ * n + pad : 0;
  size_t memSize = copies * (weightBytes + sizeof(float) * n * uint64_t(m) +
                             2 * (a.tensorOverhead() + pad) + a.graphOverhead()) +
                   sizeof(float) * k * uint64_t(m) + a.tensorOverhead() + pad;
  mm->context_ = a.init(InitParams{memSize, nullptr, false});
  if (!mm->context_)
    fail("ggml_init failed for " + std::to_string(memSize) + " bytes");
  void *weightContext = mm->context_;
  if (!plain) {
    mm->weightContext_ =
        a.init(InitParams{copies * (a.tensorOverhead() + pad), nullptr, true});
    if (!mm->weightContext_)
      fail("ggml_init failed for the weights' headers");
    weightContext = mm->weightContext_;
  }
  std::vector<void *> weights;
  for (size_t c = 0; c < copies; ++c)
    weights.push_back(a.newTensor2d(weightContext, kTypeQ4_0, int64_t(k), int64_t(n)));
  if (!plain) {
    mm->weightBuffer_ = a.allocContextTensors(mm->weightContext_, bufferType);
    if (!mm->weightBuffer_)
      fail("cannot allocate " + std::to_string(copies) + " copies of " +
           std::to_string(n) + "x" + std::to_string(k) + " Q4_0 weights in " + buffer);
  }
  mm->input_ = a.newTensor2d(mm->context_, kTypeF32, int64_t(k), m);
  for (void *w : weights) {
    if (plain)
      std::memcpy(a.getData(w), mm->quantized_.data(), mm->quantized_.size());
    else
      a.tensorSet(w, mm->quantized_.data(), 0, mm->quantized_.size());
    void *y = a.mulMat(mm->context_, w, mm->input_);
    void *graph = a.newGraph(mm->context_);
    a.buildForwardExpand(graph, y);
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
  if (weightBuffer_)
    ggml_.api_->bufferFree(weightBuffer_);
  if (weightContext_)
    ggml_.api_->free(weightContext_);
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


} // namespace cq4p::bench
