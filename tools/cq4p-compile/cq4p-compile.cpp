//===- cq4p-compile.cpp - AOT-compiles a per-model kernel library ---------===//
//
//   cq4p-compile model.mlir --target=aarch64-neon -o libmodel.so
//
// Lowers every cq4p.linear / cq4p.embedding / cq4p.prefill_attention of the
// input through the target's kernel pipeline (cq4p-neon-pipeline,
// cq4p-sme2-pipeline or cq4p-host-pipeline),
// translates the result to LLVM IR, optimizes and generates code in
// process with LLVM, and links a shared library with lld (also in process)
// that exports the C-ABI kernels and `cq4p_kernel_table`
// (runtime/include/cq4p/kernel_abi.h). The library records the model_digest
// of the bundle it is for (`cq4p_bundle_digest`) when it is known: from a
// model.mlir's `cq4p.model` attribute, or from the manifest.json of the
// bundle --bundle names; the runtime then refuses the library for any other
// bundle. For AArch64 triples whose shared
// libraries need an SDK this machine lacks (Android, Apple), it writes a
// relocatable object instead (--emit=obj).
//
// --target=host on x86-64 without --host-cpu compiles several instruction
// set levels into one library (HostLevel::byDefault): the target-independent
// front of the pipeline runs once, then each level is lowered from a copy
// to the LLVM dialect, optimized and generated into an object of its own.
// The first level keeps kernel_abi.h's names; the others' symbols get the
// level as a suffix and are hidden; `cq4p_kernel_variants` lists them all
// for the runtime, which runs the widest the CPU has. The shared library
// names the system libraries its code calls (DT_NEEDED libm, libc), linked
// against stand-ins with their sonames written here, so that no system
// file, nor a target's sysroot, is needed to link.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Conversion/Passes.h"
#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4P/Transforms/Passes.h"
#include "cq4p/Pipelines/Pipelines.h"
#include "cq4p/Target/LLVMIR/CQ4PIntrToLLVMIRTranslation.h"
#include "cq4p/Tools/InputNesting.h"
#include "cq4p/Tools/LargeStack.h"
#include "cq4p/Codegen/KernelAbi.h"
#include "cq4p/kernel_abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ArmNeon/ArmNeonDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/ArmNeon/ArmNeonToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/ArmSME/ArmSMEToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "lld/Common/Driver.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include "SafeInput.h"
#include "PreRaScheduling.h"
#include "SmeAbiSource.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

LLD_HAS_DRIVER(elf)

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory category("cq4p-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input.mlir>"),
                                      cl::Required, cl::cat(category));
static cl::opt<std::string> outputFile(
    "o",
    cl::desc("The file to write (required): the shared library, or with --emit "
             "the object, LLVM IR or MLIR"),
    cl::value_desc("LIB.so"), cl::Required, cl::cat(category));
static cl::opt<std::string> targetName(
    "target",
    cl::desc("What the code runs on (required): host (this machine's "
             "processor), aarch64-neon (Armv8.2-A with the dot product) or "
             "aarch64-sme2 (SME2 streaming leaves, 512-bit vectors)"),
    cl::value_desc("TARGET"), cl::Required, cl::cat(category));
static cl::opt<std::string>
    tripleName("triple",
               cl::desc("Target triple (default: aarch64-linux-gnu for "
                        "aarch64-neon, this machine's for host)"),
               cl::cat(category));
static cl::opt<std::string>
    emitKind("emit", cl::desc("lib (the default: a shared library), obj, llvm "
                              "(LLVM IR) or mlir (the LLVM dialect)"),
             cl::init("lib"), cl::cat(category));
static cl::opt<int64_t> gemmRows(
    "gemm-rows",
    cl::desc("Rows per GEMM tile (1 to 8; default: 8 for aarch64-neon, whose "
             "packed tiles keep 16 accumulators, else 4)"),
    cl::init(0), cl::cat(category));
static cl::opt<int64_t>
    prefillChunk("prefill-chunk",
                 cl::desc("Most tokens one prefill step of a model takes, "
                          "2 to 65536 (default 128; a longer prompt runs as "
                          "chunks)"),
                 cl::init(128), cl::cat(category));
static cl::opt<std::string>
    kvCache("kv-cache",
            cl::desc("Element type of a model's KV cache: f32 (default) or "
                     "f16 (half the memory and attention reads)"),
            cl::init("f32"), cl::cat(category));
static cl::opt<bool> fuseDenseMlp(
    "fuse-dense-mlp",
    cl::desc("A model's gate and up projections and their gating in one "
             "dispatch sharing one quantized activation (off by default: on "
             "some phones it costs decode time)"),
    cl::init(false), cl::cat(category));
static cl::opt<bool> gateInTransform(
    "gate-in-transform",
    cl::desc("A model's gating (act(gate) * up) formed by the down "
             "projection's activation transform as it loads the gate and up "
             "rows (default true); =false runs it as a separate pass (the "
             "same bits: for comparisons)"),
    cl::init(true), cl::cat(category));
static cl::opt<bool> sme2FmlalRotation(
    "sme2-fmlal-rotation",
    cl::desc("aarch64-sme2: the lm_head's rotation from fp16-rounded "
             "activations with FMLAL (default true); =false keeps NEON's bits "
             "(docs/MODEL.md)"),
    cl::init(true), cl::cat(category));
static cl::opt<std::string>
    tuneCpu("tune-cpu",
            cl::desc("CPU whose scheduling model tunes the code (aarch64; "
                     "default neoverse-v2; the instruction set stays "
                     "armv8.2-a+dotprod)"),
            cl::init("neoverse-v2"), cl::cat(category));
static cl::opt<std::string> bundleDirectory(
    "bundle",
    cl::desc("The bundle the library is for: its manifest.json's model_digest "
             "is recorded in the library, and the runtime refuses the library "
             "for any other bundle (default: none; a model.mlir records its "
             "own digest)"),
    cl::value_desc("DIR"), cl::cat(category));
