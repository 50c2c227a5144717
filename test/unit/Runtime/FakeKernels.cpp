//===- FakeKernels.cpp - a kernel library for the runtime's tests ---------===//
//
// Stands in for cq4p-compile's output: a shared library exporting a
// cq4p_kernel_table whose kernels are plain, scalar implementations of
// docs/FORMAT.md section 5, one instantiation per shape the tests use. Built
// several times under compile definitions to make the defective libraries
// the refusal tests need:
//
//   CQ4P_FAKE_ABI_VERSION=n    the table claims ABI version n
//   CQ4P_FAKE_MORE_FEATURES    one matmul kernel also needs the wider ISA
//                              extensions (i8mm; avx2 and AVX-512)
//   CQ4P_FAKE_BAD_SHAPE        one descriptor has K not a multiple of gs
//   CQ4P_FAKE_SME2             every kernel targets aarch64-sme2 (the SME
//                              workers' library); it lacks the matmuls of
//                              N=72 K=256 gs=32 and the GEMM of N=64 K=256
//                              gs=128
//   CQ4P_FAKE_NO_TABLE         no cq4p_kernel_table symbol at all
//   CQ4P_FAKE_DIGEST           records the bundle digest "toy-digest-1"
//                              (cq4p_bundle_digest)
//   CQ4P_FAKE_BAD_DIGEST       records an empty bundle digest
//   CQ4P_FAKE_VARIANTS=v       lists two code variants (cq4p_kernel_variants
//                              of version v): "base", the exported table,
//                              and "wide", a hidden copy that also needs
//                              avx512vbmi (i8mm on AArch64)
//
// Every call is counted (cq4p_fake_calls, by op), as is every call outside
// the range a kernel declared or outside the tensor (cq4p_fake_violations),
// so tests can see which kernels the runtime reached and that it honoured
// the contract.
//
//===----------------------------------------------------------------------===//

#include "cq4p/format.h"
#include "cq4p/kernel_abi.h"

#include "fp16.h"

#include <cmath>
#include <cstdint>

#define CQ4P_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// The initialisers make these definitions (`extern "C"` alone declares).
CQ4P_FAKE_EXPORT int64_t cq4p_fake_calls[5] = {}; // by cq4p_kernel_op
CQ4P_FAKE_EXPORT int64_t cq4p_fake_gemm_calls = 0; // matmul calls, rows > 1
CQ4P_FAKE_EXPORT int64_t cq4p_fake_violations = 0; // calls breaking the contract

namespace {

void count(int64_t &counter) { __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED); }

void checkRange(bool ok) {
  if (!ok)
    count(cq4p_fake_violations);
}

float half(uint16_t bits) { return cq4p_half_to_float(bits); }

/// Index of weight (n, k) in the panels (docs/FORMAT.md section 3).
unsigned panelIndex(const uint8_t *panels, uint64_t numGroups,
                    uint64_t groupSize, uint64_t n, uint64_t k) {
  uint64_t s = n / 64, c = n % 64, g = k / groupSize;
  uint64_t kg = (k % groupSize) / 4, kc = k % 4;
  uint64_t nibble = c * 4 + kc;
  uint8_t byte = panels[((s * numGroups + g) * (groupSize / 4) + kg) * 128 +
                        nibble / 2];
  return nibble % 2 ? byte >> 4 : byte & 0xF;
}

/// Step 2: per-group int8 quantization of z[groupSize].
void quantizeGroup(const float *z, uint32_t groupSize, int8_t *out,
                   float *scale) {
  float maxAbs = 0.0f;
  for (uint32_t j = 0; j < groupSize; ++j)
    maxAbs = std::fabs(z[j]) > maxAbs ? std::fabs(z[j]) : maxAbs;
  float s = maxAbs / 127.0f;
  if (s < 1e-10f)
    s = 1e-10f;
  for (uint32_t j = 0; j < groupSize; ++j) {
    float q = std::nearbyintf(z[j] / s); // half to even in the default mode
    q = q > 127.0f ? 127.0f : (q < -128.0f ? -128.0f : q);
    out[j] = int8_t(q);
  }
  *scale = s;
}

