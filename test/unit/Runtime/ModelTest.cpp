//===- ModelTest.cpp - whole models: binding, steps, threads, sampling ----===//
//
// The Model runs the toy model of FakeModel.c over a bundle written here.
// The toy's logits depend on every token so far and its position, so the
// tests can check the runtime against an independent evaluation of the toy
// (toyLogits) and prefill in chunks against decoding token by token, bit
// for bit.
//
//===----------------------------------------------------------------------===//

#include "Refusals.h"
#include "TempDir.h"
#include "TestFiles.h"
#include "ToyBundle.h"

#include "CApiHandles.h"

#include "cq4p/cq4p.h"
#include "cq4p/runtime/Model.h"

#include "fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <alloca.h>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <new>
#include <pthread.h>
#include <random>
#include <thread>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CQ4P_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CQ4P_TEST_SANITIZED 1
#endif

// Counts every allocation through operator new in this test binary, so a
// test can see that a decode step allocates nothing. Not under the
// sanitizers, which own operator new there.
#ifndef CQ4P_TEST_SANITIZED
namespace {
std::atomic<int64_t> allocations{0};
} // namespace

void *operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void *memory = std::malloc(size ? size : 1))
    return memory;
  std::abort(); // built without exceptions: nothing to throw
}
void operator delete(void *memory) noexcept { std::free(memory); }
void operator delete(void *memory, std::size_t) noexcept { std::free(memory); }
#endif

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

/// The fake model library's counters (FakeModel.c), through its own handle:
/// dlopen of a loaded path returns the same module.
class FakeModelModule {
public:
  explicit FakeModelModule(const char *path)
      : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {}
  ~FakeModelModule() {
    if (handle_ != nullptr)
      dlclose(handle_);
  }
  bool loaded() const { return counter("cq4p_fake_model_violations"); }
  int64_t prefillSteps() const { return load("cq4p_fake_model_steps", 0); }
  int64_t decodeSteps() const { return load("cq4p_fake_model_steps", 1); }
  int64_t prefillStepsOf(int64_t rows) const {
    return load("cq4p_fake_model_rows", rows);
  }
  int64_t ranges() const { return load("cq4p_fake_model_ranges", 0); }
  int64_t violations() const { return load("cq4p_fake_model_violations", 0); }

private:
  int64_t *counter(const char *name) const {
    return handle_ ? static_cast<int64_t *>(dlsym(handle_, name)) : nullptr;
  }
  int64_t load(const char *name, int64_t index) const {
    int64_t *values = counter(name);
    return values ? __atomic_load_n(&values[index], __ATOMIC_RELAXED) : -1;
  }
  void *handle_;
};

/// The toy evaluated independently of the runtime and the library: the
/// logits after the tokens `ids` (positions 0..), as FakeModel.c defines
/// them.
std::vector<float> toyLogits(const CqTensor &head,
                             const std::vector<int64_t> &ids) {
  std::vector<float> embed = embedValues(kVocab * kKvWidth);
  int64_t count = int64_t(ids.size());
  std::vector<float> keys(kLayers * count * kKvWidth),
      values(kLayers * count * kKvWidth);
  for (int64_t l = 0; l < kLayers; ++l)
    for (int64_t p = 0; p < count; ++p)
      for (int64_t w = 0; w < kKvWidth; ++w) {
        // fp16File stores 0, 1, 2, ...: scale[w] = w.
        float key = embed[ids[p] * kKvWidth + w] * float(w) +
                    float((l + 1) * p);
        keys[(l * count + p) * kKvWidth + w] = key;
        values[(l * count + p) * kKvWidth + w] = key + float(w + 1);
      }
  std::vector<float> logits(kVocab);
  for (int64_t v = 0; v < kVocab; ++v) {
    int64_t acc = 0;
    for (int64_t l = 0; l < kLayers; ++l)
      for (int64_t j = 0; j < count; ++j)
        for (int64_t w = 0; w < kKvWidth; ++w) {
          // A pre-scaled codebook: cb_i8 holds the levels themselves.
          int64_t coef = int64_t(toFloat(head.codebook[head.indices[v * kHeadK + w]]));
          acc += int64_t(keys[(l * count + j) * kKvWidth + w]) * coef * (j + 1) +
                 int64_t(values[(l * count + j) * kKvWidth + w]);
        }
    logits[v] = float((acc % 1009 + 1009) % 1009) / 64.0f;
  }
  return logits;
}

std::vector<int64_t> tokenIds(int64_t count, int64_t seed = 3) {
  std::vector<int64_t> ids(count);
  for (int64_t i = 0; i < count; ++i)
    ids[i] = (seed + i * 29 + i * i * 5) % kVocab;
  return ids;
}

class ModelTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(module.loaded());
    Status status = toy.open(bundle);
    ASSERT_TRUE(status) << status.message();
    status = KernelLibrary::open(CQ4P_FAKE_MODEL_PATH, library);
    ASSERT_TRUE(status) << status.message();
  }
  void TearDown() override { EXPECT_EQ(module.violations(), violationsBefore); }

  std::unique_ptr<Model> open(int threads = 1, int64_t context = 0) {
    ModelOptions options;
    options.threads = threads;
    options.context = context;
    std::unique_ptr<Model> model;
    Status status = Model::open(*bundle, *library, options, model);
    EXPECT_TRUE(status) << status.message();
    return model;
  }

  FakeModelModule module{CQ4P_FAKE_MODEL_PATH};
  int64_t violationsBefore = module.violations();
  ToyBundle toy;
  std::unique_ptr<Bundle> bundle;
  std::unique_ptr<KernelLibrary> library;
};

TEST_F(ModelTest, OpensWithTheLibrarysShapeAndTheBundlesContext) {
  std::unique_ptr<Model> model = open();
  ASSERT_TRUE(model);
  EXPECT_EQ(model->vocab(), kVocab);
  EXPECT_EQ(model->prefillChunk(), kChunk);
  // The config's max_position_embeddings (512) is below the default.
  EXPECT_EQ(model->context(), 512);
  EXPECT_EQ(model->kvCacheBytes(), uint64_t(kLayers * 2 * 512 * kKvWidth * 4));
  EXPECT_EQ(model->position(), 0);
  EXPECT_EQ(model->pool().threadCount(), 1);

  toy.config = "";
  ASSERT_TRUE(toy.open(bundle));
  model = open();
  EXPECT_EQ(model->context(), Model::kDefaultContext);
  model = open(1, 40);
  EXPECT_EQ(model->context(), 40);
}

TEST_F(ModelTest, PrefillMatchesTheToyAndTokenByTokenDecode) {
  std::unique_ptr<Model> chunked = open(1, 64), stepped = open(1, 64);
  for (int64_t length : {int64_t(1), kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5}) {
    SCOPED_TRACE("length " + std::to_string(length));
    std::vector<int64_t> ids = tokenIds(length, length);
    std::vector<float> prefilled(kVocab), decoded(kVocab);
    int64_t prefillSteps = module.prefillSteps(), decodeSteps = module.decodeSteps();
    int64_t fullChunks = module.prefillStepsOf(kChunk);

    ASSERT_TRUE(chunked->reset());
    Status status = chunked->prefill(ids.data(), length, prefilled.data());
    ASSERT_TRUE(status) << status.message();
    EXPECT_EQ(chunked->position(), length);
    // Full chunks, then one step for the rest.
    EXPECT_EQ(module.prefillSteps() - prefillSteps, (length + kChunk - 1) / kChunk);
    EXPECT_EQ(module.prefillStepsOf(kChunk) - fullChunks, length / kChunk);
    EXPECT_EQ(module.decodeSteps(), decodeSteps);

    ASSERT_TRUE(stepped->reset());
    for (int64_t id : ids)
      ASSERT_TRUE(stepped->decode(id, decoded.data()));
    EXPECT_EQ(stepped->position(), length);
    EXPECT_EQ(module.decodeSteps() - decodeSteps, length);

    EXPECT_EQ(prefilled, decoded);
    EXPECT_EQ(prefilled, toyLogits(toy.head, ids));
    EXPECT_EQ(std::vector<float>(chunked->logits(), chunked->logits() + kVocab),
              prefilled);
  }
}