/// --host-cpu's help, its levels listed from kernel_abi.h's CQ4P_X86_LEVELS
/// (the table the option reads), so that a level added there is named here.
static std::string hostCpuHelp() {
  std::vector<std::string> all, defaults;
#define CQ4P_HELP_LEVEL(name, cpu, extra, features, byDefault)                 \
  all.push_back(name);                                                         \
  if (byDefault)                                                               \
    defaults.push_back(name);
  CQ4P_X86_LEVELS(CQ4P_HELP_LEVEL)
#undef CQ4P_HELP_LEVEL
  auto list = [](const std::vector<std::string> &names, const char *last) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i)
      text += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
    return text;
  };
  return "--target=host on x86-64: pins the one instruction set the library "
         "may use: " +
         list(all, ", ") +
         ", native (the widest of these this machine runs, tuned for its "
         "CPU) or widest (the same level with the levels' own tuning: the code "
         "the default library runs on this machine). By default a library holds the kernels of " +
         list(defaults, " and ") +
         ", and the runtime runs the widest this CPU has (--emit=mlir and "
         "llvm: " +
         (defaults.empty() ? std::string("none") : defaults.front()) +
         " alone)";
}
static const std::string hostCpuDescription = hostCpuHelp();
static cl::opt<std::string> hostCpu("host-cpu", cl::desc(hostCpuDescription),
                                    cl::cat(category));

namespace {

int fail(const llvm::Twine &message) {
  llvm::errs() << "cq4p-compile: error: " << message << "\n";
  return 1;
}

struct TargetChoice {
  cq4p::KernelTarget kernelTarget;
  llvm::Triple triple;
  std::string cpu, features, tuneCpu;
  uint64_t kernelFeatures = 0;
  cq4p::X86Dot x86Dot = cq4p::X86Dot::generic;
  int64_t vectorBits = 0; ///< the widest vectors the code may use (x86)
  /// The x86-64 level's name (kernel_abi.h's cq4p_kernel_variant.name);
  /// empty off x86-64.
  std::string level;
};

/// An x86-64 instruction set level of --host-cpu (kernel_abi.h's
/// CQ4P_X86_LEVELS: its name, LLVM's CPU and features, nothing else enabled
/// so that the CQ4P_FEATURE_* bits the runtime checks cover all the code may
/// use), and what the code generator makes of those bits: the panel dot and
/// the widest vectors.
struct HostLevel {
  const char *name, *cpu, *extraFeatures;
  uint64_t features;
  /// In a library compiled without --host-cpu: the AVX2 level every x86-64
  /// CPU of the last decade runs, then each panel dot a wider CPU adds.
  bool byDefault;

  constexpr cq4p::X86Dot dot() const {
    if (features & CQ4P_FEATURE_X86_AVX512VNNI)
      return cq4p::X86Dot::avx512vnni;
    if (features & CQ4P_FEATURE_X86_AVXVNNI)
      return cq4p::X86Dot::avxvnni;
    if (features & CQ4P_FEATURE_X86_AVX2)
      return cq4p::X86Dot::avx2;
    if (features & CQ4P_FEATURE_X86_SSSE3)
      return cq4p::X86Dot::ssse3;
    return cq4p::X86Dot::generic;
  }
  constexpr int64_t vectorBits() const {
    return (features & CQ4P_FEATURE_X86_64_V4)   ? 512
           : (features & CQ4P_FEATURE_X86_64_V3) ? 256
                                                 : 128;
  }
};

/// Narrowest first, the order kernel_abi.h's variant table keeps.
constexpr HostLevel kHostLevels[] = {
#define CQ4P_HOST_LEVEL(name, cpu, extra, features, byDefault)                 \
  {name, cpu, extra, features, byDefault},
    CQ4P_X86_LEVELS(CQ4P_HOST_LEVEL)
#undef CQ4P_HOST_LEVEL
};

/// The CQ4P_FEATURE_* bits of the x86 levels this machine runs, from
/// LLVM's view of the host (cpuid and the OS's saved register state).
uint64_t hostX86Features() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  auto hasAll = [&](std::initializer_list<const char *> names) {
    for (const char *name : names) {
      auto it = features.find(name);
      if (it == features.end() || !it->second)
        return false;
    }
    return true;
  };
  uint64_t bits = 0;
  if (hasAll({"ssse3", "sse4.2", "popcnt", "cx16"}))
    bits |= CQ4P_X86_64_V2_FEATURES;
  if ((bits & CQ4P_FEATURE_X86_64_V2) && hasAll({"avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt",
                              "movbe"}))
    bits |= CQ4P_X86_64_V3_FEATURES;
  if ((bits & CQ4P_FEATURE_X86_64_V3) &&
      hasAll({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}))
    bits |= CQ4P_X86_64_V4_FEATURES;
  if ((bits & CQ4P_FEATURE_X86_64_V3) && hasAll({"avxvnni"}))
    bits |= CQ4P_FEATURE_X86_AVXVNNI;
  if ((bits & CQ4P_FEATURE_X86_64_V4) && hasAll({"avx512vnni"}))
    bits |= CQ4P_FEATURE_X86_AVX512VNNI;
  return bits;
}

const HostLevel *findHostLevel(StringRef name) {
  for (const HostLevel &candidate : kHostLevels)
    if (name == candidate.name)
      return &candidate;
  return nullptr;
}

void applyLevel(TargetChoice &choice, const HostLevel &level) {
  choice.level = level.name;
  choice.cpu = level.cpu;
  choice.features = level.extraFeatures;
  choice.x86Dot = level.dot();
  choice.vectorBits = level.vectorBits();
  choice.kernelFeatures = level.features;
}

/// --host-cpu for an x86-64 host: the one level it pins, or without it the
/// default levels (only the first when `oneLevel`: text output).
LogicalResult chooseX86Levels(const TargetChoice &base, bool oneLevel,
                              std::vector<TargetChoice> &variants) {
  if (!hostCpu.getNumOccurrences()) {
    for (const HostLevel &level : kHostLevels) {
      if (!level.byDefault)
        continue;
      TargetChoice variant = base;
      applyLevel(variant, level);
      variants.push_back(variant);
      if (oneLevel)
        break;
    }
    return success();
  }
  TargetChoice variant = base;
  const HostLevel *level = nullptr;
  if (hostCpu == "native" || hostCpu == "widest") {
    uint64_t host = hostX86Features();
    for (const HostLevel &candidate : kHostLevels)
      if ((candidate.features & ~host) == 0)
        level = &candidate;
    // native tunes for this CPU; widest keeps the level's tuning, which
    // bench/model measured faster on AMD EPYC (prefill 97 vs 83 tok/s).
    if (hostCpu == "native")
      variant.tuneCpu = llvm::sys::getHostCPUName().str();
  } else {
    level = findHostLevel(hostCpu);
    if (level == nullptr) {
      std::string names;
      for (const HostLevel &candidate : kHostLevels)
        names += std::string(candidate.name) + ", ";
      fail("unknown --host-cpu '" + hostCpu + "' (expected " + names +
           "native or widest)");
      return failure();
    }
  }
  applyLevel(variant, *level);
  variants.push_back(variant);
  return success();
}

