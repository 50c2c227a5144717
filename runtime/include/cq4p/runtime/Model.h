//===- Model.h - a whole model: a bundle run by compiled steps -*- C++ -*-===//
//
// A Model runs the two step functions a model library exports
// (`cq4p_model`, kernel_abi.h, docs/MODEL.md) over a bundle's tensors. The
// runtime knows no architecture: the steps decide every kernel call; the
// Model supplies what they run on:
//
//   - the bindings: each tensor the library names, checked against its
//     descriptor (a CQ4 packed-panel file of the same N, K, group size and
//     rotation, as a cq4p_weight_view; a dense FP16/FP32 file of the same
//     element count, as its data pointer), refused by name otherwise;
//   - memory, allocated once when the model opens: the KV cache (context x
//     the library's kv_position_bytes, laid out by its steps), the step
//     state (state_bytes: LFM2's convolution rows), the workspace one step
//     needs (64-byte aligned) and the logits [vocab];
//   - threads: a ThreadPool, reached by the steps through parallelFor.
//
// Positions. prefill() appends tokens at the current position (full chunks
// of the library's prefill_chunk, then the rest, all through the prefill
// step), decode() appends one through the decode step, reset() starts a
// new sequence at position 0. Every argument (count, context room, each
// id against the vocabulary) is checked before any step runs, so a refused
// call leaves the model as it was.
//
// Steady state allocates nothing: after open(), a decode (checks, one
// step, its parallel loops) and sampling use only the buffers made then.
//
// A Model refers to its Bundle and KernelLibrary: both must outlive it.
//
// One call at a time, enforced (docs/TRUST.md, "Threads"): the model is a
// sequence's state, so every call that reads or changes it (prefill,
// decode, reset, sample, generate, and the text calls over them) claims
// the model with one atomic compare-exchange and releases it when it
// returns. A call that finds the model claimed is refused with
// CQ4P_ERROR_BUSY, never queued: from the claiming thread, that is a
// callback calling into the model whose call delivered it (a token
// callback of generate() cannot reset, prefill or decode under it); from
// another thread, a second caller that must use its own model. Not a lock:
// waiting would hide the misuse, and would deadlock a callback.
//
// Every step is checked before it runs: rows within the library's chunk,
// position + rows within the context, so no sequence of calls can make a
// step write past the KV cache. The logits a step returns are checked:
// a NaN or infinite logit fails the call, naming the position and the id.
//
// Stack. Kernels keep row tiles on the stack of the thread that runs them,
// the calling thread included (it runs a share of every parallel loop).
// stackBytes() is what a step may need on one thread (stepStackBytes: the
// measured tile bound of the library's widest K and chunk); the model's
// own threads get max(ThreadPool::kWorkerStackBytes, 2 x stackBytes()), and
// a call that runs steps refuses a calling thread with less than
// stackBytes() of stack left (pthread_getattr_np, read once per thread),
// rather than let a kernel overflow it.
//
// Files truncated while mapped (docs/TRUST.md): open() and generate()
// refuse a bound file whose size is no longer the mapped size; a prefill,
// decode or generate whose steps met a truncation fails naming the file,
// without writing logits (the model's own become NaN), and so does every
// later step, since the file's lost pages read as zeros from then on.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_MODEL_H
#define CQ4P_RUNTIME_MODEL_H

#include "cq4p/kernel_abi.h"
#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Sampling.h"
#include "cq4p/runtime/Status.h"
#include "cq4p/runtime/ThreadPool.h"
#include "cq4p/runtime/WeightView.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace cq4p::runtime {

struct ModelOptions {
  int threads = 1;
  /// KV cache positions; 0: Model::defaultContext(bundle).
  int64_t context = 0;
  /// The prefill chunk the caller expects the library to have been
  /// compiled with; 0 accepts the library's.
  int64_t expectedPrefillChunk = 0;
};

struct GenerateStats {
  int64_t promptTokens = 0;
  int64_t generatedTokens = 0;
  /// The prompt's prefill steps.
  double prefillSeconds = 0;
  /// After the first token: decode steps and sampling.
  double decodeSeconds = 0;
  /// The prompt's prefill plus the first sample.
  double timeToFirstTokenSeconds = 0;

  double prefillTokensPerSecond() const;
  /// Tokens the decode steps produced (all but the first) per second.
  double decodeTokensPerSecond() const;
};

