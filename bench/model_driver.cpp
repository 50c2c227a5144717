//===- model_driver.cpp - one model's prefill and decode, marked for QEMU --===//
//
// bench/model runs this under `qemu-aarch64 -d in_asm,exec,nochain` to count
// the instructions a compiled model executes per prefill token and per
// decode token, by function:
//
//   cq4p-bench-model BUNDLE LIBRARY "PROMPT IDS" DECODE_TOKENS
//
// prints `base <load address of LIBRARY>` and calls the marker (whose
// `hint #0x7f` the log shows) before the prefill, between the prefill and
// the decode steps, and after them (greedy, 1 thread).
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Model.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

using namespace cq4p::runtime;

/// The QEMU log is split where this runs: bench/qemu_exec_count.cpp finds
/// its `hint #0x7f` (a NOP) in the log. It must not be inlined.
extern "C" __attribute__((noinline)) void cq4p_bench_mark(int phase) {
  asm volatile("hint #0x7f" ::"r"(phase) : "memory");
}

static int fail(const std::string &message) {
  std::fprintf(stderr, "cq4p-bench-model: %s\n", message.c_str());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5)
    return fail("usage: cq4p-bench-model BUNDLE LIBRARY \"PROMPT IDS\" DECODE_TOKENS");
  std::unique_ptr<Bundle> bundle;
  if (Status status = Bundle::open(argv[1], bundle); !status)
    return fail(status.message());
  std::unique_ptr<KernelLibrary> library;
  if (Status status = KernelLibrary::open(argv[2], library); !status)
    return fail(status.message());
  std::unique_ptr<Model> model;
  if (Status status = Model::open(*bundle, *library, ModelOptions{}, model); !status)
    return fail(status.message());
  std::vector<int64_t> prompt;
  std::istringstream ids(argv[3]);
  for (long long id; ids >> id;)
    prompt.push_back(id);
  int decodeTokens = std::atoi(argv[4]);

  Dl_info info;
  if (!dladdr(reinterpret_cast<const void *>(model->desc().decode), &info))
    return fail("dladdr failed for the decode step");
  std::printf("base %p\n", info.dli_fbase);
  std::fflush(stdout);

  cq4p_bench_mark(0);
  if (Status status = model->prefill(prompt.data(), int64_t(prompt.size())); !status)
    return fail(status.message());
  cq4p_bench_mark(1);
  // Greedy sampling through the runtime, as cq4p-run and the C API do: its
  // scan of the logits is part of what a decode token costs.
  Rng rng;
  for (int i = 0; i < decodeTokens; ++i) {
    int64_t id = 0;
    if (Status status = model->sample(SamplingOptions{}, rng, id); !status)
      return fail(status.message());
    if (Status status = model->decode(id); !status)
      return fail(status.message());
  }
  cq4p_bench_mark(2);
  return 0;
}