/// The host's CPU and features, as LLVM sees them (hosts other than x86-64).
void describeHost(TargetChoice &choice) {
  choice.cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::string list;
  for (const auto &feature : features) {
    if (!list.empty())
      list += ",";
    list += (feature.second ? "+" : "-") + feature.first().str();
  }
  choice.features = list;
  auto it = features.find("dotprod");
  if (choice.triple.isAArch64() && it != features.end() && it->second)
    choice.kernelFeatures |= CQ4P_FEATURE_AARCH64_DOTPROD;
}

/// The target's code variants: one, except for an x86-64 host without
/// --host-cpu (several levels, narrowest first) unless `oneLevel`.
FailureOr<std::vector<TargetChoice>> chooseTarget(bool oneLevel) {
  TargetChoice choice;
  if (targetName == "aarch64-neon" || targetName == "aarch64-sme2") {
    bool sme2 = targetName == "aarch64-sme2";
    choice.kernelTarget = sme2 ? cq4p::KernelTarget::AArch64Sme2
                               : cq4p::KernelTarget::AArch64Neon;
    choice.triple = llvm::Triple(tripleName.empty() ? "aarch64-linux-gnu"
                                                    : tripleName.getValue());
    if (!choice.triple.isAArch64()) {
      fail("--target=" + targetName + " needs an AArch64 triple, got '" +
           choice.triple.str() + "'");
      return failure();
    }
    // Armv8.2-A with the dot product: no SVE outside streaming mode, which
    // some SME2 devices (Apple M4) do not have; SME2 only in the leaves.
    choice.cpu = "generic";
    choice.features = sme2 ? "+v8.2a,+neon,+dotprod,+sme2,-sve,-sve2"
                           : "+v8.2a,+neon,+dotprod,-sve,-sve2";
    choice.kernelFeatures = CQ4P_FEATURE_AARCH64_DOTPROD |
                            (sme2 ? CQ4P_FEATURE_AARCH64_SME2 : 0);
    return std::vector<TargetChoice>{choice};
  }
  if (targetName == "host") {
    choice.kernelTarget = cq4p::KernelTarget::Host;
    std::string host = llvm::sys::getProcessTriple();
    choice.triple = llvm::Triple(tripleName.empty() ? host : tripleName.getValue());
    if (choice.triple.getArch() != llvm::Triple(host).getArch()) {
      fail("--target=host builds for this machine (" + host +
           "), not for '" + choice.triple.str() + "'");
      return failure();
    }
    std::vector<TargetChoice> variants;
    if (choice.triple.getArch() == llvm::Triple::x86_64) {
      if (failed(chooseX86Levels(choice, oneLevel, variants)))
        return failure();
    } else {
      describeHost(choice);
      variants.push_back(choice);
    }
    return variants;
  }
  fail("unknown --target '" + targetName +
       "' (expected aarch64-neon, aarch64-sme2 or host)");
  return failure();
}

/// Peak memory per distinct linear shape (its GEMV and GEMM) beyond a fixed
/// 130 MiB, as bench/compile/run measured it: 3.1 MiB for the host, 3.5
/// for aarch64-neon, linear from 10 to 100 shapes.
constexpr const char *kMemoryPerShape = "3.5 MiB";
/// What a compile takes before its first shape, in MiB (bench/compile).
constexpr uint64_t kFixedMemoryMiB = 128;

/// What cq4p-compile says when memory runs out, written while memory is
/// still there: the handler may not allocate.
char outOfMemoryMessage[1024];
size_t outOfMemoryLength = 0;
/// The temporary files (objects, link stubs) while they exist, removed too.
constexpr size_t kMaxTemporaryFiles = 8;
char temporaryFiles[kMaxTemporaryFiles][4096];

/// Remembers `path` for onOutOfMemory (unless the slots are full or it is
/// too long: it is still removed on every other exit).
void noteTemporary(const std::string &path) {
  for (auto &slot : temporaryFiles)
    if (slot[0] == '\0' && path.size() < sizeof(slot)) {
      std::memcpy(slot, path.c_str(), path.size() + 1);
      return;
    }
}

/// Removes every temporary file; called on each exit after they are made.
void removeTemporaries(const std::vector<std::string> &paths) {
  for (const std::string &path : paths)
    llvm::sys::fs::remove(path);
  for (auto &slot : temporaryFiles)
    slot[0] = '\0';
}

void sayOnOutOfMemory(const std::string &message) {
  outOfMemoryLength = std::min(message.size(), sizeof(outOfMemoryMessage));
  std::memcpy(outOfMemoryMessage, message.data(), outOfMemoryLength);
}

/// LLVM's handler for a failed allocation anywhere in the process (its
/// safe_malloc, and operator new through LLVM's out-of-memory new-handler,
/// installed in main), instead of LLVM's abort: one line and exit status 1.
void onOutOfMemory(void *, const char *, bool) {
  ssize_t written = ::write(STDERR_FILENO, outOfMemoryMessage, outOfMemoryLength);
  (void)written;
  for (const auto &slot : temporaryFiles)
    if (slot[0] != '\0')
      ::unlink(slot);
  ::_exit(1);
}

/// manifest.json's model_digest in `directory` (--bundle), or a message.
/// Read by the runtime's rules (runtime/src/SafeOpen.h): relative to the
/// directory's descriptor, never through a symbolic link, a regular file of
/// at most the runtime's manifest size (no FIFO to block on, no device to
/// read without end), and no deeper than its JSON reader goes. `identity`
/// is what fstat said of the manifest.
FailureOr<std::string> readBundleDigest(StringRef directory,
                                        struct stat &identity) {
  std::string path = (directory + "/manifest.json").str();
  std::string where = "--bundle " + directory.str() + ": " + path;
  int directoryFd =
      ::open(directory.str().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0) {
    fail("--bundle " + directory + ": cannot open the bundle directory: " +
         std::strerror(errno));
    return failure();
  }
  std::string text, error;
  bool read = cq4p::readRegularFile(directoryFd, "manifest.json", path,
                                    /*noFollow=*/true, CQ4P_MAX_MANIFEST_BYTES, text,
                                    identity, error);
  ::close(directoryFd);
  if (!read) {
    fail("--bundle " + directory + ": " + error);
    return failure();
  }
  if (std::optional<size_t> offset =
          cq4p::findNestingPast(text, cq4p::kMaxJsonNesting, /*json=*/true)) {
    fail(where + ": nesting deeper than " + llvm::Twine(cq4p::kMaxJsonNesting) +
         " levels at byte " + llvm::Twine(*offset));
    return failure();
  }
  llvm::Expected<llvm::json::Value> manifest = llvm::json::parse(text);
  if (!manifest) {
    fail(where + ": not JSON: " + llvm::toString(manifest.takeError()));
    return failure();
  }
  const llvm::json::Object *object = manifest->getAsObject();
  std::optional<StringRef> digest =
      object ? object->getString("model_digest") : std::nullopt;
  if (!digest || digest->empty()) {
    fail(where + " has no model_digest to record (python -m cq4p convert "
                 "writes one)");
    return failure();
  }
  return digest->str();
}