template <uint64_t K, uint32_t GS>
void quantizeHadamard(const cq4p_weight_view *w, const float *x, int8_t *act,
                      float *scales, int64_t rows, int64_t groupBegin,
                      int64_t groupEnd) {
  count(cq4p_fake_calls[CQ4P_KERNEL_QUANTIZE_HADAMARD]);
  constexpr int64_t ng = K / GS;
  checkRange(rows >= 1 && 0 <= groupBegin && groupBegin < groupEnd &&
             groupEnd <= ng);
  const float invSqrt = float(1.0 / std::sqrt(double(GS)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = groupBegin; g < groupEnd; ++g) {
      float v[GS], z[GS];
      for (uint32_t j = 0; j < GS; ++j)
        v[j] = x[r * K + g * GS + j] * half(w->input_scale_recip[g * GS + j]) *
               float(w->left_signs[j]);
      // Natural-order fast Walsh-Hadamard transform.
      for (uint32_t len = 1; len < GS; len *= 2)
        for (uint32_t i = 0; i < GS; i += 2 * len)
          for (uint32_t j = i; j < i + len; ++j) {
            float a = v[j], b = v[j + len];
            v[j] = a + b;
            v[j + len] = a - b;
          }
      for (uint32_t j = 0; j < GS; ++j)
        v[j] = v[j] * invSqrt * float(w->right_signs[j]);
      for (uint32_t j = 0; j < GS; ++j)
        z[j] = v[w->permutation[j]];
      quantizeGroup(z, GS, act + r * K + g * GS, scales + r * ng + g);
    }
}

template <uint64_t K>
void quantizeOrthogonal(const cq4p_weight_view *w, const float *x, int8_t *act,
                        float *scales, int64_t rows, int64_t groupBegin,
                        int64_t groupEnd) {
  count(cq4p_fake_calls[CQ4P_KERNEL_QUANTIZE_ORTHOGONAL]);
  constexpr uint32_t GS = CQ4P_ORTHOGONAL_VIRTUAL_GROUP;
  constexpr int64_t ng = K / GS;
  checkRange(rows >= 1 && 0 <= groupBegin && groupBegin < groupEnd &&
             groupEnd <= ng);
  for (int64_t r = 0; r < rows; ++r) {
    float a[K];
    for (uint64_t k = 0; k < K; ++k)
      a[k] = x[r * K + k] * half(w->input_scale_recip[k]);
    for (int64_t g = groupBegin; g < groupEnd; ++g) {
      float basis[GS];
      for (uint32_t jj = 0; jj < GS; ++jj) {
        uint64_t j = g * GS + jj;
        float sum = 0.0f;
        for (uint64_t k = 0; k < K; ++k)
          sum += a[k] * half(w->rotation_t[j * K + k]);
        basis[jj] = sum;
      }
      quantizeGroup(basis, GS, act + r * K + g * GS, scales + r * ng + g);
    }
  }
}

template <uint64_t N, uint64_t K, uint32_t GS, uint32_t MinRows,
          uint32_t MaxRows>
void matmul(const cq4p_weight_view *w, const int8_t *act,
            const float *scales, float *y, int64_t rows, int64_t sbBegin,
            int64_t sbEnd) {
  count(cq4p_fake_calls[CQ4P_KERNEL_MATMUL]);
  if (rows > 1)
    count(cq4p_fake_gemm_calls);
  constexpr int64_t ng = K / GS;
  constexpr int64_t superBlocks = (N + 63) / 64;
  checkRange(rows >= MinRows && (MaxRows == 0 || rows <= MaxRows) &&
             0 <= sbBegin && sbBegin < sbEnd && sbEnd <= superBlocks);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = sbBegin; s < sbEnd; ++s)
      for (uint64_t c = 0; c < 64; ++c) {
        uint64_t n = s * 64 + c;
        if (n >= N)
          break; // y has N columns: padding channels are never written
        float acc = 0.0f;
        for (int64_t g = 0; g < ng; ++g) {
          int32_t partial = 0;
          for (uint32_t kk = 0; kk < GS; ++kk) {
            uint64_t k = g * GS + kk;
            partial += int32_t(act[r * K + k]) *
                       int32_t(w->cb_i8[panelIndex(w->panels, ng, GS, n, k)]);
          }
          acc += float(partial) * scales[r * ng + g] *
                 w->norm_panels[(s * ng + g) * 64 + c];
        }
        y[r * N + n] = acc;
      }
}

