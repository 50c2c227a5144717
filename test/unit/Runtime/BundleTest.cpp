//===- BundleTest.cpp - manifests, name resolution, refusals by name ------===//

#include "TempDir.h"
#include "TestFiles.h"

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/WeightView.h"

#include "fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

float toFloat(uint16_t half) { return cq4p_half_to_float(half); }

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string manifest(const std::string &tensors) {
  return R"({"format": "cq4p-bundle", "version": 1, "model_type": "llama", "tensors": [)" +
         tensors + "]}";
}

const char *kQProj = R"({"name": "layers.0.q_proj", "file": "layers.0.q_proj.weights",
  "shape": [100, 256], "dtype": "CQ4", "rotation": "hadamard", "layout": "panels",
  "group_size": 128})";
const char *kNorm = R"({"name": "layers.0.norm", "file": "layers.0.norm.weights",
  "shape": [3, 5], "dtype": "FP16"})";

class BundleTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(writeBytes(dir.file("layers.0.q_proj.cq4p.weights"),
                           panelFile(randomTensor(100, 256, 128, false, 1), toFloat)));
    ASSERT_TRUE(writeBytes(dir.file("layers.0.norm.weights"), fp16File({3, 5})));
  }
  Status open(std::unique_ptr<Bundle> &bundle) { return Bundle::open(dir.path(), bundle); }
  TempDir dir;
};

TEST_F(BundleTest, OpensEveryTensor) {
  writeText(dir.file("manifest.json"), manifest(std::string(kQProj) + "," + kNorm));
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  ASSERT_TRUE(status) << status.message();
  ASSERT_EQ(bundle->tensors().size(), 2u);
  const BundleTensor *q = bundle->find("layers.0.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->resolvedPath, dir.file("layers.0.q_proj.cq4p.weights"));
  EXPECT_EQ(q->file->layout(), CQ4P_LAYOUT_PANELS);
  EXPECT_EQ(bundle->find("layers.0.norm")->file->info().dims[1], 5u);
  EXPECT_EQ(bundle->find("missing"), nullptr);
}

TEST_F(BundleTest, ReadsTheModelDigestAndConfigIntegers) {
  writeText(dir.file("manifest.json"), manifest(kNorm));
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(open(bundle));
  EXPECT_FALSE(bundle->hasModelDigest());
  EXPECT_EQ(bundle->modelDigest(), "");
  EXPECT_FALSE(bundle->configInteger("max_position_embeddings"));

  writeText(dir.file("manifest.json"),
            R"({"format": "cq4p-bundle", "version": 1, "model_digest": "ab12",
                "config": {"max_position_embeddings": 4096, "rope_theta": 1e4,
                           "model_type": "llama", "vocab_size": 1024},
                "tensors": [)" + std::string(kNorm) + "]}");
  Status status = open(bundle);
  ASSERT_TRUE(status) << status.message();
  EXPECT_TRUE(bundle->hasModelDigest());
  EXPECT_EQ(bundle->modelDigest(), "ab12");
  EXPECT_EQ(bundle->configInteger("max_position_embeddings"), 4096);
  EXPECT_EQ(bundle->configInteger("vocab_size"), 1024);
  EXPECT_FALSE(bundle->configInteger("rope_theta")); // not an integer literal
  EXPECT_FALSE(bundle->configInteger("model_type"));

  writeText(dir.file("manifest.json"),
            R"({"format": "cq4p-bundle", "version": 1, "model_digest": "",
                "tensors": []})");
  status = open(bundle);
  EXPECT_NE(status.message().find("model_digest: expected a non-empty string"),
            std::string::npos)
      << status.message();
  writeText(dir.file("manifest.json"),
            R"({"format": "cq4p-bundle", "version": 1, "config": [1],
                "tensors": []})");
  status = open(bundle);
  EXPECT_NE(status.message().find("config: expected an object"), std::string::npos)
      << status.message();
}