/// Refuses an -o that names one of the inputs (the same file, by device and
/// inode, whatever the path): writing it would destroy what is being read;
/// and, for --emit=lib, one that exists as anything but a regular file.
LogicalResult checkOutput(
    ArrayRef<std::pair<std::string, struct stat>> inputs) {
  struct stat output;
  if (::stat(outputFile.c_str(), &output) != 0)
    return success(); // not there yet: no input
  if (emitKind == "lib" && !S_ISREG(output.st_mode)) {
    // lld writes through a stream whose failure it cannot report (a
    // device such as /dev/full would end in "LLVM ERROR").
    fail("-o " + outputFile + " is " +
         (S_ISCHR(output.st_mode)   ? "a character device"
          : S_ISDIR(output.st_mode) ? "a directory"
          : S_ISFIFO(output.st_mode) ? "a FIFO"
                                     : "not a regular file") +
         "; --emit=lib writes a regular file");
    return failure();
  }
  for (const auto &[name, input] : inputs)
    if (output.st_dev == input.st_dev && output.st_ino == input.st_ino) {
      fail("-o " + outputFile + " is the input " + name +
           ": refusing to overwrite it");
      return failure();
    }
  return success();
}

/// --tune-cpu names a CPU of the target's scheduling models (AArch64, where
/// it is used); elsewhere it is not given.
LogicalResult checkTuneCpu(const TargetChoice &choice) {
  if (!choice.triple.isAArch64()) {
    if (tuneCpu.getNumOccurrences() == 0)
      return success();
    fail("--tune-cpu applies to AArch64 targets; --target=" + targetName +
         " is tuned by --host-cpu");
    return failure();
  }
  llvm::InitializeAllTargetInfos();
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(choice.triple, lookupError);
  if (!target) {
    fail("no LLVM target for '" + choice.triple.str() + "': " + lookupError);
    return failure();
  }
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(choice.triple, "generic", ""));
  if (!subtarget || !subtarget->isCPUStringValid(tuneCpu)) {
    fail("unknown --tune-cpu '" + tuneCpu + "' for " + choice.triple.str() +
         " (expected a CPU LLVM has a scheduling model for, e.g. "
         "neoverse-v2, cortex-a76, apple-m4)");
    return failure();
  }
  return success();
}

/// Where an output stream's bytes went wrong: the write's errno text.
int failWriting(llvm::raw_fd_ostream &os, StringRef path) {
  std::error_code error = os.error();
  os.clear_error();
  return fail("cannot write " + path + ": " + error.message());
}


/// A variant's symbol suffix: "__" and its level with every character
/// other than a letter or digit as "_" (x86-64-v4+avx512vnni:
/// __x86_64_v4_avx512vnni).
std::string variantSuffix(StringRef level) {
  std::string suffix = "__";
  for (char c : level)
    suffix += llvm::isAlnum(c) ? c : '_';
  return suffix;
}

/// Gives every symbol a variant after the first defines its suffix, and
/// hidden visibility: the variants' kernels share their names, and only
/// the first (the one an older runtime loads, under kernel_abi.h's names)
/// is exported; the variant table reaches the others.
void renameVariantSymbols(llvm::Module &module, StringRef suffix) {
  for (llvm::GlobalValue &value : module.global_values()) {
    if (value.isDeclaration() || value.hasLocalLinkage() ||
        value.hasAppendingLinkage() || value.getName().starts_with("llvm."))
      continue;
    value.setName(value.getName() + suffix);
    value.setVisibility(llvm::GlobalValue::HiddenVisibility);
    if (auto *object = dyn_cast<llvm::GlobalObject>(&value))
      if (const llvm::Comdat *comdat = object->getComdat()) {
        llvm::Comdat *renamed =
            module.getOrInsertComdat((comdat->getName() + suffix).str());
        renamed->setSelectionKind(comdat->getSelectionKind());
        object->setComdat(renamed);
      }
  }
}

/// One compiled variant, as the variant table records it.
struct VariantEntry {
  std::string level, suffix; ///< suffix "" for the first (kernel_abi.h names)
  uint64_t features;
  bool hasModel; ///< defines cq4p_model_steps
};

/// kernel_abi.h's `cq4p_kernel_variants`, over `entries` (narrowest first).
std::unique_ptr<llvm::Module>
buildVariantTable(llvm::LLVMContext &context,
                  const std::vector<VariantEntry> &entries) {
  auto module = std::make_unique<llvm::Module>("cq4p-kernel-variants", context);
  using Variant = cq4p::abi::Fields<cq4p_kernel_variant>;
  using Variants = cq4p::abi::Fields<cq4p_kernel_variants>;
  auto *ptr = llvm::PointerType::getUnqual(context);
  auto *entryType = cq4p::abi::llvmStructType<cq4p_kernel_variant>(context);
  auto *tableType = cq4p::abi::llvmStructType<cq4p_kernel_variants>(context);
  auto intField = [](llvm::StructType *type, unsigned field, uint64_t value) {
    return llvm::ConstantInt::get(type->getElementType(field), value);
  };
  auto declare = [&](const std::string &name, bool hidden) {
    auto *symbol = new llvm::GlobalVariable(
        *module, llvm::Type::getInt8Ty(context), /*isConstant=*/true,
        llvm::GlobalValue::ExternalLinkage, nullptr, name);
    if (hidden)
      symbol->setVisibility(llvm::GlobalValue::HiddenVisibility);
    return symbol;
  };
  std::vector<llvm::Constant *> rows;
  for (const VariantEntry &entry : entries) {
    auto *text = llvm::ConstantDataArray::getString(context, entry.level);
    auto *name = new llvm::GlobalVariable(
        *module, text->getType(), /*isConstant=*/true,
        llvm::GlobalValue::PrivateLinkage, text, "cq4p.variant.name");
    bool hidden = !entry.suffix.empty();
    llvm::Constant *model = llvm::ConstantPointerNull::get(ptr);
    if (entry.hasModel)
      model = declare(CQ4P_MODEL_SYMBOL + entry.suffix, hidden);
    std::vector<llvm::Constant *> fields(entryType->getNumElements());
    fields[Variant::name] = name;
    fields[Variant::features] =
        intField(entryType, Variant::features, entry.features);
    fields[Variant::kernels] =
        declare(CQ4P_KERNEL_TABLE_SYMBOL + entry.suffix, hidden);
    fields[Variant::model] = model;
    rows.push_back(llvm::ConstantStruct::get(entryType, fields));
  }
  auto *listType = llvm::ArrayType::get(entryType, rows.size());
  auto *list = new llvm::GlobalVariable(
      *module, listType, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantArray::get(listType, rows), "cq4p.variant.list");
  std::vector<llvm::Constant *> fields(tableType->getNumElements());
  fields[Variants::version] =
      intField(tableType, Variants::version, CQ4P_KERNEL_VARIANTS_VERSION);
  fields[Variants::count] = intField(tableType, Variants::count, rows.size());
  fields[Variants::variants] = list;
  new llvm::GlobalVariable(*module, tableType, /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantStruct::get(tableType, fields),
                           CQ4P_KERNEL_VARIANTS_SYMBOL);
  return module;
}