template <uint64_t N, uint64_t K>
void embedding(const cq4p_weight_view *w, const int64_t *ids, float *out,
               int64_t countIds) {
  count(cq4p_fake_calls[CQ4P_KERNEL_EMBEDDING]);
  constexpr uint32_t GS = CQ4P_ORTHOGONAL_VIRTUAL_GROUP;
  constexpr uint64_t ng = K / GS;
  for (int64_t i = 0; i < countIds; ++i) {
    int64_t row = ids[i];
    if (row < 0 || uint64_t(row) >= N) {
      count(cq4p_fake_violations);
      continue;
    }
    float norm = half(w->norms[row * ng]);
    for (uint64_t j = 0; j < K; ++j) {
      float sum = 0.0f;
      for (uint64_t k = 0; k < K; ++k)
        sum += half(w->rotation[j * K + k]) *
               half(w->codebook[panelIndex(w->panels, ng, GS, row, k)]);
      out[i * K + j] = sum * norm * half(w->input_scale_recip[j]);
    }
  }
}

#if defined(CQ4P_FAKE_SME2)
constexpr uint32_t kTarget = CQ4P_TARGET_AARCH64_SME2;
constexpr uint64_t kFeatures = CQ4P_FEATURE_AARCH64_SME2;
#elif defined(__aarch64__)
constexpr uint32_t kTarget = CQ4P_TARGET_AARCH64_NEON;
constexpr uint64_t kFeatures = CQ4P_FEATURE_AARCH64_DOTPROD;
#else
constexpr uint32_t kTarget = CQ4P_TARGET_HOST;
constexpr uint64_t kFeatures = CQ4P_FEATURE_X86_SSSE3;
#endif

#if !defined(CQ4P_FAKE_MORE_FEATURES)
constexpr uint64_t kMoreFeatures = 0;
#elif defined(__aarch64__)
constexpr uint64_t kMoreFeatures = CQ4P_FEATURE_AARCH64_I8MM;
#else
constexpr uint64_t kMoreFeatures =
    CQ4P_FEATURE_X86_AVX2 | CQ4P_FEATURE_X86_AVX512BW |
    CQ4P_FEATURE_X86_AVX512VNNI | CQ4P_FEATURE_X86_AVX512VBMI;
#endif
#ifndef CQ4P_FAKE_ABI_VERSION
#define CQ4P_FAKE_ABI_VERSION CQ4P_KERNEL_ABI_VERSION
#endif

template <typename Fn> const void *entry(Fn fn) {
  return reinterpret_cast<const void *>(fn);
}

// Quantize kernels do not depend on N; the table still needs n > 0, so
// they carry K.
#define QUANTIZE_HADAMARD(K, GS)                                               \
  {"quantize_hadamard_k" #K "_gs" #GS, CQ4P_KERNEL_QUANTIZE_HADAMARD, kTarget, \
   kFeatures, K, K, GS, 0, 1, 0, entry(&quantizeHadamard<K, GS>)}
#define QUANTIZE_ORTHOGONAL(K)                                                 \
  {"quantize_orthogonal_k" #K, CQ4P_KERNEL_QUANTIZE_ORTHOGONAL, kTarget,       \
   kFeatures, K, K, 128, 1, 1, 0, entry(&quantizeOrthogonal<K>)}
#define MATMUL(N, K, GS, ORTHO, MIN, MAX, EXTRA)                               \
  {"matmul_n" #N "_k" #K "_gs" #GS "_rows" #MIN "_" #MAX,                      \
   CQ4P_KERNEL_MATMUL, kTarget, kFeatures | (EXTRA), N, K, GS, ORTHO, MIN, MAX, \
   entry(&matmul<N, K, GS, MIN, MAX>)}
