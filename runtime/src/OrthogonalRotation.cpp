//===- OrthogonalRotation.cpp - the converter's K x K rotation ------------===//
//
// The dense orthogonal R of an orthogonal CQ4 tensor (docs/FORMAT.md section 2).
// The format only asks for an orthogonal matrix stored as fp16; this is the
// converter's construction, defined by its operations so that any machine
// (any ISA, any thread count, any BLAS or none) makes the same bits, and
// python/cq4p/quant/quantize.py (`orthogonal_rotation`) makes them independently
// with numpy's elementwise operations, which round each operation alone.
//
// 1. Numbers: SplitMix64 keyed by the seed and K,
//      key = mix(mix(seed mod 2^64) xor K),
//      bits(n) = mix(key + (n + 1) * 0x9E3779B97F4A7C15)   (mod 2^64),
//    mix the SplitMix64 finalizer; uniform(n) = (bits(n) >> 11) * 2^-53.
//    Gaussian t (Irwin-Hall of 12, mean 0, variance 1) =
//      (((uniform(12t) + uniform(12t + 1)) + ...) + uniform(12t + 11)) - 6.
// 2. Householder vectors (Stewart's construction: Q = H_0 H_1 ... H_{K-2} D
//    with Gaussian vectors x_j of length K - j is distributed as the Q of
//    the QR decomposition of a Gaussian matrix with R's diagonal positive,
//    that is Haar): for j = 0..K-1, x_j = Gaussians t = j*K - j*(j-1)/2 + i,
//    i = 0..K-j-1; norm = sqrt(sum of x_i * x_i, sequential from +0);
//    s = +1 if x_0 >= 0, else -1; d_j = -s. For j <= K - 2: u_j = x_j with
//    u_0 = x_0 + s * norm, beta_j = norm * (norm + |x_0|), and H_j =
//    I - u_j u_j^T / beta_j acting on coordinates j..K-1 (the identity when
//    beta_j is 0).
// 3. Column c of R = d_c * H_0 H_1 ... H_min(c, K-2) e_c: y = e_c, then for
//    j = min(c, K-2) down to 0:
//      acc = +0; for i = j..K-1: acc = acc + u_j[i-j] * y_i
//      w = acc / beta_j;  for i = j..K-1: y_i = y_i - w * u_j[i-j]
//    every multiply, add, subtract and divide rounded on its own (this file
//    is compiled with -ffp-contract=off), then R[i][c] = d_c * y_i.
//
// Work: 4K^3/3 flops. Columns are independent, so threads take panels of
// kPanel columns and run every reflection over them, one pass over the
// panel per reflection (the update of H_j and the sum of H_{j-1} fused);
// a reflection with j > c leaves a column's zeros and its one exactly as
// they are, so a panel needs no per-column bounds.
//
//===----------------------------------------------------------------------===//

#include "cq4p/cq4p.h"

#include "QuantizeIsa.h"
#include "SplitMix64.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using cq4p::splitmix64::kGamma;
using cq4p::splitmix64::mix;

constexpr int kUniformsPerGaussian = 12;
constexpr size_t kLanes = 8;
constexpr size_t kVectors = 4;
constexpr size_t kPanel = kLanes * kVectors;
// R is K * K doubles, the Householder vectors half as many again.
constexpr uint64_t kMaxK = 1u << 16;

// Elementwise IEEE operations on kLanes doubles (any ISA; no contraction).
typedef double Lanes __attribute__((vector_size(kLanes * sizeof(double))));

double gaussian(uint64_t key, uint64_t t) {
  const uint64_t first = t * kUniformsPerGaussian;
  double sum = 0.0;
  for (int l = 0; l < kUniformsPerGaussian; ++l) {
    const uint64_t bits = mix(key + (first + uint64_t(l) + 1) * kGamma);
    const double uniform = double(bits >> 11) * 0x1p-53;
    sum = l == 0 ? uniform : sum + uniform;
  }
  return sum - 6.0;
}

uint64_t vectorOffset(uint64_t k, uint64_t j) { return j * k - j * (j - 1) / 2; }

struct Reflections {
  std::vector<double> u;    // u_j at vectorOffset(k, j), K - j values
  std::vector<double> beta; // [K - 1]
  std::vector<double> sign; // d_j, [K]
};

// u_j, beta_j (j <= K - 2) and d_j for one j.
void makeReflection(uint64_t key, uint64_t k, uint64_t j, Reflections &r) {
  const uint64_t m = k - j, offset = vectorOffset(k, j);
  double *u = r.u.data() + offset;
  double squares = 0.0;
  for (uint64_t i = 0; i < m; ++i) {
    u[i] = gaussian(key, offset + i);
    squares = squares + u[i] * u[i];
  }
  const double norm = std::sqrt(squares);
  const double x0 = u[0];
  const double s = x0 >= 0.0 ? 1.0 : -1.0;
  r.sign[j] = -s;
  if (j + 2 <= k) {
    u[0] = x0 + s * norm;
    r.beta[j] = norm * (norm + std::fabs(x0));
  }
}