/// Generates `module`'s code into the object file `path`.
int emitObject(llvm::TargetMachine &machine, llvm::Module &module,
               const std::string &path) {
  std::string errorMessage;
  auto out = openOutputFile(path, &errorMessage);
  if (!out)
    return fail(errorMessage);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, out->os(), nullptr,
                                  llvm::CodeGenFileType::ObjectFile))
    return fail("the target cannot emit object files");
  // The pre-RA scheduler, per function (PreRaScheduling.h).
  cq4p::PreRaSchedulingGate gate(module);
  llvm::OptPassGate &previousGate = module.getContext().getOptPassGate();
  module.getContext().setOptPassGate(gate);
  codegen.run(module);
  module.getContext().setOptPassGate(previousGate);
  out->os().close();
  if (out->os().has_error())
    return failWriting(out->os(), path);
  out->keep();
  return 0;
}

/// Runs lld (in process) with `args` after "ld.lld"; `what` names the
/// output in the message. lld resets every command-line option of the
/// process when it is done.
int runLinker(const std::vector<std::string> &args, const std::string &what) {
  std::vector<const char *> argv = {"ld.lld"};
  for (const std::string &arg : args)
    argv.push_back(arg.c_str());
  std::string diagnostics;
  llvm::raw_string_ostream errors(diagnostics);
  lld::Result result =
      lld::lldMain(argv, llvm::outs(), errors, {{lld::Gnu, &lld::elf::link}});
  if (result.retCode != 0)
    return fail("linking " + what + " failed:\n" + diagnostics);
  return 0;
}

/// The sonames of the C library and of the math library on `triple`'s
/// system (one library on musl), or none where cq4p-compile does not know
/// them (a library then names no dependency, as before).
std::optional<std::pair<std::string, std::string>>
systemLibraries(const llvm::Triple &given) {
  // "aarch64-linux-gnu" names its OS second: normalized, it is Linux.
  llvm::Triple triple(llvm::Triple::normalize(given.str()));
  if (!triple.isOSLinux() || triple.isAndroid())
    return std::nullopt;
  if (triple.isMusl())
    return std::make_pair(std::string("libc.so"), std::string("libc.so"));
  if (triple.isGNUEnvironment())
    return std::make_pair(std::string("libc.so.6"), std::string("libm.so.6"));
  return std::nullopt;
}

/// Whether the undefined symbol `name` is the C library's (LLVM's memory
/// builtins, the stack protector); any other is taken to be libm's, which
/// is safe either way: libm itself needs libc.
bool isCLibrarySymbol(StringRef name) {
  return name.starts_with("mem") || name.starts_with("str") ||
         name.starts_with("__stack_chk") || name == "abort" || name == "bzero";
}

/// The symbols `objects` reference and none of them defines.
FailureOr<std::vector<std::string>>
undefinedSymbols(const std::vector<std::string> &objects) {
  std::set<std::string> defined, referenced;
  for (const std::string &path : objects) {
    auto file = llvm::object::ObjectFile::createObjectFile(path);
    if (!file) {
      fail("reading " + path + ": " + llvm::toString(file.takeError()));
      return failure();
    }
    for (const llvm::object::SymbolRef &symbol : file->getBinary()->symbols()) {
      llvm::Expected<uint32_t> flags = symbol.getFlags();
      llvm::Expected<StringRef> name = symbol.getName();
      if (!flags || !name) {
        llvm::consumeError(flags.takeError());
        llvm::consumeError(name.takeError());
        continue;
      }
      if (name->empty() || !(*flags & llvm::object::SymbolRef::SF_Global))
        continue;
      if (*flags & llvm::object::SymbolRef::SF_Undefined)
        referenced.insert(name->str());
      else
        defined.insert(name->str());
    }
  }
  std::vector<std::string> undefined;
  for (const std::string &name : referenced)
    if (!defined.count(name) && !StringRef(name).starts_with("_GLOBAL_OFFSET_TABLE_"))
      undefined.push_back(name);
  return undefined;
}

/// Writes, into `directory`, a stand-in shared library per system library
/// the objects call into (libm for sincosf, libc for memcpy and memset),
/// with that library's soname and a definition of each symbol called:
/// linking against them records DT_NEEDED, so that the library loads where
/// libm is not already loaded globally, while no file of this machine's
/// (nor an SDK's) is needed. The paths go to `stubs`.
int writeSystemLibraryStubs(const llvm::Triple &triple,
                            llvm::TargetMachine &machine,
                            const std::vector<std::string> &objects,
                            StringRef directory, std::vector<std::string> &stubs,
                            std::vector<std::string> &temporaries) {
  std::optional<std::pair<std::string, std::string>> sonames =
      systemLibraries(triple);
  if (!sonames)
    return 0;
  FailureOr<std::vector<std::string>> undefined = undefinedSymbols(objects);
  if (failed(undefined))
    return 1;
  std::map<std::string, std::vector<std::string>> bySoname;
  for (const std::string &name : *undefined)
    bySoname[isCLibrarySymbol(name) ? sonames->first : sonames->second]
        .push_back(name);
  for (const auto &[soname, symbols] : bySoname) {
    llvm::LLVMContext context;
    llvm::Module module(soname, context);
    module.setTargetTriple(triple);
    module.setDataLayout(machine.createDataLayout());
    auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), false);
    for (const std::string &name : symbols) {
      auto *function = llvm::Function::Create(
          type, llvm::GlobalValue::ExternalLinkage, name, module);
      llvm::ReturnInst::Create(
          context, llvm::BasicBlock::Create(context, "", function));
    }
    llvm::SmallString<256> object(directory), library(directory);
    llvm::sys::path::append(object, soname + ".o");
    llvm::sys::path::append(library, soname);
    temporaries.push_back(std::string(object));
    noteTemporary(temporaries.back());
    if (int status = emitObject(machine, module, std::string(object)))
      return status;
    temporaries.push_back(std::string(library));
    noteTemporary(temporaries.back());
    if (int status = runLinker({"-shared", "-soname", soname, "-o",
                                std::string(library), std::string(object)},
                               std::string(library)))
      return status;
    stubs.push_back(std::string(library));
  }
  return 0;
}

