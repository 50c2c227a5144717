//===- Model.cpp - binding, memory and threads for model steps ------------===//

#include "cq4p/runtime/Model.h"

#include "LargePages.h"
#include "MappingGuard.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <pthread.h>
#include <sys/mman.h>

namespace cq4p::runtime {
namespace {

std::string str(uint64_t value) { return std::to_string(value); }
std::string signedStr(int64_t value) { return std::to_string(value); }

std::string tokens(int64_t count) {
  return signedStr(count) + (count == 1 ? " token" : " tokens");
}

/// Zero-filled, page-aligned (so 64-byte aligned) memory the kernel
/// provides lazily: a KV cache of gigabytes costs nothing until written.
/// Mappings of 2 MiB and more are placed for large pages (LargePages.h): at a
/// long context a decode step reads every layer's cached keys and values,
/// row by row at the cache's row stride, and with 4 KiB pages nearly every
/// row is a TLB miss. The memory still comes lazily, 2 MiB at a time.
void *mapZeroed(uint64_t bytes) {
  void *memory = mapForLargePages(std::max<uint64_t>(bytes, 1),
                                  PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1);
  return memory == MAP_FAILED ? nullptr : memory;
}

void unmap(void *memory, uint64_t bytes) {
  if (memory != nullptr)
    ::munmap(memory, std::max<uint64_t>(bytes, 1));
}

const char *layoutName(uint32_t layout) {
  switch (layout) {
  case CQ4P_LAYOUT_PANELS: return "packed panels";
  case CQ4P_LAYOUT_ROW_MAJOR: return "legacy row-major";
  case CQ4P_LAYOUT_INTERLEAVED_4ROW: return "legacy interleaved 4-row";
  default: return "dense";
  }
}

const char *precisionName(uint32_t precision) {
  switch (precision) {
  case CQ4P_PRECISION_FP16: return "FP16";
  case CQ4P_PRECISION_FP32: return "FP32";
  case CQ4P_PRECISION_CQ4: return "CQ4";
  default: return "another precision";
  }
}

std::string cq4Shape(uint64_t n, uint64_t k, uint64_t groupSize,
                     bool orthogonal) {
  return "N=" + str(n) + " K=" + str(k) + " gs=" + str(groupSize) +
         (orthogonal ? " orthogonal" : " hadamard");
}

double secondsBetween(std::chrono::steady_clock::time_point start,
                      std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

} // namespace

//===----------------------------------------------------------------------===//
// Statistics
//===----------------------------------------------------------------------===//

double GenerateStats::prefillTokensPerSecond() const {
  return prefillSeconds > 0 ? double(promptTokens) / prefillSeconds : 0.0;
}

double GenerateStats::decodeTokensPerSecond() const {
  return decodeSeconds > 0 && generatedTokens > 1
             ? double(generatedTokens - 1) / decodeSeconds
             : 0.0;
}

//===----------------------------------------------------------------------===//
// Opening
//===----------------------------------------------------------------------===//

int64_t Model::defaultContext(const Bundle &bundle) {
  std::optional<int64_t> trained =
      bundle.configInteger("max_position_embeddings");
  if (trained && *trained > 0 && *trained < kDefaultContext)
    return *trained;
  return kDefaultContext;
}

Status Model::open(const Bundle &bundle, const KernelLibrary &library,
                   const ModelOptions &options, std::unique_ptr<Model> &out) {
  out.reset();
  const cq4p_model_desc *desc = library.model();
  if (desc == nullptr)
    return Status(CQ4P_ERROR_NOT_FOUND,
                  library.path() + ": has no model steps (compiled from a "
                                   "kernel-only model.mlir?)");
  if (Status status = bundle.checkLibrary(library); !status)
    return status;
  if (options.expectedPrefillChunk < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "prefill chunk: expected >= 0 (0: the library's), found " +
                      signedStr(options.expectedPrefillChunk));
  if (options.expectedPrefillChunk != 0 &&
      uint64_t(options.expectedPrefillChunk) != desc->prefill_chunk)
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  library.path() + ": prefill chunk: expected " +
                      signedStr(options.expectedPrefillChunk) +
                      " (as asked), found " + str(desc->prefill_chunk) +
                      " (the library's); recompile with that chunk or ask "
                      "for none");
  if (options.context < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "context: expected > 0 positions (0: the default), found " +
                      signedStr(options.context));
  // Ids are ranked as uint32 when sampling; no vocabulary comes near.
  if (desc->vocab > uint64_t(std::numeric_limits<int32_t>::max()))
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  library.path() +
                      ": vocab: expected at most 2^31 - 1, found " +
                      str(desc->vocab));