TEST_F(BundleTest, ResolvesPanelsThenLegacyThenPlain) {
  std::string d = dir.path();
  EXPECT_EQ(Bundle::resolveWeightFile(d, "layers.0.q_proj.weights"),
            dir.file("layers.0.q_proj.cq4p.weights"));
  ASSERT_TRUE(writeBytes(dir.file("w.cq4.weights"), fp16File({2})));
  ASSERT_TRUE(writeBytes(dir.file("w.weights"), fp16File({2})));
  EXPECT_EQ(Bundle::resolveWeightFile(d, "w.weights"), dir.file("w.cq4.weights"));
  ASSERT_TRUE(writeBytes(dir.file("w.cq4p.weights"), fp16File({2})));
  EXPECT_EQ(Bundle::resolveWeightFile(d, "w.weights"), dir.file("w.cq4p.weights"));
  EXPECT_EQ(Bundle::resolveWeightFile(d, "v.weights"), "");
}

TEST_F(BundleTest, MissingTensorIsRefusedByName) {
  writeText(dir.file("manifest.json"),
            manifest(R"({"name": "layers.1.k_proj", "file": "layers.1.k_proj.weights",
                         "shape": [8, 8], "dtype": "FP16"})"));
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_EQ(status.code(), CQ4P_ERROR_NOT_FOUND);
  EXPECT_NE(status.message().find("tensor 'layers.1.k_proj': no file for "
                                  "'layers.1.k_proj.weights'"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(bundle);
}

TEST_F(BundleTest, ShapeDisagreementIsRefusedByName) {
  std::string wrong = kQProj;
  wrong.replace(wrong.find("[100, 256]"), 10, "[128, 256]");
  writeText(dir.file("manifest.json"), manifest(wrong));
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
  EXPECT_NE(status.message().find("tensor 'layers.0.q_proj': shape [128, 256] in "
                                  "manifest.json, but [100, 256] in"),
            std::string::npos)
      << status.message();
}

TEST_F(BundleTest, DtypeAndLayoutDisagreementsAreRefused) {
  std::string wrongDtype = kNorm;
  wrongDtype.replace(wrongDtype.find("FP16"), 4, "FP32");
  writeText(dir.file("manifest.json"), manifest(wrongDtype));
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_NE(status.message().find("tensor 'layers.0.norm': dtype FP32 in manifest.json, "
                                  "but FP16 in"),
            std::string::npos)
      << status.message();
  std::string wrongLayout = kQProj;
  wrongLayout.replace(wrongLayout.find("\"panels\""), 8, "\"row_major\"");
  writeText(dir.file("manifest.json"), manifest(wrongLayout));
  status = open(bundle);
  EXPECT_NE(status.message().find("layout 'row_major' in manifest.json, but panels"),
            std::string::npos)
      << status.message();
}

TEST_F(BundleTest, CorruptTensorFileIsRefusedWithItsName) {
  std::vector<uint8_t> bytes = fp16File({3, 5});
  bytes.resize(bytes.size() - 2);
  ASSERT_TRUE(writeBytes(dir.file("layers.0.norm.weights"), bytes));
  writeText(dir.file("manifest.json"), manifest(kNorm));
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
  EXPECT_EQ(status.message().rfind("tensor 'layers.0.norm': ", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("file size: expected 126 bytes, found 124 bytes"),
            std::string::npos)
      << status.message();
}

TEST_F(BundleTest, ManifestErrorsSayWhere) {
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_EQ(status.code(), CQ4P_ERROR_NOT_FOUND);
  EXPECT_NE(status.message().find("manifest.json: cannot open"), std::string::npos);

  writeText(dir.file("manifest.json"), "{\"format\": \"cq4p-bundle\",\n  \"version\": 1,,}");
  status = open(bundle);
  EXPECT_NE(status.message().find("manifest.json:2:16: invalid JSON: syntax error while "
                                  "parsing object key - unexpected ','; expected string "
                                  "literal"),
            std::string::npos)
      << status.message();

  writeText(dir.file("manifest.json"), R"({"format": "cq4p-bundle", "version": 2, "tensors": []})");
  status = open(bundle);
  EXPECT_NE(status.message().find("version: expected 1, found 2"), std::string::npos)
      << status.message();

  writeText(dir.file("manifest.json"),
            manifest(R"({"name": "x", "file": "../x.weights", "shape": [2], "dtype": "FP16"})"));
  status = open(bundle);
  EXPECT_NE(status.message().find("tensor 'x': expected \"file\" to be a file name inside the bundle"),
            std::string::npos)
      << status.message();

  writeText(dir.file("manifest.json"), manifest(std::string(kNorm) + "," + kNorm));
  status = open(bundle);
  EXPECT_NE(status.message().find("tensor 'layers.0.norm': listed twice"), std::string::npos)
      << status.message();

  writeText(dir.file("manifest.json"), std::string(100, '[') );
  status = open(bundle);
  EXPECT_NE(status.message().find("nesting deeper than 64"), std::string::npos)
      << status.message();
}


// --- hostile bundles: every entry stays inside the bundle directory --------

class HostileBundleTest : public BundleTest {
protected:
  void SetUp() override {
    BundleTest::SetUp();
    // A valid tensor outside the bundle: had a reader followed an entry to
    // it, the bundle would open, so each refusal proves it was not used.
    ASSERT_TRUE(writeBytes(outside.file("victim.weights"), fp16File({3, 5})));
  }
  /// Opens the bundle, expecting a refusal whose message holds `needle`.
  void expectRefused(cq4p_code code, const std::string &needle) {
    std::unique_ptr<Bundle> bundle;
    Status status = open(bundle);
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
    EXPECT_FALSE(bundle);
    std::ifstream victim(outside.file("victim.weights"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(victim)), {});
    std::vector<uint8_t> expected = fp16File({3, 5});
    EXPECT_EQ(bytes, std::string(expected.begin(), expected.end()));
  }
  std::string normEntry(const std::string &file) {
    return R"({"name": "layers.0.norm", "file": ")" + file +
           R"(", "shape": [3, 5], "dtype": "FP16"})";
  }
  TempDir outside;
};

