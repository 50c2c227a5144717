//===- TensorFileTest.cpp - the reader on valid and malformed files -------===//

#include "TempDir.h"
#include "TestFiles.h"

#include "cq4p/runtime/TensorFile.h"

#include "fp16.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <unistd.h>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

float toFloat(uint16_t half) { return cq4p_half_to_float(half); }

struct ValidCase {
  const char *name;
  std::function<std::vector<uint8_t>()> build;
  cq4p_layout layout;
  uint64_t n, k;
  uint32_t groupSize;
  bool orthogonal;
};

std::vector<ValidCase> validCases() {
  return {
      {"hadamard_panels_ragged", [] { return panelFile(randomTensor(100, 256, 128, false, 1), toFloat); },
       CQ4P_LAYOUT_PANELS, 100, 256, 128, false},
      {"hadamard_panels_gs32", [] { return panelFile(randomTensor(64, 256, 32, false, 2), toFloat); },
       CQ4P_LAYOUT_PANELS, 64, 256, 32, false},
      {"orthogonal_panels", [] { return panelFile(randomTensor(70, 384, 0, true, 3), toFloat); },
       CQ4P_LAYOUT_PANELS, 70, 384, 128, true},
      {"hadamard_row_major", [] { return legacyFile(randomTensor(10, 256, 64, false, 4), CQ4P_LAYOUT_ROW_MAJOR); },
       CQ4P_LAYOUT_ROW_MAJOR, 10, 256, 64, false},
      {"hadamard_interleaved", [] { return legacyFile(randomTensor(12, 256, 128, false, 5), CQ4P_LAYOUT_INTERLEAVED_4ROW); },
       CQ4P_LAYOUT_INTERLEAVED_4ROW, 12, 256, 128, false},
      {"orthogonal_row_major", [] { return legacyFile(randomTensor(6, 64, 0, true, 6), CQ4P_LAYOUT_ROW_MAJOR); },
       CQ4P_LAYOUT_ROW_MAJOR, 6, 64, 64, true},
      {"orthogonal_interleaved", [] { return legacyFile(randomTensor(8, 64, 0, true, 7), CQ4P_LAYOUT_INTERLEAVED_4ROW); },
       CQ4P_LAYOUT_INTERLEAVED_4ROW, 8, 64, 64, true},
  };
}