class Model {
public:
  /// The KV cache positions when the options ask for none, unless the
  /// bundle's config says the model was trained for fewer
  /// (max_position_embeddings).
  static constexpr int64_t kDefaultContext = 2048;
  /// Range tasks per thread in parallelFor: enough that a slow thread
  /// costs little, few enough that each range amortises its hand-out (a
  /// GEMM task rearranges its tiles' activations once per task).
  static constexpr int64_t kRangesPerThread = 4;
  /// The same for a one-row step (decode): its loops are short (a GEMV of
  /// K = 2048 streams 1-16 MiB in tens of microseconds at two threads), so
  /// the thread that finishes first waits up to a whole range for the
  /// other; 16 ranges a thread cut the caller's waits at 2 threads from
  /// 7-10% of a decode run to about 3% (the 16-layer hidden-2048 model of
  /// bench/model, AMD EPYC), where a range's own cost, a GEMV's activation
  /// rearrangement of one row, stays under a microsecond.
  static constexpr int64_t kDecodeRangesPerThread = 16;
  /// The stack one thread running a step's tasks may use, as measured
  /// (docs/MODEL.md, "Stack"; `cq4p-run --measure-stack`): a row tile of
  /// up to max(prefill_chunk, kStackTileRows) rows of the widest K, in
  /// bytes, plus kStackBaseBytes for the frames around it.
  static constexpr uint64_t kStackTileRows = 128;
  static constexpr uint64_t kStackBaseBytes = 64 << 10;
  /// stepStackBytes() of a library's steps.
  static uint64_t stepStackBytes(const cq4p_model_desc &desc);

  /// The model claimed for one call (see "One call at a time" above);
  /// released when destroyed. The methods taking a Claim run under it, so
  /// that a call made of several steps (generateText, a chat turn) holds
  /// the model from its first step to its last.
  class Claim {
  public:
    Claim() = default;
    Claim(const Claim &) = delete;
    Claim &operator=(const Claim &) = delete;
    ~Claim();

  private:
    friend class Model;
    Model *model_ = nullptr;
  };

  /// Binds `library`'s model steps to `bundle`'s tensors and allocates the
  /// model's memory and threads.
  static Status open(const Bundle &bundle, const KernelLibrary &library,
                     const ModelOptions &options, std::unique_ptr<Model> &out);

  Model(const Model &) = delete;
  Model &operator=(const Model &) = delete;
  ~Model();

  /// The context Model::open uses for `bundle` when asked for none.
  static int64_t defaultContext(const Bundle &bundle);

  /// Claims the model for `call` (named in the refusal), or refuses with
  /// CQ4P_ERROR_BUSY when another call holds it.
  Status claim(const char *call, Claim &out);

  /// Appends `count` tokens at position(); writes the last one's logits to
  /// `logits` ([vocab]) when it is not null. A step whose logits are not
  /// finite fails naming them; the tokens stay in the cache (position()
  /// counts them).
  Status prefill(const int64_t *ids, int64_t count, float *logits = nullptr);
  Status prefill(const Claim &claim, const int64_t *ids, int64_t count,
                 float *logits = nullptr);
  /// Appends one token at position(); writes its logits when asked.
  Status decode(int64_t id, float *logits = nullptr);
  Status decode(const Claim &claim, int64_t id, float *logits = nullptr);
  /// Starts a new sequence at position 0 (refused while a call runs).
  Status reset();
  Status reset(const Claim &claim);

  /// Called with each generated id in order (index 0 first); returning
  /// false stops the generation there.
  using TokenCallback = bool (*)(void *context, int64_t index, int64_t id);

  /// reset(), prefill of the prompt, then sample, decode, sample... until
  /// maxNewTokens ids are produced (the last one is not decoded) or the
  /// callback stops it. Everything is checked first: the prompt's ids, the
  /// sampling options, and that the prompt and the decoded tokens fit the
  /// context. Only logits the sampler refuses (NaN, +inf) can stop it
  /// later, with the ids so far delivered and the position where it was.
  Status generate(const int64_t *prompt, int64_t promptCount,
                  int64_t maxNewTokens, const SamplingOptions &sampling,
                  TokenCallback callback, void *context,
                  GenerateStats *stats = nullptr);
  /// The same, writing the ids to outIds[maxNewTokens].
  Status generate(const int64_t *prompt, int64_t promptCount,
                  int64_t maxNewTokens, const SamplingOptions &sampling,
                  int64_t *outIds, GenerateStats *stats = nullptr);

  /// Samples from the last step's logits.
  Status sample(const SamplingOptions &options, Rng &rng, int64_t &id);
  Status sample(const Claim &claim, const SamplingOptions &options, Rng &rng,
                int64_t &id);

