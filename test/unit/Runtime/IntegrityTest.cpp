//===- IntegrityTest.cpp - sha256, model_digest and Bundle::verifyIntegrity ===//
//
// The runtime's SHA-256 against FIPS 180-4's vectors and Python's hashlib
// (values computed with hashlib and written here), its canonical JSON
// against Python's json.dumps output for the same document, and a bundle
// whose files or config change after conversion caught by verify().
//
//===----------------------------------------------------------------------===//

#include "Refusals.h"
#include "TempDir.h"
#include "TestFiles.h"

#include "Json.h"
#include "Sha256.h"

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"

#include "fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <vector>

using namespace cq4p::runtime;
using namespace cq4p::test;

namespace {

std::string sha256(const std::string &text) {
  return Sha256::hex(text.data(), text.size());
}

TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(sha256(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a' fed in pieces that straddle the 64-byte blocks.
  Sha256 hash;
  std::string piece(997, 'a');
  size_t fed = 0;
  while (fed < 1000000) {
    size_t take = std::min(piece.size(), size_t(1000000) - fed);
    hash.update(piece.data(), take);
    fed += take;
  }
  EXPECT_EQ(hash.hexDigest(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, MatchesHashlibAtEveryLengthAroundTheBlocks) {
  // hashlib: sha256 of the hex digests of bytes (i * 7 + 3) % 256, for
  // every length 0..299, concatenated.
  std::string digests;
  for (size_t length = 0; length < 300; ++length) {
    std::string bytes(length, '\0');
    for (size_t i = 0; i < length; ++i)
      bytes[i] = char((i * 7 + 3) % 256);
    digests += sha256(bytes);
  }
  EXPECT_EQ(sha256(digests),
            "e58750e2a145fc5559c66f9b6cfb156f52894470a74c4daec866d7b6ceea29ea");
}

TEST(Sha256, TheShaExtensionsGiveThePortableDigest) {
  // Lengths from empty to many blocks, fed whole and in uneven pieces; on a
  // CPU without the extensions both are the portable rounds.
  std::vector<uint8_t> bytes(1 << 20);
  uint64_t state = 0x243F6A8885A308D3ull;
  for (uint8_t &byte : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    byte = uint8_t(state >> 56);
  }
  for (size_t length : {size_t(0), size_t(55), size_t(64), size_t(119), size_t(4096 + 17),
                        bytes.size()}) {
    Sha256 portable(Sha256::Rounds::Portable), fastest;
    portable.update(bytes.data(), length);
    for (size_t fed = 0, piece = 1; fed < length; fed += piece, piece = piece * 3 + 1)
      fastest.update(bytes.data() + fed, std::min(piece, length - fed));
    EXPECT_EQ(fastest.hexDigest(), portable.hexDigest()) << "length " << length;
  }
}

TEST(PythonJson, WritesWhatJsonDumpsWrites) {
  // The expected text is Python's json.dumps(json.loads(doc),
  // sort_keys=True, separators=(",", ":"), ensure_ascii=True).
  std::string doc =
      R"({"z": 1, "a": [1.0, 1e-05, 0.0001, 1e16, 1e15, 123456789.125, -0.0, )"
      R"(0.1, 5e-324, 1.7976931348623157e308, 2.5E+3], )"
      R"("big": 123456789012345678901234567890, "neg": -0, )"
      R"("u64": 18446744073709551615, "i64": -9223372036854775808, )"
      R"("s": "caf\u00e9 \ud83d\ude00 \u007f \u0001 \"q\" \\ \/ \n\t\b\f\r", )"
      R"("t": true, "f": false, "n": null, "\u00e9": {"b": 2, "a": 1}, "B": 3})";
  json::Value value;
  Status status = json::parse("doc", doc, value);
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(
      json::pythonJson(value),
      R"({"B":3,"a":[1.0,1e-05,0.0001,1e+16,1000000000000000.0,123456789.125,)"
      R"(-0.0,0.1,5e-324,1.7976931348623157e+308,2500.0],)"
      R"("big":123456789012345678901234567890,"f":false,)"
      R"("i64":-9223372036854775808,"n":null,"neg":0,)"
      R"("s":"caf\u00e9 \ud83d\ude00 \u007f \u0001 \"q\" \\ / \n\t\b\f\r",)"
      R"("t":true,"u64":18446744073709551615,"z":1,"\u00e9":{"a":1,"b":2}})");
  const json::Value *u64 = value.get("u64"), *i64 = value.get("i64");
  ASSERT_TRUE(u64 && i64);
  EXPECT_FALSE(u64->isInteger); // past int64: kept as written only
  EXPECT_TRUE(i64->isInteger);
  EXPECT_EQ(i64->integer, INT64_MIN);
}

// What the reader refuses beyond RFC 8259's syntax, each at its place: a
// number past the double range (Python would read it as inf, which no JSON
// writer writes back), a byte order mark, nesting past the bound (64
// levels are read), and the same member name twice.
TEST(PythonJson, RefusesWhatABundleMustNotHold) {
  auto refusal = [](const std::string &doc) {
    json::Value value;
    Status status = json::parse("doc", doc, value);
    EXPECT_FALSE(status) << doc;
    EXPECT_EQ(status.code(), CQ4P_ERROR_FORMAT);
    return status.message();
  };
  EXPECT_EQ(refusal("{\"a\": [1,\n 1E400]}"),
            "doc:2:7: invalid JSON: number overflow parsing '1E400'");
  EXPECT_EQ(refusal("\xEF\xBB\xBF{}"),
            "doc:1:1: invalid JSON: a UTF-8 byte order mark");
  EXPECT_EQ(refusal(std::string(65, '[') + "[]" + std::string(65, ']')),
            "doc:1:66: invalid JSON: nesting deeper than 64");
  EXPECT_EQ(refusal("{\"a\": 1,\n \"a\\u0062\": 2, \"ab\": 3}"),
            "doc:2:16: invalid JSON: duplicate member name \"ab\"");
  EXPECT_EQ(refusal("[1] x"),
            "doc:1:5: invalid JSON: syntax error while parsing value - invalid "
            "literal; last read: '1] x'; expected end of input");
  json::Value deepest;
  EXPECT_TRUE(json::parse("doc", std::string(64, '[') + "1" + std::string(64, ']'),
                          deepest));
}

std::string fileSha256(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  return sha256(bytes);
}

/// A bundle of two dense tensors whose manifest records each file's
/// sha256 and the model_digest of its config and tensor list.
class IntegrityTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(writeBytes(dir.file("a.weights"), fp16File({3, 5})));
    ASSERT_TRUE(writeBytes(dir.file("b.weights"), fp16File({8})));
    shaA = fileSha256(dir.file("a.weights"));
    shaB = fileSha256(dir.file("b.weights"));
  }