TEST_F(ModelTest, PrefillContinuesAtThePosition) {
  std::unique_ptr<Model> model = open(1, 64);
  std::vector<int64_t> ids = tokenIds(14);
  ASSERT_TRUE(model->prefill(ids.data(), 5));
  ASSERT_TRUE(model->decode(ids[5]));
  ASSERT_TRUE(model->prefill(ids.data() + 6, 7));
  std::vector<float> logits(kVocab);
  ASSERT_TRUE(model->decode(ids[13], logits.data()));
  EXPECT_EQ(model->position(), 14);
  EXPECT_EQ(logits, toyLogits(toy.head, ids));
  // A prefill without somewhere to put the logits still computes them.
  ASSERT_TRUE(model->reset());
  ASSERT_TRUE(model->prefill(ids.data(), 14, nullptr));
  EXPECT_EQ(std::vector<float>(model->logits(), model->logits() + kVocab), logits);
}

TEST_F(ModelTest, ThreadCountsGiveIdenticalLogits) {
  std::vector<int64_t> ids = tokenIds(3 * kChunk + 5);
  std::vector<float> expected = toyLogits(toy.head, tokenIds(3 * kChunk + 8));
  for (int threads = 1; threads <= 3; ++threads) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::unique_ptr<Model> model = open(threads, 64);
    int64_t ranges = module.ranges();
    ASSERT_TRUE(model->prefill(ids.data(), int64_t(ids.size())));
    std::vector<float> logits(kVocab);
    std::vector<int64_t> all = tokenIds(3 * kChunk + 8);
    for (size_t i = ids.size(); i < all.size(); ++i)
      ASSERT_TRUE(model->decode(all[i], logits.data()));
    EXPECT_EQ(logits, expected);
    // Three parallel regions a step; with one thread each is one range.
    int64_t steps = 5 + 3;
    if (threads == 1)
      EXPECT_EQ(module.ranges() - ranges, 3 * steps);
    else
      EXPECT_GT(module.ranges() - ranges, 3 * steps);
  }
}

TEST_F(ModelTest, TheFakeModelNoticesABrokenContract) {
  // The checks the other tests rely on are live: a step the runtime must
  // never make (more rows than the chunk, past the context) is counted.
  std::unique_ptr<Model> model = open(1, 8);
  std::vector<int64_t> ids = tokenIds(kChunk + 1);
  std::vector<float> logits(kVocab);
  cq4p_step_args args = {};
  args.ids = ids.data();
  args.logits = logits.data();
  args.rows = kChunk + 1;
  args.context = 8;
  library->model()->prefill(&args);
  args.rows = 1;
  args.position = 8;
  library->model()->decode(&args);
  // Each: its row or position check, the null pointers, and the refusal
  // to run.
  EXPECT_EQ(module.violations() - violationsBefore, 6);
  violationsBefore = module.violations();
}

/// Records the ranges parallelFor hands a task (FakeModel-free).
struct RangeLog {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> covered[200] = {};
  std::atomic<int64_t> empty{0};
};

void logRange(const cq4p_step_args *args, int64_t begin, int64_t end) {
  auto *log = static_cast<RangeLog *>(args->workspace);
  log->calls.fetch_add(1);
  if (begin >= end)
    log->empty.fetch_add(1);
  for (int64_t i = begin; i < end; ++i)
    log->covered[i].fetch_add(1);
}

TEST(ModelParallelFor, SplitsIntoNonEmptyRangesCoveringEveryItemOnce) {
  // Prefill rows: 4 ranges a thread; one decode row: 16.
  EXPECT_EQ(Model::parallelRanges(0, 4, 8), 0);
  EXPECT_EQ(Model::parallelRanges(1, 4, 8), 1);
  EXPECT_EQ(Model::parallelRanges(100, 1, 8), 1);
  EXPECT_EQ(Model::parallelRanges(5, 2, 8), 5);
  EXPECT_EQ(Model::parallelRanges(100, 3, 8), 12);
  EXPECT_EQ(Model::parallelRanges(100, 3, 1), 48);
  EXPECT_EQ(Model::parallelRanges(100, 1, 1), 1);
  EXPECT_EQ(Model::parallelRanges(20, 2, 1), 20);
  for (int threads = 1; threads <= 4; ++threads) {
    std::unique_ptr<ThreadPool> pool;
    ASSERT_TRUE(ThreadPool::create(threads, pool));
    for (int64_t rows : {1, 8})
    for (int64_t count : {0, 1, 2, 3, 7, 8, 9, 31, 100, 200}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " +
                   std::to_string(count) + " items, " + std::to_string(rows) +
                   " rows");
      RangeLog log;
      cq4p_step_args args = {};
      args.workspace = &log;
      args.rows = rows;
      Model::parallelFor(pool.get(), logRange, &args, count);
      EXPECT_EQ(log.calls.load(), Model::parallelRanges(count, threads, rows));
      EXPECT_EQ(log.empty.load(), 0);
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(log.covered[i].load(), 1) << "item " << i;
    }
  }
}

TEST_F(ModelTest, RefusesALibraryWithoutModelSteps) {
  std::unique_ptr<KernelLibrary> kernels;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, kernels));
  std::unique_ptr<Model> model;
  Status status = Model::open(*bundle, *kernels, ModelOptions(), model);
  EXPECT_EQ(status.code(), CQ4P_ERROR_NOT_FOUND);
  EXPECT_EQ(status.message(), std::string(CQ4P_FAKE_KERNELS_PATH) +
                                  ": has no model steps (compiled from a "
                                  "kernel-only model.mlir?)");
  EXPECT_EQ(model, nullptr);
}

TEST_F(ModelTest, RefusesABundleOfAnotherDigest) {
  std::unique_ptr<Model> model;
  toy.digest = "\"model_digest\": \"f00d\", ";
  ASSERT_TRUE(toy.open(bundle));
  EXPECT_REFUSED(Model::open(*bundle, *library, ModelOptions(), model),
                 CQ4P_ERROR_UNSUPPORTED,
                 "library built for bundle digest toy-digest-1, this "
                 "bundle's is f00d");
  toy.digest = "";
  ASSERT_TRUE(toy.open(bundle));
  EXPECT_REFUSED(Model::open(*bundle, *library, ModelOptions(), model),
                 CQ4P_ERROR_UNSUPPORTED,
                 "library built for bundle digest toy-digest-1, this bundle "
                 "has none (no model_digest in its manifest.json)");
  EXPECT_EQ(model, nullptr);
  // A library with no digest takes any bundle.
  std::unique_ptr<KernelLibrary> any;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_MODEL_ANY_DIGEST_PATH, any));
  EXPECT_TRUE(Model::open(*bundle, *any, ModelOptions(), model));
  toy.digest = "\"model_digest\": 7, ";
  EXPECT_REFUSED(toy.open(bundle), CQ4P_ERROR_FORMAT,
                 "model_digest: expected a non-empty string");
}

TEST_F(ModelTest, RefusesAnotherPrefillChunk) {
  ModelOptions options;
  options.expectedPrefillChunk = 8;
  std::unique_ptr<Model> model;
  EXPECT_REFUSED(Model::open(*bundle, *library, options, model),
                 CQ4P_ERROR_UNSUPPORTED,
                 "prefill chunk: expected 8 (as asked), found 4 (the "
                 "library's)");
  options.expectedPrefillChunk = kChunk;
  EXPECT_TRUE(Model::open(*bundle, *library, options, model));
  options.expectedPrefillChunk = -1;
  EXPECT_REFUSED(Model::open(*bundle, *library, options, model),
                 CQ4P_ERROR_ARGUMENT, "prefill chunk: expected >= 0");
}

