//===- KernelLibraryTable.cpp - the kernel table and model steps ----------===//

#include "cq4p/runtime/KernelLibrary.h"

#include "KernelLibraryChecks.h"

namespace cq4p::runtime {

using namespace kernel_checks;

namespace {

bool isKnownOp(uint32_t op) {
  return op >= CQ4P_KERNEL_QUANTIZE_HADAMARD && op <= CQ4P_KERNEL_ATTENTION;
}

bool isKnownTarget(uint32_t target) {
  return target >= CQ4P_TARGET_HOST && target <= CQ4P_TARGET_AARCH64_SME2;
}

/// Why code of `target` needing `features` cannot run on `cpu`, or an
/// empty string when it can. Shared by kernels and model steps.
std::string whyNotRunnable(uint32_t target, uint64_t features,
                           const CpuFeatures &cpu) {
  std::string name = kernelTargetName(target);
  // Host code records its instruction set (an x86-64 level and the dot's
  // extensions) in `features`, checked below; the ELF header check has
  // already matched its architecture to this process.
  if (target != CQ4P_TARGET_HOST && cpu.arch != CpuArch::AArch64)
    return "targets " + name + "; this process is " + archName(cpu.arch);
  if (target == CQ4P_TARGET_AARCH64_SME2) {
    if (!(cpu.features & CQ4P_FEATURE_AARCH64_SME2))
      return "targets aarch64-sme2, which needs SME2; this CPU has no SME2 "
             "(it has: " +
             featureList(cpu.features) + ")";
    if (cpu.smeVectorBits != kSme2VectorBits)
      return "targets aarch64-sme2, built for a " + str(kSme2VectorBits) +
             "-bit streaming vector length; this CPU's is " +
             str(cpu.smeVectorBits) + " bits";
  }
  if (uint64_t missing = features & ~cpu.features)
    return "needs " + featureList(missing) +
           ", which this CPU lacks (it has: " + featureList(cpu.features) +
           ")";
  return "";
}

} // namespace

namespace kernel_checks {

std::string kernelLabel(size_t index, const cq4p_kernel_desc &kernel) {
  std::string label = "kernel " + str(index);
  if (kernel.name != nullptr)
    label += std::string(" (") + kernel.name + ")";
  return label;
}

std::string abiAdvice(uint32_t version) {
  return version < CQ4P_KERNEL_ABI_VERSION
             ? ": an older cq4p-compile built it; recompile it with "
               "cq4p-compile"
             : ": a newer cq4p-compile built it; recompile it with the "
               "cq4p-compile of this runtime";
}

} // namespace kernel_checks

std::string kernelOpName(uint32_t op) {
  switch (op) {
  case CQ4P_KERNEL_QUANTIZE_HADAMARD:
    return "QUANTIZE_HADAMARD";
  case CQ4P_KERNEL_QUANTIZE_ORTHOGONAL:
    return "QUANTIZE_ORTHOGONAL";
  case CQ4P_KERNEL_MATMUL:
    return "MATMUL";
  case CQ4P_KERNEL_EMBEDDING:
    return "EMBEDDING";
  case CQ4P_KERNEL_ATTENTION:
    return "ATTENTION";
  default:
    return "op " + str(op);
  }
}

std::string kernelTargetName(uint32_t target) {
  switch (target) {
  case CQ4P_TARGET_HOST:
    return "host";
  case CQ4P_TARGET_AARCH64_NEON:
    return "aarch64-neon";
  case CQ4P_TARGET_AARCH64_SME2:
    return "aarch64-sme2";
  default:
    return "target " + str(target);
  }
}

std::string describeKernel(const cq4p_kernel_desc &kernel) {
  std::string text = kernel.name != nullptr ? kernel.name : "(unnamed)";
  text += " (" + kernelOpName(kernel.op);
  if (kernel.op != CQ4P_KERNEL_QUANTIZE_HADAMARD &&
      kernel.op != CQ4P_KERNEL_QUANTIZE_ORTHOGONAL)
    text += " N=" + str(kernel.n);
  text += " K=" + str(kernel.k) + " gs=" + str(kernel.group_size);
  text += kernel.orthogonal ? " orthogonal" : " hadamard";
  text += " rows " + str(kernel.min_rows) + "..";
  if (kernel.max_rows != 0)
    text += str(kernel.max_rows);
  text += ", " + kernelTargetName(kernel.target) + ")";
  return text;
}

Status validateKernelTable(const std::string &path,
                           const cq4p_kernel_table &table) {
  if (table.abi_version != CQ4P_KERNEL_ABI_VERSION)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "kernel ABI version: expected " +
                            str(CQ4P_KERNEL_ABI_VERSION) +
                            " (this runtime's), found " +
                            str(table.abi_version) +
                            abiAdvice(table.abi_version));
  if (table.count > kMaxKernelCount)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "kernel count: expected at most " +
                            str(kMaxKernelCount) + ", found " +
                            str(table.count));
  if (table.count > 0 && table.kernels == nullptr)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "kernels: expected " + str(table.count) +
                            " descriptors, found a null pointer");
  for (size_t i = 0; i < table.count; ++i) {
    const cq4p_kernel_desc &kernel = table.kernels[i];
    std::string label = kernelLabel(i, kernel);
    auto refuse = [&](const char *field, const std::string &expected,
                      const std::string &found) {
      return libraryError(CQ4P_ERROR_FORMAT, path,
                          label + ": " + field + ": expected " + expected +
                              ", found " + found);
    };
    if (kernel.name == nullptr)
      return refuse("name", "a string", "null");
    if (kernel.entry == nullptr)
      return refuse("entry", "a function", "null");
    if (!isKnownOp(kernel.op))
      return refuse("op",
                    "1..5 (QUANTIZE_HADAMARD, QUANTIZE_ORTHOGONAL, MATMUL, "
                    "EMBEDDING, ATTENTION)",
                    str(kernel.op));
    if (!isKnownTarget(kernel.target))
      return refuse("target", "1..3 (host, aarch64-neon, aarch64-sme2)",
                    str(kernel.target));
    if (uint64_t unknown = kernel.features & ~knownFeatureBits())
      return refuse("features", "CQ4P_FEATURE_* bits only",
                    featureList(unknown));
    if (kernel.n == 0)
      return refuse("n", "> 0", "0");
    if (kernel.k == 0)
      return refuse("k", "> 0", "0");
    if (kernel.group_size == 0)
      return refuse("group_size", "> 0", "0");
    // Attention records heads in n and kv heads in group_size.
    bool attention = kernel.op == CQ4P_KERNEL_ATTENTION;
    if (attention && kernel.n % kernel.group_size != 0)
      return refuse("group_size",
                    "a divisor of the heads (" + str(kernel.n) + ")",
                    str(kernel.group_size));
    if (!attention && kernel.k % kernel.group_size != 0)
      return refuse("group_size",
                    "a divisor of K (" + str(kernel.k) + ")",
                    str(kernel.group_size));
    if (!attention && kernel.window != 0)
      return refuse("window", "0 (only attention has a window)",
                    str(kernel.window));
    if (kernel.orthogonal > 1)
      return refuse("orthogonal", "0 or 1", str(kernel.orthogonal));
    if (kernel.op == CQ4P_KERNEL_QUANTIZE_HADAMARD && kernel.orthogonal)
      return refuse("orthogonal", "0 (a Hadamard quantize kernel)", "1");
    if ((kernel.op == CQ4P_KERNEL_QUANTIZE_ORTHOGONAL ||
         kernel.op == CQ4P_KERNEL_EMBEDDING) &&
        !kernel.orthogonal)
      return refuse("orthogonal",
                    "1 (" + kernelOpName(kernel.op) +
                        " reads an orthogonal tensor)",
                    "0");
    if (kernel.min_rows < 1)
      return refuse("min_rows", ">= 1", "0");
    if (kernel.max_rows != 0 && kernel.max_rows < kernel.min_rows)
      return refuse("max_rows",
                    "0 (no bound) or >= min_rows (" + str(kernel.min_rows) +
                        ")",
                    str(kernel.max_rows));
  }
  return Status::ok();
}