  std::unique_ptr<Model> model(new Model());
  model->library_ = &library;
  model->desc_ = desc;
  model->context_ =
      options.context != 0 ? options.context : defaultContext(bundle);

  uint64_t kvBytes = 0;
  bool overflow = __builtin_mul_overflow(uint64_t(model->context_),
                                         desc->kv_position_bytes, &kvBytes);
  std::string kvShape = signedStr(model->context_) + " positions x " +
                        str(desc->kv_position_bytes) + " bytes (" +
                        str(desc->layers) + " layers, " +
                        kvDtypeName(desc->kv_dtype) + ")";
  if (overflow)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "KV cache: " + kvShape + " does not fit in 64 bits");

  if (Status status = model->checkConfig(bundle); !status)
    return status;
  if (Status status = model->bindTensors(bundle); !status)
    return status;
  model->stackBytes_ = stepStackBytes(*desc);
  if (Status status = ThreadPool::create(options.threads, model->pool_,
                                         size_t(2 * model->stackBytes_));
      !status)
    return status;

  errno = 0;
  model->kvCache_ = mapZeroed(kvBytes);
  if (model->kvCache_ == nullptr)
    return Status(CQ4P_ERROR_IO, "KV cache: cannot allocate " + str(kvBytes) +
                                     " bytes (" + kvShape +
                                     "): " + std::strerror(errno));
  model->kvCacheBytes_ = kvBytes;
  model->state_ = mapZeroed(desc->state_bytes);
  if (model->state_ == nullptr)
    return Status(CQ4P_ERROR_IO, "step state: cannot allocate " +
                                     str(desc->state_bytes) +
                                     " bytes: " + std::strerror(errno));
  model->stateBytes_ = desc->state_bytes;
  model->workspace_ = mapZeroed(desc->workspace_bytes);
  if (model->workspace_ == nullptr)
    return Status(CQ4P_ERROR_IO, "workspace: cannot allocate " +
                                     str(desc->workspace_bytes) +
                                     " bytes: " + std::strerror(errno));
  model->workspaceMapped_ = desc->workspace_bytes;
  model->logits_.assign(desc->vocab, 0.0f);
  model->sampler_.reserve(desc->vocab);
  out = std::move(model);
  return Status::ok();
}

Model::~Model() {
  // Workers first: none may be inside a step when its memory goes.
  pool_.reset();
  unmap(kvCache_, kvCacheBytes_);
  unmap(state_, stateBytes_);
  unmap(workspace_, workspaceMapped_);
}

uint64_t Model::stepStackBytes(const cq4p_model_desc &desc) {
  uint64_t widestK = 0;
  for (uint32_t i = 0; i < desc.binding_count; ++i)
    if (desc.bindings[i].kind == CQ4P_BINDING_CQ4)
      widestK = std::max<uint64_t>(widestK, desc.bindings[i].k);
  uint64_t tile = 0;
  if (__builtin_mul_overflow(std::max<uint64_t>(desc.prefill_chunk, kStackTileRows),
                             widestK, &tile) ||
      tile > std::numeric_limits<uint64_t>::max() / 4)
    return std::numeric_limits<uint64_t>::max() / 4; // no thread has it
  return tile + kStackBaseBytes;
}

Status Model::checkConfig(const Bundle &bundle) const {
  struct Field {
    const char *key, *what;
    uint64_t library;
  } fields[] = {{"vocab_size", "vocab", desc_->vocab},
                {"num_hidden_layers", "layers", desc_->layers},
                {"hidden_size", "hidden", desc_->hidden}};
  for (const Field &field : fields) {
    std::optional<int64_t> config = bundle.textConfigInteger(field.key);
    if (config && (*config < 0 || uint64_t(*config) != field.library))
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    library_->path() + ": " + field.what + ": the library's " +
                        "steps were compiled for " + str(field.library) +
                        ", the bundle's config says " + field.key + " " +
                        signedStr(*config) + " (" + bundle.directory() +
                        "/manifest.json)");
  }
  return Status::ok();
}

