//===- TokenizerFuzzer.cpp - libFuzzer target for the tokenizer -----------===//
//
// The input's first byte picks what the rest is (its value modulo 4):
//
//   0: text. Encoded by a byte-level BPE tokenizer (a Llama-3-style split,
//     added tokens) and a SentencePiece-style one (byte fallback): invalid
//     UTF-8 must be refused, valid text must decode back to itself (the
//     byte-level one is lossless; the other where the text has no U+2581);
//     the input's bytes read as ids must decode, streamed, to valid UTF-8.
//   1: edits of a valid tokenizer.json (pairs of offset and byte, written
//     over it): opening must refuse with a message or succeed, and a
//     tokenizer that opens must encode and decode a fixed text.
//   2: a recipe for a text, checked as in 0: pieces the bytes pick from
//     added tokens and their look-alikes (cut short, one byte off, nested),
//     runs of one character (rarely up to 256 KiB), characters of every width,
//     U+2581, white space, digits, and raw bytes (invalid UTF-8).
//   3: structured edits of either file, each with a recipe text: a split
//     pattern (\C, empty, backtracking, bytes of the input), a member
//     nested up to 300,000 levels, ids that collide or overflow, added
//     tokens (long, look-alikes), normalizers that grow the text, bytes
//     after the document, a member named twice, generation_config.json's
//     eos_token_id. Opening must refuse in one line of valid UTF-8 or
//     succeed; a tokenizer that opens must encode (or refuse with a
//     message) and decode what it encoded; a split pattern alone leaves
//     the SentencePiece-style one lossless.
//
// Texts are passed in buffers of their exact size, so that a read past
// one is a report. Built with AddressSanitizer and UBSan; any crash,
// report, hang (-timeout) or broken property aborts.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
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
  ::unlink((gRoot + "/generation_config.json").c_str());
  ::rmdir(gRoot.c_str());
}

