//===- PanelEncoderTest.cpp - the C reference encoder ---------------------===//
//
// cq4p_encode_panels against panels and folded norms built independently
// from docs/FORMAT.md section 3's byte address formula (TestFiles.h), from both legacy
// source layouts, on the shapes the format's tests name.
//
//===----------------------------------------------------------------------===//

#include "TestFiles.h"

#include "cq4p/cq4p.h"

#include "fp16.h"

#include <gtest/gtest.h>

using namespace cq4p::test;

namespace {

float toFloat(uint16_t half) { return cq4p_half_to_float(half); }

struct Encoded {
  std::vector<uint8_t> panels;
  std::vector<float> normPanels;
};

Encoded encode(const CqTensor &t, cq4p_layout source, uint32_t panelGroupSize) {
  Encoded out;
  out.panels.assign(cq4p_panel_data_bytes(t.n, t.k), 0xEE);
  out.normPanels.assign(cq4p_num_super_blocks(t.n) * (t.k / panelGroupSize) * 64, -1.0f);
  std::vector<uint8_t> data = legacyData(t, source);
  char error[256] = "";
  int code = cq4p_encode_panels(source, data.data(), t.n, t.k, t.groupSize,
                                t.norms.data(), t.codebook.data(), panelGroupSize,
                                out.panels.data(), out.normPanels.data(), error,
                                sizeof(error));
  EXPECT_EQ(code, CQ4P_OK) << error;
  return out;
}

/// The data and norm_panels regions of the independently built panel file.
Encoded reference(const CqTensor &t) {
  std::vector<uint8_t> file = panelFile(t, toFloat);
  uint64_t dataBytes = cq4p_panel_data_bytes(t.n, t.k);
  uint32_t gs = t.orthogonal ? CQ4P_ORTHOGONAL_VIRTUAL_GROUP : t.groupSize;
  uint64_t ng = t.k / gs;
  Encoded out;
  out.panels.assign(file.end() - long(dataBytes), file.end());
  // norm_panels: after codebook, s, 1/s and norms, at a 4-byte boundary.
  uint64_t offset = 96 + 32 + 4 * t.k + 2 * t.n * ng;
  offset = (offset - 96 + 3) / 4 * 4 + 96;
  out.normPanels.resize(cq4p_num_super_blocks(t.n) * ng * 64);
  std::memcpy(out.normPanels.data(), file.data() + offset, out.normPanels.size() * 4);
  return out;
}

struct Shape {
  uint64_t n, k;
  uint32_t groupSize;
  bool orthogonal;
};

TEST(PanelEncoder, MatchesTheByteAddressFormula) {
  const Shape shapes[] = {{64, 256, 128, false}, {192, 512, 128, false},
                          {100, 256, 128, false}, {256, 256, 256, false},
                          {20, 1536, 0, true}};
  uint32_t seed = 100;
  for (const Shape &shape : shapes) {
    SCOPED_TRACE(::testing::Message() << shape.n << "x" << shape.k << " gs " << shape.groupSize);
    CqTensor t = randomTensor(shape.n, shape.k, shape.groupSize, shape.orthogonal, seed++);
    uint32_t panelGroupSize = shape.orthogonal ? 128 : shape.groupSize;
    Encoded expected = reference(t);
    Encoded fromRowMajor = encode(t, CQ4P_LAYOUT_ROW_MAJOR, panelGroupSize);
    EXPECT_EQ(fromRowMajor.panels, expected.panels);
    EXPECT_EQ(fromRowMajor.normPanels, expected.normPanels);
    if (shape.n % 4 == 0) {
      Encoded fromInterleaved = encode(t, CQ4P_LAYOUT_INTERLEAVED_4ROW, panelGroupSize);
      EXPECT_EQ(fromInterleaved.panels, fromRowMajor.panels);
      EXPECT_EQ(fromInterleaved.normPanels, fromRowMajor.normPanels);
    }
  }
}

TEST(PanelEncoder, PadsChannelsPastNWithZeros) {
  CqTensor t = randomTensor(100, 256, 128, false, 7);
  Encoded out = encode(t, CQ4P_LAYOUT_ROW_MAJOR, 128);
  // Super-block 1 holds channels 64..127; 100..127 are padding.
  for (uint64_t g = 0; g < 2; ++g)
    for (uint64_t kg = 0; kg < 32; ++kg)
      for (uint64_t c = 36; c < 64; ++c) {
        uint64_t block = ((1 * 2 + g) * 32 + kg) * 128;
        EXPECT_EQ(out.panels[block + c * 2], 0);
        EXPECT_EQ(out.panels[block + c * 2 + 1], 0);
      }
  for (uint64_t g = 0; g < 2; ++g)
    for (uint64_t c = 36; c < 64; ++c)
      EXPECT_EQ(out.normPanels[(1 * 2 + g) * 64 + c], 0.0f);
}

TEST(PanelEncoder, FoldsTheCodebookScaleIntoNorms) {
  CqTensor t = randomTensor(64, 128, 128, false, 8);
  // An unscaled codebook: cb_scale = max|cb| / 127 = (15 / 32) / 127.
  for (int i = 0; i < 16; ++i)
    t.codebook[i] = exactHalf(float(2 * i - 15) / 32.0f);
  Encoded out = encode(t, CQ4P_LAYOUT_ROW_MAJOR, 128);
  float cbScale = 0.46875f / 127.0f;
  for (uint64_t c = 0; c < 64; ++c)
    EXPECT_EQ(out.normPanels[c], toFloat(t.norms[c]) * cbScale);
}

TEST(PanelEncoder, CanonicalisesIndicesWithEqualInt8Levels) {
  CqTensor t = randomTensor(64, 128, 128, false, 9);
  // Levels 5 and 6 both round to the int8 level -10 (scale 1.0).
  t.codebook[5] = exactHalf(-10.0f);
  t.codebook[6] = exactHalf(-10.25f);
  for (uint64_t i = 0; i < 16; ++i) t.indices[i] = uint8_t(i);
  Encoded out = encode(t, CQ4P_LAYOUT_ROW_MAJOR, 128);
  // Row 0, k = 4..7 sit in kg-block 1, channel 0: bytes 128, 129.
  EXPECT_EQ(out.panels[128] & 0xF, 4);
  EXPECT_EQ(out.panels[128] >> 4, 5);
  EXPECT_EQ(out.panels[129] & 0xF, 5); // index 6 became 5
  EXPECT_EQ(out.panels[129] >> 4, 7);
  int8_t cbI8[16];
  float cbScale = 0;
  char error[128];
  ASSERT_EQ(cq4p_codebook_int8(t.codebook.data(), cbI8, &cbScale, error, sizeof(error)), CQ4P_OK);
  EXPECT_EQ(cbScale, 1.0f);
  EXPECT_EQ(cbI8[5], -10);
  EXPECT_EQ(cbI8[6], -10);
}

TEST(PanelEncoder, RoundsCodebookTiesAwayFromZero) {
  // max 127: cb_scale and its reciprocal are 1.0, so x.5 levels are exact
  // ties, which docs/FORMAT.md section 6 rounds away from zero (C's roundf).
  std::vector<uint16_t> codebook(16, 0);
  codebook[0] = exactHalf(127.0f);
  codebook[1] = exactHalf(2.5f);
  codebook[2] = exactHalf(-3.5f);
  codebook[3] = exactHalf(0.5f);
  codebook[4] = exactHalf(18.5f);
  int8_t cbI8[16];
  float cbScale = 0;
  char error[128];
  ASSERT_EQ(cq4p_codebook_int8(codebook.data(), cbI8, &cbScale, error, sizeof(error)), CQ4P_OK);
  EXPECT_EQ(cbI8[0], 127);
  EXPECT_EQ(cbI8[1], 3);
  EXPECT_EQ(cbI8[2], -4);
  EXPECT_EQ(cbI8[3], 1);
  EXPECT_EQ(cbI8[4], 19);
}

TEST(PanelEncoder, ScalesCodebookByTheFp32Reciprocal) {
  // max 0.1292724609375: level 0.06463623046875 times fp32(1 / cb_scale) is
  // 63.5 exactly in fp32 (-> 64), where a division gives 63.499996 (-> 63).
  // With max 0.14892578125 it is the other way round: 63.499996 -> 63.
  struct Case {
    float largest, level;
    int expected;
  };
  for (Case c : {Case{0.1292724609375f, 0.06463623046875f, 64},
                 Case{0.14892578125f, 0.074462890625f, 63}}) {
    std::vector<uint16_t> codebook(16, 0);
    codebook[0] = exactHalf(c.largest);
    codebook[1] = exactHalf(c.level);
    codebook[2] = exactHalf(-c.level);
    int8_t cbI8[16];
    float cbScale = 0;
    char error[128];
    ASSERT_EQ(cq4p_codebook_int8(codebook.data(), cbI8, &cbScale, error, sizeof(error)), CQ4P_OK);
    EXPECT_EQ(cbScale, c.largest / 127.0f);
    EXPECT_EQ(cbI8[1], c.expected) << c.largest;
    EXPECT_EQ(cbI8[2], -c.expected) << c.largest;
  }
}

TEST(PanelEncoder, RefusesBadArgumentsWithTheNumbers) {
  CqTensor t = randomTensor(64, 128, 128, false, 10);
  std::vector<uint8_t> data = legacyData(t, CQ4P_LAYOUT_ROW_MAJOR);
  std::vector<uint8_t> panels(cq4p_panel_data_bytes(64, 128));
  std::vector<float> norms(64 * 2);
  char error[256];
  EXPECT_EQ(cq4p_encode_panels(7, data.data(), 64, 128, 128, t.norms.data(), t.codebook.data(),
                               128, panels.data(), norms.data(), error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_STREQ(error, "source_layout: expected 0 (row-major) or 1 (interleaved 4-row), found 7");
  EXPECT_EQ(cq4p_encode_panels(CQ4P_LAYOUT_ROW_MAJOR, data.data(), 64, 128, 96, t.norms.data(),
                               t.codebook.data(), 96, panels.data(), norms.data(), error,
                               sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_STREQ(error, "source_group_size: expected a divisor of K (128), found 96");
  EXPECT_EQ(cq4p_encode_panels(CQ4P_LAYOUT_ROW_MAJOR, data.data(), 64, 128, 128, t.norms.data(),
                               t.codebook.data(), 48, panels.data(), norms.data(), error,
                               sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_STREQ(error, "panel_group_size: expected a multiple of 4 dividing the source group "
                      "size (128), found 48");
  EXPECT_EQ(cq4p_encode_panels(CQ4P_LAYOUT_INTERLEAVED_4ROW, data.data(), 62, 128, 128,
                               t.norms.data(), t.codebook.data(), 128, panels.data(),
                               norms.data(), error, sizeof(error)),
            CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(std::string(error).find("found N = 62"), std::string::npos) << error;
  std::vector<uint16_t> zeros(16, 0);
  EXPECT_EQ(cq4p_encode_panels(CQ4P_LAYOUT_ROW_MAJOR, data.data(), 64, 128, 128, t.norms.data(),
                               zeros.data(), 128, panels.data(), norms.data(), error,
                               sizeof(error)),
            CQ4P_ERROR_FORMAT);
  EXPECT_STREQ(error, "codebook: expected a level other than zero, found all 16 levels zero");
}

} // namespace
