//===- CpuFeatures.cpp - asking the CPU and the OS ------------------------===//
//
// On AArch64 the kernel tells a process what it may use through the
// auxiliary vector (HWCAP, HWCAP2): a CPU feature the kernel does not
// enable (SME needs OS support for its register state) is absent there even
// when the silicon has it, which is exactly what a kernel library needs to
// know. The SME streaming vector length comes from prctl. On x86-64 the
// compiler's CPU model (cpuid plus the OS's XSAVE state) answers.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/CpuFeatures.h"

#include "cq4p/kernel_abi.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace cq4p::runtime {

#if defined(__aarch64__) && defined(__linux__)
namespace {
// Older headers lack the newer bits; the values are the Linux UAPI's.
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#ifndef HWCAP2_SME
#define HWCAP2_SME (1UL << 23)
#endif
#ifndef HWCAP2_SME2
#define HWCAP2_SME2 (1UL << 37)
#endif
#ifndef PR_SME_GET_VL
#define PR_SME_GET_VL 64
#endif
#ifndef PR_SME_VL_LEN_MASK
#define PR_SME_VL_LEN_MASK 0xffff
#endif

uint32_t smeVectorBits() {
  int result = prctl(PR_SME_GET_VL, 0, 0, 0, 0);
  if (result < 0)
    return 0;
  return uint32_t(result & PR_SME_VL_LEN_MASK) * 8;
}
} // namespace
#endif

CpuArch hostArch() {
#if defined(__x86_64__)
  return CpuArch::X86_64;
#elif defined(__aarch64__)
  return CpuArch::AArch64;
#else
  return CpuArch::Other;
#endif
}

CpuFeatures detectCpuFeatures() {
  CpuFeatures cpu;
  cpu.arch = hostArch();
#if defined(__x86_64__)
  __builtin_cpu_init();
#define CQ4P_DETECT(bit, name)                                                 \
  if (__builtin_cpu_supports(name))                                            \
    cpu.features |= bit;
  CQ4P_X86_FEATURES(CQ4P_DETECT)
#undef CQ4P_DETECT
#elif defined(__aarch64__) && defined(__linux__)
  unsigned long hwcap = getauxval(AT_HWCAP);
  unsigned long hwcap2 = getauxval(AT_HWCAP2);
  if (hwcap & HWCAP_ASIMDDP)
    cpu.features |= CQ4P_FEATURE_AARCH64_DOTPROD;
  if (hwcap2 & HWCAP2_I8MM)
    cpu.features |= CQ4P_FEATURE_AARCH64_I8MM;
  if (hwcap2 & HWCAP2_SME2)
    cpu.features |= CQ4P_FEATURE_AARCH64_SME2;
  if (hwcap2 & HWCAP2_SME)
    cpu.smeVectorBits = smeVectorBits();
#endif
  return cpu;
}

const char *archName(CpuArch arch) {
  switch (arch) {
  case CpuArch::X86_64:
    return "x86-64";
  case CpuArch::AArch64:
    return "AArch64";
  case CpuArch::Other:
    break;
  }
  return "an unsupported architecture";
}

uint64_t knownFeatureBits() {
#define CQ4P_BIT(bit, name) | (bit)
  return 0 CQ4P_FEATURES(CQ4P_BIT);
#undef CQ4P_BIT
}

std::string featureName(uint64_t bit) {
  switch (bit) {
#define CQ4P_NAME(bit, name)                                                   \
  case bit:                                                                    \
    return name;
    CQ4P_FEATURES(CQ4P_NAME)
#undef CQ4P_NAME
  default:
    break;
  }
  int index = 0;
  while (index < 64 && bit != (uint64_t(1) << index))
    ++index;
  return "unknown feature bit " + std::to_string(index);
}

std::string featureList(uint64_t features) {
  std::string list;
  for (int i = 0; i < 64; ++i) {
    uint64_t bit = uint64_t(1) << i;
    if (!(features & bit))
      continue;
    if (!list.empty())
      list += ", ";
    list += featureName(bit);
  }
  return list.empty() ? "none" : list;
}

} // namespace cq4p::runtime
