//===- TokenizerInternal.h - the tokenizer files' shared parts  -*- C++ -*-===//
//
// Tokenizer::Impl and what the tokenizer's files share. Each file has one
// job: Tokenizer.cpp the public class (open, encode, decode);
// TokenizerJson.cpp reading and validating tokenizer.json and its pipeline
// steps; TokenizerUtf8.cpp UTF-8 and GPT-2's byte-to-character map;
// TokenizerAddedTokens.cpp the added (special) tokens; TokenizerBpe.cpp
// the model's vocabulary and merges and the BPE merge of a word, byte-level
// and SentencePiece; TokenizerPatterns.cpp normalization and the
// pre-tokenizer's split patterns (PCRE2); TokenizerDecode.cpp the decoder
// and streamed decoding; TokenizerChat.cpp the config files and the chat
// formats.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_TOKENIZERINTERNAL_H
#define CQ4P_RUNTIME_SRC_TOKENIZERINTERNAL_H

#include "cq4p/runtime/Tokenizer.h"

#include "cq4p/cq4p.h"

#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace cq4p::runtime::tokenizer_internal {

using Json = nlohmann::json;

constexpr size_t kMaxFileBytes = size_t(1) << 30;
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCacheEntries = size_t(1) << 16;
/// The normalized sections of one encode take at most this many times the
/// text's bytes, plus the slack (Gemma's ' ' -> U+2581 triples a space; a
/// file's Replace or Prepend could grow a text without end).
constexpr uint64_t kNormalizedGrowth = 4;
constexpr uint64_t kNormalizedSlack = uint64_t(1) << 16;
constexpr uint32_t kMatchHeapKiB = 64 << 10;
/// Added tokens are found in blocks of this many bytes (or the longest
/// token's): what they hold is a start and an id each.
constexpr size_t kAddedTokenBlockBytes = size_t(1) << 16;

struct ByteMap {
  uint32_t charOf[256];
  std::unordered_map<uint32_t, uint8_t> byteOf;
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                       (b >= 174 && b <= 255);
      charOf[b] = printable ? b : next++;
      byteOf[charOf[b]] = uint8_t(b);
    }
  }
};

// TokenizerJson.cpp: messages, members and files.
std::string_view headOf(std::string_view text, size_t limit);
std::string showText(std::string_view text);
Status unsupported(const std::string &file, const std::string &path,
                   const std::string &found, const std::string &supported);
Status malformed(const std::string &file, const std::string &path,
                 const std::string &expected, const std::string &found);
const char *typeName(const Json &value);
void appendJson(const Json &value, std::string &out, size_t limit);
std::string showJson(const Json &value);
const Json *member(const Json &object, const char *key);
bool isAbsent(const Json *value);
Status readFile(const std::string &path, std::string &out, bool noFollow);
std::string escapeInvalidUtf8(std::string_view text);
Status parseJsonFile(const std::string &path, Json &out, bool noFollow);
Status getString(const std::string &file, const Json &object, const char *key,
                 const std::string &path, std::string &out, bool required);
Status getBool(const std::string &file, const Json &object, const char *key,
               const std::string &path, bool &out, bool fallback);
Status getPattern(const std::string &file, const Json &object,
                  const std::string &path, std::string &literal,
                  std::string &regex);
Status tooManySteps(const std::string &file, const std::string &path, const char *kind);
Status onlyKnownMembers(const std::string &file, const Json &object,
                        const std::string &path,
                        std::initializer_list<const char *> known);

// TokenizerUtf8.cpp.
uint32_t decodeAt(std::string_view text, size_t i, size_t &length);
void appendUtf8(uint32_t cp, std::string &out);
void inspectSequence(std::string_view bytes, size_t i, int &expected,
                     int &matched);
const ByteMap &byteMap();

// TokenizerPatterns.cpp.
bool rewriteWhiteSpace(const std::string &pattern, std::string &out);

//===----------------------------------------------------------------------===//
// Merges: (left id, right id) -> (rank, merged id)
//===----------------------------------------------------------------------===//

