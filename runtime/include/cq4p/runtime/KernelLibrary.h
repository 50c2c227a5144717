//===- KernelLibrary.h - a kernel library, loaded and checked ---*- C++ -*-===//
//
// A kernel library is cq4p-compile's output: a shared object exporting one
// cq4p_kernel_table (kernel_abi.h). Opening one checks, in order, before any
// of its kernels can be called:
//
//   1. the whole file, before dlopen (checkElfFile): the ELF header, so that
//      a library for another machine is refused with a message rather than
//      with the dynamic loader's; the program headers, segments and dynamic
//      section within the file, so that a truncated or malformed file is
//      refused instead of faulting inside dlopen; and no initialisers or
//      finalisers, so that none of its code runs before the checks below;
//   2. dlopen (RTLD_NOW | RTLD_LOCAL: every symbol resolved now, none leaked
//      to other libraries) and the table symbol, whose size must hold a
//      table. A library of several code variants (`cq4p_kernel_variants`,
//      kernel_abi.h: an x86-64 host library holding each instruction set
//      level's kernels) has its variant table checked like the table in 3
//      and 4, and the variant chosen (chooseVariant: the widest this CPU
//      runs, or the level CQ4P_HOST_LEVEL names) gives the table and model
//      steps that 3 to 6 check;
//   3. every pointer of the table before it is followed: the descriptor
//      array and names inside the library's readable segments (names
//      NUL-terminated there), entries inside its executable ones;
//   4. the table: ABI version, kernel count, every descriptor's fields;
//   5. the CPU: every kernel's target and features must be runnable here;
//   6. the optional model steps (`cq4p_model_steps`, ABI version 3): its
//      pointers as in 3, every field of the descriptor and of its bindings,
//      then the steps' target and features against the CPU, as for the
//      kernels. A kernel-only library has no such symbol and model() is null;
//   7. the optional bundle digest (`cq4p_bundle_digest`): a non-empty string
//      inside the library, equal to the model steps' digest when both exist.
//
// A kernel library is code, trusted like any shared library (docs/TRUST.md):
// these checks refuse a damaged or foreign file, not a malicious one. A
// descriptor can still lie about what its code does (a kernel that writes
// past the shape it declares). The bundle digest a library records
// (bundleDigest) ties it to one bundle: Bundle::checkLibrary, which
// Model::open and cq4p-run apply. Kernels run only through the layers that
// bind them (Linear.h).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_KERNELLIBRARY_H
#define CQ4P_RUNTIME_KERNELLIBRARY_H

#include "cq4p/kernel_abi.h"
#include "cq4p/runtime/CpuFeatures.h"
#include "cq4p/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cq4p::runtime {

/// More kernels than any model needs: a count above this is a corrupt table.
constexpr uint32_t kMaxKernelCount = 65536;
/// More bound tensors than any model has (a 100-layer model with 20 tensors
/// a layer binds 2000): a count above this is a corrupt descriptor.
constexpr uint32_t kMaxModelBindingCount = 65536;
/// More rows than a prefill chunk can sensibly hold in its workspace.
constexpr uint64_t kMaxPrefillChunk = uint64_t(1) << 20;
/// The most step state a model library may ask for (1 GiB; LFM2-1.2B's
/// convolution rows are 80 KiB).
constexpr uint64_t kMaxStateBytes = uint64_t(1) << 30;
/// A recorded bundle digest longer than this is a corrupt symbol.
constexpr size_t kMaxBundleDigestBytes = CQ4P_MAX_BUNDLE_DIGEST_BYTES;

/// Checks the start of a file (at least its first 64 bytes when it has them)
/// as the ELF header of a shared library this process can load. `path` only
/// names the file in messages.
Status checkElfHeader(const std::string &path, const uint8_t *bytes,
                      size_t size);

/// Library files larger than this are refused before they are read.
constexpr uint64_t kMaxLibraryBytes = uint64_t(1) << 31;

/// Checks a whole shared library file before dlopen maps it, so that a
/// truncated or malformed file is refused instead of crashing the loader:
/// the ELF header (checkElfHeader), the program headers, every loadable
/// segment and the dynamic section inside the file, and no code that would
/// run at load or unload (DT_INIT, DT_FINI, DT_PREINIT_ARRAY, DT_INIT_ARRAY,
/// DT_FINI_ARRAY): cq4p-compile writes none, and a constructor would run
/// before the runtime could check the library's table. `path` only names
/// the file in messages.
Status checkElfFile(const std::string &path, const uint8_t *bytes, size_t size);

/// Checks a kernel table's version, count and descriptors.
Status validateKernelTable(const std::string &path,
                           const cq4p_kernel_table &table);

/// Checks that every kernel of a validated table can run on `cpu`.
Status checkKernelsRunnable(const std::string &path,
                            const cq4p_kernel_table &table,
                            const CpuFeatures &cpu);

/// Checks a model descriptor's version, sizes, steps and bindings.
Status validateModelDesc(const std::string &path, const cq4p_model_desc &model);

/// Checks that the steps of a validated model descriptor can run on `cpu`.
Status checkModelRunnable(const std::string &path,
                          const cq4p_model_desc &model, const CpuFeatures &cpu);