TEST_F(ModelTest, RefusesBadOptions) {
  ModelOptions options;
  std::unique_ptr<Model> model;
  options.threads = 0;
  EXPECT_REFUSED(Model::open(*bundle, *library, options, model),
                 CQ4P_ERROR_ARGUMENT, "thread count: expected 1..1024",
                 "found 0");
  options.threads = 1;
  options.context = -5;
  EXPECT_REFUSED(Model::open(*bundle, *library, options, model),
                 CQ4P_ERROR_ARGUMENT,
                 "context: expected > 0 positions (0: the default), found -5");
  options.context = int64_t(1) << 62;
  EXPECT_REFUSED(Model::open(*bundle, *library, options, model),
                 CQ4P_ERROR_ARGUMENT,
                 "KV cache: 4611686018427387904 positions x 128 bytes (2 "
                 "layers, f32) does not fit in 64 bits");
  EXPECT_EQ(model, nullptr);
}

TEST_F(ModelTest, RefusesAMissingTensorByName) {
  toy.scaleEntry = "";
  ASSERT_TRUE(toy.open(bundle));
  std::unique_ptr<Model> model;
  EXPECT_REFUSED(Model::open(*bundle, *library, ModelOptions(), model),
                 CQ4P_ERROR_NOT_FOUND,
                 "binding 1 ('toy.scale'): no such tensor in the bundle");
}