  /// The last step's logits, [vocab].
  const float *logits() const { return logits_.data(); }
  int64_t position() const { return position_; }
  /// Changes with everything that changes what the KV cache holds (every
  /// reset and every step, whoever made it), never back to an earlier
  /// value: a caller that noted it after its own last call knows the cache
  /// still holds what it put there while it reads the same. A chat checks
  /// it before each turn (TextGeneration.h).
  uint64_t cacheVersion() const { return cacheVersion_; }
  int64_t context() const { return context_; }
  int64_t vocab() const { return int64_t(desc_->vocab); }
  int64_t prefillChunk() const { return int64_t(desc_->prefill_chunk); }
  const cq4p_model_desc &desc() const { return *desc_; }
  const KernelLibrary &library() const { return *library_; }
  ThreadPool &pool() { return *pool_; }
  uint64_t kvCacheBytes() const { return kvCacheBytes_; }
  uint64_t workspaceBytes() const { return desc_->workspace_bytes; }
  /// The stack a calling thread must have left for a step (checked by
  /// every call that runs one); the model's threads get at least this.
  uint64_t stackBytes() const { return stackBytes_; }

  /// The cq4p_parallel_for_fn the steps call: `pool` is a ThreadPool.
  /// Splits [0, count) into parallelRanges(count, threads) ranges of
  /// nearly equal size and runs them over the pool; with one range (one
  /// item, or one thread) it calls the task inline without waking the
  /// pool.
  static void parallelFor(void *pool, cq4p_task_fn task,
                          const cq4p_step_args *args, int64_t count);
  /// min(count, threads * ranges per thread: kDecodeRangesPerThread for a
  /// one-row step, kRangesPerThread otherwise); 1 for one thread; 0 for an
  /// empty loop. Never an empty range.
  static int64_t parallelRanges(int64_t count, int threads, int64_t rows);

private:
  Model() = default;
  Status bindTensors(const Bundle &bundle);
  Status allocate(uint64_t kvBytes);
  Status checkTokens(const char *what, const int64_t *ids, int64_t count) const;
  /// The library's shape against the bundle's config (vocab_size,
  /// num_hidden_layers, hidden_size, where the config has them).
  Status checkConfig(const Bundle &bundle) const;
  /// Whether `claim` is this model's; a claim of another model is a bug.
  Status checkClaim(const Claim &claim, const char *call) const;
  /// Fails, naming the position and the id, when a logit is NaN or
  /// infinite.
  Status checkLogits();
  /// Samples the model's own logits, with the last check's scan of them.
  Status sampleLogits(const SamplingOptions &options, Rng &rng, int64_t &id);
  Status generateClaimed(const int64_t *prompt, int64_t promptCount,
                         int64_t maxNewTokens, const SamplingOptions &sampling,
                         TokenCallback callback, void *context,
                         GenerateStats *stats);
  /// TensorFile::checkMapping over every bound file.
  Status checkFiles() const;
  /// After a step: fails, naming the file, when a bound file was truncated
  /// under it (and makes the logits NaN).
  Status checkFaults();
  Status runStep(cq4p_step_fn step, const int64_t *ids, int64_t rows);
  Status prefillChecked(const int64_t *ids, int64_t count);
  void copyLogits(float *out) const;

  const KernelLibrary *library_ = nullptr;
  const cq4p_model_desc *desc_ = nullptr;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<WeightView[]> weightViews_; // one per binding; CQ4 ones used
  std::vector<const void *> bindings_;
  std::vector<const TensorFile *> files_; // one per binding
  uint64_t faultsSeen_ = 0;               // guardedFaults() with none of ours
  void *kvCache_ = nullptr;
  uint64_t kvCacheBytes_ = 0;
  void *state_ = nullptr;
  uint64_t stateBytes_ = 0;
  void *workspace_ = nullptr;
  uint64_t workspaceMapped_ = 0;
  std::vector<float> logits_;
  /// The scan of logits_ by the last step's check; valid until the next
  /// step writes logits_.
  LogitScan scan_;
  bool scanned_ = false;
  Sampler sampler_;
  int64_t context_ = 0;
  int64_t position_ = 0;
  uint64_t cacheVersion_ = 0;
  uint64_t stackBytes_ = 0;
  /// The claiming thread's tag (0: free) and the call it makes.
  std::atomic<uintptr_t> owner_{0};
  std::atomic<const char *> ownerCall_{nullptr};
};

/// Refuses, naming both sizes, a calling thread with less than `bytes` of
/// stack left below this frame (`call` names the refused call).
Status checkCallerStack(const char *call, size_t bytes);

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_MODEL_H