TEST(TensorFile, ValidFilesOpenWithEveryRegionInPlace) {
  TempDir dir;
  for (const ValidCase &c : validCases()) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> bytes = c.build();
    std::string path = dir.file(std::string(c.name) + ".weights");
    ASSERT_TRUE(writeBytes(path, bytes));
    std::unique_ptr<TensorFile> file;
    Status status = TensorFile::open(path, file);
    ASSERT_TRUE(status) << status.message();
    const cq4p_tensor_info &info = file->info();
    EXPECT_EQ(info.layout, uint32_t(c.layout));
    EXPECT_EQ(file->n(), c.n);
    EXPECT_EQ(file->k(), c.k);
    EXPECT_EQ(info.group_size, c.groupSize);
    EXPECT_EQ(info.num_groups, c.k / c.groupSize);
    EXPECT_EQ(file->isOrthogonal(), c.orthogonal);
    EXPECT_EQ(info.scales_offset, 96u);
    EXPECT_EQ(info.file_bytes, bytes.size());
    // Each region's bytes are the file's bytes at the region's offset.
    ByteSpan data = file->region(CQ4P_REGION_DATA);
    ASSERT_EQ(data.size, info.data_bytes);
    EXPECT_EQ(0, std::memcmp(data.data, bytes.data() + info.data_offset, data.size));
    ByteSpan codebook = file->region(CQ4P_REGION_CODEBOOK);
    ASSERT_EQ(codebook.size, 32u);
    EXPECT_EQ(0, std::memcmp(codebook.data, bytes.data() + 96, 32));
    EXPECT_EQ(file->region(CQ4P_REGION_INPUT_SCALE).size, 2 * c.k);
    EXPECT_EQ(file->region(CQ4P_REGION_INPUT_SCALE_RECIP).size, 2 * c.k);
    bool panels = c.layout == CQ4P_LAYOUT_PANELS;
    EXPECT_EQ(file->region(CQ4P_REGION_NORM_PANELS).size,
              panels ? (c.n + 63) / 64 * (c.k / c.groupSize) * 64 * 4 : 0u);
    EXPECT_EQ(file->region(CQ4P_REGION_PERMUTATION).size,
              c.orthogonal ? 0u : 4u * c.groupSize);
    EXPECT_EQ(file->region(CQ4P_REGION_ROTATION).size,
              c.orthogonal ? 2 * c.k * c.k : 0u);
    EXPECT_EQ(file->region(CQ4P_REGION_ROTATION_T).size,
              c.orthogonal && panels ? 2 * c.k * c.k : 0u);
    // The regions tile the scales region in order, with no gap but the
    // 4-byte pad before norm_panels.
    uint64_t end = info.scales_offset + info.scales_bytes;
    uint64_t last = 0;
    for (int r = CQ4P_REGION_CODEBOOK; r < CQ4P_REGION_COUNT; ++r) {
      ByteSpan span = file->region(cq4p_region(r));
      if (span.empty()) continue;
      uint64_t offset = uint64_t(span.data - data.data) + info.data_offset;
      EXPECT_GE(offset, info.scales_offset);
      EXPECT_LE(offset + span.size, end);
      last = std::max(last, offset + span.size);
    }
    EXPECT_EQ(last, end);
  }
}

TEST(TensorFile, Fp16FilesOfAnyRank) {
  TempDir dir;
  for (std::vector<uint64_t> shape : {std::vector<uint64_t>{7},
                                      std::vector<uint64_t>{3, 5},
                                      std::vector<uint64_t>{2, 3, 4, 5}}) {
    std::string path = dir.file("dense.weights");
    ASSERT_TRUE(writeBytes(path, fp16File(shape)));
    std::unique_ptr<TensorFile> file;
    Status status = TensorFile::open(path, file);
    ASSERT_TRUE(status) << status.message();
    EXPECT_EQ(file->layout(), CQ4P_LAYOUT_DENSE);
    EXPECT_EQ(file->info().ndim, shape.size());
    uint64_t count = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      EXPECT_EQ(file->info().dims[i], shape[i]);
      count *= shape[i];
    }
    ByteSpan data = file->region(CQ4P_REGION_DATA);
    ASSERT_EQ(data.size, 2 * count);
    EXPECT_EQ(cq4p_half_to_float(uint16_t(data.data[2 * 5] | data.data[2 * 5 + 1] << 8)), 5.0f);
    EXPECT_TRUE(file->region(CQ4P_REGION_CODEBOOK).empty());
  }
}

TEST(TensorFile, ViewsAreTheMappedFileNotACopy) {
  TempDir dir;
  std::string path = dir.file("t.cq4p.weights");
  std::vector<uint8_t> bytes = panelFile(randomTensor(64, 256, 128, false, 9), toFloat);
  ASSERT_TRUE(writeBytes(path, bytes));
  std::unique_ptr<TensorFile> file;
  ASSERT_TRUE(TensorFile::open(path, file));
  ByteSpan data = file->region(CQ4P_REGION_DATA);
  uint8_t changed = uint8_t(data.data[10] ^ 0xFF);
  // Writing the file through another descriptor shows in the view: the
  // kernels' operand bytes are the page cache's, with no private copy.
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &changed, 1, off_t(file->info().data_offset + 10)), 1);
  ::close(fd);
  EXPECT_EQ(data.data[10], changed);
}

