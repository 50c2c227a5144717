//===- Sha256.h - SHA-256 (FIPS 180-4) for bundle integrity -----*- C++ -*-===//
//
// The digest the bundle's manifest records for each tensor file (`sha256`)
// and for the whole model (`model_digest`), recomputed by Bundle::verify.
// The runtime depends on the OS alone, so it carries its own SHA-256 rather
// than a cryptographic library (the aarch64 build links its dependencies
// statically, and one hash is too small a reason for another). It is
// written from FIPS 180-4 and tested against Python's hashlib on the
// standard vectors and on lengths around every block boundary
// (test/unit/Runtime/IntegrityTest.cpp). On x86-64 CPUs with the SHA
// extensions (SHA-NI) the blocks go through SHA256RNDS2 and SHA256MSG1/2,
// several times faster than the portable rounds (a converted bundle is
// hashed in full when it is verified); both give the same digest, and the
// tests run both.
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
  /// How the 64-byte blocks are compressed.
  enum class Rounds {
    Fastest,  ///< the SHA extensions where the CPU has them, else Portable
    Portable, ///< FIPS 180-4's rounds in plain C++
  };

  explicit Sha256(Rounds rounds = Rounds::Fastest);
  /// Whether this CPU has the SHA extensions Rounds::Fastest uses.
  static bool hasShaExtensions();
  void update(const void *data, size_t bytes);
  /// The digest as 64 lowercase hex digits; the object is then spent.
  std::string hexDigest();

  static std::string hex(const void *data, size_t bytes);

private:
  /// Compresses `count` whole blocks.
  void blocks(const uint8_t *data, size_t count);
  bool shaExtensions_;
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_SHA256_H
