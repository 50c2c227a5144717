//===- WriteSeedFiles.cpp - valid tensor files of every layout ------------===//
//
// Writes small valid files of each layout into a directory: the fuzzer's
// seeds (it mutates from well-formed inputs, which reach deep checks).
//
//===----------------------------------------------------------------------===//

#include "../unit/Runtime/TestFiles.h"

#include "fp16.h"

#include <cstdio>
#include <string>

using namespace cq4p::test;

static float toFloat(uint16_t half) { return cq4p_half_to_float(half); }

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  struct Seed {
    const char *name;
    std::vector<uint8_t> bytes;
  } seeds[] = {
      {"hadamard.cq4p.weights", panelFile(randomTensor(70, 64, 32, false, 1), toFloat)},
      {"orthogonal.cq4p.weights", panelFile(randomTensor(8, 256, 0, true, 2), toFloat)},
      {"row_major.cq4.weights", legacyFile(randomTensor(6, 64, 32, false, 3), CQ4P_LAYOUT_ROW_MAJOR)},
      {"interleaved.cq4.weights",
       legacyFile(randomTensor(8, 64, 32, false, 4), CQ4P_LAYOUT_INTERLEAVED_4ROW)},
      {"orthogonal_interleaved.cq4.weights",
       legacyFile(randomTensor(4, 32, 0, true, 5), CQ4P_LAYOUT_INTERLEAVED_4ROW)},
      {"dense.weights", fp16File({3, 4})},
  };
  for (const Seed &seed : seeds)
    if (!writeBytes(dir + "/" + seed.name, seed.bytes)) {
      std::fprintf(stderr, "%s/%s: cannot write\n", dir.c_str(), seed.name);
      return 1;
    }
  return 0;
}