TEST(TensorFile, LargeFilesStartAtA2MiBBoundaryAndStayTheFilesPages) {
  // 1200 x 1000 fp16 values: 2.4 MB, over one large page and not a multiple
  // of it, so the mapping's tail is a partial page.
  TempDir dir;
  std::string path = dir.file("large.weights");
  std::vector<uint8_t> bytes = fp16File({1200, 1000});
  ASSERT_GT(bytes.size(), size_t(2) << 20);
  ASSERT_TRUE(writeBytes(path, bytes));
  std::unique_ptr<TensorFile> file;
  Status status = TensorFile::open(path, file);
  ASSERT_TRUE(status) << status.message();
  ByteSpan data = file->region(CQ4P_REGION_DATA);
  const uint8_t *base = data.data - file->info().data_offset;
  if (const char *value = std::getenv("CQ4P_LARGE_PAGES"); !value || std::string(value) != "0")
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (uintptr_t(2) << 20), 0u);
  // Every byte is the file's, the last one included.
  EXPECT_EQ(std::memcmp(base, bytes.data(), bytes.size()), 0);
  // Still the page cache's pages, not a copy.
  uint8_t changed = uint8_t(data.data[data.size - 1] ^ 0xFF);
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &changed, 1, off_t(bytes.size() - 1)), 1);
  ::close(fd);
  EXPECT_EQ(data.data[data.size - 1], changed);
}

TEST(TensorFile, MissingFileIsAnIoErrorNamingIt) {
  std::unique_ptr<TensorFile> file;
  Status status = TensorFile::open("/nonexistent/q_proj.cq4p.weights", file);
  EXPECT_EQ(status.code(), CQ4P_ERROR_IO);
  EXPECT_NE(status.message().find("/nonexistent/q_proj.cq4p.weights: cannot open"),
            std::string::npos);
  EXPECT_FALSE(file);
}

struct Malformed {
  std::string name;
  std::function<std::vector<uint8_t>()> build;
  const char *field;
  const char *detail; ///< a part of the message that carries the numbers
};

std::vector<uint8_t> hadamardPanels() {
  return panelFile(randomTensor(100, 256, 128, false, 11), toFloat);
}
std::vector<uint8_t> orthogonalPanels() {
  return panelFile(randomTensor(64, 256, 0, true, 12), toFloat);
}

template <typename Edit>
std::function<std::vector<uint8_t>()> edited(std::vector<uint8_t> (*base)(), Edit edit) {
  return [base, edit] {
    std::vector<uint8_t> bytes = base();
    edit(bytes);
    return bytes;
  };
}

