//===- KernelLibraryChecks.h - the library files' helpers ----- -*- C++ -*-===//
//
// What the files of KernelLibrary (KernelLibrary.cpp: opening and the
// loaded library's pointers; KernelLibraryElf.cpp: the file before dlopen;
// KernelLibraryTable.cpp: the kernel table and model descriptor;
// KernelLibraryVariant.cpp: the choice of a code variant and of a backend's
// library) share: the messages' wording and the bounds check.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_KERNELLIBRARYCHECKS_H
#define CQ4P_RUNTIME_SRC_KERNELLIBRARYCHECKS_H

#include "cq4p/kernel_abi.h"
#include "cq4p/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace cq4p::runtime::kernel_checks {

inline std::string str(uint64_t value) { return std::to_string(value); }

inline Status libraryError(cq4p_code code, const std::string &path,
                    const std::string &what) {
  return Status(code, path + ": " + what);
}

/// "kernel <index> (<name>)", how messages name a table's descriptor.
std::string kernelLabel(size_t index, const cq4p_kernel_desc &kernel);

/// What to do about a library of another ABI version.
std::string abiAdvice(uint32_t version);

/// `offset + size` within `limit`, without overflow.
inline bool fits(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

inline std::string hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "0x%llx",
                static_cast<unsigned long long>(value));
  return buffer;
}

} // namespace cq4p::runtime::kernel_checks

#endif // CQ4P_RUNTIME_SRC_KERNELLIBRARYCHECKS_H
