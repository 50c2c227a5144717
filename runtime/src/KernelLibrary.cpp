//===- KernelLibrary.cpp - loading and checking a kernel library ----------===//

#include "cq4p/runtime/KernelLibrary.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <utility>

namespace cq4p::runtime {
namespace {

constexpr size_t kElf64HeaderBytes = 64;
constexpr size_t kElfMachineEnd = 20; // e_ident[16], e_type, e_machine
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfDataLittle = 1;
constexpr uint8_t kElfDataBig = 2;
constexpr uint16_t kElfTypeDyn = 3;
constexpr uint16_t kElfMachineX86_64 = 62;
constexpr uint16_t kElfMachineAArch64 = 183;

std::string str(uint64_t value) { return std::to_string(value); }

struct ElfMachine {
  uint16_t code;
  const char *description; // with its article, as the message uses it
  const char *constant;
};

// Machines a library handed to cq4p plausibly comes from; the rest are
// named by number.
constexpr ElfMachine kMachines[] = {
    {3, "an x86 (32-bit)", "EM_386"},
    {8, "a MIPS", "EM_MIPS"},
    {20, "a PowerPC", "EM_PPC"},
    {21, "a 64-bit PowerPC", "EM_PPC64"},
    {22, "an IBM S/390", "EM_S390"},
    {40, "a 32-bit Arm", "EM_ARM"},
    {kElfMachineX86_64, "an x86-64", "EM_X86_64"},
    {kElfMachineAArch64, "an AArch64", "EM_AARCH64"},
    {243, "a RISC-V", "EM_RISCV"},
    {258, "a LoongArch", "EM_LOONGARCH"},
};

std::string describeMachine(uint16_t code) {
  for (const ElfMachine &machine : kMachines)
    if (machine.code == code)
      return std::string(machine.description) + " (" + machine.constant + ")";
  return "an ELF machine " + str(code);
}

uint16_t hostElfMachine() {
  switch (hostArch()) {
  case CpuArch::X86_64:
    return kElfMachineX86_64;
  case CpuArch::AArch64:
    return kElfMachineAArch64;
  case CpuArch::Other:
    break;
  }
  return 0;
}

Status libraryError(cq4p_code code, const std::string &path,
                    const std::string &what) {
  return Status(code, path + ": " + what);
}

std::string kernelLabel(size_t index, const cq4p_kernel_desc &kernel) {
  std::string label = "kernel " + str(index);
  if (kernel.name != nullptr)
    label += std::string(" (") + kernel.name + ")";
  return label;
}

bool isKnownOp(uint32_t op) {
  return op >= CQ4P_KERNEL_QUANTIZE_HADAMARD && op <= CQ4P_KERNEL_ATTENTION;
}

bool isKnownTarget(uint32_t target) {
  return target >= CQ4P_TARGET_HOST && target <= CQ4P_TARGET_AARCH64_SME2;
}

/// What to do about a library of another ABI version.
std::string abiAdvice(uint32_t version) {
  return version < CQ4P_KERNEL_ABI_VERSION
             ? ": an older cq4p-compile built it; recompile it with "
               "cq4p-compile"
             : ": a newer cq4p-compile built it; recompile it with the "
               "cq4p-compile of this runtime";
}

/// Why code of `target` needing `features` cannot run on `cpu`, or an
/// empty string when it can. Shared by kernels and model steps.
std::string whyNotRunnable(uint32_t target, uint64_t features,
                           const CpuFeatures &cpu) {
  std::string name = kernelTargetName(target);
  // Host code is built for the machine that compiled it; the ELF header
  // check has already matched that machine to this process.
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

/// Reads up to `want` bytes from the start of `path`.
Status readFileStart(const std::string &path, uint8_t *buffer, size_t want,
                     size_t &got) {
  got = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return libraryError(CQ4P_ERROR_IO, path,
                        std::string("cannot open: ") + std::strerror(errno));
  while (got < want) {
    ssize_t count = ::read(fd, buffer + got, want - got);
    if (count < 0 && errno == EINTR)
      continue;
    if (count < 0) {
      int error = errno;
      ::close(fd);
      return libraryError(CQ4P_ERROR_IO, path,
                          std::string("cannot read: ") + std::strerror(error));
    }
    if (count == 0)
      break;
    got += size_t(count);
  }
  ::close(fd);
  return Status::ok();
}

} // namespace

Status checkElfHeader(const std::string &path, const uint8_t *bytes,
                      size_t size) {
  static const uint8_t kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || std::memcmp(bytes, kMagic, 4) != 0) {
    std::string found = str(size) + " bytes";
    if (size >= 4) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", bytes[0],
                    bytes[1], bytes[2], bytes[3]);
      found = hex;
    }
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "not an ELF file: expected the magic 7f 45 4c 46, "
                        "found " + found);
  }
  if (size < kElfMachineEnd)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "truncated ELF header: expected 64 bytes, found " +
                            str(size));
  uint8_t elfClass = bytes[4], data = bytes[5];
  if (data != kElfDataLittle && data != kElfDataBig)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "ELF data encoding: expected 1 (little-endian) or 2 "
                        "(big-endian), found " + str(data));
  uint16_t machine = data == kElfDataLittle
                         ? uint16_t(bytes[18] | bytes[19] << 8)
                         : uint16_t(bytes[18] << 8 | bytes[19]);
  // The machine first: it is the defect a user most often has (a library
  // built for the phone, copied to the laptop) and the one dlopen words worst.
  uint16_t host = hostElfMachine();
  if (host != 0 && machine != host)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        describeMachine(machine) + " library; this process is " +
                            archName(hostArch()));
  if (elfClass != kElfClass64)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "ELF class: expected 2 (ELFCLASS64, this process is "
                        "64-bit), found " + str(elfClass));
  if (data != kElfDataLittle)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "a big-endian ELF library; this process is "
                        "little-endian");
  if (size < kElf64HeaderBytes)
    return libraryError(CQ4P_ERROR_FORMAT, path,
                        "truncated ELF header: expected 64 bytes, found " +
                            str(size));
  uint16_t type = uint16_t(bytes[16] | bytes[17] << 8);
  if (type != kElfTypeDyn)
    return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                        "ELF type: expected 3 (ET_DYN, a shared library), "
                        "found " + str(type));
  return Status::ok();
}

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
      {"kv_width", model.kv_width}};
  for (const auto &[field, value] : sizes)
    if (value == 0)
      return refuse(field, "> 0", "0");
  if (kvDtypeBytes(model.kv_dtype) == 0)
    return refuse("kv_dtype", "1 (f32) or 2 (f16)", str(model.kv_dtype));
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