TEST_F(ModelTest, RefusesTensorsOfAnotherShapeOrKind) {
  struct Case {
    const char *what;
    void (*change)(ToyBundle &);
    const char *message;
  };
  const Case cases[] = {
      {"head N",
       [](ToyBundle &t) {
         writeBytes(t.dir.file("toy.head.cq4p.weights"),
                    panelFile(randomTensor(100, kHeadK, kHeadGroupSize, false, 1), toFloat));
         t.headEntry = ToyBundle::entry("toy.head", "[100, 256]", "CQ4");
       },
       "binding 2 ('toy.head'): the library expects CQ4 N=64 K=256 gs=128 "
       "hadamard packed panels, the bundle's tensor is CQ4 N=100 K=256 gs=128 "
       "hadamard packed panels"},
      {"head group size",
       [](ToyBundle &t) {
         writeBytes(t.dir.file("toy.head.cq4p.weights"),
                    panelFile(randomTensor(kVocab, kHeadK, 64, false, 1), toFloat));
       },
       "tensor is CQ4 N=64 K=256 gs=64 hadamard packed panels"},
      {"head rotation",
       [](ToyBundle &t) {
         writeBytes(t.dir.file("toy.head.cq4p.weights"),
                    panelFile(randomTensor(kVocab, kHeadK, 128, true, 1), toFloat));
       },
       "tensor is CQ4 N=64 K=256 gs=128 orthogonal packed panels"},
      {"head legacy layout",
       [](ToyBundle &t) {
         std::remove(t.dir.file("toy.head.cq4p.weights").c_str());
         writeBytes(t.dir.file("toy.head.cq4.weights"),
                    legacyFile(t.head, CQ4P_LAYOUT_ROW_MAJOR));
       },
       "tensor is CQ4 N=64 K=256 gs=128 hadamard legacy row-major"},
      {"head dense",
       [](ToyBundle &t) {
         std::remove(t.dir.file("toy.head.cq4p.weights").c_str());
         writeBytes(t.dir.file("toy.head.weights"), fp16File({64, 256}));
         t.headEntry = ToyBundle::entry("toy.head", "[64, 256]", "FP16");
       },
       "binding 2 ('toy.head'): the library expects CQ4 N=64 K=256 gs=128 "
       "hadamard packed panels, the bundle's tensor is FP16 (dense)"},
      {"scale precision",
       [](ToyBundle &t) {
         writeBytes(t.dir.file("toy.scale.weights"), fp32File({8}, embedValues(8)));
         t.scaleEntry = ToyBundle::entry("toy.scale", "[8]", "FP32");
       },
       "binding 1 ('toy.scale'): the library expects FP16 of 8 elements, the "
       "bundle's tensor is FP32 of 8 elements"},
      {"embed elements",
       [](ToyBundle &t) {
         writeBytes(t.dir.file("toy.embed.weights"), fp32File({64, 9}, embedValues(576)));
         t.embedEntry = ToyBundle::entry("toy.embed", "[64, 9]", "FP32");
       },
       "binding 0 ('toy.embed'): the library expects FP32 of 512 elements, "
       "the bundle's tensor is FP32 of 576 elements"},
      {"embed as CQ4",
       [](ToyBundle &t) {
         std::remove(t.dir.file("toy.embed.weights").c_str());
         writeBytes(t.dir.file("toy.embed.cq4p.weights"),
                    panelFile(randomTensor(64, 256, 128, false, 2), toFloat));
         t.embedEntry = ToyBundle::entry("toy.embed", "[64, 256]", "CQ4");
       },
       "the library expects FP32 of 512 elements, the bundle's tensor is CQ4 "
       "N=64 K=256 gs=128 hadamard"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ToyBundle changed;
    c.change(changed);
    std::unique_ptr<Bundle> other;
    Status status = changed.open(other);
    ASSERT_TRUE(status) << status.message();
    std::unique_ptr<Model> model;
    EXPECT_REFUSED(Model::open(*other, *library, ModelOptions(), model),
                   CQ4P_ERROR_UNSUPPORTED, c.message, CQ4P_FAKE_MODEL_PATH);
    EXPECT_EQ(model, nullptr);
  }
}

TEST_F(ModelTest, RefusesBadTokensBeforeRunningAnything) {
  std::unique_ptr<Model> model = open(2, 8);
  std::vector<int64_t> ids = tokenIds(5);
  ASSERT_TRUE(model->prefill(ids.data(), 5));
  std::vector<float> before(model->logits(), model->logits() + kVocab);
  int64_t steps = module.prefillSteps() + module.decodeSteps();

  std::vector<int64_t> four = {1, 2, 3, 4};
  EXPECT_REFUSED(model->prefill(four.data(), 4), CQ4P_ERROR_ARGUMENT,
                 "context overflow: position 5 + 4 tokens > context 8");
  EXPECT_REFUSED(model->prefill(four.data(), 0), CQ4P_ERROR_ARGUMENT,
                 "prefill: expected at least 1 token, found 0");
  EXPECT_REFUSED(model->prefill(nullptr, 2), CQ4P_ERROR_ARGUMENT,
                 "prefill: expected 2 tokens, found a null pointer");
  std::vector<int64_t> big = {1, 2, 64};
  EXPECT_REFUSED(model->prefill(big.data(), 3), CQ4P_ERROR_ARGUMENT,
                 "token id 64 at index 2 >= vocab 64");
  std::vector<int64_t> negative = {1, -1};
  EXPECT_REFUSED(model->prefill(negative.data(), 2), CQ4P_ERROR_ARGUMENT,
                 "token id -1 at index 1 < 0");
  EXPECT_REFUSED(model->decode(5000), CQ4P_ERROR_ARGUMENT,
                 "token id 5000 at index 0 >= vocab 64");
  EXPECT_REFUSED(model->decode(-3), CQ4P_ERROR_ARGUMENT,
                 "token id -3 at index 0 < 0");
  EXPECT_EQ(model->position(), 5);
  EXPECT_EQ(module.prefillSteps() + module.decodeSteps(), steps);
  EXPECT_EQ(std::vector<float>(model->logits(), model->logits() + kVocab), before);

  ASSERT_TRUE(model->prefill(four.data(), 3));
  EXPECT_REFUSED(model->decode(1), CQ4P_ERROR_ARGUMENT,
                 "context overflow: position 8 + 1 token > context 8");
  ASSERT_TRUE(model->reset());
  EXPECT_TRUE(model->decode(1));
}

TEST_F(ModelTest, GreedyGenerationFollowsTheLogits) {
  std::unique_ptr<Model> model = open(2, 64);
  std::vector<int64_t> prompt = tokenIds(6);
  std::vector<int64_t> ids(10);
  GenerateStats stats;
  Status status = model->generate(prompt.data(), 6, 10, SamplingOptions(),
                                  ids.data(), &stats);
  ASSERT_TRUE(status) << status.message();
  // The last id is sampled, not decoded.
  EXPECT_EQ(model->position(), 6 + 9);
  EXPECT_EQ(stats.promptTokens, 6);
  EXPECT_EQ(stats.generatedTokens, 10);
  EXPECT_GE(stats.timeToFirstTokenSeconds, stats.prefillSeconds);
  EXPECT_GT(stats.prefillSeconds, 0.0);
  EXPECT_GE(stats.decodeSeconds, 0.0);

  // The same by hand: argmax (lowest id of the largest), decode, argmax...
  std::vector<int64_t> sequence = prompt;
  for (int i = 0; i < 10; ++i) {
    std::vector<float> logits = toyLogits(toy.head, sequence);
    int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(ids[i], best) << "token " << i;
    sequence.push_back(best);
  }

  std::vector<int64_t> again(10);
  ASSERT_TRUE(model->generate(prompt.data(), 6, 10, SamplingOptions(), again.data()));
  EXPECT_EQ(again, ids);
}

#if defined(CQ4P_EXAMPLE_GENERATE_CORE_PATH) && !defined(CQ4P_TEST_EMULATED)
TEST_F(ModelTest, ATokenIdProgramOfTheCoreLibraryRunsTheToy) {
  // examples/generate.c linked with the runtime's core library alone (the
  // ctest runtime.core_links_no_tokenizer checks it links no tokenizer)
  // prints the toy's greedy ids.
  std::vector<int64_t> prompt = tokenIds(6);
  std::string promptText;
  for (int64_t id : prompt)
    promptText += (promptText.empty() ? "" : " ") + std::to_string(id);
  std::string out = toy.dir.file("generate-out.txt");
  std::string command = std::string(CQ4P_EXAMPLE_GENERATE_CORE_PATH) + " '" +
                        toy.dir.path() + "' '" + CQ4P_FAKE_MODEL_PATH + "' '" + promptText +
                        "' 8 >'" + out + "' 2>/dev/null";
  int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  std::ifstream printed(out);
  std::string line;
  std::getline(printed, line);

  std::string expected = "ids:";
  std::vector<int64_t> sequence = prompt;
  for (int i = 0; i < 8; ++i) {
    std::vector<float> logits = toyLogits(toy.head, sequence);
    int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    expected += " " + std::to_string(best);
    sequence.push_back(best);
  }
  EXPECT_EQ(line, expected);
}
#endif

TEST_F(ModelTest, SeededSamplingIsReproducible) {
  std::unique_ptr<Model> model = open(3, 64);
  std::vector<int64_t> prompt = tokenIds(5);
  auto generate = [&](const SamplingOptions &sampling) {
    std::vector<int64_t> ids(16);
    Status status = model->generate(prompt.data(), 5, 16, sampling, ids.data());
    EXPECT_TRUE(status) << status.message();
    return ids;
  };
  SamplingOptions sampling;
  sampling.temperature = 1.0f;
  sampling.seed = 42;
  std::vector<int64_t> first = generate(sampling);
  EXPECT_EQ(generate(sampling), first);
  sampling.seed = 43;
  EXPECT_NE(generate(sampling), first);
  sampling.topK = 5;
  sampling.topP = 0.8f;
  std::vector<int64_t> nucleus = generate(sampling);
  EXPECT_EQ(generate(sampling), nucleus);

  std::vector<int64_t> greedy = generate(SamplingOptions());
  EXPECT_NE(first, greedy);
  sampling.topK = 1;
  sampling.topP = 1.0f;
  EXPECT_EQ(generate(sampling), greedy);
  // A nucleus of one: the largest logit alone.
  sampling.topK = 0;
  sampling.topP = 1e-6f;
  EXPECT_EQ(generate(sampling), greedy);
}

TEST_F(ModelTest, GenerateChecksEverythingFirst) {
  std::unique_ptr<Model> model = open(1, 16);
  std::vector<int64_t> prompt = tokenIds(10), ids(8);
  ASSERT_TRUE(model->prefill(prompt.data(), 3));
  int64_t steps = module.prefillSteps() + module.decodeSteps();
  SamplingOptions sampling;
  EXPECT_REFUSED(model->generate(prompt.data(), 10, 8, sampling, ids.data()),
                 CQ4P_ERROR_ARGUMENT,
                 "context overflow: a prompt of 10 tokens and 8 new tokens "
                 "need 17 positions > context 16");
  prompt[4] = 99;
  EXPECT_REFUSED(model->generate(prompt.data(), 10, 7, sampling, ids.data()),
                 CQ4P_ERROR_ARGUMENT, "token id 99 at index 4 >= vocab 64");
  prompt[4] = 1;
  sampling.topK = -2;
  EXPECT_REFUSED(model->generate(prompt.data(), 10, 7, sampling, ids.data()),
                 CQ4P_ERROR_ARGUMENT, "top_k: expected >= 0 (0: off), found -2");
  sampling = SamplingOptions();
  sampling.temperature = 0.5f;
  sampling.topP = 0.0f;
  EXPECT_REFUSED(model->generate(prompt.data(), 10, 7, sampling, ids.data()),
                 CQ4P_ERROR_ARGUMENT, "top_p: expected > 0 when sampling");
  sampling = SamplingOptions();
  EXPECT_REFUSED(model->generate(prompt.data(), 10, 7, sampling, nullptr),
                 CQ4P_ERROR_ARGUMENT, "expected room for 7 tokens");
  EXPECT_REFUSED(model->generate(prompt.data(), 0, 7, sampling, ids.data()),
                 CQ4P_ERROR_ARGUMENT, "prompt: expected at least 1 token");
  EXPECT_EQ(model->position(), 3);
  EXPECT_EQ(module.prefillSteps() + module.decodeSteps(), steps);
  // Exactly full: the prompt and 6 decode steps.
  EXPECT_TRUE(model->generate(prompt.data(), 10, 7, sampling, ids.data()));
  EXPECT_EQ(model->position(), 16);
}

TEST_F(ModelTest, ACallbackCanStopTheGeneration) {
  std::unique_ptr<Model> model = open(1, 64);
  std::vector<int64_t> prompt = tokenIds(4), seen;
  GenerateStats stats;
  ASSERT_TRUE(model->generate(
      prompt.data(), 4, 20, SamplingOptions(),
      [](void *context, int64_t index, int64_t id) {
        auto &ids = *static_cast<std::vector<int64_t> *>(context);
        ids.push_back(id);
        return index < 2;
      },
      &seen, &stats));
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(stats.generatedTokens, 3);
  EXPECT_EQ(model->position(), 4 + 2);
}

#ifndef CQ4P_TEST_SANITIZED
TEST_F(ModelTest, DecodeAndGenerateAllocateNothing) {
  int64_t before = allocations.load();
  std::unique_ptr<Model> model = open(2, 256);
  EXPECT_GT(allocations.load(), before); // the counter counts
  std::vector<int64_t> prompt = tokenIds(9), ids(100);
  std::vector<float> logits(kVocab);
  ASSERT_TRUE(model->prefill(prompt.data(), 9, logits.data()));
  before = allocations.load();
  for (int64_t i = 0; i < 20; ++i)
    ASSERT_TRUE(model->decode(i % kVocab, logits.data()));
  ASSERT_TRUE(model->prefill(prompt.data(), 9, logits.data()));
  EXPECT_EQ(allocations.load() - before, 0);

  SamplingOptions sampling;
  sampling.temperature = 0.8f;
  sampling.topK = 40;
  sampling.topP = 0.9f;
  before = allocations.load();
  ASSERT_TRUE(model->generate(prompt.data(), 9, 100, sampling, ids.data()));
  ASSERT_TRUE(model->generate(prompt.data(), 9, 100, SamplingOptions(), ids.data()));
  EXPECT_EQ(allocations.load() - before, 0);
}
#endif

TEST(Sampler, PicksFromTheLogitsAsConfigured) {
  Sampler sampler;
  sampler.reserve(4);
  Rng rng(1);
  int64_t id = -1;
  const float logits[4] = {1.0f, 3.0f, 3.0f, 0.5f};
  ASSERT_TRUE(sampler.sample(logits, 4, SamplingOptions(), rng, id));
  EXPECT_EQ(id, 1); // the lower id of a tie

  // Frequencies follow softmax(logits / T); fixed seed, so no flakiness.
  const float spread[4] = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SamplingOptions options;
  options.temperature = 1.0f;
  int counts[4] = {};
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(sampler.sample(spread, 4, options, rng, id));
    ++counts[id];
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(counts[i] / 20000.0, (i + 1) / 10.0, 0.015) << "id " << i;

  options.topK = 2; // ids 3 and 2 only, 4:3
  int top[4] = {};
  for (int i = 0; i < 7000; ++i) {
    ASSERT_TRUE(sampler.sample(spread, 4, options, rng, id));
    ++top[id];
  }
  EXPECT_EQ(top[0] + top[1], 0);
  EXPECT_NEAR(top[3] / 7000.0, 4.0 / 7.0, 0.02);

  options.topK = 0;
  options.topP = 0.65f; // 0.4 + 0.3 reaches it: ids 3 and 2
  int nucleus[4] = {};
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(sampler.sample(spread, 4, options, rng, id));
    ++nucleus[id];
  }
  EXPECT_EQ(nucleus[0] + nucleus[1], 0);
  EXPECT_GT(nucleus[2], 0);
  options.topP = 0.35f; // id 3 alone
  ASSERT_TRUE(sampler.sample(spread, 4, options, rng, id));
  EXPECT_EQ(id, 3);

  const float bad[4] = {0.0f, 1.0f, std::nanf(""), 2.0f};
  EXPECT_REFUSED(sampler.sample(bad, 4, SamplingOptions(), rng, id),
                 CQ4P_ERROR_ARGUMENT, "sampling: logits[2] is nan");
  const float none[2] = {-INFINITY, -INFINITY};
  EXPECT_REFUSED(sampler.sample(none, 2, SamplingOptions(), rng, id),
                 CQ4P_ERROR_ARGUMENT, "every one of the 2 logits is -inf");
  EXPECT_REFUSED(sampler.sample(logits, 5, SamplingOptions(), rng, id),
                 CQ4P_ERROR_ARGUMENT, "vocabulary of 5 ids");
}

