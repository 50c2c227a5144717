//===- Linear.h - tensors bound to compiled kernels --------------*- C++ -*-===//
//
// A LinearLayer is one CQ4 packed-panel tensor (Hadamard, or orthogonal for
// an lm_head) bound to the kernels of a KernelLibrary that compute
// y[rows][N] = x[rows][K] * W^T as docs/FORMAT.md section 5 defines it:
//
//   phase 1: the quantize kernel turns x into int8 activations and one fp32
//            scale per (row, group); the groups are split across threads,
//            every task taking all rows;
//   phase 2: a matmul kernel (a GEMV for one row, a GEMM for more) computes
//            int32 partials over the panels and rescales them; the 64-channel
//            super-blocks are split across threads, superBlocksPerTask each.
//
// Each output element comes from exactly one kernel call over its
// super-block and each activation from exactly one quantize call over its
// group, so the result is the same bit for bit whatever the thread count or
// the split (kernels are deterministic).
//
// Binding checks everything a kernel relies on (layout, alignment, a kernel
// for the exact N, K, group size and rotation) and refuses, naming the
// tensor, what it wanted and what the library has; run() checks its
// arguments and the row count against the kernels' ranges before it calls
// any kernel. A layer refers to its TensorFile and KernelLibrary: both must
// outlive it.
//
// A file truncated while mapped (docs/TRUST.md): bind refuses a file whose
// size is no longer the mapped size, and a run whose kernels met the
// truncation (they read zeros for the lost pages) fails naming the file,
// with NaN in place of its outputs; so do all later runs over that file.
//
// SME workers. On SME2 silicon the cores of a cluster share one SME unit,
// so only a few threads should run SME2 kernels while the others keep
// their NEON units busy. A layer bound to a NEON library may also have an
// SME2 library attached (attachSme2); then, of a pool of nt working threads
// (ThreadPool::workingThreads), the
// threads with index (ThreadPool.h) below smeThreadsFor(nt) run the SME2
// matmul kernel for the super-blocks they take and the others the NEON one:
// min(smeWorkers(), nt - 1) threads, so that at least one thread runs NEON,
// except that a pool of one thread runs SME2 whenever SME workers are
// allowed at all (its one thread is all there is; an SME unit outruns a
// core's NEON on these kernels). Phase 1 runs the NEON library's quantize
// kernel on every thread, so both backends read the same int8 activations;
// the two libraries' matmul kernels compute the same int32 partials and the
// same rescale, so the result is still the same bit for bit whatever the
// thread count, the split or the number of SME workers.
//
// An EmbeddingLayer decodes rows of an orthogonal panel tensor (token
// embeddings) through the library's EMBEDDING kernel.
//
// Threads (docs/TRUST.md). Once bound and configured, a layer is immutable:
// run() is const and any number of threads may call it at once, each with
// its own ActivationScratch, output and trace (run() refuses a scratch in use
// by another call), sharing one ThreadPool (its loops are serialised) or
// using their own. The results are the same bit for bit as one thread's.
// attachSme2, setSmeWorkers and setSuperBlocksPerTask change the layer and
// must not run while any thread runs it.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_LINEAR_H
#define CQ4P_RUNTIME_LINEAR_H

#include "cq4p/kernel_abi.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Status.h"
#include "cq4p/runtime/TensorFile.h"
#include "cq4p/runtime/ThreadPool.h"
#include "cq4p/runtime/WeightView.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cq4p::runtime {

/// The int8 activations [rows][K] and their scales [rows][num_groups]
/// between the two phases of a linear layer. One scratch may serve every
/// layer that runs after another; it grows to the largest call and then
/// never allocates again.
///
/// A scratch is per thread: it holds one call's activations, so two runs
/// at once on one scratch would overwrite each other's. run() claims it for
/// the call (one atomic exchange) and refuses a scratch another run holds,
/// instead of computing wrong results.
class ActivationScratch {
public:
  ActivationScratch() = default;
  ActivationScratch(const ActivationScratch &) = delete;
  ActivationScratch &operator=(const ActivationScratch &) = delete;

  /// Makes room for `rows` rows of `k` activations and `numGroups` scales.
  void reserve(size_t rows, size_t k, size_t numGroups);
  int8_t *activations() { return activations_.data(); }
  float *scales() { return scales_.data(); }
  size_t activationCapacity() const { return activations_.size(); }
  size_t scaleCapacity() const { return scales_.size(); }

private:
  friend class LinearLayer;
  std::vector<int8_t> activations_;
  std::vector<float> scales_;
  std::atomic<bool> inUse_{false};
};

/// What one LinearLayer::run did in phase 2, recorded only when asked for
/// (run's `trace`), so that tests and tools can see which backend ran each
/// super-block range without any global counter.
struct LinearRunTrace {
  struct MatmulTask {
    int64_t superBlockBegin = 0, superBlockEnd = 0;
    int thread = -1;                ///< the pool's index of the thread that ran it
    Backend backend = Backend::Auto; ///< Neon or Sme2 once it has run
  };
  int threads = 0;    ///< the pool's working threads when the call began
  int smeThreads = 0; ///< threads [0, smeThreads) ran the SME2 kernel
  const cq4p_kernel_desc *neonMatmul = nullptr;
  const cq4p_kernel_desc *sme2Matmul = nullptr; ///< null: no SME2 this call
  std::vector<MatmulTask> matmulTasks;          ///< in task order

