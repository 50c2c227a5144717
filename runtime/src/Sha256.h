//===- Sha256.h - SHA-256 (FIPS 180-4) for bundle integrity -----*- C++ -*-===//
//
// The digest the bundle's manifest records for each tensor file (`sha256`)
// and for the whole model (`model_digest`), recomputed by Bundle::verify.
// The runtime depends on the OS alone, so it carries its own SHA-256 rather
// than a cryptographic library (the aarch64 build links its dependencies
// statically, and one hash is too small a reason for another). It is
// written from FIPS 180-4 and tested against Python's hashlib on the
// standard vectors and on lengths around every block boundary
// (test/unit/Runtime/Sha256Test.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_SHA256_H
#define CQ4P_RUNTIME_SRC_SHA256_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace cq4p::runtime {

class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t bytes);
  /// The digest as 64 lowercase hex digits; the object is then spent.
  std::string hexDigest();

  static std::string hex(const void *data, size_t bytes);

private:
  void block(const uint8_t *data);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_SHA256_H
