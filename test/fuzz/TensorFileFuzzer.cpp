//===- TensorFileFuzzer.cpp - libFuzzer target for the tensor reader ------===//
//
// Any byte string: the reader either refuses it with a message in the house
// shape, or accepts it with every region inside the input. Built with
// AddressSanitizer and UBSan, so an out-of-bounds read or an overflow in a
// size computation is a finding too.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/TensorFile.h"

#include <cstdint>
#include <cstring>

using namespace cq4p::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cq4p_tensor_info info;
  RegionTable regions;
  Status status = validateTensorBytes("fuzz", data, size, info, regions);
  if (!status) {
    if (status.message().rfind("fuzz: ", 0) != 0)
      __builtin_trap();
    return 0;
  }
  if (info.file_bytes != size)
    __builtin_trap();
  uint8_t checksum = 0;
  for (int r = 0; r < CQ4P_REGION_COUNT; ++r) {
    if (regions.offset[r] + regions.size[r] > size ||
        regions.offset[r] + regions.size[r] < regions.offset[r])
      __builtin_trap();
    for (uint64_t i = 0; i < regions.size[r]; ++i)
      checksum ^= data[regions.offset[r] + i];
  }
  volatile uint8_t sink = checksum;
  (void)sink;
  return 0;
}
