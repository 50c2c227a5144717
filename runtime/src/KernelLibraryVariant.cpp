//===- KernelLibraryVariant.cpp - code variants and backends --------------===//

#include "cq4p/runtime/KernelLibrary.h"

#include "KernelLibraryChecks.h"

namespace cq4p::runtime {

using namespace kernel_checks;

Status chooseVariant(const std::string &path,
                     const cq4p_kernel_variant *variants, size_t count,
                     const CpuFeatures &cpu, const std::string &level,
                     const std::string &origin, size_t &index) {
  std::string names, lacking;
  for (size_t i = 0; i < count; ++i) {
    names += std::string(i ? ", " : "") + variants[i].name;
    if (uint64_t missing = variants[i].features & ~cpu.features)
      lacking += std::string(lacking.empty() ? "" : "; ") + variants[i].name +
                 " needs " + featureList(missing);
  }
  if (!level.empty()) {
    for (size_t i = 0; i < count; ++i) {
      if (level != variants[i].name)
        continue;
      if (uint64_t missing = variants[i].features & ~cpu.features)
        return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                            origin + " asks for the " + excerpt(level) +
                                " variant, which needs " +
                                featureList(missing) +
                                ": this CPU lacks it (it has: " +
                                featureList(cpu.features) + ")");
      index = i;
      return Status::ok();
    }
    return libraryError(CQ4P_ERROR_ARGUMENT, path,
                        origin + " asks for the " + excerpt(level) +
                            " variant; the library has " + str(count) + ": " +
                            names);
  }
  for (size_t i = count; i-- > 0;)
    if ((variants[i].features & ~cpu.features) == 0) {
      index = i;
      return Status::ok();
    }
  // One variant (a library pinned to a level): worded as a kernel's check.
  std::string what = count == 1 ? std::string("its ") + variants[0].name +
                                      " code needs " +
                                      featureList(variants[0].features &
                                                  ~cpu.features)
                                : "none of its " + str(count) +
                                      " code variants runs here: " + lacking;
  return libraryError(CQ4P_ERROR_UNSUPPORTED, path,
                      what + ", which this CPU lacks (it has: " +
                          featureList(cpu.features) + ")");
}

namespace {
/// Whether a loaded library holds SME2 code: its model steps target
/// aarch64-sme2, or (a kernel-only library) one of its kernels does.
bool isSme2Library(const KernelLibrary &library) {
  if (library.model() != nullptr)
    return library.model()->target == CQ4P_TARGET_AARCH64_SME2;
  for (size_t i = 0; i < library.kernelCount(); ++i)
    if (library.kernel(i).target == CQ4P_TARGET_AARCH64_SME2)
      return true;
  return false;
}
} // namespace

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
      if (status && !isSme2Library(*out)) {
        // A library for this machine, but not SME2 code (a host library on
        // x86-64, a NEON one on AArch64): refused, not run as the backend.
        uint32_t target = out->model() != nullptr ? out->model()->target
                          : out->kernelCount() > 0 ? out->kernel(0).target
                                                   : 0;
        out.reset();
        status = libraryError(
            CQ4P_ERROR_ARGUMENT, sme2Path,
            "not an SME2 library: its code targets " +
                kernelTargetName(target) +
                "; the sme2 backend needs a library compiled with "
                "cq4p-compile --target=aarch64-sme2");
      }
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