std::vector<Malformed> malformedCases() {
  std::vector<Malformed> cases;
  // Truncated at every header field boundary.
  for (uint64_t size : {0, 4, 8, 12, 16, 24, 48, 52, 60, 68, 72, 76, 83})
    cases.push_back({"truncated_at_" + std::to_string(size),
                     edited(hadamardPanels, [size](auto &b) { b.resize(size); }),
                     "header", "at least 84 bytes"});
  cases.push_back({"truncated_in_scales", edited(hadamardPanels, [](auto &b) { b.resize(200); }),
                   "file size", "found 200 bytes"});
  cases.push_back({"truncated_by_one", edited(hadamardPanels, [](auto &b) { b.pop_back(); }),
                   "file size", "bytes"});
  cases.push_back({"one_byte_extra", edited(hadamardPanels, [](auto &b) { b.push_back(0); }),
                   "file size", "bytes"});
  cases.push_back({"magic", edited(hadamardPanels, [](auto &b) { b[0] = 'X'; }), "magic", "0x54434158"});
  for (uint32_t alignment : {0u, 3u, 8192u})
    cases.push_back({"alignment_" + std::to_string(alignment),
                     edited(hadamardPanels, [alignment](auto &b) { putU32(b, 8, alignment); }),
                     "alignment", "[1, 4096]"});
  cases.push_back({"alignment_64_layout_of_32",
                   edited(hadamardPanels, [](auto &b) { putU32(b, 8, 64); }), "file size", "bytes"});
  for (uint32_t precision : {3u, 0u, 99u})
    cases.push_back({"precision_" + std::to_string(precision),
                     edited(hadamardPanels, [precision](auto &b) { putU32(b, 48, precision); }),
                     "precision", "6 (CQ4)"});
  for (uint32_t flags : {CQ4P_FLAG_PACKED_PANELS | 1u, CQ4P_FLAG_PACKED_PANELS | 8u,
                         CQ4P_FLAG_PACKED_PANELS | 0x80000000u,
                         CQ4P_FLAG_PACKED_PANELS | CQ4P_FLAG_INTERLEAVED_4ROW})
    cases.push_back({"flags_" + std::to_string(flags),
                     edited(hadamardPanels, [flags](auto &b) { putU32(b, 4, flags); }),
                     "flags", "0x"});
  cases.push_back({"panels_flag_on_fp16",
                   [] { auto b = fp16File({4, 4}); putU32(b, 4, CQ4P_FLAG_PACKED_PANELS); return b; },
                   "flags", "for precision 1"});
  cases.push_back({"extended_flag_zero_padding_is_not_dims",
                   edited(hadamardPanels, [](auto &b) { putU32(b, 4, CQ4P_FLAG_PACKED_PANELS | CQ4P_FLAG_EXTENDED_SHAPE); }),
                   "dims", "dims[5] = 0 (unused)"});
  cases.push_back({"ndim_3", edited(hadamardPanels, [](auto &b) { putU32(b, 12, 3); }), "ndim", "found 3"});
  cases.push_back({"fp16_ndim_0", [] { auto b = fp16File({4}); putU32(b, 12, 0); return b; }, "ndim", "1..4"});
  cases.push_back({"fp16_ndim_5", [] { auto b = fp16File({4}); putU32(b, 12, 5); return b; }, "ndim", "1..4"});
  cases.push_back({"n_zero", edited(hadamardPanels, [](auto &b) { putU64(b, 16, 0); }), "dims", "dims[0] > 0"});
  cases.push_back({"unused_dim_set", edited(hadamardPanels, [](auto &b) { putU64(b, 32, 1); }), "dims", "dims[2] = 0"});
  cases.push_back({"n_2_pow_40", edited(hadamardPanels, [](auto &b) { putU64(b, 16, uint64_t(1) << 40); }),
                   "dims", "N < 2^32, found 1099511627776"});
  cases.push_back({"k_2_pow_63", edited(hadamardPanels, [](auto &b) { putU64(b, 24, uint64_t(1) << 63); }),
                   "dims", "K < 2^32"});
  cases.push_back({"interleaved_n_not_multiple_of_4",
                   [] { auto b = legacyFile(randomTensor(12, 256, 128, false, 13), CQ4P_LAYOUT_INTERLEAVED_4ROW);
                        putU64(b, 16, 13); return b; },
                   "dims", "N a multiple of 4 (INTERLEAVED_4ROW), found 13"});
  cases.push_back({"original_n", edited(hadamardPanels, [](auto &b) { putU64(b, 76, 99); }),
                   "original_n", "expected 100 (N), found 99"});
  cases.push_back({"group_size_48", edited(hadamardPanels, [](auto &b) { putU32(b, 68, 48); }),
                   "group_size", "a multiple of 32, at most 256, found 48"});
  cases.push_back({"group_size_512", edited(hadamardPanels, [](auto &b) { putU32(b, 68, 512); }),
                   "group_size", "found 512"});
  cases.push_back({"orthogonal_panel_group_size", edited(orthogonalPanels, [](auto &b) { putU32(b, 68, 256); }),
                   "group_size", "128 (the virtual group"});
  cases.push_back({"num_groups", edited(hadamardPanels, [](auto &b) { putU32(b, 72, 3); }),
                   "num_groups", "= K (256), found 3"});
  cases.push_back({"scales_bytes", edited(hadamardPanels, [](auto &b) { putU64(b, 60, 1234); }),
                   "scales_bytes", "found 1234"});
  cases.push_back({"data_bytes", edited(hadamardPanels, [](auto &b) { putU64(b, 52, 12); }),
                   "data_bytes", "expected 16384, found 12"});
  cases.push_back({"fp16_elements_overflow",
                   [] { auto b = fp16File({4, 4}); putU64(b, 16, uint64_t(1) << 40);
                        putU64(b, 24, uint64_t(1) << 40); return b; },
                   "data_bytes", "a size that fits in 64 bits"});
  cases.push_back({"orthogonal_rotation_overflow",
                   edited(orthogonalPanels, [](auto &b) { putU64(b, 24, uint64_t(1) << 31);
                                                          putU32(b, 72, 1u << 24); }),
                   "scales_bytes", "a size that fits in 64 bits"});
  cases.push_back({"codebook_zero",
                   edited(hadamardPanels, [](auto &b) { std::fill(b.begin() + 96, b.begin() + 128, 0); }),
                   "codebook", "all 16 levels zero"});
  cases.push_back({"codebook_inf",
                   edited(hadamardPanels, [](auto &b) { b[96 + 6] = 0x00; b[96 + 7] = 0x7C; }),
                   "codebook", "level 3 = 0x7c00"});
  auto signOffset = [](const std::vector<uint8_t> &b) {
    // left signs follow norm_panels: the last 6 * gs bytes of the scales.
    uint64_t scalesEnd = 96 + (b[60] | b[61] << 8 | b[62] << 16);
    return scalesEnd - 6 * 128;
  };
  cases.push_back({"left_sign_zero",
                   edited(hadamardPanels, [signOffset](auto &b) { b[signOffset(b) + 5] = 0; }),
                   "left_signs", "left_signs[5] = 0"});
  cases.push_back({"right_sign_two",
                   edited(hadamardPanels, [signOffset](auto &b) { b[signOffset(b) + 128 + 7] = 2; }),
                   "right_signs", "right_signs[7] = 2"});
  cases.push_back({"permutation_out_of_range",
                   edited(hadamardPanels, [signOffset](auto &b) { putU32(b, signOffset(b) + 256 + 4 * 3, 128); }),
                   "permutation", "permutation[3] = 128"});
  cases.push_back({"permutation_repeat",
                   edited(hadamardPanels, [signOffset](auto &b) {
                     uint64_t p = signOffset(b) + 256;
                     for (int i = 0; i < 4; ++i) b[p + 4 + i] = b[p + i];
                   }),
                   "permutation", "twice (again at 1)"});
  cases.push_back({"orthogonal_norm_repeats_differ",
                   edited(orthogonalPanels, [](auto &b) {
                     // norms start after codebook, s and 1/s: 96 + 32 + 4K.
                     uint64_t norms = 96 + 32 + 4 * 256;
                     b[norms + 2 * 1] ^= 1; // row 0, virtual group 1
                   }),
                   "norms", "row 0's norm repeated over its 2 virtual groups"});
  return cases;
}

TEST(TensorFile, MalformedFilesAreRefusedAtTheRightField) {
  TempDir dir;
  for (const Malformed &c : malformedCases()) {
    SCOPED_TRACE(c.name);
    std::string path = dir.file(c.name + ".weights");
    ASSERT_TRUE(writeBytes(path, c.build()));
    std::unique_ptr<TensorFile> file;
    Status status = TensorFile::open(path, file);
    ASSERT_FALSE(status) << "accepted";
    EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
    EXPECT_FALSE(file);
    std::string prefix = path + ": " + c.field + ": expected ";
    EXPECT_EQ(status.message().rfind(prefix, 0), 0u) << status.message();
    EXPECT_NE(status.message().find(c.detail), std::string::npos) << status.message();
  }
}

} // namespace