/// The stack of the thread that compiles: MLIR's parser at kMaxIrNesting
/// levels needs a few MiB, and the recursion of lowering and code generation
/// the same headroom (docs/TRUST.md).
constexpr unsigned kStackBytes = 64u << 20;

/// The largest model.mlir read: a converted graph is a few MiB at most.
constexpr uint64_t kMaxInputBytes = uint64_t(1) << 30;

/// The input model.mlir: a regular file (a FIFO or a device is refused
/// before a byte is read, runtime/src/SafeOpen.h) or "-" for stdin.
std::unique_ptr<llvm::MemoryBuffer> readInput(std::string &errorMessage,
                                              struct stat &identity) {
  if (inputFile == "-") {
    identity = {};
    return openInputFile(inputFile, &errorMessage);
  }
  std::string text;
  if (!cq4p::readRegularFile(AT_FDCWD, inputFile, inputFile,
                             /*noFollow=*/false, kMaxInputBytes, text, identity,
                             errorMessage))
    return nullptr;
  return llvm::MemoryBuffer::getMemBufferCopy(text, inputFile);
}

int compile();

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::install_out_of_memory_new_handler();
  llvm::install_bad_alloc_error_handler(onOutOfMemory);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "cq4p-compile: builds the kernel library of a model (a bundle's model.mlir)\n"
      "or of graph-level cq4p IR: the target's pipeline (cq4p-opt's\n"
      "cq4p-<target>-pipeline), LLVM code generation and an lld link, in process.\n"
      "The runtime (cq4p-run, the C and Python APIs) loads the library beside the\n"
      "bundle.\n"
      "\n"
      "  cq4p-compile bundle/model.mlir --target=host -o libmodel.so\n"
      "  cq4p-compile bundle/model.mlir --target=aarch64-neon -o libmodel-neon.so\n"
      "  cq4p-compile bundle/model.mlir --target=aarch64-sme2 -o libmodel-sme2.so\n");
  return cq4p::runOnLargeStack(kStackBytes, compile);
}

namespace {

int compile() {
  if (emitKind != "lib" && emitKind != "obj" && emitKind != "llvm" &&
      emitKind != "mlir")
    return fail("unknown --emit '" + emitKind +
                "' (expected lib, obj, llvm or mlir)");
  if (gemmRows.getNumOccurrences() && (gemmRows < 1 || gemmRows > 8))
    return fail("--gemm-rows must be in [1, 8], got " +
                llvm::Twine(int64_t(gemmRows)));
  bool oneLevel = emitKind == "mlir" || emitKind == "llvm";
  FailureOr<std::vector<TargetChoice>> chosen = chooseTarget(oneLevel);
  if (failed(chosen) || failed(checkTuneCpu(chosen->front())))
    return 1;
  const std::vector<TargetChoice> &variants = *chosen;
  const TargetChoice &first = variants.front();
  int64_t tileRows = gemmRows.getNumOccurrences()
                         ? int64_t(gemmRows)
                         : first.kernelTarget == cq4p::KernelTarget::AArch64Neon
                               ? 8
                               : 4;
  if (emitKind == "lib" && !first.triple.isOSBinFormatELF())
    return fail("a shared library for '" + first.triple.str() +
                "' needs that platform's SDK: use --emit=obj and link it there");
  if (prefillChunk < 2 || prefillChunk > 65536)
    return fail("--prefill-chunk=" + llvm::Twine(prefillChunk) +
                " is out of range (2 to 65536)");
  std::optional<cq4p::KvDtype> kvDtype = cq4p::symbolizeKvDtype(kvCache);
  if (!kvDtype)
    return fail("--kv-cache=" + kvCache + " is not a KV cache element type "
                "(f32 or f16)");

  DialectRegistry registry;
  registry.insert<cq4p::CQ4PDialect, arith::ArithDialect,
                  arm_neon::ArmNeonDialect, func::FuncDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                  scf::SCFDialect, tensor::TensorDialect,
                  vector::VectorDialect>();
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerArmNeonDialectTranslation(registry);
  registerArmSMEDialectTranslation(registry);
  cq4p_intr::registerCQ4PIntrDialectTranslation(registry);
  MLIRContext context(registry);

  sayOnOutOfMemory("cq4p-compile: error: out of memory reading " + inputFile +
                   "\n");
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  std::string errorMessage;
  struct stat inputIdentity;
  std::unique_ptr<llvm::MemoryBuffer> input =
      readInput(errorMessage, inputIdentity);
  if (!input)
    return fail(errorMessage);
  if (std::optional<size_t> offset = cq4p::findNestingPast(
          input->getBuffer(), cq4p::kMaxIrNesting, /*json=*/false)) {
    llvm::errs() << cq4p::describeIrNestingPast(inputFile, input->getBuffer(),
                                                *offset)
                 << "\n";
    return 1;
  }
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  // The digest of the bundle the library is for, if known.
  std::string digest;
  if (auto model = (*module)->getAttrOfType<DictionaryAttr>("cq4p.model"))
    if (auto text = model.getAs<StringAttr>("digest"))
      digest = text.getValue().str();
  std::vector<std::pair<std::string, struct stat>> inputs;
  if (inputFile != "-")
    inputs.push_back({inputFile, inputIdentity});
  if (!bundleDirectory.empty()) {
    struct stat manifestIdentity;
    FailureOr<std::string> named =
        readBundleDigest(bundleDirectory, manifestIdentity);
    if (failed(named))
      return 1;
    inputs.push_back({bundleDirectory + "/manifest.json", manifestIdentity});
    if (!digest.empty() && digest != *named)
      return fail(inputFile + " was written for bundle digest " + digest +
                  ", but --bundle " + bundleDirectory + " has " + *named);
    digest = *named;
  }
  if (failed(checkOutput(inputs)))
    return 1;
  // What the runtime accepts as a recorded digest (kernel_abi.h).
  if (digest.size() > CQ4P_MAX_BUNDLE_DIGEST_BYTES ||
      StringRef(digest).contains('\0'))
    return fail("the bundle digest to record: expected at most " +
                llvm::Twine(CQ4P_MAX_BUNDLE_DIGEST_BYTES) +
                " bytes without NUL, found " + llvm::Twine(digest.size()) +
                " bytes");

  // Kernels are made per distinct shape: memory grows with their number
  // (bench/compile/results.md), and is the first thing to run out.
  std::set<std::string> shapes;
  module->walk([&](Operation *op) {
    if (!isa<cq4p::LinearOp, cq4p::EmbeddingOp, cq4p::PrefillAttentionOp>(op))
      return;
    std::string shape = op->getName().getStringRef().str();
    llvm::raw_string_ostream os(shape);
    for (Type type : op->getOperandTypes())
      os << " " << type;
    for (NamedAttribute attribute : op->getAttrs())
      os << " " << attribute.getName() << "=" << attribute.getValue();
    shapes.insert(shape);
  });
  if (shapes.empty())
    return fail(inputFile + " has no cq4p.linear, cq4p.embedding or "
                            "cq4p.prefill_attention to compile");
  std::string outOfMemory =
      "out of memory compiling " + inputFile + " for --target=" + targetName +
      ": " + std::to_string(shapes.size()) +
      " distinct kernel shapes, at about " + kMemoryPerShape +
      " each: split the functions over several files and compile a library "
      "of each (a layer binds to any library with its shape's kernels), or "
      "give the compiler more memory";
  // A data or address-space limit below what the shapes need is refused
  // before any work: past it, an allocation can fail where LLVM does not
  // check (a crash, not this message). The estimate is bench/compile's
  // lower bound: the fixed cost plus 3 MiB per shape.
  for (int resource : {RLIMIT_DATA, RLIMIT_AS}) {
    struct rlimit limit;
    uint64_t need = (uint64_t(kFixedMemoryMiB) + 3 * shapes.size()) << 20;
    if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        uint64_t(limit.rlim_cur) < need)
      return fail(outOfMemory + " (about " + std::to_string(need >> 20) +
                  " MiB in all, above the " +
                  (resource == RLIMIT_DATA ? "data" : "address space") +
                  " limit of " + std::to_string(uint64_t(limit.rlim_cur) >> 20) +
                  " MiB)");
  }
  sayOnOutOfMemory("cq4p-compile: error: " + outOfMemory + "\n");