class MergeTable {
public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2)
      capacity <<= 1;
    entries_.assign(capacity, Entry());
    mask_ = capacity - 1;
  }
  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  /// False when the pair is already there (the first rank stays).
  bool insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t k = key(left, right);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (entries_[i].key == k)
        return false;
      if (entries_[i].key == kEmpty) {
        entries_[i] = {k, rank, merged};
        return true;
      }
    }
  }
  const Entry *find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0 || entries_.empty())
      return nullptr;
    uint64_t k = key(left, right);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (entries_[i].key == k)
        return &entries_[i];
      if (entries_[i].key == kEmpty)
        return nullptr;
    }
  }

private:
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

/// A set of adjacent code point pairs (open addressing, keys only).
class PairSet {
public:
  void build(const std::vector<uint64_t> &keys) {
    size_t capacity = 16;
    while (capacity < keys.size() * 2)
      capacity <<= 1;
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    for (uint64_t key : keys)
      for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        if (slots_[i] == key)
          break;
        if (slots_[i] == kEmpty) {
          slots_[i] = key;
          break;
        }
      }
  }
  static uint64_t key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  bool contains(uint64_t key) const {
    if (slots_.empty())
      return false;
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == key)
        return true;
      if (slots_[i] == kEmpty)
        return false;
    }
  }

private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static size_t hash(uint64_t k) {
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ULL;
    k ^= k >> 29;
    return size_t(k);
  }
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
};

//===----------------------------------------------------------------------===//
// Patterns (PCRE2)
//===----------------------------------------------------------------------===//

class Pattern {
public:
  ~Pattern() {
    if (code_ != nullptr)
      pcre2_code_free(code_);
  }
  Status compile(const std::string &file, const std::string &path,
                 const std::string &source) {
    path_ = path;
    std::string rewritten;
    if (!rewriteWhiteSpace(source, rewritten))
      return unsupported(file, path, "the pattern " + showText(source),
                         "patterns without \\S inside a bracket class");
    int error = 0;
    PCRE2_SIZE offset = 0;
    // UTF mode matches whole characters, except \C (one byte, which may be
    // part of a character): a word could begin inside a character, so \C
    // is refused wherever it appears.
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()),
                          rewritten.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error,
                          &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return unsupported(file, path,
                         "the pattern " + showText(source) + " (PCRE2: " +
                             reinterpret_cast<char *>(message) + " at offset " +
                             std::to_string(offset) + ")",
                         error == PCRE2_ERROR_BACKSLASH_C_CALLER_DISABLED
                             ? "patterns that match whole characters; \\C matches "
                               "one byte, which may be part of a character"
                             : "PCRE2-compatible patterns");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE); // falls back to the interpreter
    return Status::ok();
  }
  /// Calls found(start, end) for each non-empty match, left to right,
  /// until it returns false; returns 0, or PCRE2's error code when
  /// matching failed, which encode reports rather than tokenize the rest
  /// wrongly: PCRE2_ERROR_MATCHLIMIT when `budget` ran out.
  ///
  /// The budget is in PCRE2's match-limit units (backtracking steps). Each
  /// pcre2_match runs under a limit that starts small and doubles while
  /// PCRE2 runs out of it, every try charged at its limit, so the work done
  /// is at most what was charged: a pattern that backtracks just under
  /// PCRE2's own limit (ten million) at every character, 7 ms each, is
  /// stopped once it has spent the budget its text earned.
  template <typename Found>
  int forEachMatch(std::string_view text, pcre2_match_data *data,
                   pcre2_match_context *context, uint64_t &budget, Found &&found) const {
    constexpr uint64_t kFirstLimit = 16; // most matches of real patterns take 1-20
    size_t start = 0;
    while (start <= text.size()) {
      int rc;
      for (uint64_t limit = kFirstLimit;; limit *= 2) {
        uint64_t tried = std::min({limit, budget, uint64_t(UINT32_MAX)});
        if (tried == 0)
          return PCRE2_ERROR_MATCHLIMIT;
        pcre2_set_match_limit(context, uint32_t(tried));
        rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                         PCRE2_NO_UTF_CHECK, data, context);
        budget -= tried;
        if (rc != PCRE2_ERROR_MATCHLIMIT)
          break;
        if (tried < limit)
          return PCRE2_ERROR_MATCHLIMIT;
      }
      if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
      if (rc < 0)
        return rc;
      PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(data);
      size_t matchStart = ovector[0], matchEnd = ovector[1];
      if (matchEnd == matchStart) {
        // An empty match: step over one character.
        if (matchStart >= text.size())
          return 0;
        size_t length;
        decodeAt(text, matchStart, length);
        start = matchStart + length;
        continue;
      }
      if (!found(matchStart, matchEnd))
        return 0;
      start = matchEnd;
    }
    return 0;
  }
  const std::string &path() const { return path_; }
  pcre2_code *code() const { return code_; }