Status checkKernelsRunnable(const std::string &path,
                            const cq4p_kernel_table &table,
                            const CpuFeatures &cpu) {
  for (size_t i = 0; i < table.count; ++i) {
    const cq4p_kernel_desc &kernel = table.kernels[i];
    std::string why = whyNotRunnable(kernel.target, kernel.features, cpu);
    if (!why.empty())
      return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                          kernelLabel(i, kernel) + " " + why);
  }
  return Status::ok();
}

std::string bindingKindName(uint32_t kind) {
  switch (kind) {
  case CQ4P_BINDING_CQ4:
    return "CQ4";
  case CQ4P_BINDING_FP16:
    return "FP16";
  case CQ4P_BINDING_FP32:
    return "FP32";
  default:
    return "kind " + str(kind);
  }
}

std::string kvDtypeName(uint32_t dtype) {
  switch (dtype) {
  case CQ4P_KV_F32:
    return "f32";
  case CQ4P_KV_F16:
    return "f16";
  default:
    return "kv dtype " + str(dtype);
  }
}

size_t kvDtypeBytes(uint32_t dtype) {
  switch (dtype) {
  case CQ4P_KV_F32:
    return 4;
  case CQ4P_KV_F16:
    return 2;
  default:
    return 0;
  }
}

Status validateModelDesc(const std::string &path,
                         const cq4p_model_desc &model) {
  auto refuse = [&](const std::string &field, const std::string &expected,
                    const std::string &found) {
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "model steps: " + field + ": expected " + expected +
                            ", found " + found);
  };
  if (model.abi_version != CQ4P_KERNEL_ABI_VERSION)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "model steps: ABI version: expected " +
                            str(CQ4P_KERNEL_ABI_VERSION) +
                            " (this runtime's), found " +
                            str(model.abi_version) +
                            abiAdvice(model.abi_version));
  if (model.prefill == nullptr)
    return refuse("prefill", "a function", "null");
  if (model.decode == nullptr)
    return refuse("decode", "a function", "null");
  if (model.architecture == nullptr)
    return refuse("architecture", "a string", "null");
  if (model.digest == nullptr)
    return refuse("digest", "a string (empty: any bundle)", "null");
  const std::pair<const char *, uint64_t> sizes[] = {
      {"vocab", model.vocab},
      {"hidden", model.hidden},
      {"layers", model.layers},
      {"kv_width", model.kv_width},
      {"kv_position_bytes", model.kv_position_bytes}};
  for (const auto &[field, value] : sizes)
    if (value == 0)
      return refuse(field, "> 0", "0");
  if (kvDtypeBytes(model.kv_dtype) == 0)
    return refuse("kv_dtype", "1 (f32) or 2 (f16)", str(model.kv_dtype));
  // Per position, every layer's keys and values: 2 x kv_width elements each
  // at the most.
  uint64_t widestPosition = 0;
  if (__builtin_mul_overflow(model.layers, 2 * model.kv_width, &widestPosition) ||
      __builtin_mul_overflow(widestPosition, uint64_t(kvDtypeBytes(model.kv_dtype)),
                             &widestPosition) ||
      model.kv_position_bytes > widestPosition)
    return refuse("kv_position_bytes",
                  "at most layers x 2 x kv_width x " +
                      str(kvDtypeBytes(model.kv_dtype)) + " bytes",
                  str(model.kv_position_bytes));
  if (model.state_bytes > kMaxStateBytes)
    return refuse("state_bytes", "at most " + str(kMaxStateBytes),
                  str(model.state_bytes));
  if (!isKnownTarget(model.target))
    return refuse("target", "1..3 (host, aarch64-neon, aarch64-sme2)",
                  str(model.target));
  if (uint64_t unknown = model.features & ~knownFeatureBits())
    return refuse("features", "CQ4P_FEATURE_* bits only",
                  featureList(unknown));
  if (model.prefill_chunk < 1 || model.prefill_chunk > kMaxPrefillChunk)
    return refuse("prefill_chunk", "1.." + str(kMaxPrefillChunk),
                  str(model.prefill_chunk));
  if (model.binding_count > kMaxModelBindingCount)
    return refuse("binding_count", "at most " + str(kMaxModelBindingCount),
                  str(model.binding_count));
  if (model.binding_count > 0 && model.bindings == nullptr)
    return refuse("bindings", str(model.binding_count) + " bindings",
                  "a null pointer");

  for (uint32_t i = 0; i < model.binding_count; ++i) {
    const cq4p_model_binding &binding = model.bindings[i];
    std::string label = "binding " + str(i);
    if (binding.tensor == nullptr)
      return refuse(label + ": tensor", "a tensor name", "null");
    if (binding.tensor[0] == '\0')
      return refuse(label + ": tensor", "a tensor name", "an empty string");
    label += " ('" + std::string(binding.tensor) + "')";
    auto refuseField = [&](const char *field, const std::string &expected,
                           const std::string &found) {
      return refuse(label + ": " + field, expected, found);
    };
    if (binding.reserved != 0)
      return refuseField("reserved", "0", str(binding.reserved));
    if (binding.orthogonal > 1)
      return refuseField("orthogonal", "0 or 1", str(binding.orthogonal));
    if (binding.n == 0)
      return refuseField("n", "> 0", "0");
    switch (binding.kind) {
    case CQ4P_BINDING_CQ4:
      if (binding.k == 0)
        return refuseField("k", "> 0", "0");
      if (binding.group_size == 0)
        return refuseField("group_size", "> 0", "0");
      if (binding.k % binding.group_size != 0)
        return refuseField("group_size",
                           "a divisor of K (" + str(binding.k) + ")",
                           str(binding.group_size));
      break;
    case CQ4P_BINDING_FP16:
    case CQ4P_BINDING_FP32:
      // A dense binding is its element count alone; anything else set
      // would be a field the runtime ignores, so it is refused instead.
      if (binding.k != 0)
        return refuseField("k", "0 (a dense binding)", str(binding.k));
      if (binding.group_size != 0)
        return refuseField("group_size", "0 (a dense binding)",
                           str(binding.group_size));
      if (binding.orthogonal != 0)
        return refuseField("orthogonal", "0 (a dense binding)",
                           str(binding.orthogonal));
      break;
    default:
      return refuseField("kind", "1 (CQ4), 2 (FP16) or 3 (FP32)",
                         str(binding.kind));
    }
  }
  return Status::ok();
}

