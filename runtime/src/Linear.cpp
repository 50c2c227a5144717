//===- Linear.cpp - binding tensors to kernels and running them -----------===//

#include "cq4p/runtime/Linear.h"

#include "cq4p/format.h"

#include <algorithm>
#include <limits>

namespace cq4p::runtime {
namespace {

// Less work than this many multiply-adds (about two microseconds of one
// core) is not worth waking another thread for.
constexpr int64_t kMinWorkPerTask = int64_t(1) << 16;
// Tasks per thread when the work allows it: a thread the OS delays leaves
// its remaining tasks to the others.
constexpr int64_t kTasksPerThread = 4;

/// How many tasks share `units` units of `workPerUnit` each over `threads`
/// threads: one when the work is too small to split, otherwise up to
/// kTasksPerThread per thread, never fewer units than one per task.
int64_t taskCountFor(int64_t units, int64_t workPerUnit, int threads) {
  if (units <= 1 || threads <= 1)
    return 1;
  int64_t byWork = workPerUnit > std::numeric_limits<int64_t>::max() / units
                       ? units
                       : std::max<int64_t>(1, units * workPerUnit / kMinWorkPerTask);
  return std::min({units, int64_t(threads) * kTasksPerThread, byWork});
}

/// `work` multiplied out, saturating (rows can be large).
int64_t workOf(int64_t rows, int64_t perRow) {
  return rows > std::numeric_limits<int64_t>::max() / std::max<int64_t>(perRow, 1)
             ? std::numeric_limits<int64_t>::max()
             : rows * perRow;
}

std::string str(uint64_t value) { return std::to_string(value); }

std::string shapeText(const TensorFile &file, bool withN) {
  std::string text;
  if (withN)
    text += "N=" + str(file.n()) + ", ";
  text += "K=" + str(file.k()) + ", group_size=" +
          str(file.info().group_size) +
          (file.isOrthogonal() ? ", orthogonal" : ", hadamard");
  return text;
}

Status missingKernel(const KernelLibrary &library, const TensorFile &file,
                     cq4p_kernel_op op, const std::string &wanted) {
  return Status(CQ4P_ERROR_NOT_FOUND,
                file.path() + ": no " + kernelOpName(op) + " kernel for " +
                    wanted + " in " + library.path() + "; it has:" +
                    library.listKernels(op));
}

bool takesRows(const cq4p_kernel_desc &kernel, int64_t rows) {
  return rows >= int64_t(kernel.min_rows) &&
         (kernel.max_rows == 0 || rows <= int64_t(kernel.max_rows));
}

const cq4p_kernel_desc *
firstTaking(const std::vector<const cq4p_kernel_desc *> &kernels,
            int64_t rows) {
  for (const cq4p_kernel_desc *kernel : kernels)
    if (takesRows(*kernel, rows))
      return kernel;
  return nullptr;
}

std::string rowRanges(const std::vector<const cq4p_kernel_desc *> &kernels) {
  std::string text;
  for (const cq4p_kernel_desc *kernel : kernels) {
    if (!text.empty())
      text += ", ";
    text += "rows " + str(kernel->min_rows) + ".." +
            (kernel->max_rows ? str(kernel->max_rows) : std::string()) +
            " (" + kernel->name + ")";
  }
  return text;
}

Status noKernelForRows(const KernelLibrary &library, const TensorFile &file,
                       cq4p_kernel_op op,
                       const std::vector<const cq4p_kernel_desc *> &kernels,
                       int64_t rows, bool withN) {
  return Status(CQ4P_ERROR_UNSUPPORTED,
                file.path() + ": run: no " + kernelOpName(op) +
                    " kernel in " + library.path() + " takes " + str(rows) +
                    (rows == 1 ? " row" : " rows") + " for " +
                    shapeText(file, withN) + "; it has " + rowRanges(kernels));
}

/// A descriptor's entry as the function type its op declares.
template <typename Fn> Fn entryAs(const cq4p_kernel_desc &kernel) {
  return reinterpret_cast<Fn>(const_cast<void *>(kernel.entry));
}

/// ceil(a / b) for a >= 0, b > 0.
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// After kernels ran over `file`: when it was truncated under them they
/// read zeros for its lost pages, so their `count` outputs become NaN (a
/// caller that ignores the status sees no plausible numbers) and the call
/// fails naming the file.
Status refuseIfTruncated(const TensorFile &file, float *out, uint64_t count) {
  if (!file.truncatedWhileMapped())
    return Status::ok();
  std::fill(out, out + count, std::numeric_limits<float>::quiet_NaN());
  return file.checkMapping();
}

} // namespace

void ActivationScratch::reserve(size_t rows, size_t k, size_t numGroups) {
  if (activations_.size() < rows * k)
    activations_.resize(rows * k);
  if (scales_.size() < rows * numGroups)
    scales_.resize(rows * numGroups);
}

Status LinearLayer::bind(const KernelLibrary &library, const TensorFile &file,
                         std::unique_ptr<LinearLayer> &out) {
  out.reset();
  if (Status status = file.checkMapping(); !status)
    return status;
  std::unique_ptr<LinearLayer> layer(new LinearLayer());
  layer->library_ = &library;
  layer->file_ = &file;
  if (Status status = layer->weight_.bind(file); !status)
    return status;

  bool orthogonal = file.isOrthogonal();
  uint32_t groupSize = file.info().group_size;
  cq4p_kernel_op quantizeOp = orthogonal ? CQ4P_KERNEL_QUANTIZE_ORTHOGONAL
                                         : CQ4P_KERNEL_QUANTIZE_HADAMARD;
  layer->quantizeKernels_ =
      library.find(quantizeOp, file.n(), file.k(), groupSize, orthogonal);
  if (layer->quantizeKernels_.empty())
    return missingKernel(library, file, quantizeOp, shapeText(file, false));

  layer->matmulKernels_ = library.find(CQ4P_KERNEL_MATMUL, file.n(), file.k(),
                                       groupSize, orthogonal);
  // A GEMV is required (decoding is one row at a time); a GEMM is optional,
  // and without one a call with more rows is refused when it is made.
  if (firstTaking(layer->matmulKernels_, 1) == nullptr)
    return missingKernel(library, file, CQ4P_KERNEL_MATMUL,
                         shapeText(file, true) + " taking 1 row (a GEMV)");
  if (firstTaking(layer->quantizeKernels_, 1) == nullptr)
    return missingKernel(library, file, quantizeOp,
                         shapeText(file, false) + " taking 1 row");
  out = std::move(layer);
  return Status::ok();
}

Status LinearLayer::attachSme2(const KernelLibrary &sme2) {
  std::vector<const cq4p_kernel_desc *> kernels = sme2.find(
      CQ4P_KERNEL_MATMUL, n(), k(), groupSize(), orthogonal());
  if (kernels.empty())
    return missingKernel(sme2, *file_, CQ4P_KERNEL_MATMUL,
                         shapeText(*file_, true) + " for the SME workers");
  for (const cq4p_kernel_desc *kernel : kernels)
    if (kernel->target != CQ4P_TARGET_AARCH64_SME2)
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    path() + ": the SME workers need aarch64-sme2 MATMUL "
                             "kernels; " +
                        sme2.path() + " has " + describeKernel(*kernel));
  sme2Library_ = &sme2;
  sme2MatmulKernels_ = std::move(kernels);
  return Status::ok();
}

