//===- ggml_baseline.h - ggml's Q4_0 mat-mul, loaded at run time ----------===//
//
// bench/host times cq4p's host kernels side by side with ggml's CPU Q4_0
// path when a ggml build is on the machine. ggml is loaded with dlopen from
// the directory given to --ggml (libggml-base.so and libggml-cpu.so), so cq4p
// neither builds nor links against it and its CI needs no ggml.
//
// The path timed is ggml's plain graph API: one context from ggml_init
// owning every tensor, Q4_0 weights filled by ggml_quantize_chunk, fp32
// activations, ggml_mul_mat, a graph built once (ggml_new_graph +
// ggml_build_forward_expand) and a plan made once per thread count
// (ggml_graph_plan with a persistent ggml threadpool, a work buffer of its
// size); a timed call is one ggml_graph_compute, which quantizes the
// activations to Q8_0 and multiplies. The weights are ggml's row-major Q4_0
// blocks in the context ("plain"), or, given the name of one of the CPU
// backend's extra buffer types (CPU_REPACK: interleaved rows for its x86 and
// Arm GEMV/GEMM kernels; AMX), the same blocks stored through that buffer
// type, which repacks them as llama.cpp's weight loading does; the same
// ggml_graph_compute then dispatches to that buffer type's kernels.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_BENCH_HOST_GGML_BASELINE_H
#define CQ4P_BENCH_HOST_GGML_BASELINE_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cq4p::bench {

class Ggml;

/// y[m][n] = x[m][k] * W^T through ggml, W (n x k) drawn from N(0, 1) and
/// quantized to Q4_0, held as `copies` distinct copies (a working set larger
/// than the caches when the caller asks for enough of them).
class GgmlMatMul {
public:
  ~GgmlMatMul();

  /// Copies x[m][k] into the activation tensor every copy's graph reads.
  void setInput(const float *x);
  /// Computes copy `copy`'s product with `threads` threads (a count given
  /// when this was made); exits with a one-line error if ggml fails.
  void run(size_t copy, int threads);
  const float *output(size_t copy) const;
  /// The Q4_0 rows every copy was made from (row-major, rowBytes() each,
  /// whatever layout the buffer type keeps): for checking the product.
  const uint8_t *weights() const { return quantized_.data(); }
  size_t rowBytes() const { return rowBytes_; }
  /// The bytes of one copy's weights.
  double bytes() const { return double(rowBytes_) * double(n_); }

private:
  friend class Ggml;
  struct Plan;
  explicit GgmlMatMul(Ggml &ggml);

  Ggml &ggml_;
  uint64_t n_ = 0, k_ = 0;
  int64_t m_ = 0;
  size_t rowBytes_ = 0;
  void *context_ = nullptr;
  void *input_ = nullptr;
  void *weightContext_ = nullptr, *weightBuffer_ = nullptr;
  std::vector<uint8_t> quantized_;
  std::vector<void *> outputs_, graphs_;
  std::map<int, std::unique_ptr<Plan>> plans_;
};

/// libggml-base.so and libggml-cpu.so of one ggml build.
class Ggml {
public:
  /// Loads ggml from `dir`; null with `error` set (one line naming the
  /// library's path and what is missing) if it cannot.
  static std::unique_ptr<Ggml> load(const std::string &dir, std::string &error);
  ~Ggml();

  /// A product of m rows with `copies` copies of an n x k weight (k a
  /// multiple of 32) held in `buffer` ("plain" or an extra buffer type's
  /// name), its graphs built and planned for each count in `threads`, all
  /// outside any timed region.
  std::unique_ptr<GgmlMatMul> matMul(const std::string &buffer, uint64_t n, uint64_t k,
                                     int64_t m, size_t copies, uint32_t seed,
                                     const std::vector<int> &threads);

  /// The names of the CPU backend's extra buffer types in this build.
  std::vector<std::string> extraBuffers();

private:
  friend class GgmlMatMul;
  struct Api;
  Ggml();
  void *threadpool(int threads);
  void *extraBuffer(const std::string &name);

  std::unique_ptr<Api> api_;
  void *base_ = nullptr, *cpu_ = nullptr;
  std::map<int, void *> threadpools_;
};

} // namespace cq4p::bench

#endif // CQ4P_BENCH_HOST_GGML_BASELINE_H