Status KernelLibrary::open(const std::string &path,
                           std::unique_ptr<KernelLibrary> &out) {
  return open(path, detectCpuFeatures(), out);
}

Status KernelLibrary::open(const std::string &path, const CpuFeatures &cpu,
                           std::unique_ptr<KernelLibrary> &out) {
  out.reset();
  uint8_t header[kElf64HeaderBytes];
  size_t headerBytes = 0;
  if (Status status = readFileStart(path, header, sizeof(header), headerBytes);
      !status)
    return status;
  if (Status status = checkElfHeader(path, header, headerBytes); !status)
    return status;

  // Without a slash dlopen would search the library path and could load a
  // different file from the one whose header was just checked.
  std::string loadPath =
      path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  void *handle = ::dlopen(loadPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *error = dlerror();
    return libraryError(CQ4P_ERROR_IO, path,
                        std::string("cannot load: ") +
                            (error ? error : "dlopen failed"));
  }
  std::unique_ptr<KernelLibrary> library(new KernelLibrary());
  library->path_ = path;
  library->handle_ = handle;

  dlerror();
  void *symbol = ::dlsym(handle, CQ4P_KERNEL_TABLE_SYMBOL);
  if (symbol == nullptr) {
    const char *error = dlerror();
    return libraryError(CQ4P_ERROR_NOT_FOUND, path,
                        std::string("no `") + CQ4P_KERNEL_TABLE_SYMBOL +
                            "` symbol: not a cq4p kernel library (" +
                            (error ? error : "the symbol is null") + ")");
  }
  library->table_ = static_cast<const cq4p_kernel_table *>(symbol);
  if (Status status = validateKernelTable(path, *library->table_); !status)
    return status;
  if (Status status = checkKernelsRunnable(path, *library->table_, cpu);
      !status)
    return status;

  // Optional: a library compiled from kernels alone has no model steps.
  dlerror();
  if (void *model = ::dlsym(handle, CQ4P_MODEL_SYMBOL)) {
    const auto *desc = static_cast<const cq4p_model_desc *>(model);
    if (Status status = validateModelDesc(path, *desc); !status)
      return status;
    if (Status status = checkModelRunnable(path, *desc, cpu); !status)
      return status;
    library->model_ = desc;
  }
  out = std::move(library);
  return Status::ok();
}

KernelLibrary::~KernelLibrary() {
  if (handle_ != nullptr)
    ::dlclose(handle_);
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

const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Auto: return "auto";
  case Backend::Neon: return "neon";
  case Backend::Sme2: return "sme2";
  }
  return "?";
}

Status KernelLibrary::openForBackend(Backend backend, const std::string &neonPath,
                                     const std::string &sme2Path,
                                     const CpuFeatures &cpu,
                                     std::unique_ptr<KernelLibrary> &out,
                                     Backend &chosen, std::string *declined) {
  out.reset();
  if (declined)
    declined->clear();
  if (backend != Backend::Neon) {
    if (sme2Path.empty()) {
      if (backend == Backend::Sme2)
        return Status(CQ4P_ERROR_ARGUMENT,
                      "backend sme2: expected an SME2 kernel library, found none");
    } else {
      Status status = open(sme2Path, cpu, out);
      if (status) {
        chosen = Backend::Sme2;
        return status;
      }
      if (backend == Backend::Sme2)
        return status;
      if (declined)
        *declined = status.message();
    }
  }
  if (neonPath.empty())
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string("backend ") + backendName(backend) +
                      ": expected a NEON kernel library, found none");
  chosen = Backend::Neon;
  return open(neonPath, cpu, out);
}

} // namespace cq4p::runtime