Status LinearLayer::setSmeWorkers(int count) {
  if (count < 0 || count > ThreadPool::kMaxThreads)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": SME workers: expected 0.." +
                      std::to_string(ThreadPool::kMaxThreads) +
                      " (0 disables them), found " + std::to_string(count));
  smeWorkers_ = count;
  return Status::ok();
}

int LinearLayer::smeThreadsFor(int threads) const {
  return sme2Library_ != nullptr ? smeThreadCount(smeWorkers_, threads) : 0;
}

int LinearLayer::smeThreadCount(int smeWorkers, int threads) {
  if (smeWorkers <= 0 || threads < 1)
    return 0;
  if (threads == 1)
    return 1;
  return std::min(smeWorkers, threads - 1);
}

int64_t LinearRunTrace::tasksOn(Backend backend) const {
  return std::count_if(matmulTasks.begin(), matmulTasks.end(),
                       [&](const MatmulTask &task) {
                         return task.backend == backend;
                       });
}

Status LinearLayer::setSuperBlocksPerTask(int64_t count) {
  if (count < 1)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": super-blocks per task: expected >= 1, found " +
                      std::to_string(count));
  superBlocksPerTask_ = count;
  return Status::ok();
}

const cq4p_kernel_desc *LinearLayer::quantizeKernelFor(int64_t rows) const {
  return firstTaking(quantizeKernels_, rows);
}

