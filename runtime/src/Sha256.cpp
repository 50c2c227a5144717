//===- Sha256.cpp - SHA-256 (FIPS 180-4) ----------------------------------===//

#include "Sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CQ4P_SHA256_X86 1
#endif

namespace cq4p::runtime {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of
// the cube roots of the first 64 primes.
alignas(16) constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/// Section 6.2.2 over one block: the schedule, 64 rounds, the sums.
void blockPortable(uint32_t state[8], const uint8_t *data) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(data[4 * t]) << 24 | uint32_t(data[4 * t + 1]) << 16 |
           uint32_t(data[4 * t + 2]) << 8 | uint32_t(data[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3],
           e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + sum1 + choose + kRoundConstants[t] + w[t];
    uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

#ifdef CQ4P_SHA256_X86
/// The same compression with the SHA extensions. SHA256RNDS2 runs two
/// rounds on the working variables held as {A, B, E, F} and {C, D, G, H}
/// (highest lane first) with W[t] + K[t] of both rounds in its third
/// operand's low lanes; SHA256MSG1 adds sigma0 of the next word to each of
/// four schedule words and SHA256MSG2 adds sigma1 of the words two back,
/// which with W[t-7] added between them gives the next four words.
__attribute__((target("sha,sse4.1,ssse3"))) void
blocksShaExtensions(uint32_t state[8], const uint8_t *data, size_t count) {
  const __m128i bigEndian =
      _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
  // state[0..3] = {a, b, c, d}, state[4..7] = {e, f, g, h}, lowest lane
  // first: rearranged into ABEF = {f, e, b, a} and CDGH = {h, g, d, c}.
  __m128i dcba = _mm_shuffle_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(state)), 0xB1);
  __m128i hgfe = _mm_shuffle_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(dcba, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, dcba, 0xF0);
  for (size_t block = 0; block < count; ++block, data += 64) {
    const __m128i savedAbef = abef, savedCdgh = cdgh;
    __m128i words[4]; // W[4g .. 4g+3] of the last four groups g
    for (int group = 0; group < 16; ++group) {
      __m128i &current = words[group % 4];
      if (group < 4) {
        current = _mm_shuffle_epi8(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(data + 16 * group)),
            bigEndian);
      } else {
        const __m128i &back1 = words[(group + 3) % 4], &back2 = words[(group + 2) % 4],
                      &back3 = words[(group + 1) % 4];
        // W[t-16] + sigma0(W[t-15]) + W[t-7], then + sigma1(W[t-2]).
        __m128i partial = _mm_add_epi32(_mm_sha256msg1_epu32(current, back3),
                                        _mm_alignr_epi8(back1, back2, 4));
        current = _mm_sha256msg2_epu32(partial, back1);
      }
      __m128i sums = _mm_add_epi32(
          current, _mm_load_si128(reinterpret_cast<const __m128i *>(
                       kRoundConstants + 4 * group)));
      // Two rounds make the old A, B, E, F the new C, D, G, H: each call
      // returns the new ABEF, and its ABEF operand is the new CDGH.
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, sums);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(sums, 0x0E));
    }
    abef = _mm_add_epi32(abef, savedAbef);
    cdgh = _mm_add_epi32(cdgh, savedCdgh);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i ghcd = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state), _mm_blend_epi16(feba, ghcd, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4), _mm_alignr_epi8(ghcd, feba, 8));
}
#endif

} // namespace

Sha256::Sha256(Rounds rounds)
    : shaExtensions_(rounds == Rounds::Fastest && hasShaExtensions()) {
  // Section 5.3.3: the first 32 bits of the fractional parts of the square
  // roots of the first 8 primes.
  static constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                           0xa54ff53a, 0x510e527f, 0x9b05688c,
                                           0x1f83d9ab, 0x5be0cd19};
  std::memcpy(state_, kInitial, sizeof(state_));
}

bool Sha256::hasShaExtensions() {
#ifdef CQ4P_SHA256_X86
  static const bool present = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
      return false;
    const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
      return false;
    return ssse3 && sse41 && (b & (1u << 29)) != 0;
  }();
  return present;
#else
  return false;
#endif
}

void Sha256::blocks(const uint8_t *data, size_t count) {
#ifdef CQ4P_SHA256_X86
  if (shaExtensions_)
    return blocksShaExtensions(state_, data, count);
#endif
  for (size_t i = 0; i < count; ++i)
    blockPortable(state_, data + 64 * i);
}

void Sha256::update(const void *data, size_t bytes) {
  const auto *in = static_cast<const uint8_t *>(data);
  totalBytes_ += bytes;
  if (buffered_ > 0) {
    size_t take = std::min(bytes, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, in, take);
    buffered_ += take;
    in += take;
    bytes -= take;
    if (buffered_ < sizeof(buffer_))
      return;
    blocks(buffer_, 1);
    buffered_ = 0;
  }
  blocks(in, bytes / 64);
  in += bytes / 64 * 64;
  bytes %= 64;
  std::memcpy(buffer_, in, bytes);
  buffered_ = bytes;
}

std::string Sha256::hexDigest() {
  // Section 5.1.1: a 1 bit, zeros to 56 bytes mod 64, the length in bits.
  uint64_t bits = totalBytes_ * 8;
  uint8_t padding[72] = {0x80};
  size_t zeros = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i)
    padding[zeros + i] = uint8_t(bits >> (56 - 8 * i));
  update(padding, zeros + 8);
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state_)
    for (int shift = 28; shift >= 0; shift -= 4)
      out += kDigits[(word >> shift) & 0xF];
  return out;
}

std::string Sha256::hex(const void *data, size_t bytes) {
  Sha256 hash;
  hash.update(data, bytes);
  return hash.hexDigest();
}

} // namespace cq4p::runtime
