//===- Quantize.cpp - the native CQ4 quantizer ------------------------------===//
//
// The converter's quantization (docs/FORMAT.md section 2) straight into packed
// panels (section 3): python/cq4p/quant/quantize.py is the oracle, and every
// floating-point step here repeats its operations in its order so that the
// indices and norms are bit for bit the same:
//
// - rows: float64(w) * s (exact), zero-padded to the padded K;
// - squared norms: numpy's einsum("...i,...i") sum of products (baseline
//   SSE2 universal intrinsics: two lanes by index parity, blocks of 8 added
//   as p0 + (p2 + (p4 + (p6 + acc))) per lane, the tail pair by pair, then
//   lane 0 + lane 1, then 0 + that);
// - norm = max(sqrt(sum), 1e-8); the unit row = x / norm;
// - Hadamard: numpy's matmul with the float64 rotation, whose entries are
//   +-c (c = fl(1/sqrt(gs))), through the reference BLAS dgemm/dgemv: each
//   output a sequential sum from 0 over i of fl(unit_i * c) * (+-1). A fused
//   multiply-add by +-1 rounds exactly as that add does;
// - orthogonal: unit rounded to float32, times the float32 rotation (the
//   stored fp16 R), through the reference sgemm: a sequential float32 sum
//   from 0 of fl32(u_i * r_ij), multiplies and adds rounded separately;
// - index = the number of bounds (the midpoints of the float64 levels)
//   strictly below the value (numpy's searchsorted, side left).
//
// This file is compiled with -ffp-contract=off: no multiply-add is fused
// unless written as one.
//
//===----------------------------------------------------------------------===//

#include "cq4p/cq4p.h"

#include "QuantizeIsa.h"
#include "fp16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CQ4P_QUANTIZE_X86 1
#endif