TEST_F(HostileBundleTest, DotDotAndAbsoluteNamesAreRefused) {
  for (std::string file : {"../victim.weights", "a/../../victim.weights", "..",
                           "/etc/passwd", "sub/x.weights"}) {
    writeText(dir.file("manifest.json"), manifest(normEntry(file)));
    expectRefused(CQ4P_ERROR_FORMAT, "tensor 'layers.0.norm': expected \"file\" to be a "
                                     "file name inside the bundle");
  }
}

std::string manifestWith(const std::string &members) {
  return R"({"format": "cq4p-bundle", "version": 1, "model_type": "llama", )" + members +
         R"(, "tensors": [)" + kNorm + "]}";
}

TEST_F(HostileBundleTest, TokenizerFilesAreConfinedToTheBundle) {
  for (std::string name : {"../../../etc/passwd", "/etc/passwd", "..", "sub/t.json",
                           "manifest.json"}) {
    writeText(dir.file("manifest.json"),
              manifestWith(R"("tokenizer_files": [")" + name + R"("])"));
    expectRefused(CQ4P_ERROR_FORMAT, "tokenizer_files[0]: expected the name of a file "
                                     "inside the bundle (not manifest.json), found \"" +
                                         name + "\"");
    writeText(dir.file("manifest.json"),
              manifestWith(R"("files_sha256": {")" + name + R"(": ")" +
                           std::string(64, '0') + R"("})"));
    expectRefused(CQ4P_ERROR_FORMAT, "files_sha256: expected the name of a file inside "
                                     "the bundle (not manifest.json), found \"" +
                                         name + "\"");
  }
  writeText(dir.file("manifest.json"),
            manifestWith(R"("tokenizer_files": ["t.json", "t.json"])"));
  expectRefused(CQ4P_ERROR_FORMAT, "tokenizer_files[1]: \"t.json\" listed twice");
  writeText(dir.file("manifest.json"),
            manifestWith(R"("tokenizer_files": ["t.json"], "files_sha256": {})"));
  expectRefused(CQ4P_ERROR_FORMAT,
                "tokenizer_files[0]: \"t.json\" has no sha256 in files_sha256");
}

