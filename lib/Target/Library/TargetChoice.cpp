//===- TargetChoice.cpp - what a kernel library's code runs on ------------===//
//
// The variants of a target (TargetChoice.h): the AArch64 targets' fixed
// instruction set, the x86-64 levels of kernel_abi.h's CQ4P_X86_LEVELS, and
// this machine's CPU for a host of another architecture.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/Library/TargetChoice.h"

#include "cq4p/kernel_abi.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <initializer_list>
#include <mutex>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

/// LLVM's target for the choice's triple (the targets registered first).
llvm::Expected<const llvm::Target *> lookupTarget(const TargetChoice &choice) {
  initializeLlvmTargets();
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(choice.triple, lookupError);
  if (!target)
    return message("no LLVM target for '" + choice.triple.str() +
                   "': " + lookupError);
  return target;
}

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

  constexpr X86Dot dot() const {
    if (features & CQ4P_FEATURE_X86_AVX512VNNI)
      return X86Dot::avx512vnni;
    if (features & CQ4P_FEATURE_X86_AVXVNNI)
      return X86Dot::avxvnni;
    if (features & CQ4P_FEATURE_X86_AVX2)
      return X86Dot::avx2;
    if (features & CQ4P_FEATURE_X86_SSSE3)
      return X86Dot::ssse3;
    return X86Dot::generic;
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

const HostLevel *findHostLevel(llvm::StringRef name) {
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
llvm::Error chooseX86Levels(const TargetChoice &base,
                            const TargetRequest &request,
                            std::vector<TargetChoice> &variants) {
  if (!request.hostCpu) {
    for (const HostLevel &level : kHostLevels) {
      if (!level.byDefault)
        continue;
      TargetChoice variant = base;
      applyLevel(variant, level);
      variants.push_back(variant);
      if (request.oneLevel)
        break;
    }
    return llvm::Error::success();
  }
  const std::string &hostCpu = *request.hostCpu;
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
      return message("unknown --host-cpu '" + hostCpu + "' (expected " + names +
                     "native or widest)");
    }
  }
  applyLevel(variant, *level);
  variants.push_back(variant);
  return llvm::Error::success();
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

} // namespace

uint64_t mlir::cq4p::hostX86Features() {
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
  if ((bits & CQ4P_FEATURE_X86_64_V2) &&
      hasAll({"avx2", "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe"}))
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

llvm::Expected<std::vector<TargetChoice>>
mlir::cq4p::chooseTargets(const TargetRequest &request) {
  const std::string &targetName = request.target;
  TargetChoice choice;
  if (targetName == "aarch64-neon" || targetName == "aarch64-sme2") {
    bool sme2 = targetName == "aarch64-sme2";
    choice.kernelTarget =
        sme2 ? Target::aarch64_sme2 : Target::aarch64_neon;
    choice.triple = llvm::Triple(request.triple.empty() ? "aarch64-linux-gnu"
                                                        : request.triple);
    if (!choice.triple.isAArch64())
      return message("--target=" + targetName +
                     " needs an AArch64 triple, got '" + choice.triple.str() +
                     "'");
    // The SME ABI routines an SME2 library carries are ELF assembly
    // (runtime/src/sme_abi/sme_abi.S).
    if (sme2 && !choice.triple.isOSBinFormatELF())
      return message("--target=aarch64-sme2 needs an ELF triple (Linux, "
                     "Android) for its SME ABI routines, got '" +
                     choice.triple.str() + "'");
    // Armv8.2-A with the dot product: no SVE outside streaming mode, which
    // some SME2 devices (Apple M4) do not have; SME2 only in the leaves.
    choice.cpu = "generic";
    choice.features = sme2 ? "+v8.2a,+neon,+dotprod,+sme2,-sve,-sve2"
                           : "+v8.2a,+neon,+dotprod,-sve,-sve2";
    choice.kernelFeatures =
        CQ4P_FEATURE_AARCH64_DOTPROD | (sme2 ? CQ4P_FEATURE_AARCH64_SME2 : 0);
    return std::vector<TargetChoice>{choice};
  }
  if (targetName == "host") {
    choice.kernelTarget = Target::host;
    std::string host = llvm::sys::getProcessTriple();
    choice.triple =
        llvm::Triple(request.triple.empty() ? host : request.triple);
    if (choice.triple.getArch() != llvm::Triple(host).getArch())
      return message("--target=host builds for this machine (" + host +
                     "), not for '" + choice.triple.str() + "'");
    std::vector<TargetChoice> variants;
    if (choice.triple.getArch() == llvm::Triple::x86_64) {
      if (llvm::Error error = chooseX86Levels(choice, request, variants))
        return std::move(error);
    } else {
      describeHost(choice);
      variants.push_back(choice);
    }
    return variants;
  }
  return message("unknown --target '" + targetName +
                 "' (expected aarch64-neon, aarch64-sme2 or host)");
}

void mlir::cq4p::initializeLlvmTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    llvm::InitializeAllAsmParsers();
  });
}

llvm::Error mlir::cq4p::checkTuneCpu(const TargetChoice &choice,
                                     llvm::StringRef targetName,
                                     llvm::StringRef tuneCpu, bool given) {
  if (!choice.triple.isAArch64()) {
    if (!given)
      return llvm::Error::success();
    return message("--tune-cpu applies to AArch64 targets; --target=" +
                   targetName + " is tuned by --host-cpu");
  }
  llvm::Expected<const llvm::Target *> target = lookupTarget(choice);
  if (!target)
    return target.takeError();
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      (*target)->createMCSubtargetInfo(choice.triple, "generic", ""));
  if (!subtarget || !subtarget->isCPUStringValid(tuneCpu))
    return message("unknown --tune-cpu '" + tuneCpu + "' for " +
                   choice.triple.str() +
                   " (expected a CPU LLVM has a scheduling model for, e.g. "
                   "neoverse-v2, cortex-a76, apple-m4)");
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
mlir::cq4p::createTargetMachine(const TargetChoice &choice) {
  llvm::Expected<const llvm::Target *> target = lookupTarget(choice);
  if (!target)
    return target.takeError();
  llvm::TargetOptions targetOptions;
  std::unique_ptr<llvm::TargetMachine> machine((*target)->createTargetMachine(
      choice.triple, choice.cpu, choice.features, targetOptions,
      llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return message("cannot create a target machine for '" +
                   choice.triple.str() + "'");
  return std::move(machine);
}