Status Model::bindTensors(const Bundle &bundle) {
  const std::string &path = library_->path();
  uint32_t count = desc_->binding_count;
  weightViews_.reset(new WeightView[count]);
  bindings_.assign(count, nullptr);
  for (uint32_t i = 0; i < count; ++i) {
    const cq4p_model_binding &binding = desc_->bindings[i];
    std::string label = path + ": binding " + str(i) + " ('" +
                        binding.tensor + "')";
    const BundleTensor *tensor = bundle.find(binding.tensor);
    if (tensor == nullptr)
      return Status(CQ4P_ERROR_NOT_FOUND,
                    label + ": no such tensor in the bundle (" +
                        bundle.directory() + ")");
    const TensorFile &file = *tensor->file;
    // Before anything reads it: a truncated file's values are gone.
    if (Status status = file.checkMapping(); !status)
      return status;
    files_.push_back(&file);
    const cq4p_tensor_info &info = file.info();
    std::string wanted = bindingKindName(binding.kind);
    if (binding.kind == CQ4P_BINDING_CQ4)
      wanted += " " + cq4Shape(binding.n, binding.k, binding.group_size,
                               binding.orthogonal != 0) + " packed panels";
    else
      wanted += " of " + str(binding.n) + " elements";
    auto mismatch = [&](const std::string &found) {
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    label + ": the library expects " + wanted +
                        ", the bundle's tensor is " + found + " (" +
                        file.path() + ")");
    };

    switch (binding.kind) {
    case CQ4P_BINDING_CQ4: {
      if (info.precision != CQ4P_PRECISION_CQ4)
        return mismatch(std::string(precisionName(info.precision)) +
                        " (dense)");
      std::string found = "CQ4 " +
                          cq4Shape(file.n(), file.k(), info.group_size,
                                   file.isOrthogonal()) +
                          " " + layoutName(info.layout);
      if (file.n() != binding.n || file.k() != binding.k ||
          info.group_size != binding.group_size ||
          file.isOrthogonal() != (binding.orthogonal != 0) ||
          info.layout != CQ4P_LAYOUT_PANELS)
        return mismatch(found);
      if (Status status = weightViews_[i].bind(file); !status)
        return Status(status.code(), label + ": " + status.message());
      bindings_[i] = &weightViews_[i].view();
      break;
    }
    case CQ4P_BINDING_FP16:
    case CQ4P_BINDING_FP32: {
      uint32_t precision = binding.kind == CQ4P_BINDING_FP16
                               ? CQ4P_PRECISION_FP16
                               : CQ4P_PRECISION_FP32;
      uint64_t elementBytes = binding.kind == CQ4P_BINDING_FP16 ? 2 : 4;
      // A validated dense file's element count fits: its bytes do.
      uint64_t elements = 1;
      for (uint32_t d = 0; d < info.ndim; ++d)
        elements *= info.dims[d];
      std::string found = std::string(precisionName(info.precision)) +
                          " of " + str(elements) + " elements";
      if (info.precision != precision || elements != binding.n)
        return mismatch(info.precision == CQ4P_PRECISION_CQ4
                            ? "CQ4 " + cq4Shape(file.n(), file.k(),
                                                info.group_size,
                                                file.isOrthogonal())
                            : found);
      ByteSpan data = file.region(CQ4P_REGION_DATA);
      // Steps load these as typed elements (a file may be 1-byte aligned).
      if (reinterpret_cast<uintptr_t>(data.data) % elementBytes != 0)
        return Status(CQ4P_ERROR_UNSUPPORTED,
                      label + ": " + file.path() +
                          ": data: expected an address aligned to " +
                          str(elementBytes) +
                          " bytes (its element type), found one that is not");
      bindings_[i] = data.data;
      break;
    }
    default:
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    label + ": binding kind " + str(binding.kind) +
                        " is not one this runtime binds");
    }
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

int64_t Model::parallelRanges(int64_t count, int threads, int64_t rows) {
  if (count <= 0)
    return 0;
  if (threads <= 1)
    return 1;
  int64_t perThread = rows == 1 ? kDecodeRangesPerThread : kRangesPerThread;
  return std::min<int64_t>(count, int64_t(threads) * perThread);
}

void Model::parallelFor(void *pool, cq4p_task_fn task,
                        const cq4p_step_args *args, int64_t count) {
  auto *threads = static_cast<ThreadPool *>(pool);
  int64_t ranges =
      parallelRanges(count, threads != nullptr ? threads->threadCount() : 1,
                     args->rows);
  if (ranges == 0)
    return;
  if (ranges == 1) {
    task(args, 0, count);
    return;
  }
  // Range r is [r * base + min(r, extra), ...): sizes differ by at most
  // one, computed without a product that could overflow.
  struct Loop {
    cq4p_task_fn task;
    const cq4p_step_args *args;
    int64_t base, extra;
  } loop{task, args, count / ranges, count % ranges};
  threads->run(
      ranges,
      [](void *context, int64_t range) {
        const Loop &l = *static_cast<const Loop *>(context);
        int64_t begin = range * l.base + std::min(range, l.extra);
        int64_t end = begin + l.base + (range < l.extra ? 1 : 0);
        l.task(l.args, begin, end);
      },
      &loop);
}