  llvm::InitializeAllTargetInfos();
  llvm::InitializeAllTargets();
  llvm::InitializeAllTargetMCs();
  llvm::InitializeAllAsmPrinters();
  llvm::InitializeAllAsmParsers();
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(first.triple, lookupError);
  if (!target)
    return fail("no LLVM target for '" + first.triple.str() + "': " + lookupError);
  auto createMachine = [&](const TargetChoice &choice) {
    llvm::TargetOptions targetOptions;
    return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
        choice.triple, choice.cpu, choice.features, targetOptions,
        llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  };

  // Each variant (one, or an x86-64 level each) is lowered from the tiled
  // module to the LLVM dialect, optimized and generated into an object of
  // its own, one at a time so that memory peaks at one variant's.
  std::vector<std::string> objects, temporaries;
  auto cleanUp = [&](int status) {
    removeTemporaries(temporaries);
    return status;
  };
  std::vector<VariantEntry> entries;
  bool directObject = emitKind == "obj" && variants.size() == 1 &&
                      first.level.empty();
  cq4p::KernelPipelineOptions options;
  options.gemmRows = tileRows;
  options.prefillChunk = prefillChunk;
  options.kvCache = *kvDtype;
  options.fuseDenseMlp = fuseDenseMlp;
  options.gateInTransform = gateInTransform;
  options.sme2FmlalRotation = sme2FmlalRotation;
  {
    // The model's planning, kernel outlining and tiling, the same for
    // every variant: run once.
    PassManager pm(&context);
    cq4p::buildKernelFrontPipeline(pm, first.kernelTarget, options);
    if (failed(pm.run(*module)))
      return fail("lowering " + inputFile + " failed");
  }
  for (size_t index = 0; index < variants.size(); ++index) {
    const TargetChoice &choice = variants[index];
    OwningOpRef<ModuleOp> variant =
        index + 1 < variants.size() ? OwningOpRef<ModuleOp>(module->clone())
                                    : std::move(module);
    PassManager pm(&context);
    options.x86Dot = choice.x86Dot;
    options.features = choice.kernelFeatures;
    cq4p::buildKernelBackPipeline(pm, choice.kernelTarget, options);
    if (failed(pm.run(*variant)))
      return cleanUp(fail("lowering " + inputFile +
                          (choice.level.empty() ? ""
                                                : " for " + choice.level) +
                          " failed"));
    if (index == 0 && !digest.empty()) {
      // kernel_abi.h's optional `const char cq4p_bundle_digest[]`, once.
      OpBuilder b = OpBuilder::atBlockEnd(variant->getBody());
      std::string text = digest + std::string(1, '\0');
      LLVM::GlobalOp::create(
          b, variant->getLoc(),
          LLVM::LLVMArrayType::get(IntegerType::get(&context, 8), text.size()),
          /*isConstant=*/true, LLVM::Linkage::External,
          CQ4P_BUNDLE_DIGEST_SYMBOL, b.getStringAttr(text));
    }

    if (emitKind == "mlir") {
      auto out = openOutputFile(outputFile, &errorMessage);
      if (!out)
        return fail(errorMessage);
      variant->print(out->os());
      out->os().close();
      if (out->os().has_error())
        return failWriting(out->os(), outputFile);
      out->keep();
      return 0;
    }

    std::unique_ptr<llvm::TargetMachine> machine = createMachine(choice);
    if (!machine)
      return cleanUp(fail("cannot create a target machine for '" +
                          choice.triple.str() + "'"));
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> llvmModule =
        translateModuleToLLVMIR(*variant, llvmContext, "cq4p-kernels");
    if (!llvmModule)
      return cleanUp(fail("translating the kernels to LLVM IR failed"));
    variant = nullptr;
    llvmModule->setTargetTriple(choice.triple);
    llvmModule->setDataLayout(machine->createDataLayout());
    std::string suffix = index == 0 ? "" : variantSuffix(choice.level);
    if (!suffix.empty())
      renameVariantSymbols(*llvmModule, suffix);
    if (!choice.level.empty())
      entries.push_back(
          {choice.level, suffix, choice.kernelFeatures,
           llvmModule->getNamedGlobal(CQ4P_MODEL_SYMBOL + suffix) != nullptr});
    if (choice.kernelTarget == cq4p::KernelTarget::AArch64Sme2) {
      // The SME ABI routines the streaming leaves call (lazy ZA saves), local
      // to the library. It is only loaded where SME2 runs (the runtime checks
      // first), so the routines' "SME available" flag is set; SVE outside
      // streaming mode is not assumed.
      std::string routines = kSmeAbiAssembly;
      routines += "\n  .data\n";
      for (const char *flag : {"cq4p_sme_abi_has_sme", "cq4p_sme_abi_has_sve"})
        routines += std::string("  .hidden ") + flag + "\n" + flag +
                    ":\n  .byte " +
                    (std::string(flag) == "cq4p_sme_abi_has_sme" ? "1" : "0") +
                    "\n";
      for (const char *routine :
           {"__arm_sme_state", "__arm_tpidr2_save", "__arm_tpidr2_restore",
            "__arm_za_disable", "__arm_get_current_vg"})
        routines += std::string("  .hidden ") + routine + "\n";
      llvmModule->appendModuleInlineAsm(routines);
    }
    for (llvm::Function &function : *llvmModule) {
      if (function.isDeclaration())
        continue;
      function.addFnAttr("target-cpu", choice.cpu);
      function.addFnAttr("target-features", choice.features);
      if (choice.triple.isAArch64()) {
        function.addFnAttr("tune-cpu", tuneCpu);
        // The kernels keep their emitted, register-budgeted order
        // (PreRaScheduling.h says why).
        function.addFnAttr(cq4p::kNoPreRaScheduling);
      }
      else if (!choice.tuneCpu.empty())
        function.addFnAttr("tune-cpu", choice.tuneCpu);
      if (choice.vectorBits > 0) {
        // Wide vectors stay whole even where the tuning prefers 256 bits.
        std::string bits = std::to_string(choice.vectorBits);
        function.addFnAttr("prefer-vector-width", bits);
        function.addFnAttr("min-legal-vector-width", bits);
      }
    }

    // The standard O3 optimization pipeline.
    {
      llvm::LoopAnalysisManager lam;
      llvm::FunctionAnalysisManager fam;
      llvm::CGSCCAnalysisManager cgam;
      llvm::ModuleAnalysisManager mam;
      llvm::PassBuilder builder(machine.get());
      builder.registerModuleAnalyses(mam);
      builder.registerCGSCCAnalyses(cgam);
      builder.registerFunctionAnalyses(fam);
      builder.registerLoopAnalyses(lam);
      builder.crossRegisterProxies(lam, fam, cgam, mam);
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
          .run(*llvmModule, mam);
    }

    if (emitKind == "llvm") {
      auto out = openOutputFile(outputFile, &errorMessage);
      if (!out)
        return fail(errorMessage);
      llvmModule->print(out->os(), nullptr);
      out->os().close();
      if (out->os().has_error())
        return failWriting(out->os(), outputFile);
      out->keep();
      return 0;
    }

    // Code generation, into the object file (--emit=obj of one variant) or
    // a temporary one.
    std::string objectPath = outputFile;
    if (!directObject) {
      llvm::SmallString<128> temporary;
      if (std::error_code error = llvm::sys::fs::createTemporaryFile(
              "cq4p-kernels", "o", temporary))
        return cleanUp(fail("cannot create a temporary object file: " +
                            error.message()));
      objectPath = std::string(temporary);
      temporaries.push_back(objectPath);
      noteTemporary(objectPath);
    }
    if (int status = emitObject(*machine, *llvmModule, objectPath))
      return cleanUp(status);
    objects.push_back(objectPath);
  }
  if (directObject)
    return 0;

