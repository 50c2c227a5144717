//===- CpuFeatures.h - what this CPU can run ---------------------*- C++ -*-===//
//
// The CPU facts a kernel library is checked against before any of its code
// runs: the process's architecture, the CQ4P_FEATURE_* bits of kernel_abi.h
// the CPU (and the OS) provide, and the SME streaming vector length.
// Detection asks the OS (getauxval and prctl on Linux AArch64) or the
// compiler's CPU model (x86-64). The checks take the features as a value,
// so tests can hand them a CPU that lacks something the machine has.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_CPUFEATURES_H
#define CQ4P_RUNTIME_CPUFEATURES_H

#include <cstdint>
#include <string>

namespace cq4p::runtime {

enum class CpuArch { Other, X86_64, AArch64 };

struct CpuFeatures {
  CpuArch arch = CpuArch::Other;
  uint64_t features = 0;        ///< CQ4P_FEATURE_* bits present
  uint32_t smeVectorBits = 0;   ///< streaming vector length; 0 without SME
};

/// The architecture this runtime was compiled for (kernels run in-process,
/// so it is also the only architecture a library may be built for).
CpuArch hostArch();

/// Asks the CPU and the OS, every call (cheap: a few system calls at most).
CpuFeatures detectCpuFeatures();

/// "x86-64", "AArch64" or "an unsupported architecture".
const char *archName(CpuArch arch);

/// The name of one CQ4P_FEATURE_* bit ("dotprod", "avx512vnni"), or
/// "unknown feature bit N".
std::string featureName(uint64_t bit);

/// Every set bit of `features` by name, comma-separated ("none" when empty).
std::string featureList(uint64_t features);

/// Every CQ4P_FEATURE_* bit kernel_abi.h defines.
uint64_t knownFeatureBits();

/// The streaming vector length the SME2 target is built for.
constexpr uint32_t kSme2VectorBits = 512;

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_CPUFEATURES_H