TEST(Sampler, GreedyIsTheLowestIdOfTheLargestLogitOverEveryBlock) {
  // The greedy pick scans in blocks of integer keys; the oracle is the plain
  // "first strictly larger" loop over floats. Rows span several blocks,
  // have ties within and across blocks, signed zeros as the largest value,
  // denormals, and -inf (allowed), each placed at random.
  std::mt19937 gen(11);
  Sampler sampler;
  sampler.reserve(5000);
  Rng rng(3);
  std::vector<float> logits;
  for (int trial = 0; trial < 400; ++trial) {
    size_t vocab = 1 + gen() % 5000;
    std::uniform_int_distribution<int> level(-4, 3);
    logits.resize(vocab);
    int kind = trial % 4;
    for (float &logit : logits) {
      int l = level(gen);
      logit = kind == 0   ? float(l)                       // many ties
              : kind == 1 ? (l == -4  ? -1e-38f                 // zeros
                             : l < 0    ? -0.0f
                             : l == 0   ? 0.0f
                                        : -1.0f)
              : kind == 2 ? std::ldexp(float(l), -140)     // denormals
                          : std::normal_distribution<float>()(gen);
      if (gen() % 97 == 0)
        logit = -INFINITY;
    }
    size_t want = 0;
    bool anyFinite = false;
    for (size_t i = 0; i < vocab; ++i) {
      anyFinite |= logits[i] != -INFINITY;
      if (logits[i] > logits[want])
        want = i;
    }
    int64_t id = -1;
    if (!anyFinite) {
      EXPECT_REFUSED(sampler.sample(logits.data(), vocab, SamplingOptions(),
                                    rng, id),
                     CQ4P_ERROR_ARGUMENT, "is -inf");
      continue;
    }
    ASSERT_TRUE(
        sampler.sample(logits.data(), vocab, SamplingOptions(), rng, id));
    EXPECT_EQ(id, int64_t(want)) << "trial " << trial << ", vocab " << vocab;
  }
  // A NaN or +inf anywhere, also past the first block, is named.
  logits.assign(3000, 1.0f);
  logits[2500] = INFINITY;
  int64_t id = -1;
  EXPECT_REFUSED(
      sampler.sample(logits.data(), 3000, SamplingOptions(), rng, id),
      CQ4P_ERROR_ARGUMENT, "sampling: logits[2500] is +inf");
}

TEST(Sampler, TheGeneratorDependsOnTheSeedAlone) {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t value = a.next();
    EXPECT_EQ(value, b.next());
    differs |= value != c.next();
    double u = a.uniform();
    b.uniform();
    c.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_TRUE(differs);
  // splitmix64 then xoshiro256**: fixed for every machine.
  EXPECT_EQ(Rng(0).next(), Rng(0).next());
}

