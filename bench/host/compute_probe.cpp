//===- compute_probe.cpp - the int8 dot-product rate a core sustains ------===//
//
// bench/model's roofline for prefill, the compute counterpart of
// cq4p-bench-decode-probe: how many int8 multiply-adds per second this
// machine's cores sustain with the x86 GEMM's own instruction mix, and
// without it. A prefill chunk is a GEMM per weight matrix, so its tokens
// per second times the multiply-adds of a token bound what any kernel over
// the format can reach here.
//
//   cq4p-bench-compute-probe THREADS REPS
//
// Prints, per thread count 1..THREADS (median of REPS, each thread its own
// loop, rates per second of the threads' own CPU time, so that other
// processes' time slices do not count; two threads on two vCPUs that share
// a physical core do):
//   "dot T G"    G GMAC/s of independent VPDPBUSD (zmm with AVX-512 VNNI,
//                ymm with AVX-VNNI): the instruction's peak;
//   "lookup T G" G GMAC/s of the GEMM loop's mix per 64-byte weight vector
//                (cq4p's AVX-512 VNNI panel dot: one load, two nibble masks,
//                a shift, two VPSHUFB codebook lookups, eight VPDPBUSD for
//                four rows): what the 4-bit weights' decoding leaves.
// or "none" when the CPU has neither VNNI.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <immintrin.h>
#include <thread>
#include <time.h>
#include <vector>

namespace {

constexpr uint64_t kIterations = 40000000;

/// The calling thread's CPU time: a rate per CPU second holds whatever
/// else shares the machine (time slices given to other processes do not
/// count), where wall time would not.
double threadSeconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

/// Twelve independent accumulators: more than the instruction's latency
/// times its throughput, so the loop runs at the throughput. Returns the
/// multiply-adds done (the sum keeps the work alive).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) uint64_t
dotZmm(uint64_t iterations, int32_t &sink) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm512_set1_epi32(i);
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(5);
  for (uint64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i)
      acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
    asm volatile("" : "+v"(u), "+v"(s));
  }
  __m512i total = acc[0];
  for (int i = 1; i < 12; ++i)
    total = _mm512_add_epi32(total, acc[i]);
  sink += _mm512_reduce_add_epi32(total);
  return iterations * 12 * 64;
}

/// The AVX-512 VNNI panel dot's loop body per two 64-byte weight loads (a
/// pair of kg-blocks), from L1: the 16-bit zips of the pair, each zip's
/// low and high nibbles (mask, shift, mask) looked up in the codebook
/// (VPSHUFB), each lookup dotted with four rows' broadcast activations:
/// 16 VPDPBUSD and 18 other instructions, the ratio of the generated loop
/// (128 and 146 per iteration).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) uint64_t
lookupZmm(uint64_t iterations, int32_t &sink) {
  alignas(64) static int8_t weights[64][64];
  alignas(64) static int32_t activations[256];
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j)
      weights[i][j] = int8_t(i * 7 + j);
  for (int i = 0; i < 256; ++i)
    activations[i] = int32_t(uint32_t(i) * 0x01010101u);
  __m512i acc[16];
  for (int i = 0; i < 16; ++i)
    acc[i] = _mm512_set1_epi32(i);
  __m512i table = _mm512_set1_epi8(9), mask = _mm512_set1_epi8(15);
  for (uint64_t n = 0; n < iterations; n += 2) {
    size_t w = size_t(n & 63), a = size_t(n & 255);
    __m512i x = _mm512_load_si512(weights[w]);
    __m512i y = _mm512_load_si512(weights[w + 1]);
    __m512i zips[2] = {_mm512_unpacklo_epi16(x, y), _mm512_unpackhi_epi16(x, y)};
    __m512i even = _mm512_set1_epi32(activations[a]);
    __m512i odd = _mm512_set1_epi32(activations[(a + 1) & 255]);
    __m512i even2 = _mm512_set1_epi32(activations[(a + 2) & 255]);
    __m512i odd2 = _mm512_set1_epi32(activations[(a + 3) & 255]);
    __m512i rows[4] = {even, odd, even2, odd2};
#pragma GCC unroll 2
    for (int z = 0; z < 2; ++z) {
      __m512i low = _mm512_shuffle_epi8(table, _mm512_and_si512(zips[z], mask));
      __m512i high = _mm512_shuffle_epi8(
          table, _mm512_and_si512(_mm512_srli_epi16(zips[z], 4), mask));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        acc[8 * z + r] = _mm512_dpbusd_epi32(acc[8 * z + r], low, rows[r]);
        acc[8 * z + 4 + r] = _mm512_dpbusd_epi32(acc[8 * z + 4 + r], high, rows[r]);
      }
    }
  }
  __m512i total = acc[0];
  for (int i = 1; i < 16; ++i)
    total = _mm512_add_epi32(total, acc[i]);
  sink += _mm512_reduce_add_epi32(total);
  return iterations / 2 * 16 * 64;
}

