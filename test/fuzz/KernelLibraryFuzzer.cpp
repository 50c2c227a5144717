//===- KernelLibraryFuzzer.cpp - libFuzzer target for the library check ---===//
//
// Any byte string as a kernel library file: checkElfFile, everything the
// runtime reads before it hands a file to dlopen, either refuses it with a
// message naming the file or accepts it; it must never read outside the
// input (AddressSanitizer) or overflow a size computation (UBSan). Seeded
// with the fake kernel and model libraries, so that mutations reach the
// program headers, the dynamic section and the relocations.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/KernelLibrary.h"

#include <cstdint>
#include <vector>

using namespace cq4p::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A copy exactly as large as the input, so that ASan sees any read past it.
  std::vector<uint8_t> bytes(data, data + size);
  Status status = checkElfFile("fuzz.so", bytes.data(), bytes.size());
  if (!status && status.message().rfind("fuzz.so: ", 0) != 0)
    __builtin_trap();
  return 0;
}