TEST_F(BundleTest, VerifyHashesTheShippedFiles) {
  writeText(dir.file("tokenizer.json"), "{}");
  // sha256("{}")
  const std::string digest =
      "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
  writeText(dir.file("manifest.json"),
            manifestWith(R"("tokenizer_files": ["tokenizer.json"], "files_sha256": )"
                         R"({"tokenizer.json": ")" + digest + R"("})"));
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(open(bundle));
  Bundle::Integrity integrity;
  Status status = bundle->verifyIntegrity(&integrity);
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(integrity.shippedHashed, 1u);
  EXPECT_TRUE(integrity.shippedRecorded);

  writeText(dir.file("tokenizer.json"), "{ }");  // edited after conversion
  status = bundle->verifyIntegrity(&integrity);
  EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
  EXPECT_NE(status.message().find("tokenizer.json: sha256 " + digest +
                                  " in manifest.json files_sha256, but the file gives"),
            std::string::npos) << status.message();

  writeText(dir.file("tokenizer.json"), "{}");
  writeText(dir.file("chat_template.jinja"), "{{ x }}");  // added after conversion
  status = bundle->verify(&integrity);
  EXPECT_NE(status.message().find("chat_template.jinja: not in manifest.json files_sha256"),
            std::string::npos) << status.message();

  // A bundle from before files_sha256: verified, with what no digest covers.
  writeText(dir.file("manifest.json"),
            manifestWith(R"("tokenizer_files": ["tokenizer.json"])"));
  ASSERT_TRUE(open(bundle));
  status = bundle->verifyIntegrity(&integrity);
  ASSERT_TRUE(status) << status.message();
  EXPECT_FALSE(integrity.shippedRecorded);
  EXPECT_EQ(integrity.shippedUncovered,
            (std::vector<std::string>{"tokenizer.json", "chat_template.jinja"}));
}

TEST_F(HostileBundleTest, SymbolicLinksAreRefusedByName) {
  ASSERT_EQ(::symlink(outside.file("victim.weights").c_str(),
                      dir.file("link.weights").c_str()), 0);
  writeText(dir.file("manifest.json"), manifest(normEntry("link.weights")));
  expectRefused(CQ4P_ERROR_FORMAT, "tensor 'layers.0.norm': " + dir.file("link.weights") +
                                       ": a symbolic link");
  // A link shadowing a legacy name is refused, not skipped for the next one.
  ASSERT_EQ(::symlink("/etc/passwd", dir.file("layers.0.norm.cq4.weights").c_str()), 0);
  writeText(dir.file("manifest.json"), manifest(kNorm));
  expectRefused(CQ4P_ERROR_FORMAT, "layers.0.norm.cq4.weights: a symbolic link");
  ::unlink(dir.file("layers.0.norm.cq4.weights").c_str());

  writeText(outside.file("manifest.json"), manifest(kNorm));
  ::unlink(dir.file("manifest.json").c_str());
  ASSERT_EQ(::symlink(outside.file("manifest.json").c_str(),
                      dir.file("manifest.json").c_str()), 0);
  expectRefused(CQ4P_ERROR_FORMAT, "manifest.json: a symbolic link");
}

TEST_F(HostileBundleTest, FifosAndDevicesAreRefusedWithoutReading) {
  // Opened without O_NONBLOCK, each of these would block forever.
  ASSERT_EQ(::mkfifo(dir.file("fifo.weights").c_str(), 0600), 0);
  writeText(dir.file("manifest.json"), manifest(normEntry("fifo.weights")));
  expectRefused(CQ4P_ERROR_IO, "tensor 'layers.0.norm': " + dir.file("fifo.weights") +
                                   ": a FIFO, expected a regular file");
  ASSERT_EQ(::mkfifo(dir.file("manifest.json.fifo").c_str(), 0600), 0);
  ASSERT_EQ(::rename(dir.file("manifest.json.fifo").c_str(),
                     dir.file("manifest.json").c_str()), 0);
  expectRefused(CQ4P_ERROR_IO, "manifest.json: a FIFO, expected a regular file");

  std::unique_ptr<TensorFile> file;
  Status status = TensorFile::open("/dev/zero", file);
  EXPECT_EQ(status.code(), CQ4P_ERROR_IO);
  EXPECT_EQ(status.message(), "/dev/zero: a character device, expected a regular file");
}

TEST_F(HostileBundleTest, DuplicateMemberNamesAreRefused) {
  writeText(dir.file("manifest.json"),
            manifest(R"({"name": "layers.0.norm", "file": "layers.0.norm.weights",
                         "file": "../victim.weights", "shape": [3, 5], "dtype": "FP16"})"));
  expectRefused(CQ4P_ERROR_FORMAT, "manifest.json:2:26: invalid JSON: duplicate member "
                                   "name \"file\"");
  writeText(dir.file("manifest.json"),
            R"({"format": "cq4p-bundle", "version": 1, "version": 2, "tensors": []})");
  expectRefused(CQ4P_ERROR_FORMAT, "duplicate member name \"version\"");
}