__attribute__((target("avx2,avxvnni"))) uint64_t dotYmm(uint64_t iterations,
                                                        int32_t &sink) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm256_set1_epi32(i);
  __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(5);
  for (uint64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i)
      acc[i] = _mm256_dpbusd_avx_epi32(acc[i], u, s);
    asm volatile("" : "+x"(u), "+x"(s));
  }
  int32_t lanes[8];
  __m256i total = acc[0];
  for (int i = 1; i < 12; ++i)
    total = _mm256_add_epi32(total, acc[i]);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(lanes), total);
  for (int32_t lane : lanes)
    sink += lane;
  return iterations * 12 * 32;
}

__attribute__((target("avx2,avxvnni"))) uint64_t
lookupYmm(uint64_t iterations, int32_t &sink) {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i)
    acc[i] = _mm256_set1_epi32(i);
  __m256i weights = _mm256_set1_epi8(0x37), table = _mm256_set1_epi8(9);
  __m256i mask = _mm256_set1_epi8(15);
  __m256i rows[2] = {_mm256_set1_epi8(1), _mm256_set1_epi8(2)};
  for (uint64_t n = 0; n < iterations; ++n) {
    asm volatile("" : "+x"(weights));
    __m256i low = _mm256_shuffle_epi8(table, _mm256_and_si256(weights, mask));
    __m256i high = _mm256_shuffle_epi8(
        table, _mm256_and_si256(_mm256_srli_epi16(weights, 4), mask));
    int slot = int(n & 1) * 4;
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) {
      acc[slot + r] = _mm256_dpbusd_avx_epi32(acc[slot + r], low, rows[r]);
      acc[slot + 2 + r] = _mm256_dpbusd_avx_epi32(acc[slot + 2 + r], high, rows[r]);
    }
  }
  int32_t lanes[8];
  __m256i total = acc[0];
  for (int i = 1; i < 8; ++i)
    total = _mm256_add_epi32(total, acc[i]);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(lanes), total);
  for (int32_t lane : lanes)
    sink += lane;
  return iterations * 4 * 32;
}

using Loop = uint64_t (*)(uint64_t, int32_t &);

/// Where every loop's result ends: a volatile store the compiler must keep,
/// so it keeps the loops that feed it.
volatile int32_t gSink;

/// GMAC/s of `threads` threads each running `loop` at once: the sum of
/// each thread's multiply-adds per second of its own CPU time.
double rate(Loop loop, int threads) {
  std::vector<std::thread> pool;
  std::vector<int32_t> sinks(size_t(threads), 0);
  std::vector<double> rates(size_t(threads), 0.0);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      double start = threadSeconds();
      uint64_t done = loop(kIterations, sinks[size_t(t)]);
      rates[size_t(t)] = double(done) / (threadSeconds() - start) / 1e9;
    });
  for (std::thread &thread : pool)
    thread.join();
  double total = 0.0;
  for (int t = 0; t < threads; ++t)
    total += rates[size_t(t)];
  for (int32_t sink : sinks)
    gSink = gSink + sink;
  return total;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cq4p-bench-compute-probe THREADS REPS\n");
    return 2;
  }
  int threads = std::atoi(argv[1]), reps = std::atoi(argv[2]);
  if (threads < 1 || threads > 256 || reps < 1 || reps > 1000) {
    std::fprintf(stderr,
                 "cq4p-bench-compute-probe: THREADS must be in [1, 256] and REPS "
                 "in [1, 1000], got %s and %s\n",
                 argv[1], argv[2]);
    return 2;
  }
  __builtin_cpu_init();
  Loop dot = nullptr, lookup = nullptr;
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) {
    dot = dotZmm;
    lookup = lookupZmm;
  } else if (__builtin_cpu_supports("avxvnni")) {
    dot = dotYmm;
    lookup = lookupYmm;
  } else {
    std::printf("none\n");
    return 0;
  }
  for (int t = 1; t <= threads; ++t) {
    std::vector<double> dots, lookups;
    rate(dot, t); // warm-up: the clock settles
    for (int r = 0; r < reps; ++r) {
      dots.push_back(rate(dot, t));
      lookups.push_back(rate(lookup, t));
    }
    std::printf("dot %d %.1f\nlookup %d %.1f\n", t, median(dots), t, median(lookups));
  }
  return 0;
}