Status Model::checkTokens(const char *what, const int64_t *ids,
                          int64_t count) const {
  if (count < 1)
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string(what) + ": expected at least 1 token, found " +
                      signedStr(count));
  if (ids == nullptr)
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string(what) + ": expected " + tokens(count) +
                      ", found a null pointer");
  if (count > context_ - position_)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "context overflow: position " + signedStr(position_) +
                      " + " + tokens(count) + " > context " +
                      signedStr(context_));
  int64_t vocabulary = vocab();
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0)
      return Status(CQ4P_ERROR_ARGUMENT,
                    "token id " + signedStr(ids[i]) + " at index " +
                        signedStr(i) + " < 0");
    if (ids[i] >= vocabulary)
      return Status(CQ4P_ERROR_ARGUMENT,
                    "token id " + signedStr(ids[i]) + " at index " +
                        signedStr(i) + " >= vocab " + signedStr(vocabulary));
  }
  return Status::ok();
}

Status Model::checkFiles() const {
  for (const TensorFile *file : files_)
    if (Status status = file->checkMapping(); !status)
      return status;
  return Status::ok();
}

Status Model::checkFaults() {
  // Faults are counted over the process: while the count is the one seen
  // last, none of this model's files can have faulted.
  uint64_t faults = guardedFaults();
  if (faults == faultsSeen_)
    return Status::ok();
  for (const TensorFile *file : files_)
    if (file->truncatedWhileMapped()) {
      std::fill(logits_.begin(), logits_.end(),
                std::numeric_limits<float>::quiet_NaN());
      return file->checkMapping();
    }
  faultsSeen_ = faults;
  return Status::ok();
}

Status Model::runStep(cq4p_step_fn step, const int64_t *ids, int64_t rows) {
  // The step's contract (kernel_abi.h), whatever called it: the KV cache
  // has room for every row it appends.
  int64_t most = step == desc_->decode ? 1 : prefillChunk();
  if (rows < 1 || rows > most || position_ < 0 || rows > context_ - position_)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "context overflow: a step of " + tokens(rows) +
                      " at position " + signedStr(position_) +
                      " (at most " + signedStr(most) +
                      " a step) does not fit the context of " +
                      signedStr(context_) + " positions");
  scanned_ = false; // the step rewrites the logits
  ++cacheVersion_;  // and the cache
  cq4p_step_args args = {};
  args.bindings = bindings_.data();
  args.kv_cache = kvCache_;
  args.workspace = workspace_;
  args.ids = ids;
  args.logits = logits_.data();
  args.rows = rows;
  args.position = position_;
  args.context = context_;
  args.parallel_for = &Model::parallelFor;
  args.pool = pool_.get();
  args.state = state_;
  step(&args);
  position_ += rows;
  return checkFaults();
}

Status Model::checkLogits() {
  scan_ = scanLogits(logits_.data(), logits_.size());
  scanned_ = true;
  if (!scan_.nonFinite)
    return Status::ok();
  for (size_t i = 0; i < logits_.size(); ++i)
    if (!std::isfinite(logits_[i]))
      return Status(CQ4P_ERROR_FORMAT,
                    "logits of position " + signedStr(position_ - 1) +
                        ": logits[" + str(i) + "] is " +
                        (std::isnan(logits_[i]) ? "nan"
                         : logits_[i] > 0       ? "+inf"
                                                : "-inf") +
                        " (the model computed a non-finite value: check the "
                        "bundle with cq4p-run --verify)");
  return Status::ok();
}

Status Model::sampleLogits(const SamplingOptions &options, Rng &rng,
                           int64_t &id) {
  return sampler_.sample(logits_.data(), logits_.size(), options, rng, id,
                         scanned_ ? &scan_ : nullptr);
}

Status Model::prefillChecked(const int64_t *ids, int64_t count) {
  int64_t chunk = prefillChunk();
  for (int64_t done = 0; done < count; done += chunk)
    if (Status status =
            runStep(desc_->prefill, ids + done, std::min(chunk, count - done));
        !status)
      return status;
  return checkLogits();
}

