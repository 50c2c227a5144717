//===- ToyBundle.h - the bundle FakeModel.c binds ---------------*- C++ -*-===//
//
// The toy model's shape (FakeModel.c) and a bundle of it written to a
// scratch directory, shared by the model and text C API tests.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_TOYBUNDLE_H
#define CQ4P_TEST_UNIT_RUNTIME_TOYBUNDLE_H

#include "TempDir.h"
#include "TestFiles.h"

#include "cq4p/runtime/Bundle.h"

#include "fp16.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace cq4p::test {

// FakeModel.c's shape.
constexpr int64_t kVocab = 64;
constexpr int64_t kLayers = 2;
constexpr int64_t kKvWidth = 8;
constexpr int64_t kChunk = 4;
constexpr uint64_t kHeadK = 256;
constexpr uint32_t kHeadGroupSize = 128;

inline float toFloat(uint16_t half) { return cq4p_half_to_float(half); }

/// A dense FP32 file of the given shape holding `values`.
inline std::vector<uint8_t> fp32File(const std::vector<uint64_t> &shape,
                              const std::vector<float> &values) {
  Bytes data;
  for (float value : values)
    data.f32(value);
  uint64_t dims[4] = {};
  for (size_t i = 0; i < shape.size() && i < 4; ++i)
    dims[i] = shape[i];
  return assemble(header(0, uint32_t(shape.size()), dims, CQ4P_PRECISION_FP32,
                         data.data.size(), 0, 0, 0, shape[0]),
                  Bytes(), data.data);
}

inline std::vector<float> embedValues(uint64_t count) {
  std::vector<float> values(count);
  for (uint64_t i = 0; i < count; ++i)
    values[i] = float(int64_t(i * 7 % 23) - 11);
  return values;
}

/// The toy model's bundle: what FakeModel.c binds, each part replaceable
/// to make the bundle a test needs.
struct ToyBundle {
  TempDir dir;
  CqTensor head = randomTensor(kVocab, kHeadK, kHeadGroupSize, false, 7);
  std::string digest = "\"model_digest\": \"toy-digest-1\", ";
  std::string config = "\"config\": {\"max_position_embeddings\": 512}, ";
  std::string embedEntry = entry("toy.embed", "[64, 8]", "FP32");
  std::string scaleEntry = entry("toy.scale", "[8]", "FP16");
  std::string headEntry = entry("toy.head", "[64, 256]", "CQ4");

  static std::string entry(const char *name, const char *shape,
                           const char *dtype) {
    return std::string("{\"name\": \"") + name + "\", \"file\": \"" + name +
           ".weights\", \"shape\": " + shape + ", \"dtype\": \"" + dtype +
           "\"}";
  }

  ToyBundle() {
    writeBytes(dir.file("toy.embed.weights"),
               fp32File({uint64_t(kVocab), uint64_t(kKvWidth)},
                        embedValues(kVocab * kKvWidth)));
    writeBytes(dir.file("toy.scale.weights"), fp16File({uint64_t(kKvWidth)}));
    writeBytes(dir.file("toy.head.cq4p.weights"), panelFile(head, toFloat));
  }

  /// Writes manifest.json from the parts (an empty entry is left out).
  cq4p::runtime::Status open(std::unique_ptr<cq4p::runtime::Bundle> &out) {
    std::string tensors;
    for (const std::string *part : {&embedEntry, &scaleEntry, &headEntry})
      if (!part->empty())
        tensors += (tensors.empty() ? "" : ", ") + *part;
    std::ofstream(dir.file("manifest.json"))
        << "{\"format\": \"cq4p-bundle\", \"version\": 1, " << digest << config
        << "\"tensors\": [" << tensors << "]}";
    return cq4p::runtime::Bundle::open(dir.path(), out);
  }
};

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_RUNTIME_TOYBUNDLE_H