Status checkModelRunnable(const std::string &path,
                          const cq4p_model_desc &model,
                          const CpuFeatures &cpu) {
  std::string why = whyNotRunnable(model.target, model.features, cpu);
  if (!why.empty())
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path, "model steps: " + why);
  return Status::ok();
}

std::vector<const cq4p_kernel_desc *>
KernelLibrary::find(cq4p_kernel_op op, uint64_t n, uint64_t k,
                    uint32_t groupSize, bool orthogonal) const {
  bool quantize = op == CQ4P_KERNEL_QUANTIZE_HADAMARD ||
                  op == CQ4P_KERNEL_QUANTIZE_ORTHOGONAL;
  // Panel bytes mean the same whatever rotated the weights: one matmul
  // kernel serves a Hadamard projection and an orthogonal lm_head alike.
  bool rotationMatters = op != CQ4P_KERNEL_MATMUL;
  std::vector<const cq4p_kernel_desc *> found;
  for (size_t i = 0; i < kernelCount(); ++i) {
    const cq4p_kernel_desc &kernel = this->kernel(i);
    if (kernel.op == uint32_t(op) && kernel.k == k &&
        kernel.group_size == groupSize &&
        (!rotationMatters || (kernel.orthogonal != 0) == orthogonal) &&
        (quantize || kernel.n == n))
      found.push_back(&kernel);
  }
  return found;
}

std::string KernelLibrary::listKernels(cq4p_kernel_op op, size_t limit) const {
  std::string list;
  size_t listed = 0, rest = 0;
  for (size_t i = 0; i < kernelCount(); ++i) {
    if (kernel(i).op != uint32_t(op))
      continue;
    if (listed == limit) {
      ++rest;
      continue;
    }
    list += "\n  " + describeKernel(kernel(i));
    ++listed;
  }
  if (listed == 0)
    return " no " + kernelOpName(op) + " kernel";
  if (rest > 0)
    list += "\n  ... and " + str(rest) + " more";
  return list;
}

} // namespace cq4p::runtime