/// The environment variable that forces a library's code variant: its value
/// is a level name (x86-64-v3, ...); unset or empty, the widest runs.
constexpr const char *kHostLevelVariable = "CQ4P_HOST_LEVEL";

/// Which of `count` variants (narrowest first) runs on `cpu`: the one named
/// `level` when it is not empty (refused when the library has none of that
/// name or the CPU lacks a feature it needs; `origin` says in messages who
/// asked for it), else the last one whose features the CPU has (refused,
/// naming what each lacks, when there is none). `path` names the library.
Status chooseVariant(const std::string &path,
                     const cq4p_kernel_variant *variants, size_t count,
                     const CpuFeatures &cpu, const std::string &level,
                     const std::string &origin, size_t &index);

/// "CQ4", "FP16", "FP32" ("kind N" when unknown).
std::string bindingKindName(uint32_t kind);
/// "f32", "f16" ("kv dtype N" when unknown).
std::string kvDtypeName(uint32_t dtype);
/// Bytes of one KV cache element of `dtype` (0 when unknown).
size_t kvDtypeBytes(uint32_t dtype);

/// "MATMUL", "QUANTIZE_HADAMARD", ... ("op N" when unknown).
std::string kernelOpName(uint32_t op);
/// "host", "aarch64-neon", "aarch64-sme2" ("target N" when unknown).
std::string kernelTargetName(uint32_t target);
/// One line describing a descriptor: name, op, shape, gs, rows, target.
std::string describeKernel(const cq4p_kernel_desc &kernel);

/// Which kernels run the panel matmuls on AArch64.
enum class Backend {
  Auto, ///< SME2 where the CPU runs it (SME2, 512-bit streaming vectors), else NEON
  Neon,
  Sme2, ///< forced: an error where the CPU cannot run it
};

const char *backendName(Backend backend);

class KernelLibrary {
public:
  /// Loads `path` and checks it against this CPU (detectCpuFeatures()).
  static Status open(const std::string &path,
                     std::unique_ptr<KernelLibrary> &out);
  /// Loads `path` and checks it against the given CPU, with the variant
  /// that CQ4P_HOST_LEVEL names when it is set.
  static Status open(const std::string &path, const CpuFeatures &cpu,
                     std::unique_ptr<KernelLibrary> &out);
  /// Loads `path` and checks it against the given CPU, with the variant
  /// named `level` (empty: the widest the CPU runs). A level given to a
  /// library that records no variants is refused. `origin` names who
  /// asked for the level in messages.
  static Status open(const std::string &path, const CpuFeatures &cpu,
                     const std::string &level, const std::string &origin,
                     std::unique_ptr<KernelLibrary> &out);

  /// Opens the library of `backend`: `neonPath` for Neon, `sme2Path` for
  /// Sme2 (refused, saying what the CPU lacks, where it cannot run it), and
  /// for Auto the SME2 library when `cpu` runs it, the NEON one otherwise,
  /// with the SME2 library's refusal in `declined`. `chosen` says which.
  static Status openForBackend(Backend backend, const std::string &neonPath,
                               const std::string &sme2Path,
                               const CpuFeatures &cpu,
                               std::unique_ptr<KernelLibrary> &out,
                               Backend &chosen, std::string *declined = nullptr);

  KernelLibrary(const KernelLibrary &) = delete;
  KernelLibrary &operator=(const KernelLibrary &) = delete;
  /// Unloads the library: every layer bound to it must be gone first.
  ~KernelLibrary();

  const std::string &path() const { return path_; }
  const cq4p_kernel_table &table() const { return *table_; }
  size_t kernelCount() const { return table_->count; }
  const cq4p_kernel_desc &kernel(size_t index) const {
    return table_->kernels[index];
  }
  /// The model steps, validated and runnable here; null for a kernel-only
  /// library.
  const cq4p_model_desc *model() const { return model_; }
  /// The model_digest of the bundle the library was compiled for
  /// (`cq4p_bundle_digest`, or else the model steps' digest), or "" when
  /// it records none.
  const std::string &bundleDigest() const { return bundleDigest_; }
  /// The level of the code variant in use ("x86-64-v4+avx512vnni"), or ""
  /// for a library that records no variants.
  const std::string &variant() const { return variant_; }
  /// How many variants the library holds (0: it records none).
  size_t variantCount() const { return variantCount_; }

  /// The kernels of `op` for a tensor of the given shape, in table order.
  /// Quantize kernels are matched on K, the group size and the rotation
  /// only (they do not depend on N); matmul kernels on N, K and the group
  /// size only (panels mean the same whatever rotated the weights).
  std::vector<const cq4p_kernel_desc *> find(cq4p_kernel_op op, uint64_t n,
                                             uint64_t k, uint32_t groupSize,
                                             bool orthogonal) const;

  /// The kernels of `op`, one per line, for messages (at most `limit`
  /// lines, then a count of the rest).
  std::string listKernels(cq4p_kernel_op op, size_t limit = 16) const;

private:
  KernelLibrary() = default;

  std::string path_;
  void *handle_ = nullptr;
  const cq4p_kernel_table *table_ = nullptr;
  const cq4p_model_desc *model_ = nullptr;
  std::string bundleDigest_;
  std::string variant_;
  size_t variantCount_ = 0;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_KERNELLIBRARY_H