TEST_F(ModelTest, TheCApiRunsAModel) {
  cq4p_model_options options = {2, 32, kChunk};
  cq4p_model *model = nullptr;
  char error[512] = "";
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &model, error, sizeof(error)),
            CQ4P_OK)
      << error;
  cq4p_model_info info;
  cq4p_model_get_info(model, &info);
  EXPECT_EQ(info.vocab, uint64_t(kVocab));
  EXPECT_EQ(info.layers, uint64_t(kLayers));
  EXPECT_EQ(info.context, 32u);
  EXPECT_EQ(info.prefill_chunk, uint64_t(kChunk));
  EXPECT_EQ(info.kv_dtype, uint32_t(CQ4P_KV_F32));
  EXPECT_STREQ(info.architecture, "toy");

  std::vector<int64_t> ids = tokenIds(7);
  std::vector<float> logits(kVocab);
  ASSERT_EQ(cq4p_model_prefill(model, ids.data(), 6, nullptr, error, sizeof(error)),
            CQ4P_OK)
      << error;
  ASSERT_EQ(cq4p_model_decode(model, ids[6], logits.data(), error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(logits, toyLogits(toy.head, ids));
  cq4p_model_get_info(model, &info);
  EXPECT_EQ(info.position, 7u);

  EXPECT_EQ(cq4p_model_decode(model, 64, nullptr, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_STREQ(error, "token id 64 at index 0 >= vocab 64");

  std::vector<int64_t> generated(5), again(5);
  cq4p_sampling sampling = {0.9f, 10, 0.95f, 1234};
  cq4p_generate_stats stats = {};
  ASSERT_EQ(cq4p_model_generate(model, ids.data(), 7, 5, &sampling,
                                generated.data(), &stats, error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(stats.prompt_tokens, 7);
  EXPECT_EQ(stats.generated_tokens, 5);
  EXPECT_GT(stats.prefill_seconds, 0.0);
  ASSERT_EQ(cq4p_model_generate(model, ids.data(), 7, 5, &sampling, again.data(),
                                nullptr, error, sizeof(error)),
            CQ4P_OK);
  EXPECT_EQ(generated, again);
  cq4p_model_reset(model);
  cq4p_model_get_info(model, &info);
  EXPECT_EQ(info.position, 0u);
  cq4p_model_close(model);

  model = reinterpret_cast<cq4p_model *>(&options);
  EXPECT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_KERNELS_PATH,
                            nullptr, &model, error, sizeof(error)),
            CQ4P_ERROR_NOT_FOUND);
  EXPECT_EQ(model, nullptr);
  EXPECT_TRUE(contains(error, "has no model steps")) << error;
  options.prefill_chunk = 16;
  EXPECT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &model, error, sizeof(error)),
            CQ4P_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(error, "prefill chunk: expected 16 (as asked), found 4"))
      << error;
  EXPECT_EQ(cq4p_model_prefill(nullptr, ids.data(), 1, nullptr, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  cq4p_model_close(nullptr);
}

} // namespace

namespace {

std::string fileSize(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? std::to_string(st.st_size) : "?";
}

} // namespace

// docs/TRUST.md: a bound file truncated under a model. The step reads zeros
// for the lost pages (no SIGBUS, nothing out of bounds under ASan); the call
// fails naming the file without writing logits, and so does every later
// step; generate and a new Model::open refuse before any step runs.
TEST_F(ModelTest, AFileTruncatedWhileMappedFailsTheStepNotTheProcess) {
  std::unique_ptr<Model> model = open(2);
  ASSERT_NE(model, nullptr);
  std::vector<int64_t> ids = tokenIds(6);
  std::vector<float> logits(kVocab);
  ASSERT_TRUE(model->prefill(ids.data(), 5, logits.data()));
  EXPECT_EQ(logits, toyLogits(toy.head, {ids.begin(), ids.begin() + 5}));

  std::string head = toy.dir.file("toy.head.cq4p.weights");
  std::string message = head + " was truncated while mapped: mapped " +
                        fileSize(head) + " bytes, the file now has 0 bytes";
  ASSERT_EQ(::truncate(head.c_str(), 0), 0);
  std::fill(logits.begin(), logits.end(), 2.0f);
  EXPECT_REFUSED(model->decode(ids[5], logits.data()), CQ4P_ERROR_IO,
                 message.c_str(), "(a read past its end found no page)");
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return v == 2.0f; }));
  EXPECT_TRUE(std::all_of(model->logits(), model->logits() + kVocab,
                          [](float v) { return std::isnan(v); }));
  EXPECT_REFUSED(model->prefill(ids.data(), 5, logits.data()), CQ4P_ERROR_IO,
                 message.c_str());
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return v == 2.0f; }));

  int64_t steps = module.prefillSteps() + module.decodeSteps();
  std::vector<int64_t> generated(3, -1);
  EXPECT_REFUSED(model->generate(ids.data(), 5, 3, SamplingOptions(), generated.data()),
                 CQ4P_ERROR_IO, message.c_str());
  EXPECT_EQ(module.prefillSteps() + module.decodeSteps(), steps);
  EXPECT_EQ(generated, std::vector<int64_t>(3, -1));
  std::unique_ptr<Model> again;
  EXPECT_REFUSED(Model::open(*bundle, *library, ModelOptions(), again), CQ4P_ERROR_IO,
                 message.c_str());
  EXPECT_EQ(again, nullptr);
}

TEST_F(ModelTest, TheCApiReportsAFileTruncatedWhileMapped) {
  cq4p_model *model = nullptr;
  char error[512] = "";
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH, nullptr,
                            &model, error, sizeof(error)),
            CQ4P_OK)
      << error;
  std::vector<int64_t> ids = tokenIds(3);
  std::vector<float> logits(kVocab, 2.0f);
  ASSERT_EQ(cq4p_model_prefill(model, ids.data(), 2, nullptr, error, sizeof(error)),
            CQ4P_OK)
      << error;
  std::string embed = toy.dir.file("toy.embed.weights");
  std::string message = embed + " was truncated while mapped: mapped " +
                        fileSize(embed) + " bytes, the file now has 0 bytes";
  ASSERT_EQ(::truncate(embed.c_str(), 0), 0);
  EXPECT_EQ(cq4p_model_decode(model, ids[2], logits.data(), error, sizeof(error)),
            CQ4P_ERROR_IO);
  EXPECT_TRUE(contains(error, message)) << error;
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return v == 2.0f; }));
  std::vector<int64_t> generated(2);
  EXPECT_EQ(cq4p_model_generate(model, ids.data(), 3, 2, nullptr, generated.data(),
                                nullptr, error, sizeof(error)),
            CQ4P_ERROR_IO);
  EXPECT_TRUE(contains(error, message)) << error;
  cq4p_model_close(model);
}

// A kernel-only library compiled for a bundle (cq4p-compile --bundle)
// records its digest and is refused for any other bundle, as a model
// library is; one that records none serves any bundle unless a digest is
// required.
TEST_F(ModelTest, AKernelLibraryForAnotherBundleIsRefused) {
  std::unique_ptr<KernelLibrary> recorded, none;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_DIGEST_PATH, recorded));
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_KERNELS_PATH, none));
  Status status = bundle->checkLibrary(*recorded, true);
  EXPECT_TRUE(status) << status.message();
  EXPECT_TRUE(bundle->checkLibrary(*none));
  std::string required = std::string(CQ4P_FAKE_KERNELS_PATH) +
                         ": records no bundle digest, and one is required "
                         "(compile it from the bundle's model.mlir or with "
                         "cq4p-compile --bundle " +
                         toy.dir.path() + ")";
  EXPECT_REFUSED(bundle->checkLibrary(*none, true), CQ4P_ERROR_UNSUPPORTED,
                 required.c_str());

  toy.digest = "\"model_digest\": \"f00d\", ";
  ASSERT_TRUE(toy.open(bundle));
  std::string other = std::string(CQ4P_FAKE_KERNELS_DIGEST_PATH) +
                      ": library built for bundle digest toy-digest-1, this "
                      "bundle's is f00d (" +
                      toy.dir.path() + ")";
  EXPECT_REFUSED(bundle->checkLibrary(*recorded), CQ4P_ERROR_UNSUPPORTED,
                 other.c_str());
  EXPECT_TRUE(bundle->checkLibrary(*none));
  toy.digest = "";
  ASSERT_TRUE(toy.open(bundle));
  EXPECT_REFUSED(bundle->checkLibrary(*recorded), CQ4P_ERROR_UNSUPPORTED,
                 "library built for bundle digest toy-digest-1, this bundle has "
                 "none (no model_digest in its manifest.json)");
}

//===----------------------------------------------------------------------===//
// The model defends its state (one call at a time, every step checked)
//===----------------------------------------------------------------------===//

namespace {

/// What a token callback did to the model that called it.
struct Reentry {
  Model *model;
  enum Kind { Prefill, Decode, Reset, Generate, Sample } kind;
  std::vector<int64_t> ids;
  std::vector<Status> refusals;
};

bool reenter(void *context, int64_t, int64_t id) {
  auto &r = *static_cast<Reentry *>(context);
  r.ids.push_back(id);
  int64_t prompt[3] = {1, 2, 3}, out[4];
  Rng rng(1);
  int64_t sampled = 0;
  switch (r.kind) {
  case Reentry::Prefill:
    r.refusals.push_back(r.model->prefill(prompt, 3));
    break;
  case Reentry::Decode:
    r.refusals.push_back(r.model->decode(id));
    break;
  case Reentry::Reset:
    r.refusals.push_back(r.model->reset());
    break;
  case Reentry::Generate:
    r.refusals.push_back(
        r.model->generate(prompt, 3, 4, SamplingOptions(), out));
    break;
  case Reentry::Sample:
    r.refusals.push_back(r.model->sample(SamplingOptions(), rng, sampled));
    break;
  }
  return true;
}

} // namespace