  std::unique_ptr<llvm::TargetMachine> machine = createMachine(first);
  if (!machine)
    return cleanUp(fail("cannot create a target machine for '" +
                        first.triple.str() + "'"));
  if (!entries.empty()) {
    // The variant table, an object of its own (data only).
    llvm::LLVMContext llvmContext;
    std::unique_ptr<llvm::Module> table =
        buildVariantTable(llvmContext, entries);
    table->setTargetTriple(first.triple);
    table->setDataLayout(machine->createDataLayout());
    llvm::SmallString<128> temporary;
    if (std::error_code error = llvm::sys::fs::createTemporaryFile(
            "cq4p-variants", "o", temporary))
      return cleanUp(fail("cannot create a temporary object file: " +
                          error.message()));
    temporaries.push_back(std::string(temporary));
    noteTemporary(temporaries.back());
    if (int status = emitObject(*machine, *table, temporaries.back()))
      return cleanUp(status);
    objects.push_back(temporaries.back());
  }

  // lld resets every command-line option of the process when it is done
  // (outputFile among them): what the links need is copied first.
  const std::string output = outputFile;
  if (emitKind == "obj") {
    // The variants' objects as one relocatable object. lld cannot report a
    // failed write (a device such as /dev/full ends in "LLVM ERROR"), so
    // it links into a temporary, copied to -o here.
    llvm::SmallString<128> linked;
    if (std::error_code error = llvm::sys::fs::createTemporaryFile(
            "cq4p-kernels-linked", "o", linked))
      return cleanUp(fail("cannot create a temporary object file: " +
                          error.message()));
    temporaries.push_back(std::string(linked));
    noteTemporary(temporaries.back());
    std::vector<std::string> args = {"-r", "-o", temporaries.back()};
    args.insert(args.end(), objects.begin(), objects.end());
    if (int status = runLinker(args, output))
      return cleanUp(status);
    if (std::error_code error = llvm::sys::fs::copy_file(linked, output))
      return cleanUp(fail("cannot write " + output + ": " + error.message()));
    return cleanUp(0);
  }

  // The shared library, naming the system libraries it calls into.
  llvm::SmallString<128> stubDirectory;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("cq4p-link", stubDirectory))
    return cleanUp(fail("cannot create a temporary directory: " +
                        error.message()));
  std::vector<std::string> stubs;
  int status = writeSystemLibraryStubs(first.triple, *machine, objects,
                                       stubDirectory, stubs, temporaries);
  if (status == 0) {
    std::vector<std::string> args = {"-shared",   "-o",     output,
                                     "-z",        "noexecstack",
                                     "-z",        "now",    "--gc-sections"};
    args.insert(args.end(), objects.begin(), objects.end());
    args.push_back("--as-needed");
    args.insert(args.end(), stubs.begin(), stubs.end());
    status = runLinker(args, output);
  }
  cleanUp(0);
  llvm::sys::fs::remove(stubDirectory);
  return status;
}

} // namespace