TEST_F(HostileBundleTest, ManifestsThatAreNotUtf8AreRefused) {
  // A stray byte, an overlong '/', a UTF-16 surrogate, past U+10FFFF.
  for (std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    writeText(dir.file("manifest.json"),
              R"({"format": "cq4p-bundle", "version": 1, "tensors": [], "x": ")" + bad + "\"}");
    expectRefused(CQ4P_ERROR_FORMAT, "manifest.json: invalid JSON: not UTF-8 at byte 61");
  }
  writeText(dir.file("manifest.json"),
            R"({"format": "cq4p-bundle", "version": 1, "tensors": [], "x": "Ã©ð"})");
  std::unique_ptr<Bundle> bundle;
  Status status = open(bundle);
  EXPECT_TRUE(status) << status.message();
}

TEST_F(HostileBundleTest, OversizedManifestIsRefusedBeforeItIsRead) {
  writeText(dir.file("manifest.json"), manifest(kNorm));
  ASSERT_EQ(::truncate(dir.file("manifest.json").c_str(),
                       off_t(Bundle::kMaxManifestBytes + 1)), 0);
  expectRefused(CQ4P_ERROR_FORMAT, "manifest.json: size: expected at most 16777216 bytes, "
                                   "found 16777217");
}

TEST_F(BundleTest, PermutationRewrittenInPlaceChangesNoAddress) {
  // The documented contract: a file changed in place while open changes the
  // mapped values (MAP_PRIVATE shares unmodified pages with the file) but
  // never the permutation the kernels index with, which the view copied.
  writeText(dir.file("manifest.json"), manifest(kQProj));
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(open(bundle));
  const TensorFile &file = *bundle->find("layers.0.q_proj")->file;
  WeightView view;
  ASSERT_TRUE(view.bind(file));
  ByteSpan permutation = file.region(CQ4P_REGION_PERMUTATION);
  std::vector<uint32_t> before(128);
  std::memcpy(before.data(), permutation.data, 512);
  std::vector<uint8_t> hostile(512, 0xFF);
  int fd = ::open(dir.file("layers.0.q_proj.cq4p.weights").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, hostile.data(), hostile.size(),
                     off_t(permutation.data - file.region(CQ4P_REGION_DATA).data) +
                         off_t(file.info().data_offset)),
            ssize_t(hostile.size()));
  ::close(fd);
  EXPECT_EQ(permutation.data[0], 0xFF); // the mapping sees the new bytes
  EXPECT_TRUE(std::equal(before.begin(), before.end(), view.view().permutation));
}


TEST_F(BundleTest, VerifyChecksTheContentOpeningLeavesOut) {
  writeText(dir.file("manifest.json"), manifest(std::string(kQProj) + "," + kNorm));
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(open(bundle));
  Status status = bundle->verify();
  EXPECT_TRUE(status) << status.message();

  // A folded norm one ulp off: opening accepts the file, verify does not.
  const TensorFile &file = *bundle->find("layers.0.q_proj")->file;
  uint64_t offset = uint64_t(file.region(CQ4P_REGION_NORM_PANELS).data -
                             file.region(CQ4P_REGION_DATA).data) +
                    file.info().data_offset;
  float folded;
  std::memcpy(&folded, file.region(CQ4P_REGION_NORM_PANELS).data, 4);
  float bumped = std::nextafter(folded, 1e30f);
  bundle.reset();
  int fd = ::open(dir.file("layers.0.q_proj.cq4p.weights").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &bumped, 4, off_t(offset)), 4);
  ::close(fd);
  ASSERT_TRUE(open(bundle));
  status = bundle->verify();
  EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
  EXPECT_EQ(status.message().rfind("tensor 'layers.0.q_proj': ", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("norm_panels: expected fp32(norm) * cb_scale = "),
            std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("at super-block 0, group 0, channel 0 (row 0)"),
            std::string::npos)
      << status.message();
}

} // namespace
