//===- Quantize.cpp - the native CQ4 quantizer ------------------------------===//
//
// The converter's quantization (FORMAT.md section 2) straight into packed
// panels (section 3): python/cq4p/quantize.py is the oracle, and every
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

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
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

int fail(int code, char *error, size_t error_size, const char *format, ...) {
  if (error != nullptr && error_size > 0) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error, error_size, format, args);
    va_end(args);
  }
  return code;
}

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
__attribute__((target("avx2,fma"))) void
signedSumsAvx2(const double *p, size_t rows, size_t gs, const double *sign, double *out) {
  size_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    const double *p0 = p + m * gs, *p1 = p0 + gs, *p2 = p1 + gs, *p3 = p2 + gs;
    for (size_t j = 0; j < gs; j += 8) {
      __m256d a00 = _mm256_setzero_pd(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
              a21 = a00, a30 = a00, a31 = a00;
      const double *s = sign + j;
      for (size_t i = 0; i < gs; ++i, s += gs) {
        const __m256d s0 = _mm256_loadu_pd(s), s1 = _mm256_loadu_pd(s + 4);
        __m256d b = _mm256_broadcast_sd(p0 + i);
        a00 = _mm256_fmadd_pd(b, s0, a00);
        a01 = _mm256_fmadd_pd(b, s1, a01);
        b = _mm256_broadcast_sd(p1 + i);
        a10 = _mm256_fmadd_pd(b, s0, a10);
        a11 = _mm256_fmadd_pd(b, s1, a11);
        b = _mm256_broadcast_sd(p2 + i);
        a20 = _mm256_fmadd_pd(b, s0, a20);
        a21 = _mm256_fmadd_pd(b, s1, a21);
        b = _mm256_broadcast_sd(p3 + i);
        a30 = _mm256_fmadd_pd(b, s0, a30);
        a31 = _mm256_fmadd_pd(b, s1, a31);
      }
      double *o = out + m * gs + j;
      _mm256_storeu_pd(o, a00);
      _mm256_storeu_pd(o + 4, a01);
      _mm256_storeu_pd(o + gs, a10);
      _mm256_storeu_pd(o + gs + 4, a11);
      _mm256_storeu_pd(o + 2 * gs, a20);
      _mm256_storeu_pd(o + 2 * gs + 4, a21);
      _mm256_storeu_pd(o + 3 * gs, a30);
      _mm256_storeu_pd(o + 3 * gs + 4, a31);
    }
  }
  if (m < rows)
    signedSumsGeneric(p + m * gs, rows - m, gs, sign, out + m * gs);
}

// ---- orthogonal: out[m][j] = sum_i fl32(u[m][i] * r[i][j]), sequential i.
__attribute__((target("avx2"))) void
rotateRowsAvx2(const float *u, size_t rows, size_t k, const float *r, float *out) {
  size_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    const float *u0 = u + m * k, *u1 = u0 + k, *u2 = u1 + k, *u3 = u2 + k;
    for (size_t j = 0; j < k; j += 16) {
      __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,
             a21 = a00, a30 = a00, a31 = a00;
      const float *s = r + j;
      for (size_t i = 0; i < k; ++i, s += k) {
        const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + 8);
        __m256 b = _mm256_broadcast_ss(u0 + i);
        a00 = _mm256_add_ps(a00, _mm256_mul_ps(b, r0));
        a01 = _mm256_add_ps(a01, _mm256_mul_ps(b, r1));
        b = _mm256_broadcast_ss(u1 + i);
        a10 = _mm256_add_ps(a10, _mm256_mul_ps(b, r0));
        a11 = _mm256_add_ps(a11, _mm256_mul_ps(b, r1));
        b = _mm256_broadcast_ss(u2 + i);
        a20 = _mm256_add_ps(a20, _mm256_mul_ps(b, r0));
        a21 = _mm256_add_ps(a21, _mm256_mul_ps(b, r1));
        b = _mm256_broadcast_ss(u3 + i);
        a30 = _mm256_add_ps(a30, _mm256_mul_ps(b, r0));
        a31 = _mm256_add_ps(a31, _mm256_mul_ps(b, r1));
      }
      float *o = out + m * k + j;
      _mm256_storeu_ps(o, a00);
      _mm256_storeu_ps(o + 8, a01);
      _mm256_storeu_ps(o + k, a10);
      _mm256_storeu_ps(o + k + 8, a11);
      _mm256_storeu_ps(o + 2 * k, a20);
      _mm256_storeu_ps(o + 2 * k + 8, a21);
      _mm256_storeu_ps(o + 3 * k, a30);
      _mm256_storeu_ps(o + 3 * k + 8, a31);
    }
  }
  for (; m < rows; ++m) {
    float *o = out + m * k;
    for (size_t j = 0; j < k; ++j)
      o[j] = 0.0f;
    for (size_t i = 0; i < k; ++i) {
      const float ui = u[m * k + i];
      const float *s = r + i * k;
      for (size_t j = 0; j < k; ++j)
        o[j] = o[j] + ui * s[j];
    }
  }
}
#endif

void rotateRowsGeneric(const float *u, size_t rows, size_t k, const float *r, float *out) {
  // Four rows and 64 columns at a time, sequential over i for each output.
  constexpr size_t kCols = 64;
  size_t m = 0;
  for (; m < rows; m += 4) {
    const size_t mr = std::min<size_t>(4, rows - m);
    for (size_t j = 0; j < k; j += kCols) {
      const size_t nc = std::min(kCols, k - j);
      float acc[4][kCols] = {};
      for (size_t i = 0; i < k; ++i) {
        const float *s = r + i * k + j;
        for (size_t q = 0; q < mr; ++q) {
          const float ui = u[(m + q) * k + i];
          for (size_t c = 0; c < nc; ++c)
            acc[q][c] = acc[q][c] + ui * s[c];
        }
      }
      for (size_t q = 0; q < mr; ++q)
        std::memcpy(out + (m + q) * k + j, acc[q], nc * sizeof(float));
    }
  }
}