void Model::copyLogits(float *out) const {
  if (out != nullptr)
    std::memcpy(out, logits_.data(), logits_.size() * sizeof(float));
}

//===----------------------------------------------------------------------===//
// One call at a time
//===----------------------------------------------------------------------===//

namespace {
/// Its address tells threads apart: unique among the threads alive.
thread_local char threadTag;

uintptr_t thisThread() { return reinterpret_cast<uintptr_t>(&threadTag); }
} // namespace

Model::Claim::~Claim() {
  if (model_ != nullptr) {
    model_->ownerCall_.store(nullptr, std::memory_order_relaxed);
    model_->owner_.store(0, std::memory_order_release);
  }
}

Status Model::claim(const char *call, Claim &out) {
  uintptr_t expected = 0;
  if (owner_.compare_exchange_strong(expected, thisThread(),
                                     std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
    ownerCall_.store(call, std::memory_order_relaxed);
    out.model_ = this;
    return Status::ok();
  }
  const char *holder = ownerCall_.load(std::memory_order_relaxed);
  std::string during = holder != nullptr ? std::string(" (") + holder + ")" : "";
  if (expected == thisThread())
    return Status(CQ4P_ERROR_BUSY,
                  std::string(call) + ": the model is in a call on this "
                                      "thread" + during +
                      ": a callback may not call into the model whose call "
                      "delivered it");
  return Status(CQ4P_ERROR_BUSY,
                std::string(call) + ": the model is in use by another "
                                    "thread" + during +
                    ": one call at a time per model (give each thread a "
                    "model of its own)");
}

Status Model::checkClaim(const Claim &claim, const char *call) const {
  if (claim.model_ != this)
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string(call) +
                      ": expected a claim on this model, found " +
                      (claim.model_ == nullptr ? "none" : "another model's"));
  return Status::ok();
}

Status checkCallerStack(const char *call, size_t bytes) {
  // The lowest address of this thread's stack, read once per thread
  // (for the main thread glibc reads /proc/self/maps).
  thread_local uintptr_t lowest = 0;
  thread_local bool known = false;
  if (!known) {
    pthread_attr_t attributes;
    if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
      void *address = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attributes, &address, &size) == 0)
        lowest = reinterpret_cast<uintptr_t>(address);
      pthread_attr_destroy(&attributes);
    }
    known = true;
  }
  uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (lowest == 0 || here < lowest)
    return Status::ok(); // not a stack this thread's attributes describe
  uint64_t left = here - lowest;
  if (left >= bytes)
    return Status::ok();
  return Status(CQ4P_ERROR_ARGUMENT,
                std::string(call) + ": the calling thread has " + str(left) +
                    " bytes of stack left, a step needs " + str(bytes) +
                    " (kernels keep row tiles on the stack of every thread "
                    "that runs them; give this thread a larger stack)");
}

//===----------------------------------------------------------------------===//
// Calls
//===----------------------------------------------------------------------===//

Status Model::prefill(const int64_t *ids, int64_t count, float *logits) {
  Claim held;
  if (Status status = claim("prefill", held); !status)
    return status;
  return prefill(held, ids, count, logits);
}

Status Model::prefill(const Claim &held, const int64_t *ids, int64_t count,
                      float *logits) {
  if (Status status = checkClaim(held, "prefill"); !status)
    return status;
  if (Status status = checkTokens("prefill", ids, count); !status)
    return status;
  if (Status status = checkCallerStack("prefill", stackBytes_); !status)
    return status;
  if (Status status = prefillChecked(ids, count); !status)
    return status;
  copyLogits(logits);
  return Status::ok();
}

Status Model::decode(int64_t id, float *logits) {
  Claim held;
  if (Status status = claim("decode", held); !status)
    return status;
  return decode(held, id, logits);
}

Status Model::decode(const Claim &held, int64_t id, float *logits) {
  if (Status status = checkClaim(held, "decode"); !status)
    return status;
  if (Status status = checkTokens("decode", &id, 1); !status)
    return status;
  if (Status status = checkCallerStack("decode", stackBytes_); !status)
    return status;
  if (Status status = runStep(desc_->decode, &id, 1); !status)
    return status;
  if (Status status = checkLogits(); !status)
    return status;
  copyLogits(logits);
  return Status::ok();
}

Status Model::reset() {
  Claim held;
  if (Status status = claim("reset", held); !status)
    return status;
  return reset(held);
}

Status Model::reset(const Claim &held) {
  if (Status status = checkClaim(held, "reset"); !status)
    return status;
  position_ = 0;
  ++cacheVersion_;
  return Status::ok();
}