  std::string entries() const {
    return R"([{"name": "a", "file": "a.weights", "shape": [3, 5], "dtype": "FP16", )"
           R"("sha256": ")" + shaA + R"("}, {"name": "b", "file": "b.weights", )"
           R"("shape": [8], "dtype": "FP16", "sha256": ")" + shaB + R"("}])";
  }
  /// The digest as python/cq4p/io/bundle.py defines it, spelled out by hand.
  std::string digest(const std::string &canonicalConfig) const {
    return sha256(R"({"config":)" + canonicalConfig +
                  R"(,"tensors":[{"dtype":"FP16","file":"a.weights","name":"a",)"
                  R"("sha256":")" + shaA + R"(","shape":[3,5]},)"
                  R"({"dtype":"FP16","file":"b.weights","name":"b","sha256":")" +
                  shaB + R"(","shape":[8]}]})");
  }
  Status write(const std::string &config, const std::string &modelDigest,
               std::unique_ptr<Bundle> &out) {
    std::ofstream(dir.file("manifest.json"))
        << R"({"format": "cq4p-bundle", "version": 1, "model_digest": ")"
        << modelDigest << R"(", "config": )" << config
        << R"(, "tensors": )" << entries() << "}";
    return Bundle::open(dir.path(), out);
  }

  TempDir dir;
  std::string shaA, shaB;
  const std::string config =
      R"({"num_hidden_layers": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-05})";
  const std::string canonical =
      R"({"num_hidden_layers":2,"rms_norm_eps":1e-05,"rope_theta":10000.0})";
};

TEST_F(IntegrityTest, AnIntactBundlePasses) {
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(write(config, digest(canonical), bundle));
  EXPECT_EQ(bundle->computeModelDigest(), digest(canonical));
  Bundle::Integrity integrity;
  Status status = bundle->verify(&integrity);
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(integrity.filesHashed, 2u);
  EXPECT_EQ(integrity.filesUnrecorded, 0u);
  EXPECT_TRUE(integrity.digestRecorded);
  EXPECT_EQ(integrity.digest, digest(canonical));
}