const cq4p_kernel_desc *LinearLayer::matmulKernelFor(int64_t rows) const {
  return firstTaking(matmulKernels_, rows);
}

const cq4p_kernel_desc *LinearLayer::sme2MatmulKernelFor(int64_t rows) const {
  return firstTaking(sme2MatmulKernels_, rows);
}

Status LinearLayer::run(ThreadPool &pool, const float *x, float *y,
                        int64_t rows, ActivationScratch &scratch,
                        LinearRunTrace *trace) const {
  if (rows < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: rows: expected >= 0, found " +
                      std::to_string(rows));
  if (rows == 0)
    return Status::ok();
  if (x == nullptr || y == nullptr)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: expected x and y, found a null pointer");
  uint64_t widest = std::max(n(), k());
  if (uint64_t(rows) > uint64_t(std::numeric_limits<int64_t>::max()) / widest)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: rows: expected at most " +
                      str(uint64_t(std::numeric_limits<int64_t>::max()) /
                          widest) +
                      " for N=" + str(n()) + ", K=" + str(k()) + ", found " +
                      str(uint64_t(rows)));
  const cq4p_kernel_desc *quantize = quantizeKernelFor(rows);
  if (quantize == nullptr)
    return noKernelForRows(*library_, *file_, cq4p_kernel_op(quantizeKernels_[0]->op),
                           quantizeKernels_, rows, false);
  const cq4p_kernel_desc *matmul = matmulKernelFor(rows);
  if (matmul == nullptr)
    return noKernelForRows(*library_, *file_, CQ4P_KERNEL_MATMUL,
                           matmulKernels_, rows, true);

  // The scratch is one call's: a second call at once would overwrite it.
  if (scratch.inUse_.exchange(true, std::memory_order_acquire))
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: scratch: in use by another call at the "
                           "same time; each thread needs its own "
                           "ActivationScratch");
  struct Release {
    std::atomic<bool> &inUse;
    ~Release() { inUse.store(false, std::memory_order_release); }
  } release{scratch.inUse_};
  scratch.reserve(size_t(rows), size_t(k()), numGroups());
  int8_t *activations = scratch.activations();
  float *scales = scratch.scales();
  const cq4p_weight_view *weight = &weight_.view();
  int threads = pool.workingThreads();

  // Phase 1: groups across threads, every row in each task. The Hadamard
  // transform is a small share of the work (a butterfly pass per
  // activation); an orthogonal group is a 128 x K matrix product per row.
  auto quantizeFn = entryAs<cq4p_quantize_fn>(*quantize);
  int64_t groups = numGroups();
  int64_t gs = int64_t(k()) / groups;
  int64_t perGroup = workOf(rows, file_->isOrthogonal() ? gs * int64_t(k()) : 8 * gs);
  int64_t groupsPerTask = ceilDiv(groups, taskCountFor(groups, perGroup, threads));
  pool.parallelFor(ceilDiv(groups, groupsPerTask), [&](int64_t task) {
    int64_t begin = task * groupsPerTask;
    int64_t end = std::min(groups, begin + groupsPerTask);
    quantizeFn(weight, x, activations, scales, rows, begin, end);
  });

  // Phase 2: super-blocks across threads, the SME2 kernel on the threads of
  // the lowest indices, the NEON kernel on the others.
  const cq4p_kernel_desc *sme2Matmul = sme2MatmulKernelFor(rows);
  int smeThreads = sme2Matmul != nullptr ? smeThreadsFor(threads) : 0;
  if (smeThreads == 0)
    sme2Matmul = nullptr;
  auto neonFn = entryAs<cq4p_matmul_fn>(*matmul);
  auto sme2Fn = sme2Matmul != nullptr ? entryAs<cq4p_matmul_fn>(*sme2Matmul)
                                      : neonFn;
  int64_t superBlocks = int64_t(this->superBlocks());
  int64_t perTask = superBlocksPerTask_;
  if (perTask == 0)
    perTask = ceilDiv(superBlocks,
                      taskCountFor(superBlocks,
                                   workOf(rows, CQ4P_PANEL_CHANNELS * int64_t(k())),
                                   threads));
  int64_t tasks = ceilDiv(superBlocks, perTask);
  if (trace != nullptr) {
    trace->threads = threads;
    trace->smeThreads = smeThreads;
    trace->neonMatmul = matmul;
    trace->sme2Matmul = sme2Matmul;
    trace->matmulTasks.assign(size_t(tasks), LinearRunTrace::MatmulTask());
  }
  pool.parallelFor(tasks, [&](int64_t task, int thread) {
    int64_t begin = task * perTask;
    int64_t end = std::min(superBlocks, begin + perTask);
    bool sme2 = thread < smeThreads;
    (sme2 ? sme2Fn : neonFn)(weight, activations, scales, y, rows, begin, end);
    if (trace != nullptr)
      trace->matmulTasks[size_t(task)] = {begin, end, thread,
                                          sme2 ? Backend::Sme2 : Backend::Neon};
  });
  return refuseIfTruncated(*file_, y, uint64_t(rows) * n());
}