/// Opens tokenizer.json `json`, with generation_config.json `generation`
/// when it is not empty.
std::unique_ptr<Tokenizer> openText(const std::string &json, Status &status,
                                    const std::string &generation = "") {
  std::unique_ptr<Tokenizer> out;
  if (!writeFile(gRoot + "/tokenizer.json", json))
    std::abort();
  ::unlink((gRoot + "/generation_config.json").c_str());
  if (!generation.empty() && !writeFile(gRoot + "/generation_config.json", generation))
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

/// `status`'s message: one line of valid UTF-8.
void checkMessage(const Status &status) {
  check(!status.message().empty(), "a refusal has a message");
  check(findInvalidUtf8(status.message()) == std::string_view::npos,
        "a refusal is valid UTF-8");
  check(status.message().find('\n') == std::string::npos, "a refusal is one line");
}

/// Encodes `text` from a buffer of its exact size; with `mayRefuse`
/// (a tokenizer from an edited file), valid text may be refused too, with
/// a message (a budget, a growing normalizer, no unk).
void exerciseText(const Tokenizer &tokenizer, std::string_view text, bool lossless,
                  bool mayRefuse = false) {
  std::unique_ptr<char[]> exact(new char[text.size()]);
  std::memcpy(exact.get(), text.data(), text.size());
  text = std::string_view(exact.get(), text.size());
  std::vector<int64_t> ids;
  Status status = tokenizer.encode(text, false, ids);
  bool valid = findInvalidUtf8(text) == std::string_view::npos;
  if (!valid || !mayRefuse)
    check(status.isOk() == valid, "encode accepts exactly valid UTF-8");
  if (!status.isOk()) {
    checkMessage(status);
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

/// Reads the input a byte at a time (0 past its end).
class Input {
public:
  Input(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  size_t below(size_t n) { return n == 0 ? 0 : byte() % n; }
  size_t number() { return size_t(byte()) << 8 | byte(); }

private:
  const uint8_t *data_;
  size_t size_, at_ = 0;
};

/// Added tokens of both files and look-alikes: cut short, one byte off,
/// doubled, nested.
const char *const kTokenish[] = {
    "<|begin|>", "<|end|>", "<|end|>x", "<bos>", "<turn>", "<|end|", "<|en", "|end|>",
    "<|end|>>", "<<|end|>", "<|End|>", "<|end|><|end|>", "<|<|end|>|>", "<tur", "<turn",
    "<bos", "bos>", "<|begin|><|end|>x", "<|end|>xx",
};
/// Characters of every width, U+2581 and what NFC or \s treat apart.
const char *const kCharacters[] = {
    "a", "b", "c", "t", "h", "e", " ", "\n", "\r\n", "\t", "1", "'", "-", "\xC3\xA9",
    "e\xCC\x81", "\xE8\xAA\x9E", "\xF0\x9F\x98\x80", "\xE2\x96\x81", "\xC2\x85",
    "\xE1\xA0\x8E", "\xEF\xBB\xBF", "\xE3\x80\x80", "ab", "abc",
};

/// A text of at most `pieces` pieces and about `maxText` bytes from the
/// input's bytes.
std::string recipeText(Input &input, size_t pieces, size_t maxText) {
  std::string text;
  for (; pieces > 0 && !input.done() && text.size() < maxText; --pieces) {
    switch (input.below(8)) {
    case 0:
      text += kTokenish[input.below(std::size(kTokenish))];
      break;
    case 1:
    case 6:
    case 7: { // a run of one character: up to 64, 4 K or, rarely, 256 K
      std::string unit = kCharacters[input.below(std::size(kCharacters))];
      size_t count = input.byte() % 64 + 1;
      if (input.below(16) == 0)
        count = input.number() * 4 + 1;
      else if (input.below(2) == 0)
        count *= 64;
      for (size_t i = 0; i < count && text.size() < maxText; ++i)
        text += unit;
      break;
    }
    case 2:
      text += char(input.byte());
      break;
    case 3:
      text += kCharacters[input.below(std::size(kCharacters))];
      break;
    case 4:
      text += std::to_string(input.number());
      break;
    case 5:
      text += "the ";
      break;
    }
  }
  return text;
}

/// Split patterns: hostile and ordinary.
const char *const kPatterns[] = {
    "\\C", "", "a|\\C", "(?<=\\C)", "(?:(?:a|aa){0,20}b|.)", "(a*)*b", ".", "\\X", "\\s+",
    "\\p{L}+|\\p{N}|[^\\p{L}\\p{N}]", "(?=a)", "a??", "\\b", "(*LIMIT_MATCH=1)a", "[",
    "(?i:'s|'t)|\\p{L}+|\\s+(?!\\S)|\\s+", "\\S+", "[\\S]", "\\K.", "(*UTF)\\w+",
};
/// Numbers an id may be.
const char *const kNumbers[] = {
    "0", "1", "2", "3", "258", "259", "262", "263", "-1", "1.5", "1e30", "2147483647",
    "2147483648", "16777216", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "\"1\"", "null", "[1]",
};

/// Replaces the first `"@@here@@"` of `text` with `value`.
std::string placed(std::string text, const std::string &value) {
  size_t at = text.find("\"@@here@@\"");
  if (at != std::string::npos)
    text.replace(at, 10, value);
  return text;
}

/// Edits `json` (a file of the fuzzer's) as the input says; `generation`
/// receives generation_config.json's text; returns the file's text.
/// `lossless`: only the split pattern changed.
std::string structuredEdit(Input &input, Json json, std::string &generation, bool &lossless) {
  lossless = false;
  generation.clear();
  std::string text;
  switch (input.below(9)) {
  case 0: { // a split pattern
    std::string pattern;
    if (input.below(2) == 0) {
      pattern = kPatterns[input.below(std::size(kPatterns))];
    } else {
      for (size_t n = input.below(16); n > 0; --n)
        pattern += char(input.byte());
      if (findInvalidUtf8(pattern) != std::string_view::npos)
        pattern = "\\x{" + std::to_string(pattern.size()) + "}";
    }
    const char *behaviors[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                               "Contiguous"};
    size_t behavior = input.below(std::size(behaviors));
    Json split = {{"type", "Split"}, {"pattern", {{"Regex", pattern}}},
                  {"behavior", behaviors[behavior]}, {"invert", input.below(2) == 1}};
    if (json.contains("pre_tokenizer") && json["pre_tokenizer"].is_object() &&
        json["pre_tokenizer"]["type"] == "Sequence") {
      json["pre_tokenizer"]["pretokenizers"][0] = split;
    } else {
      json["pre_tokenizer"] = split;
      lossless = behavior != 1; // Removed drops what it matches
    }
    return json.dump();
  }
  case 1: { // a member nested deep
    const char *members[] = {"/truncation", "/padding", "/model/dropout", "/model/merges/0",
                             "/added_tokens/0/id", "/decoder", "/normalizer", "/post_processor"};
    json[Json::json_pointer(members[input.below(std::size(members))])] = "@@here@@";
    size_t depth = input.number() * 5;
    return placed(json.dump(), std::string(depth, '[') + std::string(depth, ']'));
  }
  case 2: { // an id
    const char *members[] = {"/added_tokens/0/id", "/added_tokens/1/id", "/model/vocab/a",
                             "/model/vocab/<unk>", "/model/vocab/th"};
    json[Json::json_pointer(members[input.below(std::size(members))])] = "@@here@@";
    return placed(json.dump(), kNumbers[input.below(std::size(kNumbers))]);
  }
  case 3: { // an added token
    std::string content;
    for (size_t n = input.below(4) + 1; n > 0; --n)
      content += input.below(2) ? kTokenish[input.below(std::size(kTokenish))]
                                : kCharacters[input.below(std::size(kCharacters))];
    if (input.below(4) == 0)
      content = std::string(input.number() * 4, 'a') + "b";
    json["added_tokens"].push_back(added(0, content.c_str()));
    json["added_tokens"].back()["id"] = "@@here@@";
    return placed(json.dump(), kNumbers[input.below(std::size(kNumbers))]);
  }
  case 4: { // a normalizer that grows or changes the text
    Json steps = Json::array();
    for (size_t n = input.below(3) + 1; n > 0; --n) {
      switch (input.below(3)) {
      case 0:
        steps.push_back({{"type", "Replace"},
                         {"pattern", {{"String", kCharacters[input.below(std::size(kCharacters))]}}},
                         {"content", std::string(input.number() % 300, 'x')}});
        break;
      case 1:
        steps.push_back({{"type", "Prepend"}, {"prepend", std::string(input.number(), 'p')}});
        break;
      default:
        steps.push_back({{"type", "NFC"}});
      }
    }
    json["normalizer"] = {{"type", "Sequence"}, {"normalizers", steps}};
    return json.dump();
  }
  case 5: { // bytes after the document
    text = json.dump();
    text += input.below(2) ? std::string(1, '\0') : std::string(" ");
    for (size_t n = input.below(8); n > 0; --n)
      text += char(input.byte());
    return text;
  }
  case 6: { // a member named twice
    text = json.dump();
    size_t at = text.find("\"vocab\":{");
    if (at != std::string::npos)
      text.insert(at + 9, "\"a\":" + std::to_string(input.byte()) + ",");
    return text;
  }
  case 7: { // generation_config.json
    Json config = {{"eos_token_id", "@@here@@"}};
    std::string value = kNumbers[input.below(std::size(kNumbers))];
    if (input.below(2))
      value = "[1, " + value + "]";
    if (input.below(8) == 0) {
      size_t depth = input.number() * 5;
      value = std::string(depth, '[') + std::string(depth, ']');
    }
    generation = placed(config.dump(), value);
    return json.dump();
  }
  default: { // steps past the limit
    Json steps = Json::array();
    for (size_t n = input.below(40); n > 0; --n)
      steps.push_back({{"type", "Replace"}, {"pattern", {{"String", "q"}}}, {"content", "r"}});
    json["normalizer"] = {{"type", "Sequence"}, {"normalizers", steps}};
    return json.dump();
  }
  }
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
  switch (data[0] % 4) {
  case 0:
    exerciseText(*gByteLevel, rest, /*lossless=*/false); // NFC may compose
    exerciseText(*gPiece, rest, rest.find("\xE2\x96\x81") == std::string_view::npos);
    exerciseIds(*gByteLevel, data + 1, size - 1);
    exerciseIds(*gPiece, data + 1, size - 1);
    return 0;
  case 1: {
    // Edits of a valid file: (offset high, offset low, byte) triples.
    std::string json = (data[0] & 4) ? gPieceJson : gByteLevelJson;
    for (size_t i = 1; i + 2 < size; i += 3) {
      size_t offset = (size_t(data[i]) << 8 | data[i + 1]) * 7 % json.size();
      json[offset] = char(data[i + 2]);
    }
    Status status;
    std::unique_ptr<Tokenizer> tokenizer = openText(json, status);
    if (!status) {
      checkMessage(status);
      return 0;
    }
    exerciseText(*tokenizer, "the theme <|end|>x abc \xC3\xA9 ab", false, true);
    return 0;
  }
  case 2: {
    Input input(data + 1, size - 1);
    // Up to 256 KiB: runs longer than CQ4P_TOKENIZER_MAX_WORD_BYTES.
    std::string text = recipeText(input, size, size_t(1) << 18);
    exerciseText(*gByteLevel, text, false);
    exerciseText(*gPiece, text, text.find("\xE2\x96\x81") == std::string::npos);
    return 0;
  }
  default: {
    // Edits one after another, each of a valid file, with a text each.
    Input input(data + 1, size - 1);
    for (int edits = 0; edits < 8 && !input.done(); ++edits) {
      bool piece = input.below(2) == 0;
      std::string generation;
      bool lossless;
      std::string json = structuredEdit(
          input, Json::parse(piece ? gPieceJson : gByteLevelJson), generation, lossless);
      std::string text = recipeText(input, input.below(8) + 1, size_t(1) << 14);
      Status status;
      std::unique_ptr<Tokenizer> tokenizer = openText(json, status, generation);
      if (!status) {
        checkMessage(status);
        continue;
      }
      exerciseText(*tokenizer, text,
                   piece && lossless && text.find("\xE2\x96\x81") == std::string::npos,
                   /*mayRefuse=*/true);
    }
    return 0;
  }
  }
}