TEST_F(IntegrityTest, AFileSwappedForOneOfTheSameShapeIsCaught) {
  // Before: the swap passed open, verify and inspect --deep alike.
  std::vector<uint8_t> other = fp16File({3, 5});
  std::swap(other[other.size() - 1], other[other.size() - 3]);
  ASSERT_TRUE(writeBytes(dir.file("a.weights"), other));
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(write(config, digest(canonical), bundle)); // opening is cheap
  std::string found = fileSha256(dir.file("a.weights"));
  ASSERT_NE(found, shaA);
  std::string named = "tensor 'a': sha256 " + shaA + " in manifest.json, but " +
                      found + " for " + dir.file("a.weights");
  EXPECT_REFUSED(bundle->verify(), CQ4P_ERROR_FORMAT, named.c_str(),
                 "the file is not the one converted");
}

TEST_F(IntegrityTest, AConfigEditedAfterConversionIsCaught) {
  // Before: edits of layers, rope_theta or rms_norm_eps went unnoticed.
  for (const char *edited :
       {R"({"num_hidden_layers": 3, "rope_theta": 10000.0, "rms_norm_eps": 1e-05})",
        R"({"num_hidden_layers": 2, "rope_theta": 500000.0, "rms_norm_eps": 1e-05})",
        R"({"num_hidden_layers": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-06})",
        R"({"num_hidden_layers": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "vocab_size": 9})"}) {
    SCOPED_TRACE(edited);
    std::unique_ptr<Bundle> bundle;
    ASSERT_TRUE(write(edited, digest(canonical), bundle));
    std::string recorded = "model_digest " + digest(canonical) + " recorded";
    EXPECT_REFUSED(bundle->verify(), CQ4P_ERROR_FORMAT, recorded.c_str(),
                   "the manifest was edited after conversion");
  }
  // The same value written another way is the same config.
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(write(R"({"rms_norm_eps": 1.0e-5, "rope_theta": 1e4, "num_hidden_layers": 2})",
                    digest(canonical), bundle));
  Status status = bundle->verify();
  EXPECT_TRUE(status) << status.message();
}

TEST_F(IntegrityTest, AMalformedSha256IsRefusedAtOpen) {
  std::ofstream(dir.file("manifest.json"))
      << R"({"format": "cq4p-bundle", "version": 1, "tensors": [{"name": "a", )"
         R"("file": "a.weights", "shape": [3, 5], "dtype": "FP16", "sha256": "ABC"}]})";
  std::unique_ptr<Bundle> bundle;
  EXPECT_REFUSED(Bundle::open(dir.path(), bundle), CQ4P_ERROR_FORMAT,
                 "tensor 'a': expected \"sha256\" to be 64 lowercase hex digits");
}

TEST_F(IntegrityTest, EntriesWithoutASha256AreCountedNotChecked) {
  std::ofstream(dir.file("manifest.json"))
      << R"({"format": "cq4p-bundle", "version": 1, "tensors": [{"name": "a", )"
         R"("file": "a.weights", "shape": [3, 5], "dtype": "FP16"}]})";
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(Bundle::open(dir.path(), bundle));
  Bundle::Integrity integrity;
  ASSERT_TRUE(bundle->verify(&integrity));
  EXPECT_EQ(integrity.filesHashed, 0u);
  EXPECT_EQ(integrity.filesUnrecorded, 1u);
  EXPECT_FALSE(integrity.digestRecorded);
}

TEST_F(IntegrityTest, ALibraryIsComparedWithTheRecomputedDigest) {
  // The fake model library records "toy-digest-1". A manifest rewritten to
  // claim that digest opens with it (Bundle::checkLibrary compares the
  // labels), but the digest its content gives is another.
  std::unique_ptr<KernelLibrary> library;
  ASSERT_TRUE(KernelLibrary::open(CQ4P_FAKE_MODEL_PATH, library));
  ASSERT_EQ(library->bundleDigest(), "toy-digest-1");
  std::unique_ptr<Bundle> bundle;
  ASSERT_TRUE(write(config, "toy-digest-1", bundle));
  EXPECT_TRUE(bundle->checkLibrary(*library));
  std::string content = digest(canonical);
  EXPECT_REFUSED(bundle->checkLibraryAgainst(*library, bundle->computeModelDigest()),
                 CQ4P_ERROR_UNSUPPORTED,
                 "library built for bundle digest toy-digest-1, this bundle's "
                 "content gives ",
                 content.c_str());
  EXPECT_REFUSED(bundle->verify(), CQ4P_ERROR_FORMAT,
                 "model_digest toy-digest-1 recorded");
}

} // namespace