  /// Phase-2 tasks run by `backend`.
  int64_t tasksOn(Backend backend) const;
};

class LinearLayer {
public:
  /// 0: phase-2 tasks sized from the work and the thread count (Linear.cpp).
  static constexpr int64_t kDefaultSuperBlocksPerTask = 0;
  static constexpr int kDefaultSmeWorkers = 2;

  /// Binds `file` (a CQ4 packed-panel tensor) to `library`'s kernels (the
  /// NEON library on AArch64; every kernel of the layer comes from it until
  /// an SME2 library is attached).
  static Status bind(const KernelLibrary &library, const TensorFile &file,
                     std::unique_ptr<LinearLayer> &out);

  LinearLayer(const LinearLayer &) = delete;
  LinearLayer &operator=(const LinearLayer &) = delete;

  /// Lets the SME workers run `sme2`'s matmul kernels for this tensor. The
  /// library must have one of the tensor's N, K and group size, built for
  /// aarch64-sme2 (opening it has checked the CPU runs it); a call whose
  /// row count none of them takes runs NEON on every thread. Refused, the
  /// layer keeps what it had. `sme2` must outlive the layer.
  Status attachSme2(const KernelLibrary &sme2);
  const KernelLibrary *sme2Library() const { return sme2Library_; }

  /// How many threads may run SME2 kernels (0 disables them; at most
  /// ThreadPool::kMaxThreads). The default is kDefaultSmeWorkers.
  Status setSmeWorkers(int count);
  int smeWorkers() const { return smeWorkers_; }
  /// The threads of a pool of `threads` that run SME2 matmuls (those with
  /// the lowest indices): 0 without an SME2 library, else
  /// smeThreadCount(smeWorkers(), threads).
  int smeThreadsFor(int threads) const;
  /// The rule: 0 when `smeWorkers` is 0, else min(smeWorkers, threads - 1),
  /// and 1 when threads is 1.
  static int smeThreadCount(int smeWorkers, int threads);

  /// y[rows][N] = x[rows][K] * W^T. rows == 0 does nothing. With `trace`,
  /// also records which thread and backend ran each phase-2 task.
  Status run(ThreadPool &pool, const float *x, float *y, int64_t rows,
             ActivationScratch &scratch, LinearRunTrace *trace = nullptr) const;

  /// Super-blocks of 64 channels per phase-2 task (>= 1), instead of a
  /// count sized from the work and the thread count.
  Status setSuperBlocksPerTask(int64_t count);
  int64_t superBlocksPerTask() const { return superBlocksPerTask_; }

  const std::string &path() const { return file_->path(); }
  uint64_t n() const { return file_->n(); }
  uint64_t k() const { return file_->k(); }
  uint32_t groupSize() const { return file_->info().group_size; }
  uint32_t numGroups() const { return file_->info().num_groups; }
  uint64_t superBlocks() const { return cq4p_num_super_blocks(n()); }
  bool orthogonal() const { return file_->isOrthogonal(); }
  const cq4p_weight_view &view() const { return weight_.view(); }

  /// The kernels run() would call for `rows` rows, or null when the
  /// library has none taking that many.
  const cq4p_kernel_desc *quantizeKernelFor(int64_t rows) const;
  const cq4p_kernel_desc *matmulKernelFor(int64_t rows) const;
  /// The SME2 matmul kernel the SME workers would call for `rows` rows, or
  /// null (no SME2 library, or none of its kernels takes that many).
  const cq4p_kernel_desc *sme2MatmulKernelFor(int64_t rows) const;

private:
  LinearLayer() = default;

  const KernelLibrary *library_ = nullptr;
  const KernelLibrary *sme2Library_ = nullptr;
  const TensorFile *file_ = nullptr;
  WeightView weight_;
  std::vector<const cq4p_kernel_desc *> quantizeKernels_;
  std::vector<const cq4p_kernel_desc *> matmulKernels_;
  std::vector<const cq4p_kernel_desc *> sme2MatmulKernels_;
  int64_t superBlocksPerTask_ = kDefaultSuperBlocksPerTask;
  int smeWorkers_ = kDefaultSmeWorkers;
};

class EmbeddingLayer {
public:
  /// Binds `file` (an orthogonal CQ4 packed-panel tensor, [vocab][K]) to
  /// `library`'s EMBEDDING kernel.
  static Status bind(const KernelLibrary &library, const TensorFile &file,
                     std::unique_ptr<EmbeddingLayer> &out);

  EmbeddingLayer(const EmbeddingLayer &) = delete;
  EmbeddingLayer &operator=(const EmbeddingLayer &) = delete;

  /// out[i][K] = row ids[i] of the tensor, for i < count. Every id must be
  /// a row of the tensor. count == 0 does nothing.
  Status run(const int64_t *ids, float *out, int64_t count) const;

  const std::string &path() const { return file_->path(); }
  uint64_t rows() const { return file_->n(); }
  uint64_t k() const { return file_->k(); }
  const cq4p_weight_view &view() const { return weight_.view(); }
  const cq4p_kernel_desc *kernelFor(int64_t count) const;

private:
  EmbeddingLayer() = default;

  const KernelLibrary *library_ = nullptr;
  const TensorFile *file_ = nullptr;
  WeightView weight_;
  std::vector<const cq4p_kernel_desc *> kernels_;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_LINEAR_H