Status Model::sample(const SamplingOptions &options, Rng &rng, int64_t &id) {
  Claim held;
  if (Status status = claim("sample", held); !status)
    return status;
  return sample(held, options, rng, id);
}

Status Model::sample(const Claim &held, const SamplingOptions &options,
                     Rng &rng, int64_t &id) {
  if (Status status = checkClaim(held, "sample"); !status)
    return status;
  return sampleLogits(options, rng, id);
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

Status Model::generate(const int64_t *prompt, int64_t promptCount,
                       int64_t maxNewTokens, const SamplingOptions &sampling,
                       TokenCallback callback, void *context,
                       GenerateStats *stats) {
  if (stats != nullptr)
    *stats = GenerateStats();
  Claim held;
  if (Status status = claim("generate", held); !status)
    return status;
  return generateClaimed(prompt, promptCount, maxNewTokens, sampling, callback,
                         context, stats);
}

Status Model::generateClaimed(const int64_t *prompt, int64_t promptCount,
                              int64_t maxNewTokens,
                              const SamplingOptions &sampling,
                              TokenCallback callback, void *context,
                              GenerateStats *stats) {
  if (maxNewTokens < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "generate: max new tokens: expected >= 0, found " +
                      signedStr(maxNewTokens));
  if (maxNewTokens > 0 && callback == nullptr)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "generate: expected somewhere to put " +
                      tokens(maxNewTokens) + ", found a null pointer");
  if (Status status = Sampler::validate(sampling); !status)
    return status;
  // The whole sequence must fit before anything runs: the prompt, then a
  // decode step for every generated token but the last.
  int64_t decodeSteps = std::max<int64_t>(maxNewTokens - 1, 0);
  if (promptCount > 0 && decodeSteps > context_ - promptCount)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "context overflow: a prompt of " + tokens(promptCount) +
                      " and " + signedStr(maxNewTokens) + " new tokens need " +
                      // Exact, without a sum that could overflow.
                      (decodeSteps <= std::numeric_limits<int64_t>::max() -
                                          promptCount
                           ? signedStr(promptCount + decodeSteps)
                           : "more than 2^63 - 1") +
                      " positions > context " + signedStr(context_));
  int64_t savedPosition = position_;
  position_ = 0;
  Status status = checkTokens("generate: prompt", prompt, promptCount);
  position_ = savedPosition;
  if (!status)
    return status;
  if (status = checkFiles(); !status)
    return status;
  if (status = checkCallerStack("generate", stackBytes_); !status)
    return status;

  GenerateStats local;
  GenerateStats &out = stats != nullptr ? *stats : local;
  out = GenerateStats();
  out.promptTokens = promptCount;
  Rng rng(sampling.seed);
  auto start = std::chrono::steady_clock::now();
  position_ = 0;
  ++cacheVersion_;
  if (status = prefillChecked(prompt, promptCount); !status)
    return status;
  auto prefilled = std::chrono::steady_clock::now();
  out.prefillSeconds = secondsBetween(start, prefilled);
  if (maxNewTokens == 0)
    return Status::ok();

  int64_t id = 0;
  if (status = sampleLogits(sampling, rng, id); !status)
    return status;
  auto first = std::chrono::steady_clock::now();
  out.timeToFirstTokenSeconds = secondsBetween(start, first);
  out.generatedTokens = 1;
  bool more = callback(context, 0, id);
  for (int64_t index = 1; more && index < maxNewTokens; ++index) {
    if (status = runStep(desc_->decode, &id, 1); !status)
      break;
    if (status = checkLogits(); !status)
      break;
    if (status = sampleLogits(sampling, rng, id); !status)
      break;
    out.generatedTokens = index + 1;
    more = callback(context, index, id);
  }
  out.decodeSeconds = secondsBetween(first, std::chrono::steady_clock::now());
  return status;
}

Status Model::generate(const int64_t *prompt, int64_t promptCount,
                       int64_t maxNewTokens, const SamplingOptions &sampling,
                       int64_t *outIds, GenerateStats *stats) {
  if (maxNewTokens > 0 && outIds == nullptr)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "generate: expected room for " + tokens(maxNewTokens) +
                      ", found a null pointer");
  return generate(
      prompt, promptCount, maxNewTokens, sampling,
      [](void *context, int64_t index, int64_t id) {
        static_cast<int64_t *>(context)[index] = id;
        return true;
      },
      outIds, stats);
}

} // namespace cq4p::runtime