private:
  pcre2_code *code_ = nullptr;
  std::string path_; // in tokenizer.json, for messages
};

//===----------------------------------------------------------------------===//
// Pipeline steps
//===----------------------------------------------------------------------===//

struct NormalizerStep {
  enum class Kind { Nfc, Replace, Prepend } kind;
  std::string from, to; // Replace: from -> to; Prepend: to
  std::string path;     // in tokenizer.json, for messages
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious,
                           MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind;
  std::unique_ptr<Pattern> regex; // Split with a Regex, ByteLevel's GPT-2 one
  std::string literal;            // Split with a String
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool addPrefixSpace = false;
};

constexpr const char *kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/// The added tokens, found leftmost-longest in time linear in the text,
/// whatever the tokens: their reversed bytes make an Aho-Corasick
/// automaton, and a text is read from its end, so that the state after
/// text[i] names the longest token that starts at i. (A trie walked from
/// every byte took time proportional to the longest token a byte: a
/// 4 KiB token "aa...ab" made 100 KB of "a" take 2.6 s.)
class AddedTokenMatcher {
public:
  bool empty() const { return nodes_.size() <= 1; }

  void add(std::string_view content, int32_t id) {
    if (nodes_.empty())
      nodes_.emplace_back();
    int32_t node = 0;
    for (size_t i = content.size(); i-- > 0;) {
      uint8_t byte = static_cast<uint8_t>(content[i]);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = int32_t(nodes_.size());
        auto &children = nodes_[size_t(node)].children;
        children.insert(std::lower_bound(children.begin(), children.end(),
                                         std::make_pair(byte, int32_t(0))),
                        {byte, next});
        nodes_.emplace_back();
        nodes_.back().depth = nodes_[size_t(node)].depth + 1;
      }
      node = next;
    }
    nodes_[size_t(node)].token = id;
    longest_ = std::max<size_t>(longest_, content.size());
  }

  /// The failure links, and each state's longest token (its own, or its
  /// failure link's), breadth first.
  void build() {
    if (empty())
      return;
    std::deque<int32_t> queue;
    for (const auto &[byte, next] : nodes_[0].children)
      queue.push_back(next);
    while (!queue.empty()) {
      int32_t node = queue.front();
      queue.pop_front();
      Node &here = nodes_[size_t(node)];
      here.output = here.token >= 0 ? node : nodes_[size_t(here.fail)].output;
      for (const auto &[byte, next] : here.children) {
        nodes_[size_t(next)].fail = step(here.fail, byte);
        queue.push_back(next);
      }
    }
  }

  /// Calls found(start, id, length) for every i in [begin, end) where a
  /// token starts, with the longest one there, from the right.
  template <typename Found>
  void forEachStart(std::string_view text, size_t begin, size_t end, Found &&found) const {
    // Reading from `longest_` bytes past `end` finds every token starting
    // before it.
    size_t from = std::min(text.size(), end + longest_);
    int32_t state = 0;
    for (size_t i = from; i-- > begin;) {
      state = step(state, static_cast<uint8_t>(text[i]));
      if (i < end) {
        int32_t output = nodes_[size_t(state)].output;
        if (output >= 0)
          found(i, nodes_[size_t(output)].token, size_t(nodes_[size_t(output)].depth));
      }
    }
  }
  size_t longest() const { return longest_; }

private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children; // sorted by byte
    int32_t fail = 0;
    int32_t token = -1;  // the added token these bytes spell, reversed
    int32_t output = -1; // the node of the longest token ending here
    uint32_t depth = 0;
  };
  int32_t child(int32_t node, uint8_t byte) const {
    const auto &children = nodes_[size_t(node)].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t(0)));
    return it != children.end() && it->first == byte ? it->second : -1;
  }
  int32_t step(int32_t node, uint8_t byte) const {
    for (;;) {
      if (int32_t next = child(node, byte); next >= 0)
        return next;
      if (node == 0)
        return 0;
      node = nodes_[size_t(node)].fail;
    }
  }

  std::vector<Node> nodes_;
  size_t longest_ = 0;
};