Status EmbeddingLayer::bind(const KernelLibrary &library,
                            const TensorFile &file,
                            std::unique_ptr<EmbeddingLayer> &out) {
  out.reset();
  if (Status status = file.checkMapping(); !status)
    return status;
  std::unique_ptr<EmbeddingLayer> layer(new EmbeddingLayer());
  layer->library_ = &library;
  layer->file_ = &file;
  if (!file.isOrthogonal())
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  file.path() +
                      ": an embedding needs an orthogonal tensor (flag 1<<1), "
                      "found a Hadamard one");
  if (Status status = layer->weight_.bind(file); !status)
    return status;
  layer->kernels_ = library.find(CQ4P_KERNEL_EMBEDDING, file.n(), file.k(),
                                 file.info().group_size, true);
  if (layer->kernels_.empty())
    return missingKernel(library, file, CQ4P_KERNEL_EMBEDDING,
                         shapeText(file, true));
  out = std::move(layer);
  return Status::ok();
}

const cq4p_kernel_desc *EmbeddingLayer::kernelFor(int64_t count) const {
  return firstTaking(kernels_, count);
}

Status EmbeddingLayer::run(const int64_t *ids, float *out,
                           int64_t count) const {
  if (count < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: count: expected >= 0, found " +
                      std::to_string(count));
  if (count == 0)
    return Status::ok();
  if (ids == nullptr || out == nullptr)
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: expected ids and out, found a null pointer");
  if (uint64_t(count) > uint64_t(std::numeric_limits<int64_t>::max()) / k())
    return Status(CQ4P_ERROR_ARGUMENT,
                  path() + ": run: count: expected at most " +
                      str(uint64_t(std::numeric_limits<int64_t>::max()) / k()) +
                      ", found " + str(uint64_t(count)));
  // The kernel indexes the panels with these ids unchecked.
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] < 0 || uint64_t(ids[i]) >= rows())
      return Status(CQ4P_ERROR_ARGUMENT,
                    path() + ": run: ids[" + std::to_string(i) + "] = " +
                        std::to_string(ids[i]) + ": expected a row in [0, " +
                        str(rows()) + ")");
  const cq4p_kernel_desc *kernel = kernelFor(count);
  if (kernel == nullptr)
    return noKernelForRows(*library_, *file_, CQ4P_KERNEL_EMBEDDING, kernels_,
                           count, true);
  entryAs<cq4p_embedding_fn>(*kernel)(&weight_.view(), ids, out, count);
  return refuseIfTruncated(*file_, out, uint64_t(count) * k());
}

} // namespace cq4p::runtime