namespace {

constexpr int kLevels = CQ4P_CODEBOOK_LEVELS;
constexpr int kChannels = 64;
constexpr int kKgK = 4;
constexpr int kKgBytes = 128;
constexpr double kNormMin = 1e-8;

using cq4p::quantize::fail;
using cq4p::quantize::kMaxThreads;

// numpy 1.24's einsum sum of products of a contiguous float64 vector with
// itself (baseline SSE2: 2 lanes, 4 vectors per step), see the file comment.
double einsumSquares(const double *x, size_t count) {
  double acc0 = 0.0, acc1 = 0.0;
  size_t i = 0;
  for (; count - i >= 8; i += 8) {
    double t0 = x[i + 6] * x[i + 6] + acc0;
    double t1 = x[i + 7] * x[i + 7] + acc1;
    t0 = x[i + 4] * x[i + 4] + t0;
    t1 = x[i + 5] * x[i + 5] + t1;
    t0 = x[i + 2] * x[i + 2] + t0;
    t1 = x[i + 3] * x[i + 3] + t1;
    acc0 = x[i] * x[i] + t0;
    acc1 = x[i + 1] * x[i + 1] + t1;
  }
  for (; i < count; i += 2) {
    acc0 = x[i] * x[i] + acc0;
    acc1 = (i + 1 < count ? x[i + 1] * x[i + 1] : 0.0) + acc1;
  }
  return 0.0 + (acc0 + acc1);
}

inline uint8_t nearestIndex(double value, const double *bounds) {
  // searchsorted(bounds, value, side='left'): bounds strictly below value.
  uint8_t index = 0;
  for (int b = 0; b < kLevels - 1; ++b)
    index += bounds[b] < value ? 1 : 0;
  return index;
}

// ---- Hadamard: out[m][j] = sum_i p[m][i] * S[i][j], S = +-1, sequential i.

void signedSumsGeneric(const double *p, size_t rows, size_t gs, const double *sign,
                       double *out) {
  for (size_t m = 0; m < rows; ++m) {
    double *o = out + m * gs;
    for (size_t j = 0; j < gs; ++j)
      o[j] = 0.0;
    for (size_t i = 0; i < gs; ++i) {
      const double pi = p[m * gs + i];
      const double *s = sign + i * gs;
      for (size_t j = 0; j < gs; ++j)
        o[j] = o[j] + pi * s[j]; // pi * +-1 is exact
    }
  }
}

#ifdef CQ4P_QUANTIZE_X86
// R groups x V vectors of outputs per pass; each output's sum stays sequential.
template <int R, int V>
__attribute__((target("avx512f"))) void signedSumsTile512(const double *p, size_t gs,
                                                          const double *sign, double *out) {
  for (size_t j = 0; j < gs; j += 8 * V) {
    __m512d a[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        a[r][v] = _mm512_setzero_pd();
    const double *s = sign + j;
    for (size_t i = 0; i < gs; ++i, s += gs) {
      __m512d sv[V];
      for (int v = 0; v < V; ++v)
        sv[v] = _mm512_loadu_pd(s + 8 * v);
      for (int r = 0; r < R; ++r) {
        const __m512d b = _mm512_set1_pd(p[r * gs + i]);
        for (int v = 0; v < V; ++v)
          a[r][v] = _mm512_fmadd_pd(b, sv[v], a[r][v]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        _mm512_storeu_pd(out + r * gs + j + 8 * v, a[r][v]);
  }
}

__attribute__((target("avx512f"))) void
signedSums512(const double *p, size_t rows, size_t gs, const double *sign, double *out) {
  size_t m = 0;
  for (; m + 8 <= rows; m += 8)
    signedSumsTile512<8, 2>(p + m * gs, gs, sign, out + m * gs);
  for (; m + 4 <= rows; m += 4)
    signedSumsTile512<4, 2>(p + m * gs, gs, sign, out + m * gs);
  for (; m < rows; ++m)
    signedSumsTile512<1, 2>(p + m * gs, gs, sign, out + m * gs);
}

template <int R, int V>
__attribute__((target("avx2,fma"))) void signedSumsTile256(const double *p, size_t gs,
                                                           const double *sign, double *out) {
  for (size_t j = 0; j < gs; j += 4 * V) {
    __m256d a[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        a[r][v] = _mm256_setzero_pd();
    const double *s = sign + j;
    for (size_t i = 0; i < gs; ++i, s += gs) {
      __m256d sv[V];
      for (int v = 0; v < V; ++v)
        sv[v] = _mm256_loadu_pd(s + 4 * v);
      for (int r = 0; r < R; ++r) {
        const __m256d b = _mm256_broadcast_sd(p + r * gs + i);
        for (int v = 0; v < V; ++v)
          a[r][v] = _mm256_fmadd_pd(b, sv[v], a[r][v]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        _mm256_storeu_pd(out + r * gs + j + 4 * v, a[r][v]);
  }
}

__attribute__((target("avx2,fma"))) void
signedSumsAvx2(const double *p, size_t rows, size_t gs, const double *sign, double *out) {
  size_t m = 0;
  for (; m + 6 <= rows; m += 6)
    signedSumsTile256<6, 2>(p + m * gs, gs, sign, out + m * gs);
  for (; m + 2 <= rows; m += 2)
    signedSumsTile256<2, 2>(p + m * gs, gs, sign, out + m * gs);
  for (; m < rows; ++m)
    signedSumsTile256<1, 2>(p + m * gs, gs, sign, out + m * gs);
}

// Indices of n values (n % 8 == 0): bounds strictly below each value.
__attribute__((target("avx512f"))) void nearest512(const double *values, size_t n,
                                                   const double *bounds, uint8_t *out) {
  __m512d b[kLevels - 1];
  for (int i = 0; i < kLevels - 1; ++i)
    b[i] = _mm512_set1_pd(bounds[i]);
  const __m512i one = _mm512_set1_epi64(1);
  for (size_t j = 0; j < n; j += 8) {
    const __m512d v = _mm512_loadu_pd(values + j);
    __m512i index = _mm512_setzero_si512();
    for (int i = 0; i < kLevels - 1; ++i)
      index = _mm512_mask_add_epi64(index, _mm512_cmp_pd_mask(b[i], v, _CMP_LT_OQ), index, one);
    _mm_storel_epi64(reinterpret_cast<__m128i *>(out + j), _mm512_cvtepi64_epi8(index));
  }
}

__attribute__((target("avx512f"))) void nearest512f(const float *values, size_t n,
                                                    const double *bounds, uint8_t *out) {
  __m512d b[kLevels - 1];
  for (int i = 0; i < kLevels - 1; ++i)
    b[i] = _mm512_set1_pd(bounds[i]);
  const __m512i one = _mm512_set1_epi64(1);
  for (size_t j = 0; j < n; j += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(values + j)); // exact
    __m512i index = _mm512_setzero_si512();
    for (int i = 0; i < kLevels - 1; ++i)
      index = _mm512_mask_add_epi64(index, _mm512_cmp_pd_mask(b[i], v, _CMP_LT_OQ), index, one);
    _mm_storel_epi64(reinterpret_cast<__m128i *>(out + j), _mm512_cvtepi64_epi8(index));
  }
}

// ---- orthogonal: out[m][j] = sum_i fl32(u[m][i] * r[i][j]), sequential i,
// over a strip of kStrip columns packed [k][kStrip].
template <int R>
__attribute__((target("avx512f"))) void rotateTile512(const float *u, size_t k,
                                                      const float *strip, float *out,
                                                      size_t ldo) {
  __m512 a[R][2];
  for (int r = 0; r < R; ++r)
    a[r][0] = a[r][1] = _mm512_setzero_ps();
  const float *s = strip;
  for (size_t i = 0; i < k; ++i, s += 32) {
    const __m512 s0 = _mm512_loadu_ps(s), s1 = _mm512_loadu_ps(s + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(u[r * k + i]);
      a[r][0] = _mm512_add_ps(a[r][0], _mm512_mul_ps(b, s0));
      a[r][1] = _mm512_add_ps(a[r][1], _mm512_mul_ps(b, s1));
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(out + r * ldo, a[r][0]);
    _mm512_storeu_ps(out + r * ldo + 16, a[r][1]);
  }
}

__attribute__((target("avx512f"))) void rotateStrip512(const float *u, size_t rows, size_t k,
                                                       const float *strip, float *out) {
  size_t m = 0;
  for (; m + 8 <= rows; m += 8)
    rotateTile512<8>(u + m * k, k, strip, out + m * k, k);
  for (; m + 4 <= rows; m += 4)
    rotateTile512<4>(u + m * k, k, strip, out + m * k, k);
  for (; m < rows; ++m)
    rotateTile512<1>(u + m * k, k, strip, out + m * k, k);
}

template <int R>
__attribute__((target("avx2"))) void rotateTile256(const float *u, size_t k, const float *strip,
                                                   float *out, size_t ldo) {
  __m256 a[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      a[r][v] = _mm256_setzero_ps();
  const float *s = strip;
  for (size_t i = 0; i < k; ++i, s += 32) {
    __m256 sv[4];
    for (int v = 0; v < 4; ++v)
      sv[v] = _mm256_loadu_ps(s + 8 * v);
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(u + r * k + i);
      for (int v = 0; v < 4; ++v)
        a[r][v] = _mm256_add_ps(a[r][v], _mm256_mul_ps(b, sv[v]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      _mm256_storeu_ps(out + r * ldo + 8 * v, a[r][v]);
}

__attribute__((target("avx2"))) void rotateStripAvx2(const float *u, size_t rows, size_t k,
                                                     const float *strip, float *out) {
  size_t m = 0;
  for (; m + 3 <= rows; m += 3)
    rotateTile256<3>(u + m * k, k, strip, out + m * k, k);
  for (; m < rows; ++m)
    rotateTile256<1>(u + m * k, k, strip, out + m * k, k);
}
#endif

constexpr size_t kStrip = 32;

void rotateStripGeneric(const float *u, size_t rows, size_t k, const float *strip, float *out) {
  for (size_t m = 0; m < rows; ++m) {
    float acc[kStrip] = {};
    for (size_t i = 0; i < k; ++i) {
      const float ui = u[m * k + i];
      const float *s = strip + i * kStrip;
      for (size_t c = 0; c < kStrip; ++c)
        acc[c] = acc[c] + ui * s[c];
    }
    std::memcpy(out + m * k, acc, sizeof(acc));
  }
}

#ifdef CQ4P_QUANTIZE_X86
using cq4p::quantize::isaCap;

bool hasAvx2Fma() {
  static const bool yes =
      isaCap() >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

bool hasAvx512() {
  static const bool yes = isaCap() >= 2 && __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

void signedSums(const double *p, size_t rows, size_t gs, const double *sign, double *out) {
#ifdef CQ4P_QUANTIZE_X86
  if (gs % 16 == 0 && hasAvx512())
    return signedSums512(p, rows, gs, sign, out);
  if (gs % 8 == 0 && hasAvx2Fma())
    return signedSumsAvx2(p, rows, gs, sign, out);
#endif
  signedSumsGeneric(p, rows, gs, sign, out);
}

void nearestIndices(const double *values, size_t n, const double *bounds, uint8_t *out) {
  size_t j = 0;
#ifdef CQ4P_QUANTIZE_X86
  if (hasAvx512()) {
    j = n & ~size_t(7);
    nearest512(values, j, bounds, out);
  }
#endif
  for (; j < n; ++j)
    out[j] = nearestIndex(values[j], bounds);
}

void nearestIndices(const float *values, size_t n, const double *bounds, uint8_t *out) {
  size_t j = 0;
#ifdef CQ4P_QUANTIZE_X86
  if (hasAvx512()) {
    j = n & ~size_t(7);
    nearest512f(values, j, bounds, out);
  }
#endif
  for (; j < n; ++j)
    out[j] = nearestIndex(double(values[j]), bounds);
}

// rows x kStrip outputs (row stride k) from a strip packed [k][kStrip].
void rotateStrip(const float *u, size_t rows, size_t k, const float *strip, float *out) {
#ifdef CQ4P_QUANTIZE_X86
  if (hasAvx512())
    return rotateStrip512(u, rows, k, strip, out);
  if (hasAvx2Fma())
    return rotateStripAvx2(u, rows, k, strip, out);
#endif
  rotateStripGeneric(u, rows, k, strip, out);
}

// ---- panels: one super-block of 64 rows of indices [64][k] -> its bytes.
void packSuperBlock(const uint8_t *indices, size_t k, size_t gs, const uint8_t *canonical,
                    uint8_t *out) {
  const size_t ng = k / gs, kgs = gs / kKgK;
  for (size_t g = 0; g < ng; ++g)
    for (size_t kg = 0; kg < kgs; ++kg) {
      const size_t k0 = g * gs + kg * kKgK;
      uint8_t *block = out + (g * kgs + kg) * kKgBytes;
      for (size_t c = 0; c < kChannels; ++c) {
        const uint8_t *x = indices + c * k + k0;
        block[2 * c] = uint8_t(canonical[x[0]] | (canonical[x[1]] << 4));
        block[2 * c + 1] = uint8_t(canonical[x[2]] | (canonical[x[3]] << 4));
      }
    }
}

// Runs body(sb) for every super-block over `threads` threads.
template <typename Body> void forEachSuperBlock(size_t superBlocks, int threads, Body &body) {
  size_t count = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  count = std::min(count, superBlocks);
  std::atomic<size_t> next{0};
  auto worker = [&](size_t id) {
    body.prepare(id);
    for (size_t sb; (sb = next.fetch_add(1)) < superBlocks;)
      body.run(id, sb);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t)
    pool.emplace_back(worker, t);
  worker(0);
  for (auto &thread : pool)
    thread.join();
}

struct Bad {
  std::atomic<bool> found{false};
  std::atomic<uint64_t> row{~uint64_t(0)};
  void report(uint64_t r) {
    found = true;
    uint64_t old = row.load();
    while (r < old && !row.compare_exchange_weak(old, r)) {
    }
  }
};

// One element of a checkpoint row as float32 (exactly as numpy widens it).
inline float sourceValue(const void *w, int dtype, size_t index) {
  switch (dtype) {
  case CQ4P_SOURCE_BF16: {
    const uint32_t bits = uint32_t(static_cast<const uint16_t *>(w)[index]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  case CQ4P_SOURCE_F16:
    return cq4p_half_to_float(static_cast<const uint16_t *>(w)[index]);
  default:
    return static_cast<const float *>(w)[index];
  }
}

template <int Dtype>
bool scaledRowOf(const void *w, size_t k, size_t kp, const double *scale, size_t r, double *x) {
  bool finite = true;
  for (size_t i = 0; i < k; ++i) {
    x[i] = double(sourceValue(w, Dtype, r * k + i)) * scale[i];
    finite &= std::isfinite(x[i]);
  }
  for (size_t i = k; i < kp; ++i)
    x[i] = 0.0;
  return finite;
}

// Loads row r as float64(w) * scale, zero-padded to kp; false if a value is
// not finite.
bool scaledRow(const void *w, int dtype, size_t k, size_t kp, const double *scale, size_t r,
               double *x) {
  switch (dtype) {
  case CQ4P_SOURCE_BF16:
    return scaledRowOf<CQ4P_SOURCE_BF16>(w, k, kp, scale, r, x);
  case CQ4P_SOURCE_F16:
    return scaledRowOf<CQ4P_SOURCE_F16>(w, k, kp, scale, r, x);
  default:
    return scaledRowOf<CQ4P_SOURCE_F32>(w, k, kp, scale, r, x);
  }
}

// p[i] = fl(fl(x[i] / norm) * unit) for one group (the division exact, as numpy's).
#ifdef CQ4P_QUANTIZE_X86
__attribute__((target("avx512f"))) void dividedScaled512(const double *x, size_t n, double norm,
                                                         double unit, double *p) {
  const __m512d vn = _mm512_set1_pd(norm), vu = _mm512_set1_pd(unit);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm512_storeu_pd(p + i, _mm512_mul_pd(_mm512_div_pd(_mm512_loadu_pd(x + i), vn), vu));
  for (; i < n; ++i)
    p[i] = (x[i] / norm) * unit;
}
#endif

void dividedScaled(const double *x, size_t n, double norm, double unit, double *p) {
#ifdef CQ4P_QUANTIZE_X86
  if (hasAvx512())
    return dividedScaled512(x, n, norm, unit, p);
#endif
  for (size_t i = 0; i < n; ++i)
    p[i] = (x[i] / norm) * unit;
}

struct HadamardJob {
  const void *w;
  int dtype;
  size_t n, k, kp, gs;
  const double *scale, *bounds, *sign;
  const uint8_t *canonical;
  double unit; // fl(1 / sqrt(gs)), the rotation's |entry|
  uint8_t *panels;
  double *norms;
  Bad *bad;
  std::vector<std::vector<double>> x, p, out;
  std::vector<std::vector<uint8_t>> idx;

  void prepare(size_t id) {
    x[id].resize(kp);
    p[id].resize(kp);
    out[id].resize(kp);
    idx[id].assign(kChannels * kp, 0);
  }
  void run(size_t id, size_t sb) {
    const size_t ng = kp / gs;
    double *xr = x[id].data(), *pr = p[id].data(), *o = out[id].data();
    uint8_t *ix = idx[id].data();
    const size_t rows = std::min<size_t>(kChannels, n - sb * kChannels);
    for (size_t c = 0; c < rows; ++c) {
      const size_t r = sb * kChannels + c;
      if (!scaledRow(w, dtype, k, kp, scale, r, xr)) {
        bad->report(r);
        return;
      }
      for (size_t g = 0; g < ng; ++g) {
        const double *xg = xr + g * gs;
        const double norm = std::max(std::sqrt(einsumSquares(xg, gs)), kNormMin);
        norms[r * ng + g] = norm;
        dividedScaled(xg, gs, norm, unit, pr + g * gs);
      }
      signedSums(pr, ng, gs, sign, o);
      nearestIndices(o, kp, bounds, ix + c * kp);
    }
    if (rows < kChannels)
      std::memset(ix + rows * kp, 0, (kChannels - rows) * kp);
    packSuperBlock(ix, kp, gs, canonical, panels + sb * kChannels * kp / 2);
  }
};

struct OrthogonalJob {
  const void *w;
  int dtype;
  size_t n, k, kp;
  const double *scale, *bounds;
  const float *rotation;
  const uint8_t *canonical;
  uint8_t *panels;
  double *norms;
  Bad *bad;
  std::vector<std::vector<double>> x;
  std::vector<std::vector<float>> u, out;
  std::vector<std::vector<uint8_t>> idx;

  void prepare(size_t id) {
    x[id].resize(kp);
    u[id].assign(kChannels * kp, 0.0f);
    out[id].resize(kChannels * kp);
    idx[id].assign(kChannels * kp, 0);
  }
  void run(size_t id, size_t sb) {
    double *xr = x[id].data();
    float *ur = u[id].data(), *o = out[id].data();
    uint8_t *ix = idx[id].data();
    const size_t rows = std::min<size_t>(kChannels, n - sb * kChannels);
    for (size_t c = 0; c < rows; ++c) {
      const size_t r = sb * kChannels + c;
      if (!scaledRow(w, dtype, k, kp, scale, r, xr)) {
        bad->report(r);
        return;
      }
      const double norm = std::max(std::sqrt(einsumSquares(xr, kp)), kNormMin);
      norms[r] = norm;
      for (size_t i = 0; i < kp; ++i)
        ur[c * kp + i] = float(xr[i] / norm);
    }
    for (size_t j = 0; j < kp; j += kStrip)
      rotateStrip(ur, rows, kp, rotation + j * kp, o + j);
    nearestIndices(o, rows * kp, bounds, ix);
    if (rows < kChannels)
      std::memset(ix + rows * kp, 0, (kChannels - rows) * kp);
    packSuperBlock(ix, kp, CQ4P_ORTHOGONAL_VIRTUAL_GROUP, canonical,
                   panels + sb * kChannels * kp / 2);
  }
};

int checkCommon(const void *w, int dtype, uint64_t n, uint64_t k, uint64_t kp, const double *scale,
                const double *bounds, const uint8_t *canonical, uint8_t *panels,
                double *norms, char *error, size_t error_size) {
  if (!w || !scale || !bounds || !canonical || !panels || !norms)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size, "quantize: a null pointer");
  if (dtype != CQ4P_SOURCE_F32 && dtype != CQ4P_SOURCE_BF16 && dtype != CQ4P_SOURCE_F16)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: weight dtype %d, expected F32 (0), BF16 (1) or F16 (2)", dtype);
  if (n == 0 || k == 0 || kp < k)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: shape %llux%llu padded to K = %llu", (unsigned long long)n,
                (unsigned long long)k, (unsigned long long)kp);
  for (int i = 0; i < kLevels; ++i)
    if (canonical[i] >= kLevels)
      return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                  "quantize: canonical index %d is %u, expected < 16", i, canonical[i]);
  return CQ4P_OK;
}

int reportBad(const Bad &bad, char *error, size_t error_size) {
  return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
              "the weight has non-finite values (row %llu)",
              (unsigned long long)bad.row.load());
}

} // namespace

extern "C" int cq4p_quantize_hadamard_panels(
    const void *w, int w_dtype, uint64_t n, uint64_t k, uint64_t k_padded, uint32_t group_size,
    const double *scale, const int8_t *left, const int8_t *right,
    const uint32_t *permutation, const double *bounds, const uint8_t *canonical,
    int threads, uint8_t *panels_out, double *norms_out, char *error, size_t error_size) {
  int code = checkCommon(w, w_dtype, n, k, k_padded, scale, bounds, canonical, panels_out, norms_out,
                         error, error_size);
  if (code != CQ4P_OK)
    return code;
  if (threads > kMaxThreads)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: %d threads, expected at most %d (0: every CPU)", threads, kMaxThreads);
  const size_t gs = group_size;
  if (gs == 0 || (gs & (gs - 1)) || gs % kKgK || k_padded % gs || !left || !right ||
      !permutation)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: group size %u for K = %llu", group_size,
                (unsigned long long)k_padded);
  // S[i][j] = left[i] * H[i][perm[j]] * right[perm[j]], H natural-order Sylvester.
  std::vector<double> sign(gs * gs);
  for (size_t j = 0; j < gs; ++j) {
    const uint32_t pj = permutation[j];
    if (pj >= gs)
      return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                  "quantize: permutation[%zu] = %u, expected < %zu", j, pj, gs);
    for (size_t i = 0; i < gs; ++i) {
      const int h = (__builtin_popcountll(uint64_t(i) & pj) & 1) ? -1 : 1;
      sign[i * gs + j] = double(left[i] * h * right[pj]);
    }
  }
  Bad bad;
  HadamardJob job{w, w_dtype, n, k, k_padded, gs, scale, bounds, sign.data(), canonical,
                  1.0 / std::sqrt(double(gs)), panels_out, norms_out, &bad, {}, {}, {}, {}};
  const size_t superBlocks = (n + kChannels - 1) / kChannels;
  size_t count = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  job.x.resize(count);
  job.p.resize(count);
  job.out.resize(count);
  job.idx.resize(count);
  forEachSuperBlock(superBlocks, int(count), job);
  if (bad.found)
    return reportBad(bad, error, error_size);
  return CQ4P_OK;
}

extern "C" int cq4p_quantize_orthogonal_panels(
    const void *w, int w_dtype, uint64_t n, uint64_t k, uint64_t k_padded, const double *scale,
    const float *rotation, const double *bounds, const uint8_t *canonical, int threads,
    uint8_t *panels_out, double *norms_out, char *error, size_t error_size) {
  int code = checkCommon(w, w_dtype, n, k, k_padded, scale, bounds, canonical, panels_out, norms_out,
                         error, error_size);
  if (code != CQ4P_OK)
    return code;
  if (threads > kMaxThreads)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: %d threads, expected at most %d (0: every CPU)", threads, kMaxThreads);
  if (!rotation || k_padded % CQ4P_ORTHOGONAL_VIRTUAL_GROUP)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: orthogonal panels need K %% %d == 0 and a rotation, K = %llu",
                CQ4P_ORTHOGONAL_VIRTUAL_GROUP, (unsigned long long)k_padded);
  // The rotation in strips of kStrip columns, [k / kStrip][k][kStrip]: a
  // strip is read once per row tile, contiguous.
  const size_t kp = k_padded;
  std::vector<float> strips(kp * kp);
  for (size_t j = 0; j < kp; j += kStrip)
    for (size_t i = 0; i < kp; ++i)
      std::memcpy(&strips[j * kp + i * kStrip], rotation + i * kp + j, kStrip * sizeof(float));
  Bad bad;
  OrthogonalJob job{w, w_dtype, n, k, k_padded, scale, bounds, strips.data(), canonical, panels_out,
                    norms_out, &bad, {}, {}, {}, {}};
  const size_t superBlocks = (n + kChannels - 1) / kChannels;
  size_t count = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  job.x.resize(count);
  job.u.resize(count);
  job.out.resize(count);
  job.idx.resize(count);
  forEachSuperBlock(superBlocks, int(count), job);
  if (bad.found)
    return reportBad(bad, error, error_size);
  return CQ4P_OK;
}