bool hasAvx2Fma() {
#ifdef CQ4P_QUANTIZE_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

void signedSums(const double *p, size_t rows, size_t gs, const double *sign, double *out) {
#ifdef CQ4P_QUANTIZE_X86
  if (gs % 8 == 0 && hasAvx2Fma())
    return signedSumsAvx2(p, rows, gs, sign, out);
#endif
  signedSumsGeneric(p, rows, gs, sign, out);
}

void rotateRows(const float *u, size_t rows, size_t k, const float *r, float *out) {
#ifdef CQ4P_QUANTIZE_X86
  if (k % 16 == 0 && hasAvx2Fma())
    return rotateRowsAvx2(u, rows, k, r, out);
#endif
  rotateRowsGeneric(u, rows, k, r, out);
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

// Loads row r scaled and zero-padded to kp; false if a value is not finite.
bool scaledRow(const float *w, size_t k, size_t kp, const double *scale, size_t r,
               double *x) {
  const float *src = w + r * k;
  bool finite = true;
  for (size_t i = 0; i < k; ++i) {
    x[i] = double(src[i]) * scale[i];
    finite &= std::isfinite(x[i]);
  }
  for (size_t i = k; i < kp; ++i)
    x[i] = 0.0;
  return finite;
}

struct HadamardJob {
  const float *w;
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
      if (!scaledRow(w, k, kp, scale, r, xr)) {
        bad->report(r);
        return;
      }
      for (size_t g = 0; g < ng; ++g) {
        const double *xg = xr + g * gs;
        const double norm = std::max(std::sqrt(einsumSquares(xg, gs)), kNormMin);
        norms[r * ng + g] = norm;
        for (size_t i = 0; i < gs; ++i)
          pr[g * gs + i] = (xg[i] / norm) * unit;
      }
      signedSums(pr, ng, gs, sign, o);
      uint8_t *row = ix + c * kp;
      for (size_t j = 0; j < kp; ++j)
        row[j] = nearestIndex(o[j], bounds);
    }
    if (rows < kChannels)
      std::memset(ix + rows * kp, 0, (kChannels - rows) * kp);
    packSuperBlock(ix, kp, gs, canonical, panels + sb * kChannels * kp / 2);
  }
};

struct OrthogonalJob {
  const float *w;
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
      if (!scaledRow(w, k, kp, scale, r, xr)) {
        bad->report(r);
        return;
      }
      const double norm = std::max(std::sqrt(einsumSquares(xr, kp)), kNormMin);
      norms[r] = norm;
      for (size_t i = 0; i < kp; ++i)
        ur[c * kp + i] = float(xr[i] / norm);
    }
    rotateRows(ur, rows, kp, rotation, o);
    for (size_t c = 0; c < rows; ++c)
      for (size_t j = 0; j < kp; ++j)
        ix[c * kp + j] = nearestIndex(double(o[c * kp + j]), bounds);
    if (rows < kChannels)
      std::memset(ix + rows * kp, 0, (kChannels - rows) * kp);
    packSuperBlock(ix, kp, CQ4P_ORTHOGONAL_VIRTUAL_GROUP, canonical,
                   panels + sb * kChannels * kp / 2);
  }
};

int checkCommon(const float *w, uint64_t n, uint64_t k, uint64_t kp, const double *scale,
                const double *bounds, const uint8_t *canonical, uint8_t *panels,
                double *norms, char *error, size_t error_size) {
  if (!w || !scale || !bounds || !canonical || !panels || !norms)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size, "quantize: a null pointer");
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
    const float *w, uint64_t n, uint64_t k, uint64_t k_padded, uint32_t group_size,
    const double *scale, const int8_t *left, const int8_t *right,
    const uint32_t *permutation, const double *bounds, const uint8_t *canonical,
    int threads, uint8_t *panels_out, double *norms_out, char *error, size_t error_size) {
  int code = checkCommon(w, n, k, k_padded, scale, bounds, canonical, panels_out, norms_out,
                         error, error_size);
  if (code != CQ4P_OK)
    return code;
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
  HadamardJob job{w, n, k, k_padded, gs, scale, bounds, sign.data(), canonical,
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
    const float *w, uint64_t n, uint64_t k, uint64_t k_padded, const double *scale,
    const float *rotation, const double *bounds, const uint8_t *canonical, int threads,
    uint8_t *panels_out, double *norms_out, char *error, size_t error_size) {
  int code = checkCommon(w, n, k, k_padded, scale, bounds, canonical, panels_out, norms_out,
                         error, error_size);
  if (code != CQ4P_OK)
    return code;
  if (!rotation || k_padded % CQ4P_ORTHOGONAL_VIRTUAL_GROUP)
    return fail(CQ4P_ERROR_ARGUMENT, error, error_size,
                "quantize: orthogonal panels need K %% %d == 0 and a rotation, K = %llu",
                CQ4P_ORTHOGONAL_VIRTUAL_GROUP, (unsigned long long)k_padded);
  Bad bad;
  OrthogonalJob job{w, n, k, k_padded, scale, bounds, rotation, canonical, panels_out,
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