// The columns c0..c0+kPanel-1 of R (those below K) into out (row stride k).
// y holds K rows of kPanel lanes.
__attribute__((always_inline)) inline void rotatePanel(const Reflections &r, uint64_t k,
                                                      uint64_t c0, Lanes *y, double *out) {
  std::memset(static_cast<void *>(y), 0, k * kVectors * sizeof(Lanes));
  const uint64_t width = std::min<uint64_t>(kPanel, k - c0);
  for (uint64_t p = 0; p < width; ++p)
    y[(c0 + p) * kVectors + p / kLanes][p % kLanes] = 1.0;
  if (k >= 2) {
    const int64_t top = int64_t(std::min<uint64_t>(c0 + width - 1, k - 2));
    // acc holds the sums of reflection j: first for `top` alone, then each
    // pass updates with H_j and sums for H_{j-1} over the rows it updates.
    Lanes acc[kVectors];
    {
      const double *u = r.u.data() + vectorOffset(k, top);
      for (size_t v = 0; v < kVectors; ++v)
        acc[v] = Lanes{};
      for (uint64_t i = top; i < k; ++i)
        for (size_t v = 0; v < kVectors; ++v)
          acc[v] = acc[v] + u[i - top] * y[i * kVectors + v];
    }
    for (int64_t j = top; j >= 0; --j) {
      const double beta = r.beta[j];
      const double *u = r.u.data() + vectorOffset(k, j);
      const double *next = j > 0 ? r.u.data() + vectorOffset(k, j - 1) : nullptr;
      Lanes w[kVectors], sum[kVectors];
      for (size_t v = 0; v < kVectors; ++v) {
        w[v] = acc[v] / beta;
        sum[v] = Lanes{};
      }
      if (next) { // row j - 1 is not H_j's; it comes first in H_{j-1}'s sum
        for (size_t v = 0; v < kVectors; ++v)
          sum[v] = sum[v] + next[0] * y[(j - 1) * kVectors + v];
      }
      const bool identity = beta == 0.0;
      for (uint64_t i = j; i < k; ++i) {
        Lanes *row = y + i * kVectors;
        if (!identity)
          for (size_t v = 0; v < kVectors; ++v)
            row[v] = row[v] - w[v] * u[i - j];
        if (next)
          for (size_t v = 0; v < kVectors; ++v)
            sum[v] = sum[v] + next[i - j + 1] * row[v];
      }
      for (size_t v = 0; v < kVectors; ++v)
        acc[v] = sum[v];
    }
  }
  for (uint64_t i = 0; i < k; ++i)
    for (uint64_t p = 0; p < width; ++p)
      out[i * k + c0 + p] = r.sign[c0 + p] * y[i * kVectors + p / kLanes][p % kLanes];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The same operations on zmm registers (a different encoding of the same
// elementwise IEEE operations, so the same bits).
__attribute__((target("avx512f"))) void rotatePanel512(const Reflections &r, uint64_t k,
                                                       uint64_t c0, Lanes *y, double *out) {
  rotatePanel(r, k, c0, y, out);
}
__attribute__((target("avx2"))) void rotatePanelAvx2(const Reflections &r, uint64_t k,
                                                     uint64_t c0, Lanes *y, double *out) {
  rotatePanel(r, k, c0, y, out);
}
#endif

void rotatePanelBest(const Reflections &r, uint64_t k, uint64_t c0, Lanes *y, double *out) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const int cap = cq4p::quantize::isaCap();
  if (cap >= 2 && __builtin_cpu_supports("avx512f"))
    return rotatePanel512(r, k, c0, y, out);
  if (cap >= 1 && __builtin_cpu_supports("avx2"))
    return rotatePanelAvx2(r, k, c0, y, out);
#endif
  rotatePanel(r, k, c0, y, out);
}

// body(thread, item) for item = 0..count-1, taken in order by `threads`
// threads (thread: 0..threads-1).
template <typename Body> void forEach(uint64_t count, size_t threads, const Body &body) {
  threads = size_t(std::max<uint64_t>(1, std::min<uint64_t>(threads, count)));
  std::atomic<uint64_t> next{0};
  auto worker = [&](size_t thread) {
    for (uint64_t item; (item = next.fetch_add(1)) < count;)
      body(thread, item);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(worker, t);
  worker(0);
  for (auto &thread : pool)
    thread.join();
}

} // namespace

extern "C" int cq4p_orthogonal_rotation(uint64_t k, uint64_t seed, int threads,
                                        double *rotation_out, char *error,
                                        size_t error_size) {
  if (k == 0 || k > kMaxK)
    return cq4p::quantize::fail(
        CQ4P_ERROR_ARGUMENT, error, error_size,
        "orthogonal rotation: K = %llu, expected 1 to %llu",
        static_cast<unsigned long long>(k),
        static_cast<unsigned long long>(kMaxK));
  if (threads > cq4p::quantize::kMaxThreads)
    return cq4p::quantize::fail(
        CQ4P_ERROR_ARGUMENT, error, error_size,
        "orthogonal rotation: %d threads, expected at most %d (0: every CPU)",
        threads, cq4p::quantize::kMaxThreads);
  if (!rotation_out)
    return cq4p::quantize::fail(
        CQ4P_ERROR_ARGUMENT, error, error_size,
        "orthogonal rotation: no output buffer (K = %llu)",
        static_cast<unsigned long long>(k));
  const size_t count = threads > 0
                           ? size_t(threads)
                           : std::max(1u, std::thread::hardware_concurrency());
  const uint64_t key = mix(mix(seed) ^ k);
  Reflections r;
  r.u.resize(vectorOffset(k, k));
  r.beta.resize(k);
  r.sign.resize(k);
  forEach(k, count, [&](size_t, uint64_t j) { makeReflection(key, k, j, r); });
  // The widest panels (the most reflections) first.
  const uint64_t panels = (k + kPanel - 1) / kPanel;
  std::vector<std::vector<Lanes>> scratch(count);
  forEach(panels, count, [&](size_t thread, uint64_t item) {
    std::vector<Lanes> &y = scratch[thread];
    y.resize(k * kVectors);
    rotatePanelBest(r, k, (panels - 1 - item) * kPanel, y.data(), rotation_out);
  });
  return CQ4P_OK;
}