TEST_F(ModelTest, ACallbackCannotCallIntoItsModel) {
  // Before: a callback that prefilled made generate decode past the KV
  // cache; one that reset made it continue silently from position 0.
  std::vector<int64_t> prompt = tokenIds(6);
  std::unique_ptr<Model> reference = open(1, 16);
  std::vector<int64_t> expected(10);
  ASSERT_TRUE(reference->generate(prompt.data(), 6, 10, SamplingOptions(),
                                  expected.data()));
  for (Reentry::Kind kind : {Reentry::Prefill, Reentry::Decode, Reentry::Reset,
                             Reentry::Generate, Reentry::Sample}) {
    SCOPED_TRACE("re-entry " + std::to_string(int(kind)));
    std::unique_ptr<Model> model = open(1, 16);
    Reentry r{model.get(), kind, {}, {}};
    ASSERT_TRUE(model->generate(prompt.data(), 6, 10, SamplingOptions(),
                                &reenter, &r));
    // Every call from the callback refused; the generation as without it,
    // and exactly full: 6 + 9 positions of the 16.
    ASSERT_EQ(r.refusals.size(), 10u);
    for (const Status &status : r.refusals)
      EXPECT_REFUSED(status, CQ4P_ERROR_BUSY,
                     "the model is in a call on this thread (generate)",
                     "a callback may not call into the model");
    EXPECT_EQ(r.ids, expected);
    EXPECT_EQ(model->position(), 6 + 9);
    // Released when generate returns.
    EXPECT_TRUE(model->reset());
    EXPECT_TRUE(model->prefill(prompt.data(), 2));
  }
}

TEST_F(ModelTest, TheCApiResetIsRefusedFromACallback) {
  cq4p_model_options options = {1, 16, 0};
  cq4p_model *model = nullptr;
  char error[512] = "";
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &model, error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(cq4p_model_reset(model), CQ4P_OK);
  EXPECT_EQ(cq4p_model_reset(nullptr), CQ4P_ERROR_ARGUMENT);
  // The handle's model generating, its callback resetting through the C
  // API (as a C program's text callback would).
  struct Seen {
    cq4p_model *handle;
    std::vector<int> codes;
  } seen{model, {}};
  std::vector<int64_t> prompt = tokenIds(4);
  ASSERT_TRUE(model->model->generate(
      prompt.data(), 4, 3, SamplingOptions(),
      [](void *context, int64_t, int64_t) {
        auto &s = *static_cast<Seen *>(context);
        s.codes.push_back(cq4p_model_reset(s.handle));
        return true;
      },
      &seen));
  EXPECT_EQ(seen.codes, std::vector<int>(3, CQ4P_ERROR_BUSY));
  cq4p_model_info info;
  cq4p_model_get_info(model, &info);
  EXPECT_EQ(info.position, 4u + 2u);
  cq4p_model_close(model);
}

TEST_F(ModelTest, TwoThreadsOnOneModelAreRefusedNeverWrong) {
  // Before: NaN failures, and CQ4P_OK with wrong ids for about a quarter
  // of the calls. Now each call either runs alone (the right ids) or is
  // refused with CQ4P_ERROR_BUSY.
  cq4p_model_options options = {2, 32, 0};
  cq4p_model *model = nullptr;
  char error[512] = "";
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &model, error, sizeof(error)),
            CQ4P_OK)
      << error;
  std::vector<int64_t> prompts[2] = {tokenIds(7, 1), tokenIds(9, 5)};
  std::vector<int64_t> expected[2];
  for (int t = 0; t < 2; ++t) {
    expected[t].resize(12);
    ASSERT_EQ(cq4p_model_generate(model, prompts[t].data(),
                                  int64_t(prompts[t].size()), 12, nullptr,
                                  expected[t].data(), nullptr, error,
                                  sizeof(error)),
              CQ4P_OK)
        << error;
  }
  ASSERT_NE(expected[0], expected[1]);
  std::atomic<int> wrong{0}, busy{0}, ran{0}, other{0};
  auto work = [&](int t) {
    char message[512];
    for (int call = 0; call < 200; ++call) {
      std::vector<int64_t> ids(12, -1);
      int code = cq4p_model_generate(model, prompts[t].data(),
                                     int64_t(prompts[t].size()), 12, nullptr,
                                     ids.data(), nullptr, message,
                                     sizeof(message));
      if (code == CQ4P_OK)
        (ids == expected[t] ? ran : wrong).fetch_add(1);
      else if (code == CQ4P_ERROR_BUSY &&
               contains(message, "in use by another thread"))
        busy.fetch_add(1);
      else
        other.fetch_add(1);
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ran.load() + busy.load(), 400);
  EXPECT_GT(ran.load(), 0);
  cq4p_model_close(model);
}

TEST_F(ModelTest, AnotherThreadIsRefusedWhileACallRuns) {
  // Deterministic: thread A holds the model inside a token callback until
  // thread B has tried every call.
  std::unique_ptr<Model> model = open(1, 16);
  std::atomic<bool> inside{false}, done{false};
  struct Hold {
    std::atomic<bool> *inside, *done;
  } hold{&inside, &done};
  std::vector<int64_t> prompt = tokenIds(3);
  std::thread holder([&] {
    Status status = model->generate(
        prompt.data(), 3, 2, SamplingOptions(),
        [](void *context, int64_t index, int64_t) {
          auto &h = *static_cast<Hold *>(context);
          if (index == 0) {
            h.inside->store(true);
            while (!h.done->load())
              std::this_thread::yield();
          }
          return true;
        },
        &hold);
    EXPECT_TRUE(status) << status.message();
  });
  while (!inside.load())
    std::this_thread::yield();
  int64_t ids[2];
  Rng rng(0);
  int64_t id;
  EXPECT_REFUSED(model->prefill(prompt.data(), 3), CQ4P_ERROR_BUSY,
                 "prefill: the model is in use by another thread (generate)");
  EXPECT_REFUSED(model->decode(1), CQ4P_ERROR_BUSY, "decode: ", "another thread");
  EXPECT_REFUSED(model->reset(), CQ4P_ERROR_BUSY, "reset: ", "another thread");
  EXPECT_REFUSED(model->sample(SamplingOptions(), rng, id), CQ4P_ERROR_BUSY,
                 "sample: ");
  EXPECT_REFUSED(model->generate(prompt.data(), 3, 2, SamplingOptions(), ids),
                 CQ4P_ERROR_BUSY, "generate: ", "one call at a time");
  done.store(true);
  holder.join();
  EXPECT_EQ(model->position(), 4);
}

namespace {
struct StackRun {
  Model *model;
  std::vector<int64_t> ids;
  /// Stack to leave below the call (0: call with what the thread has).
  uint64_t leave;
  Status status;
};

uintptr_t lowestStackAddress() {
  pthread_attr_t attributes;
  void *address = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    pthread_attr_getstack(&attributes, &address, &size);
    pthread_attr_destroy(&attributes);
  }
  return reinterpret_cast<uintptr_t>(address);
}

void *prefillOnThisThread(void *context) {
  auto &run = *static_cast<StackRun *>(context);
  uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t lowest = lowestStackAddress();
  if (run.leave != 0 && lowest != 0 && here > lowest + run.leave) {
    // Use the stack down to `leave` bytes above its end (the sanitizers
    // round small thread stacks up, so a small stack alone is no test).
    volatile char *used = static_cast<char *>(alloca(here - lowest - run.leave));
    used[0] = 0;
    run.status = run.model->prefill(run.ids.data(), int64_t(run.ids.size()));
    used[0] = 1;
    return nullptr;
  }
  run.status = run.model->prefill(run.ids.data(), int64_t(run.ids.size()));
  return nullptr;
}