enum PieceFlags : uint8_t {
  kAdded = 1,
  kSpecial = 2,
  kModelPiece = 4, // a piece of model.vocab
};

/// One encode call's state.
struct EncodeRun {
  std::vector<int64_t> &ids;
  pcre2_match_data *data = nullptr;
  pcre2_match_context *context = nullptr;
  /// PCRE2 match-limit units the split patterns may still spend: each
  /// byte a pattern scans earns CQ4P_TOKENIZER_MATCH_STEPS_PER_BYTE.
  uint64_t matchBudget = CQ4P_TOKENIZER_MATCH_STEPS_BASE;
  /// Bytes the normalized sections may still take (docs/TOKENIZER.md).
  uint64_t normalizedRoom = 0;
  Status failure = Status::ok();
};

} // namespace cq4p::runtime::tokenizer_internal

namespace cq4p::runtime {

using namespace tokenizer_internal;

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

struct Tokenizer::Impl {
  std::string file; // tokenizer.json's path, for messages
  TokenizerKind kind = TokenizerKind::ByteLevelBpe;

  std::unordered_map<std::string, int32_t> vocab; // model pieces and added tokens
  std::vector<std::string> pieces;                // by id
  std::vector<std::string> decoded;               // by id: decoded bytes
  std::vector<uint8_t> flags;                     // by id
  std::vector<uint8_t> isByteFallbackPiece;       // by id: <0xXX>
  int64_t size = 0;

  MergeTable merges;
  int32_t byteIds[256];         // byte-level: each byte's char; SP: <0xXX>
  std::unordered_map<uint32_t, int32_t> charIds; // SP: one-character pieces
  /// SP: the adjacent character pairs some piece holds. Between two
  /// characters that no piece holds together no merge can ever reach, so a
  /// word is merged as the separate runs between such boundaries: the same
  /// ids, and runs short enough to cache (Gemma has no pre-tokenizer).
  PairSet joinable;
  bool splitAtUnjoinable = false;
  bool ignoreMerges = false;
  bool byteFallback = false;
  bool fuseUnk = false;
  int32_t unkId = -1;

  AddedTokenMatcher addedTokens;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> preTokenizers;
  std::vector<int64_t> prefix, suffix;
  size_t stripLeadingSpaces = 0;

  int64_t bos = -1;
  std::vector<int64_t> stops;
  ChatFormat chat = ChatFormat::None;
  Status chatStatus;
  bool chatAddsBos = false;
  /// Gemma 4: the template writes the empty thought channel after the
  /// generation prompt when thinking is off (its larger models' templates).
  bool chatEmptyThought = false;
  std::string bosText;

  mutable std::mutex cacheMutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  int32_t idOf(std::string_view piece) const {
    auto it = vocab.find(std::string(piece));
    return it == vocab.end() ? -1 : it->second;
  }

  Status load(const Json &root);
  Status loadModel(const Json &model);
  Status loadAddedTokens(const Json &added);
  Status loadNormalizer(const Json &normalizer, const std::string &path);
  Status loadPreTokenizer(const Json &pre, const std::string &path);
  Status loadPostProcessor(const Json &post, const std::string &path);
  Status loadDecoder(const Json &decoder, const std::string &path);
  void buildDecoded(const std::vector<std::pair<std::string, std::string>> &replaces,
                    bool byteFallbackDecode);
  Status loadConfig(const TokenizerFiles &files);

  // Encoding. Each returns false when the encode failed (run.failure).
  bool normalize(std::string_view section, std::string &storage, std::string_view &text,
                 EncodeRun &run) const;
  bool encodeSection(std::string_view section, EncodeRun &run) const;
  bool preTokenize(size_t step, std::string_view word, EncodeRun &run) const;
  void encodePreToken(std::string_view word, std::vector<int64_t> &ids) const;
  void encodeBounded(std::string_view word, std::vector<int64_t> &ids) const;
  void encodeWord(std::string_view word, std::vector<int64_t> &ids) const;
  void mergeWord(std::string_view word, std::vector<int32_t> &out) const;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_TOKENIZERINTERNAL_H
