//===- TokenizerFuzzer.cpp - libFuzzer target for the tokenizer -----------===//
//
// The input's first byte picks what the rest is:
//
//   even: text. Encoded by a byte-level BPE tokenizer (a Llama-3-style split,
//     added tokens) and a SentencePiece-style one (byte fallback): invalid
//     UTF-8 must be refused, valid text must decode back to itself (the
//     byte-level one is lossless; the other where the text has no U+2581);
//     the input's bytes read as ids must decode, streamed, to valid UTF-8.
//   odd: edits of a valid tokenizer.json (pairs of offset and byte, written
//     over it): opening must refuse with a message or succeed, and a
//     tokenizer that opens must encode and decode a fixed text.
//
// Built with AddressSanitizer and UBSan; any crash, report or broken
// property aborts.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace cq4p::runtime;
using Json = nlohmann::json;

namespace {

std::string gRoot;
std::string gByteLevelJson, gPieceJson;
std::unique_ptr<Tokenizer> gByteLevel, gPiece;

std::string byteChar(int b) {
  int n = 0;
  for (int c = 0; c < 256; ++c) {
    bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
    int cp = printable ? c : 256 + n++;
    if (c == b) {
      std::string out;
      if (cp < 0x80) {
        out += char(cp);
      } else {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
      }
      return out;
    }
  }
  return "";
}

Json added(int id, const char *content) {
  return {{"id", id}, {"content", content}, {"special", true}, {"normalized", false},
          {"lstrip", false}, {"rstrip", false}, {"single_word", false}};
}

std::string byteLevelJson() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b)
    vocab[byteChar(b)] = 3 + b;
  Json merges = Json::array();
  int next = 259;
  for (auto [a, b] : {std::pair<std::string, std::string>{"t", "h"}, {"th", "e"},
                      {byteChar(' '), "the"}, {"i", "n"}, {byteChar(' '), byteChar(' ')},
                      {byteChar(0xC3), byteChar(0xA9)}}) {
    if (!vocab.contains(a + b))
      vocab[a + b] = next++;
    merges.push_back({a, b});
  }
  Json root = {
      {"added_tokens", {added(0, "<|begin|>"), added(1, "<|end|>"), added(2, "<|end|>x")}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                       "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                       "\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges},
                 {"ignore_merges", true}}}};
  return root.dump();
}

std::string pieceJson() {
  Json vocab = {{"<unk>", 0}, {"<bos>", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 2 + b;
  }
  int next = 258;
  for (const char *piece : {"\xE2\x96\x81", "a", "b", "c", "\xC3\xA9", "\n"})
    vocab[piece] = next++;
  Json merges = Json::array();
  for (auto [a, b] : {std::pair<std::string, std::string>{"a", "b"}, {"ab", "c"},
                      {"\xE2\x96\x81", "abc"}, {"\xE2\x96\x81", "\xE2\x96\x81"}}) {
    if (!vocab.contains(a + b))
      vocab[a + b] = next++;
    merges.push_back({a, b});
  }
  Json root = {
      {"added_tokens", {added(1, "<bos>"), added(next, "<turn>")}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                      {"content", "\xE2\x96\x81"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", {{"<bos>", {{"ids", {1}}}}}}}},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}},
                                  {"content", " "}},
                                 {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges},
                 {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}}}};
  return root.dump();
}

bool writeFile(const std::string &path, const std::string &text) {
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return false;
  bool ok = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  return std::fclose(file) == 0 && ok;
}

void removeRoot() {
  ::unlink((gRoot + "/tokenizer.json").c_str());
  ::rmdir(gRoot.c_str());
}

std::unique_ptr<Tokenizer> openText(const std::string &json, Status &status) {
  std::unique_ptr<Tokenizer> out;
  if (!writeFile(gRoot + "/tokenizer.json", json))
    std::abort();
  status = Tokenizer::openDirectory(gRoot, out);
  return out;
}

void check(bool property, const char *what) {
  if (!property) {
    std::fprintf(stderr, "tokenizer fuzzer: broken property: %s\n", what);
    std::abort();
  }
}

void exerciseText(const Tokenizer &tokenizer, std::string_view text, bool lossless) {
  std::vector<int64_t> ids;
  Status status = tokenizer.encode(text, false, ids);
  bool valid = findInvalidUtf8(text) == std::string_view::npos;
  check(status.isOk() == valid, "encode accepts exactly valid UTF-8");
  if (!status.isOk()) {
    check(ids.empty(), "a refused encode appends nothing");
    return;
  }
  for (int64_t id : ids)
    check(id >= 0 && id < tokenizer.vocabSize(), "ids inside the vocabulary");
  std::string back;
  check(tokenizer.decode(ids.data(), ids.size(), back).isOk(), "the ids decode");
  if (lossless)
    check(back == text, "decode(encode(text)) == text");
}

void exerciseIds(const Tokenizer &tokenizer, const uint8_t *data, size_t size) {
  TextDecoder decoder(tokenizer);
  std::string text;
  for (size_t i = 0; i + 1 < size; i += 2) {
    int64_t id = int64_t((data[i] << 8) | data[i + 1]) % (tokenizer.vocabSize() + 4);
    std::string piece;
    if (decoder.push(id, piece).isOk())
      check(findInvalidUtf8(piece) == std::string_view::npos, "streamed text is UTF-8");
    text += piece;
  }
  decoder.finish(text);
  check(findInvalidUtf8(text) == std::string_view::npos, "decoded text is UTF-8");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  struct stat shm;
  std::string pattern = std::string(::stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode)
                                        ? "/dev/shm"
                                        : "/tmp") +
                        "/cq4p-tokenizer-fuzz-XXXXXX";
  const char *root = ::mkdtemp(pattern.data());
  if (!root)
    std::abort();
  gRoot = root;
  std::atexit(removeRoot);
  gByteLevelJson = byteLevelJson();
  gPieceJson = pieceJson();
  Status status;
  gByteLevel = openText(gByteLevelJson, status);
  if (!status) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    std::abort();
  }
  gPiece = openText(gPieceJson, status);
  if (!status) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string_view rest(reinterpret_cast<const char *>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    exerciseText(*gByteLevel, rest, /*lossless=*/false); // NFC may compose
    exerciseText(*gPiece, rest, rest.find("\xE2\x96\x81") == std::string_view::npos);
    exerciseIds(*gByteLevel, data + 1, size - 1);
    exerciseIds(*gPiece, data + 1, size - 1);
    return 0;
  }
  // Edits of a valid file: (offset high, offset low, byte) triples.
  std::string json = (data[0] & 2) ? gPieceJson : gByteLevelJson;
  for (size_t i = 1; i + 2 < size; i += 3) {
    size_t offset = (size_t(data[i]) << 8 | data[i + 1]) * 7 % json.size();
    json[offset] = char(data[i + 2]);
  }
  Status status;
  std::unique_ptr<Tokenizer> tokenizer = openText(json, status);
  if (!status) {
    check(!status.message().empty(), "a refusal has a message");
    return 0;
  }
  exerciseText(*tokenizer, "the theme <|end|>x abc \xC3\xA9 ab", false);
  return 0;
}