/// Runs a prefill on a new thread with `stackBytes` of stack, of which all
/// but about `leave` bytes are in use when it calls.
Status prefillWithStack(Model &model, size_t stackBytes, uint64_t leave) {
  StackRun run{&model, tokenIds(5), leave, Status::ok()};
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, stackBytes);
  pthread_t thread;
  int error = pthread_create(&thread, &attributes, &prefillOnThisThread, &run);
  pthread_attr_destroy(&attributes);
  if (error != 0)
    return Status(CQ4P_ERROR_IO, "pthread_create failed");
  pthread_join(thread, nullptr);
  return run.status;
}
} // namespace

TEST_F(ModelTest, AThreadWithASmallStackIsRefusedCleanly) {
  // Before: kernels overflowed a calling thread's stack under ~384 KiB.
  // The toy's widest K is 256 and its chunk 4: 128 rows x 256 + 64 KiB.
  std::unique_ptr<Model> model = open(2, 64);
  EXPECT_EQ(model->stackBytes(), 128u * 256u + (64u << 10));
  EXPECT_REFUSED(prefillWithStack(*model, 1 << 20, 48 << 10),
                 CQ4P_ERROR_ARGUMENT, "prefill: the calling thread has ",
                 " bytes of stack left", "a step needs 98304");
  EXPECT_EQ(model->position(), 0);
  Status status = prefillWithStack(*model, 2 << 20, 0);
  EXPECT_TRUE(status) << status.message();
  EXPECT_EQ(model->position(), 5);
  // The check itself, on this thread: far more than any thread has.
  EXPECT_REFUSED(checkCallerStack("decode", size_t(1) << 40),
                 CQ4P_ERROR_ARGUMENT, "decode: the calling thread has ",
                 "a step needs 1099511627776");
}

TEST_F(ModelTest, NonFiniteLogitsFailTheStep) {
  // Before: prefill and decode returned CQ4P_OK with NaN logits. A NaN in
  // token 9's embedding row makes the toy's logits NaN (FakeModel.c).
  std::vector<float> embed = embedValues(kVocab * kKvWidth);
  embed[9 * kKvWidth + 3] = std::nanf("");
  writeBytes(toy.dir.file("toy.embed.weights"),
             fp32File({uint64_t(kVocab), uint64_t(kKvWidth)}, embed));
  ASSERT_TRUE(toy.open(bundle));
  std::unique_ptr<Model> model = open(1, 32);
  std::vector<float> logits(kVocab, 1.0f);
  int64_t poisoned[3] = {1, 2, 9};
  EXPECT_REFUSED(model->prefill(poisoned, 3, logits.data()),
                 CQ4P_ERROR_FORMAT, "logits of position 2: logits[0] is nan");
  EXPECT_EQ(logits, std::vector<float>(kVocab, 1.0f)); // not written
  EXPECT_REFUSED(model->decode(9, logits.data()), CQ4P_ERROR_FORMAT,
                 "logits of position 3: logits[0] is nan");
  EXPECT_TRUE(model->decode(4, logits.data())); // finite again
  std::vector<int64_t> ids(4);
  EXPECT_REFUSED(model->generate(poisoned, 3, 4, SamplingOptions(), ids.data()),
                 CQ4P_ERROR_FORMAT, "logits of position 2");

  // Through the C API.
  cq4p_model *handle = nullptr;
  char error[512] = "";
  cq4p_model_options options = {1, 32, 0};
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &handle, error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(cq4p_model_prefill(handle, poisoned, 3, logits.data(), error,
                               sizeof(error)),
            CQ4P_ERROR_FORMAT);
  EXPECT_TRUE(contains(error, "logits[0] is nan")) << error;
  EXPECT_EQ(cq4p_model_decode(handle, 9, logits.data(), error, sizeof(error)),
            CQ4P_ERROR_FORMAT);
  cq4p_model_close(handle);
}

TEST_F(ModelTest, TheCApiSamplingStructZeroFilledIsGreedy) {
  cq4p_model_options options = {1, 32, 0};
  cq4p_model *model = nullptr;
  char error[512] = "";
  ASSERT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH,
                            &options, &model, error, sizeof(error)),
            CQ4P_OK)
      << error;
  std::vector<int64_t> prompt = tokenIds(5), greedy(6), zeroed(6), ids(6);
  ASSERT_EQ(cq4p_model_generate(model, prompt.data(), 5, 6, nullptr,
                                greedy.data(), nullptr, error, sizeof(error)),
            CQ4P_OK)
      << error;
  // Before: refused for its top_p of 0.
  cq4p_sampling zero = {};
  ASSERT_EQ(cq4p_model_generate(model, prompt.data(), 5, 6, &zero,
                                zeroed.data(), nullptr, error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(zeroed, greedy);

  // Before: temperature +inf accepted.
  struct Case {
    float temperature, topP;
    const char *message;
  } cases[] = {
      {INFINITY, 1.0f, "temperature: expected a finite number (<= 0: greedy), found +inf"},
      {-INFINITY, 1.0f, "found -inf"},
      {std::nanf(""), 1.0f, "found nan"},
      {0.7f, 0.0f, "top_p: expected > 0 when sampling"},
      {0.0f, -0.5f, "top_p: expected a number >= 0"},
      {0.0f, std::nanf(""), "top_p: expected a number >= 0"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.message);
    cq4p_sampling sampling = {c.temperature, 0, c.topP, 0};
    EXPECT_EQ(cq4p_model_generate(model, prompt.data(), 5, 6, &sampling,
                                  ids.data(), nullptr, error, sizeof(error)),
              CQ4P_ERROR_ARGUMENT);
    EXPECT_TRUE(contains(error, c.message)) << error;
  }
  // A count no context holds: a clear refusal, no overflow.
  EXPECT_EQ(cq4p_model_generate(model, prompt.data(), 5, INT64_MAX, nullptr,
                                ids.data(), nullptr, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_TRUE(contains(error, "need more than 2^63 - 1 positions > context 32"))
      << error;
  EXPECT_EQ(cq4p_model_generate(model, prompt.data(), 5, -1, nullptr,
                                ids.data(), nullptr, error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_TRUE(contains(error, "expected >= 0, found -1")) << error;
  cq4p_model_close(model);
}

TEST_F(ModelTest, ALibraryForAnotherConfigIsRefusedBeforeAnyStep) {
  struct Case {
    std::string config;
    std::vector<const char *> message;
  } cases[] = {
      {"\"config\": {\"vocab_size\": 65}, ",
       {"vocab: the library's steps were compiled for 64",
        "the bundle's config says vocab_size 65"}},
      {"\"config\": {\"num_hidden_layers\": 3, \"vocab_size\": 64}, ",
       {"layers: the library's steps were compiled for 2",
        "num_hidden_layers 3"}},
      {"\"config\": {\"hidden_size\": 8}, ",
       {"hidden: the library's steps were compiled for 16", "hidden_size 8"}},
      // A multimodal wrapper: the decoder's fields are text_config's.
      {"\"config\": {\"vocab_size\": 64, \"text_config\": {\"vocab_size\": 70}}, ",
       {"vocab_size 70"}},
  };
  int64_t steps = module.prefillSteps() + module.decodeSteps();
  for (const Case &c : cases) {
    SCOPED_TRACE(c.config);
    toy.config = c.config;
    ASSERT_TRUE(toy.open(bundle));
    std::unique_ptr<Model> model;
    Status status = Model::open(*bundle, *library, ModelOptions(), model);
    EXPECT_EQ(status.code(), CQ4P_ERROR_UNSUPPORTED) << status.message();
    for (const char *part : c.message)
      EXPECT_TRUE(contains(status.message(), part)) << status.message();
    EXPECT_FALSE(model);
  }
  EXPECT_EQ(module.prefillSteps() + module.decodeSteps(), steps);
  toy.config = "\"config\": {\"vocab_size\": 64, \"num_hidden_layers\": 2, "
               "\"hidden_size\": 16}, ";
  ASSERT_TRUE(toy.open(bundle));
  EXPECT_TRUE(open());
}