#define GEMV_GEMM(N, K, GS)                                                    \
  MATMUL(N, K, GS, 0, 1, 1, 0), MATMUL(N, K, GS, 0, 2, 0, 0)

const cq4p_kernel_desc kKernels[] = {
    QUANTIZE_HADAMARD(256, 32),
    QUANTIZE_HADAMARD(256, 128),
    MATMUL(64, 256, 32, 0, 1, 1, kMoreFeatures),
    MATMUL(64, 256, 32, 0, 2, 0, 0),
#ifndef CQ4P_FAKE_SME2
    GEMV_GEMM(72, 256, 32),
#endif
    GEMV_GEMM(100, 256, 32),
    GEMV_GEMM(260, 256, 32), // five super-blocks, the last one ragged
#ifdef CQ4P_FAKE_SME2
    MATMUL(64, 256, 128, 0, 1, 1, 0),
#else
    GEMV_GEMM(64, 256, 128),
#endif
    GEMV_GEMM(72, 256, 128),
    GEMV_GEMM(100, 256, 128),
    // A tensor with a GEMV and no GEMM.
    QUANTIZE_HADAMARD(128, 32),
    MATMUL(64, 128, 32, 0, 1, 1, 0),
    // A tensor whose GEMM takes at most 4 rows.
    QUANTIZE_HADAMARD(128, 64),
    MATMUL(64, 128, 64, 0, 1, 1, 0),
    MATMUL(64, 128, 64, 0, 2, 4, 0),
    // A tied embedding / lm_head, vocabulary 100, K 256.
    QUANTIZE_ORTHOGONAL(256),
    MATMUL(100, 256, 128, 1, 1, 1, 0),
    MATMUL(100, 256, 128, 1, 2, 0, 0),
    {"embedding_n100_k256", CQ4P_KERNEL_EMBEDDING, kTarget, kFeatures, 100, 256,
     128, 1, 1, 0, entry(&embedding<100, 256>)},
#ifdef CQ4P_FAKE_BAD_SHAPE
    {"matmul_bad_shape", CQ4P_KERNEL_MATMUL, kTarget, kFeatures, 64, 250, 128,
     0, 1, 1, entry(&matmul<64, 256, 128, 1, 1>)},
#endif
};

} // namespace

#if defined(CQ4P_FAKE_DIGEST)
extern "C" __attribute__((visibility("default"))) const char
    cq4p_bundle_digest[] = "toy-digest-1";
#elif defined(CQ4P_FAKE_BAD_DIGEST)
extern "C" __attribute__((visibility("default"))) const char
    cq4p_bundle_digest[] = "";
#endif

#ifndef CQ4P_FAKE_NO_TABLE
// The symbol shares its name with the struct's typedef, which C and C++ do
// not allow for a variable of that type: the asm label gives it the name.
extern "C" __attribute__((visibility("default"))) const cq4p_kernel_table
    cq4pFakeTable __asm__("cq4p_kernel_table");
const cq4p_kernel_table cq4pFakeTable = {
    CQ4P_FAKE_ABI_VERSION, uint32_t(sizeof(kKernels) / sizeof(kKernels[0])),
    kKernels};
#endif

#ifdef CQ4P_FAKE_VARIANTS
#if defined(__aarch64__)
constexpr uint64_t kWideFeature = CQ4P_FEATURE_AARCH64_I8MM;
#else
constexpr uint64_t kWideFeature = CQ4P_FEATURE_X86_AVX512VBMI;
#endif
namespace {
const cq4p_kernel_table kWideTable = {
    CQ4P_FAKE_ABI_VERSION, uint32_t(sizeof(kKernels) / sizeof(kKernels[0])),
    kKernels};
const cq4p_kernel_variant kVariantList[] = {
    {"base", kFeatures, &cq4pFakeTable, nullptr},
    {"wide", kFeatures | kWideFeature, &kWideTable, nullptr},
};
} // namespace
extern "C" __attribute__((visibility("default"))) const cq4p_kernel_variants
    cq4pFakeVariants __asm__("cq4p_kernel_variants");
const cq4p_kernel_variants cq4pFakeVariants = {CQ4P_FAKE_VARIANTS, 2,
                                               kVariantList};
#endif
