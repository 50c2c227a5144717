//===- FakeKernelModule.h - the fake kernel library's call counters -*- C++ -*-===//
//
// The test's own handle on a fake kernel library (FakeKernels.cpp): dlopen
// of a path already loaded returns the same module, so its counters are the
// ones the runtime's calls move; holding the handle also keeps a library
// the runtime refused (and unloaded) in memory, counters intact.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_FAKEKERNELMODULE_H
#define CQ4P_TEST_UNIT_RUNTIME_FAKEKERNELMODULE_H

#include "cq4p/kernel_abi.h"

#include <cstdint>
#include <dlfcn.h>

namespace cq4p::test {

class FakeKernelModule {
public:
  explicit FakeKernelModule(const char *path)
      : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr)
      return;
    calls_ = static_cast<int64_t *>(dlsym(handle_, "cq4p_fake_calls"));
    gemmCalls_ = static_cast<int64_t *>(dlsym(handle_, "cq4p_fake_gemm_calls"));
    violations_ = static_cast<int64_t *>(dlsym(handle_, "cq4p_fake_violations"));
  }
  ~FakeKernelModule() {
    if (handle_ != nullptr)
      dlclose(handle_);
  }
  FakeKernelModule(const FakeKernelModule &) = delete;
  FakeKernelModule &operator=(const FakeKernelModule &) = delete;

  bool loaded() const {
    return calls_ != nullptr && gemmCalls_ != nullptr && violations_ != nullptr;
  }
  int64_t calls(cq4p_kernel_op op) const { return load(&calls_[op]); }
  int64_t totalCalls() const {
    int64_t total = 0;
    for (int op = CQ4P_KERNEL_QUANTIZE_HADAMARD; op <= CQ4P_KERNEL_EMBEDDING; ++op)
      total += load(&calls_[op]);
    return total;
  }
  int64_t gemmCalls() const { return load(gemmCalls_); }
  int64_t violations() const { return load(violations_); }

private:
  static int64_t load(const int64_t *counter) {
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
  }
  void *handle_;
  int64_t *calls_ = nullptr;
  int64_t *gemmCalls_ = nullptr;
  int64_t *violations_ = nullptr;
};

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_RUNTIME_FAKEKERNELMODULE_H
