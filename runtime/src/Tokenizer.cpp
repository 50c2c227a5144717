//===- Tokenizer.cpp - tokenizer.json: byte-level and SentencePiece BPE ---===//
//
// Reading. nlohmann-json's SAX parser feeds a tree builder that bounds the
// nesting (CQ4P_TOKENIZER_MAX_NESTING), refuses a member named twice and
// names the member of any error; no exception is thrown (the runtime builds
// with -fno-exceptions), and every member is type-checked before it is
// read, since a wrong-typed read would abort. The vocabulary becomes
// id-indexed pieces, one to an id; merges become an open-addressing table from
// a pair of ids to (rank, merged id).
//
// Encoding. Added tokens are cut out first (leftmost-longest, an
// Aho-Corasick automaton of their reversed bytes read from the text's end).
// Each remaining section is normalized, pre-tokenized (PCRE2 matches of the
// file's split patterns, under a match budget scaled to the text; each
// step passes a piece on as soon as no later match can join it, so no list
// of words is held), and each word is merged by rank: a heap of adjacent
// pairs, lowest rank then leftmost first, the order of Hugging Face's BPE.
// Byte-level words start from one symbol per byte (the GPT-2
// byte-to-character map); SentencePiece words from one symbol per
// character, characters missing from the vocabulary falling back to their
// <0xXX> byte pieces. Words longer than CQ4P_TOKENIZER_MAX_WORD_BYTES are
// merged in pieces; short words' ids are cached.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Tokenizer.h"

#include "SafeOpen.h"

#include "cq4p/cq4p.h"

#include <nlohmann/json.hpp>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

namespace cq4p::runtime {
namespace {

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

/// The first `limit` bytes of `text` or fewer: never a part of a character.
std::string_view headOf(std::string_view text, size_t limit) {
  if (text.size() <= limit)
    return text;
  while (limit > 0 && (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80)
    --limit;
  return text.substr(0, limit);
}

std::string showText(std::string_view text) {
  std::string out = "'";
  for (char c : headOf(text, 200)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  if (text.size() > 200)
    out += "...";
  return out + "'";
}

Status unsupported(const std::string &file, const std::string &path,
                   const std::string &found, const std::string &supported) {
  return Status(CQ4P_ERROR_UNSUPPORTED,
                file + ": " + path + ": " + found +
                    " is not implemented by cq4p's tokenizer (it implements " +
                    supported + ")");
}

Status malformed(const std::string &file, const std::string &path,
                 const std::string &expected, const std::string &found) {
  return formatError(file, path.c_str(), expected, found);
}

const char *typeName(const Json &value) { return value.type_name(); }

void appendJson(const Json &value, std::string &out, size_t limit) {
  if (out.size() > limit)
    return;
  switch (value.type()) {
  case Json::value_t::array:
  case Json::value_t::object: {
    bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
      if (!first)
        out += ", ";
      first = false;
      if (object)
        out += Json(std::string(headOf(it.key(), limit))).dump() + ": ";
      appendJson(it.value(), out, limit);
    }
    out += object ? '}' : ']';
    return;
  }
  case Json::value_t::string:
    out += Json(std::string(headOf(value.get_ref<const std::string &>(), limit))).dump();
    return;
  default:
    out += value.dump();
    return;
  }
}

/// `value` as JSON, cut after about 100 bytes: a message shows what was
/// found without printing (or copying) the whole of a large value.
std::string showJson(const Json &value) {
  constexpr size_t kShown = 100;
  std::string out;
  appendJson(value, out, kShown);
  if (out.size() <= kShown)
    return out;
  return std::string(headOf(out, kShown)) + "...";
}

const Json *member(const Json &object, const char *key) {
  if (!object.is_object())
    return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool isAbsent(const Json *value) { return value == nullptr || value->is_null(); }

/// Reads a whole regular file (SafeOpen's policy: a FIFO or a device is
/// refused by name; with `noFollow`, so is a symbolic link).
Status readFile(const std::string &path, std::string &out, bool noFollow) {
  int fd = -1;
  uint64_t size = 0;
  if (Status status = openRegularFile(AT_FDCWD, path, path, noFollow, fd, size); !status)
    return status;
  if (size > kMaxFileBytes) {
    ::close(fd);
    return Status(CQ4P_ERROR_FORMAT, path + ": size: expected at most " +
                                         std::to_string(kMaxFileBytes) +
                                         " bytes, found " + std::to_string(size));
  }
  out.resize(size_t(size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::read(fd, &out[done], out.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      ::close(fd);
      return Status(CQ4P_ERROR_IO, path + ": read failed at byte " +
                                       std::to_string(done) + " of " +
                                       std::to_string(size));
    }
    done += size_t(got);
  }
  ::close(fd);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// UTF-8
//===----------------------------------------------------------------------===//

/// Decodes one valid code point at text[i] (the text was validated).
uint32_t decodeAt(std::string_view text, size_t i, size_t &length) {
  unsigned char c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    length = 1;
    return c;
  }
  if (c < 0xE0) {
    length = 2;
    return (uint32_t(c & 0x1F) << 6) | (uint32_t(text[i + 1]) & 0x3F);
  }
  if (c < 0xF0) {
    length = 3;
    return (uint32_t(c & 0x0F) << 12) | ((uint32_t(text[i + 1]) & 0x3F) << 6) |
           (uint32_t(text[i + 2]) & 0x3F);
  }
  length = 4;
  return (uint32_t(c & 0x07) << 18) | ((uint32_t(text[i + 1]) & 0x3F) << 12) |
         ((uint32_t(text[i + 2]) & 0x3F) << 6) | (uint32_t(text[i + 3]) & 0x3F);
}

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

/// The UTF-8 sequence at bytes[i]: how long its lead byte says it is (0 for
/// a byte that cannot lead) and how many of its bytes are valid so far (the
/// lead and the continuation bytes that follow it correctly).
void inspectSequence(std::string_view bytes, size_t i, int &expected,
                     int &matched) {
  unsigned char c = static_cast<unsigned char>(bytes[i]);
  matched = 1;
  unsigned char low = 0x80, high = 0xBF;
  if (c < 0x80) {
    expected = 1;
    return;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    expected = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    expected = 3;
    low = c == 0xE0 ? 0xA0 : 0x80;
    high = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    expected = 4;
    low = c == 0xF0 ? 0x90 : 0x80;
    high = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    expected = 0;
    return;
  }
  while (matched < expected && i + size_t(matched) < bytes.size()) {
    unsigned char next = static_cast<unsigned char>(bytes[i + size_t(matched)]);
    if (next < (matched == 1 ? low : 0x80) || next > (matched == 1 ? high : 0xBF))
      return;
    ++matched;
  }
}

//===----------------------------------------------------------------------===//
// Reading JSON
//===----------------------------------------------------------------------===//

/// `text` with each byte that is not part of valid UTF-8 written \xHH (a
/// message quoting the bytes of a file stays valid UTF-8).
std::string escapeInvalidUtf8(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    int expected, matched;
    inspectSequence(text, i, expected, matched);
    if (expected > 0 && matched == expected) {
      out.append(text.substr(i, size_t(matched)));
      i += size_t(matched);
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof(escaped), "\\x%02X", static_cast<unsigned char>(text[i]));
    out += escaped;
    ++i;
  }
  return out;
}

/// Builds a Json tree from nlohmann-json's SAX events, adding what its own
/// tree builder does not check: the nesting depth (a tree is copied,
/// printed and compared by recursion, so a deep one overflows the stack)
/// and unique member names (a reader taking the first or the last of two
/// would tokenize differently). Every refusal names the member's path.
class TreeBuilder {
public:
  TreeBuilder(const std::string &file, Json &root) : file_(file), root_(root) {}
  Status status = Status::ok();

  bool null() { return leaf(Json()); }
  bool boolean(bool value) { return leaf(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return leaf(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return leaf(Json(value)); }
  bool number_float(Json::number_float_t value, const std::string &) {
    return leaf(Json(value));
  }
  bool string(std::string &value) { return leaf(Json(std::move(value))); }
  bool binary(Json::binary_t &) { return refuse("(document)", "JSON text", "binary data"); }
  bool start_object(std::size_t) { return open(Json::value_t::object); }
  bool start_array(std::size_t) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string &name) {
    Level &level = levels_.back();
    auto [it, inserted] =
        level.container->get_ref<Json::object_t &>().emplace(std::move(name), Json());
    level.member = &it->first;
    level.valueDone = false;
    if (!inserted)
      return refuse(path(levels_.size()), "each member name once",
                    showText(it->first) + " twice");
    level.slot = &it->second;
    return true;
  }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &error) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9:
    // syntax error ..." without the library's tag.
    std::string message = error.what();
    if (size_t tag = message.find("] "); tag != std::string::npos)
      message.erase(0, tag + 2);
    if (status)
      status = Status(CQ4P_ERROR_FORMAT, file_ + ": " + path(levels_.size()) +
                                             ": not valid JSON: " + escapeInvalidUtf8(message));
    return false;
  }

private:
  struct Level {
    Json *container;
    Json *slot = nullptr;                // an object's member being read
    const std::string *member = nullptr; // its name
    bool valueDone = false;              // the member's or element's value was read
  };

  /// The path of the member being read inside the first `depth` levels,
  /// e.g. model.merges[3]; a path deeper than a few levels is elided.
  std::string path(size_t depth) const {
    constexpr size_t kShownLevels = 6;
    std::string out;
    for (size_t i = 0; i < depth && i < kShownLevels; ++i) {
      const Level &level = levels_[i];
      if (level.container->is_object()) {
        if (level.member == nullptr || level.valueDone)
          break; // between members
        if (!out.empty())
          out += '.';
        out += std::string(headOf(*level.member, 100));
      } else {
        size_t size = level.container->size();
        out += "[" + std::to_string(level.valueDone || size == 0 ? size : size - 1) + "]";
      }
    }
    if (depth > kShownLevels)
      out += "...";
    return out.empty() ? "(document)" : out;
  }
  bool refuse(const std::string &where, const std::string &expected,
              const std::string &found) {
    status = formatError(file_, where.c_str(), expected, found);
    return false;
  }
  /// Where the next value goes: the root, an object's member or a new
  /// element of an array.
  Json *slot() {
    if (levels_.empty())
      return &root_;
    Level &level = levels_.back();
    level.valueDone = false;
    if (level.container->is_object())
      return level.slot;
    level.container->get_ref<Json::array_t &>().emplace_back();
    return &level.container->back();
  }
  void valueRead() {
    if (!levels_.empty())
      levels_.back().valueDone = true;
  }
  bool leaf(Json value) {
    *slot() = std::move(value);
    valueRead();
    return true;
  }
  bool open(Json::value_t type) {
    Json *container = slot();
    if (levels_.size() >= size_t(CQ4P_TOKENIZER_MAX_NESTING))
      return refuse(path(levels_.size()),
                    "at most " + std::to_string(CQ4P_TOKENIZER_MAX_NESTING) +
                        " levels of nested [] and {} (CQ4P_TOKENIZER_MAX_NESTING)",
                    "a level deeper");
    *container = Json(type);
    levels_.push_back({container});
    return true;
  }
  bool close() {
    levels_.pop_back();
    valueRead();
    return true;
  }

  const std::string &file_;
  Json &root_;
  std::vector<Level> levels_;
};

Status parseJsonFile(const std::string &path, Json &out, bool noFollow) {
  std::string text;
  if (Status status = readFile(path, text, noFollow); !status)
    return status;
  TreeBuilder builder(path, out);
  bool parsed = Json::sax_parse(text.begin(), text.end(), &builder);
  if (!builder.status)
    return builder.status;
  if (!parsed)
    return Status(CQ4P_ERROR_FORMAT, path + ": not valid JSON");
  // nlohmann-json's lexer takes a NUL byte for the end of the text, so a
  // document followed by one and anything at all was read as whole; JSON
  // holds no raw NUL anywhere.
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    return malformed(path, "(document)", "nothing after the JSON document but white space",
                     "a NUL byte at byte " + std::to_string(nul) + " of " +
                         std::to_string(text.size()));
  if (!out.is_object())
    return malformed(path, "(document)", "an object", typeName(out));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// GPT-2's byte-to-character map
//===----------------------------------------------------------------------===//

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

const ByteMap &byteMap() {
  static const ByteMap map;
  return map;
}

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

/// Unicode White_Space, which `\s` means in the Rust tokenizers' Oniguruma
/// (PCRE2's own `\s` adds U+180E and JavaScript's adds U+FEFF).
constexpr const char *kWhiteSpaceClass =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/// The file's pattern with `\s` / `\S` spelled as White_Space classes.
/// False when `\S` appears inside a bracket class (not expressible).
bool rewriteWhiteSpace(const std::string &pattern, std::string &out) {
  out.clear();
  bool inClass = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char next = pattern[i + 1];
      ++i;
      if (next == 's') {
        out += inClass ? std::string(kWhiteSpaceClass)
                       : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (next == 'S') {
        if (inClass)
          return false;
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (!inClass && c == '[') {
      inClass = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')
        out += pattern[++i];
      continue;
    }
    if (inClass && c == ']')
      inClass = false;
    out += c;
  }
  return true;
}

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

} // namespace

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

namespace {

//===----------------------------------------------------------------------===//
// Loading tokenizer.json
//===----------------------------------------------------------------------===//

Status getString(const std::string &file, const Json &object, const char *key,
                 const std::string &path, std::string &out, bool required) {
  const Json *value = member(object, key);
  if (isAbsent(value)) {
    if (required)
      return malformed(file, path + "." + key, "a string", "nothing");
    out.clear();
    return Status::ok();
  }
  if (!value->is_string())
    return malformed(file, path + "." + key, "a string", typeName(*value));
  out = value->get_ref<const std::string &>();
  return Status::ok();
}

Status getBool(const std::string &file, const Json &object, const char *key,
               const std::string &path, bool &out, bool fallback) {
  const Json *value = member(object, key);
  if (isAbsent(value)) {
    out = fallback;
    return Status::ok();
  }
  if (!value->is_boolean())
    return malformed(file, path + "." + key, "true or false", typeName(*value));
  out = value->get<bool>();
  return Status::ok();
}

/// A pattern member: {"String": s} or {"Regex": r}.
Status getPattern(const std::string &file, const Json &object,
                  const std::string &path, std::string &literal,
                  std::string &regex) {
  const Json *pattern = member(object, "pattern");
  if (pattern == nullptr || !pattern->is_object())
    return malformed(file, path + ".pattern", "an object",
                     pattern ? typeName(*pattern) : "nothing");
  literal.clear();
  regex.clear();
  if (const Json *s = member(*pattern, "String"); s != nullptr && s->is_string()) {
    literal = s->get_ref<const std::string &>();
    if (literal.empty())
      return malformed(file, path + ".pattern.String", "a non-empty string", "''");
    return Status::ok();
  }
  if (const Json *r = member(*pattern, "Regex"); r != nullptr && r->is_string()) {
    regex = r->get_ref<const std::string &>();
    if (regex.empty())
      return malformed(file, path + ".pattern.Regex", "a non-empty pattern", "''");
    return Status::ok();
  }
  return malformed(file, path + ".pattern", "{\"String\": ...} or {\"Regex\": ...}",
                   showJson(*pattern));
}

/// A step more than CQ4P_TOKENIZER_MAX_STEPS of one kind (a file of a
/// million Replace steps would take a million passes over every text).
Status tooManySteps(const std::string &file, const std::string &path, const char *kind) {
  return malformed(file, path,
                   "at most " + std::to_string(CQ4P_TOKENIZER_MAX_STEPS) + " " + kind +
                       " steps (CQ4P_TOKENIZER_MAX_STEPS)",
                   "more");
}

/// Every member of `object` must be in `known` (what cq4p reads or knows
/// does not change the ids).
Status onlyKnownMembers(const std::string &file, const Json &object,
                        const std::string &path,
                        std::initializer_list<const char *> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (const char *name : known)
      found = found || it.key() == name;
    if (!found)
      return unsupported(file, path + "." + it.key(), "the member",
                         "only the members it reads");
  }
  return Status::ok();
}

} // namespace

Status Tokenizer::Impl::loadAddedTokens(const Json &added) {
  if (isAbsent(&added))
    return Status::ok();
  if (!added.is_array())
    return malformed(file, "added_tokens", "an array", typeName(added));
  for (size_t i = 0; i < added.size(); ++i) {
    std::string path = "added_tokens[" + std::to_string(i) + "]";
    const Json &token = added[i];
    const Json *id = member(token, "id");
    if (id == nullptr || !id->is_number_unsigned() ||
        id->get<uint64_t>() >= uint64_t(kMaxVocab))
      return malformed(file, path + ".id",
                       "an id below " + std::to_string(kMaxVocab),
                       id ? showJson(*id) : "nothing");
    std::string content;
    if (Status s = getString(file, token, "content", path, content, true); !s)
      return s;
    if (content.empty())
      return malformed(file, path + ".content", "a non-empty string", "''");
    bool special, lstrip, rstrip, singleWord, normalized;
    if (Status s = getBool(file, token, "special", path, special, false); !s)
      return s;
    if (Status s = getBool(file, token, "lstrip", path, lstrip, false); !s)
      return s;
    if (Status s = getBool(file, token, "rstrip", path, rstrip, false); !s)
      return s;
    if (Status s = getBool(file, token, "single_word", path, singleWord, false); !s)
      return s;
    if (Status s = getBool(file, token, "normalized", path, normalized, false); !s)
      return s;
    if (lstrip || rstrip || singleWord)
      return unsupported(file, path, "an added token with lstrip, rstrip or single_word",
                         "added tokens matched exactly");
    // A normalized added token (matched on normalized text) is matched on
    // the raw text here: the same wherever normalizing leaves its text as
    // it is, which the check below makes sure of for the normalizers cq4p
    // implements.
    if (normalized && !special) {
      for (const NormalizerStep &step : normalizers)
        if (step.kind != NormalizerStep::Kind::Nfc &&
            (step.kind == NormalizerStep::Kind::Prepend ||
             content.find(step.from) != std::string::npos))
          return unsupported(file, path + ".normalized",
                             "a normalized added token the normalizer changes",
                             "added tokens the normalizer leaves unchanged");
    }
    int32_t value = int32_t(id->get<uint64_t>());
    if (size_t(value) >= pieces.size()) {
      pieces.resize(size_t(value) + 1);
      flags.resize(size_t(value) + 1);
    }
    // An added token may be a piece of the model's vocabulary (Gemma's
    // <bos>), on that piece's id; on another piece's id (a byte piece's
    // too) or another added token's, one of the two would decode as the
    // other.
    if (flags[size_t(value)] & kAdded)
      return malformed(file, path + ".id", "an id no other added token has",
                       std::to_string(value) + ", the id of the added token " +
                           showText(pieces[size_t(value)]));
    if ((flags[size_t(value)] & kModelPiece) && pieces[size_t(value)] != content)
      return malformed(file, path + ".id",
                       "the id of the piece " + showText(content) + " or an id no piece has",
                       std::to_string(value) + ", the id of the piece " +
                           showText(pieces[size_t(value)]));
    pieces[size_t(value)] = content;
    flags[size_t(value)] |= kAdded | (special ? kSpecial : 0);
    vocab[content] = value;
    addedTokens.add(content, value);
  }
  addedTokens.build();
  return Status::ok();
}

Status Tokenizer::Impl::loadModel(const Json &model) {
  if (!model.is_object())
    return malformed(file, "model", "an object", typeName(model));
  std::string type;
  if (Status s = getString(file, model, "type", "model", type, false); !s)
    return s;
  if (type != "BPE" && !(type.empty() && member(model, "merges")))
    return unsupported(file, "model.type", showText(type), "BPE");
  if (Status s = onlyKnownMembers(file, model, "model",
                                  {"type", "dropout", "unk_token",
                                   "continuing_subword_prefix",
                                   "end_of_word_suffix", "fuse_unk",
                                   "byte_fallback", "ignore_merges", "vocab",
                                   "merges"});
      !s)
    return s;
  if (const Json *dropout = member(model, "dropout"); !isAbsent(dropout))
    return unsupported(file, "model.dropout", showJson(*dropout), "no dropout (null)");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string value;
    if (Status s = getString(file, model, key, "model", value, false); !s)
      return s;
    if (!value.empty())
      return unsupported(file, std::string("model.") + key, showText(value),
                         "none (null or '')");
  }
  if (Status s = getBool(file, model, "byte_fallback", "model", byteFallback, false); !s)
    return s;
  if (Status s = getBool(file, model, "ignore_merges", "model", ignoreMerges, false); !s)
    return s;
  if (Status s = getBool(file, model, "fuse_unk", "model", fuseUnk, false); !s)
    return s;

  const Json *vocabJson = member(model, "vocab");
  if (vocabJson == nullptr || !vocabJson->is_object())
    return malformed(file, "model.vocab", "an object",
                     vocabJson ? typeName(*vocabJson) : "nothing");
  vocab.reserve(vocabJson->size() + 1024);
  for (auto it = vocabJson->begin(); it != vocabJson->end(); ++it) {
    if (!it.value().is_number_unsigned() ||
        it.value().get<uint64_t>() >= uint64_t(kMaxVocab))
      return malformed(file, "model.vocab[" + showText(it.key()) + "]",
                       "an id below " + std::to_string(kMaxVocab),
                       showJson(it.value()));
    int32_t id = int32_t(it.value().get<uint64_t>());
    if (size_t(id) >= pieces.size()) {
      pieces.resize(size_t(id) + 1);
      flags.resize(size_t(id) + 1);
    }
    // Two pieces on one id: one of them would decode as the other.
    if (flags[size_t(id)] & kModelPiece)
      return malformed(file, "model.vocab[" + showText(it.key()) + "]",
                       "an id no other piece has",
                       std::to_string(id) + ", the id of " + showText(pieces[size_t(id)]));
    flags[size_t(id)] |= kModelPiece;
    pieces[size_t(id)] = it.key();
    vocab.emplace(it.key(), id);
  }

  std::string unk;
  if (Status s = getString(file, model, "unk_token", "model", unk, false); !s)
    return s;
  if (!unk.empty()) {
    unkId = idOf(unk);
    if (unkId < 0)
      return malformed(file, "model.unk_token", "a piece of the vocabulary",
                       showText(unk));
  }

  const Json *mergesJson = member(model, "merges");
  if (mergesJson == nullptr || !mergesJson->is_array())
    return malformed(file, "model.merges", "an array",
                     mergesJson ? typeName(*mergesJson) : "nothing");
  merges.reserve(mergesJson->size());
  std::string joined;
  for (size_t rank = 0; rank < mergesJson->size(); ++rank) {
    const Json &merge = (*mergesJson)[rank];
    std::string_view left, right;
    std::string path = "model.merges[" + std::to_string(rank) + "]";
    if (merge.is_string()) {
      const std::string &text = merge.get_ref<const std::string &>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        return malformed(file, path, "two pieces separated by one space",
                         showText(text));
      left = std::string_view(text).substr(0, space);
      right = std::string_view(text).substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get_ref<const std::string &>();
      right = merge[1].get_ref<const std::string &>();
    } else {
      return malformed(file, path, "\"a b\" or [\"a\", \"b\"]",
                       showJson(merge));
    }
    int32_t a = idOf(left), b = idOf(right);
    joined.assign(left);
    joined.append(right);
    int32_t merged = idOf(joined);
    if (a < 0 || b < 0 || merged < 0)
      return malformed(file, path, "pieces of the vocabulary",
                       showText(a < 0 ? left : b < 0 ? right : std::string_view(joined)));
    merges.insert(a, b, int32_t(rank), merged);
  }
  return Status::ok();
}

Status Tokenizer::Impl::loadNormalizer(const Json &normalizer,
                                       const std::string &path) {
  if (isAbsent(&normalizer))
    return Status::ok();
  std::string type;
  if (Status s = getString(file, normalizer, "type", path, type, true); !s)
    return s;
  if (type == "Sequence") {
    const Json *list = member(normalizer, "normalizers");
    if (list == nullptr || !list->is_array())
      return malformed(file, path + ".normalizers", "an array",
                       list ? typeName(*list) : "nothing");
    for (size_t i = 0; i < list->size(); ++i)
      if (Status s = loadNormalizer((*list)[i], path + ".normalizers[" +
                                                    std::to_string(i) + "]");
          !s)
        return s;
    return Status::ok();
  }
  if (normalizers.size() >= CQ4P_TOKENIZER_MAX_STEPS)
    return tooManySteps(file, path, "normalizer");
  if (type == "NFC") {
    normalizers.push_back({NormalizerStep::Kind::Nfc, "", "", path});
    return Status::ok();
  }
  if (type == "Replace") {
    std::string literal, regex, content;
    if (Status s = getPattern(file, normalizer, path, literal, regex); !s)
      return s;
    if (!regex.empty())
      return unsupported(file, path + ".pattern.Regex", showText(regex),
                         "Replace with a String pattern");
    if (Status s = getString(file, normalizer, "content", path, content, true); !s)
      return s;
    normalizers.push_back({NormalizerStep::Kind::Replace, literal, content, path});
    return Status::ok();
  }
  if (type == "Prepend") {
    std::string prepend;
    if (Status s = getString(file, normalizer, "prepend", path, prepend, true); !s)
      return s;
    normalizers.push_back({NormalizerStep::Kind::Prepend, "", prepend, path});
    return Status::ok();
  }
  return unsupported(file, path + ".type", showText(type),
                     "the normalizers NFC, Replace (String), Prepend and Sequence");
}

Status Tokenizer::Impl::loadPreTokenizer(const Json &pre,
                                         const std::string &path) {
  if (isAbsent(&pre))
    return Status::ok();
  std::string type;
  if (Status s = getString(file, pre, "type", path, type, true); !s)
    return s;
  if (type == "Sequence") {
    const Json *list = member(pre, "pretokenizers");
    if (list == nullptr || !list->is_array())
      return malformed(file, path + ".pretokenizers", "an array",
                       list ? typeName(*list) : "nothing");
    for (size_t i = 0; i < list->size(); ++i)
      if (Status s = loadPreTokenizer((*list)[i], path + ".pretokenizers[" +
                                                      std::to_string(i) + "]");
          !s)
        return s;
    return Status::ok();
  }
  if (preTokenizers.size() >= CQ4P_TOKENIZER_MAX_STEPS)
    return tooManySteps(file, path, "pre-tokenizer");
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    std::string regex;
    if (Status s = getPattern(file, pre, path, step.literal, regex); !s)
      return s;
    if (!regex.empty()) {
      step.regex = std::make_unique<Pattern>();
      if (Status s = step.regex->compile(file, path + ".pattern.Regex", regex); !s)
        return s;
    }
    std::string behavior;
    if (Status s = getString(file, pre, "behavior", path, behavior, true); !s)
      return s;
    static const std::pair<const char *, SplitBehavior> behaviors[] = {
        {"Removed", SplitBehavior::Removed},
        {"Isolated", SplitBehavior::Isolated},
        {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
        {"MergedWithNext", SplitBehavior::MergedWithNext},
        {"Contiguous", SplitBehavior::Contiguous}};
    bool known = false;
    for (const auto &[name, value] : behaviors)
      if (behavior == name) {
        step.behavior = value;
        known = true;
      }
    if (!known)
      return unsupported(file, path + ".behavior", showText(behavior),
                         "Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                         "Contiguous");
    if (Status s = getBool(file, pre, "invert", path, step.invert, false); !s)
      return s;
    preTokenizers.push_back(std::move(step));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    bool useRegex;
    if (Status s = getBool(file, pre, "add_prefix_space", path, step.addPrefixSpace, true); !s)
      return s;
    if (Status s = getBool(file, pre, "use_regex", path, useRegex, true); !s)
      return s;
    if (useRegex) {
      step.regex = std::make_unique<Pattern>();
      if (Status s = step.regex->compile(file, path, kGpt2Pattern); !s)
        return s;
    }
    kind = TokenizerKind::ByteLevelBpe;
    preTokenizers.push_back(std::move(step));
    return Status::ok();
  }
  return unsupported(file, path + ".type", showText(type),
                     "the pre-tokenizers Split, ByteLevel and Sequence");
}

Status Tokenizer::Impl::loadPostProcessor(const Json &post,
                                          const std::string &path) {
  if (isAbsent(&post))
    return Status::ok();
  std::string type;
  if (Status s = getString(file, post, "type", path, type, true); !s)
    return s;
  if (type == "ByteLevel")
    return Status::ok(); // offsets only
  if (type == "Sequence") {
    const Json *list = member(post, "processors");
    if (list == nullptr || !list->is_array())
      return malformed(file, path + ".processors", "an array",
                       list ? typeName(*list) : "nothing");
    for (size_t i = 0; i < list->size(); ++i)
      if (Status s = loadPostProcessor((*list)[i], path + ".processors[" +
                                                       std::to_string(i) + "]");
          !s)
        return s;
    return Status::ok();
  }
  if (type != "TemplateProcessing")
    return unsupported(file, path + ".type", showText(type),
                       "the post-processors TemplateProcessing, ByteLevel and "
                       "Sequence");
  const Json *single = member(post, "single");
  const Json *specials = member(post, "special_tokens");
  if (single == nullptr || !single->is_array())
    return malformed(file, path + ".single", "an array",
                     single ? typeName(*single) : "nothing");
  if (!prefix.empty() || !suffix.empty())
    return unsupported(file, path, "a second TemplateProcessing",
                       "one template");
  bool seenSequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    std::string itemPath = path + ".single[" + std::to_string(i) + "]";
    const Json &item = (*single)[i];
    if (const Json *sequence = member(item, "Sequence")) {
      std::string id;
      if (Status s = getString(file, *sequence, "id", itemPath + ".Sequence", id, true); !s)
        return s;
      if (id != "A" || seenSequence)
        return unsupported(file, itemPath + ".Sequence.id", showText(id),
                           "one sequence, A");
      seenSequence = true;
      continue;
    }
    const Json *special = member(item, "SpecialToken");
    if (special == nullptr)
      return malformed(file, itemPath, "a Sequence or a SpecialToken",
                       showJson(item));
    std::string name;
    if (Status s = getString(file, *special, "id", itemPath + ".SpecialToken", name, true); !s)
      return s;
    const Json *entry = specials ? member(*specials, name.c_str()) : nullptr;
    const Json *ids = entry ? member(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array())
      return malformed(file, path + ".special_tokens[" + showText(name) + "].ids",
                       "an array of ids", ids ? typeName(*ids) : "nothing");
    for (const Json &id : *ids) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(kMaxVocab))
        return malformed(file, path + ".special_tokens[" + showText(name) + "].ids",
                         "ids below " + std::to_string(kMaxVocab), showJson(id));
      (seenSequence ? suffix : prefix).push_back(int64_t(id.get<uint64_t>()));
    }
  }
  if (!seenSequence)
    return malformed(file, path + ".single", "a Sequence A", "none");
  return Status::ok();
}

Status Tokenizer::Impl::loadDecoder(const Json &decoder, const std::string &path) {
  if (isAbsent(&decoder))
    return unsupported(file, path, "no decoder", "ByteLevel or a Sequence of "
                                                 "Replace, ByteFallback, Fuse, Strip");
  std::string type;
  if (Status s = getString(file, decoder, "type", path, type, true); !s)
    return s;
  std::vector<std::pair<std::string, std::string>> replaces;
  bool byteFallbackDecode = false;
  auto one = [&](const Json &step, const std::string &stepPath) -> Status {
    std::string stepType;
    if (Status s = getString(file, step, "type", stepPath, stepType, true); !s)
      return s;
    if (stepType == "ByteLevel") {
      if (kind != TokenizerKind::ByteLevelBpe)
        return unsupported(file, stepPath + ".type", "ByteLevel without a ByteLevel "
                                                     "pre-tokenizer", "both or neither");
      return Status::ok();
    }
    if (kind == TokenizerKind::ByteLevelBpe)
      return unsupported(file, stepPath + ".type", showText(stepType) +
                                                       " after a ByteLevel pre-tokenizer",
                         "the ByteLevel decoder");
    if (stepType == "Replace") {
      std::string literal, regex, content;
      if (Status s = getPattern(file, step, stepPath, literal, regex); !s)
        return s;
      if (!regex.empty())
        return unsupported(file, stepPath + ".pattern.Regex", showText(regex),
                           "Replace with a String pattern");
      if (Status s = getString(file, step, "content", stepPath, content, true); !s)
        return s;
      replaces.emplace_back(literal, content);
      return Status::ok();
    }
    if (stepType == "ByteFallback") {
      byteFallbackDecode = true;
      return Status::ok();
    }
    if (stepType == "Fuse")
      return Status::ok();
    if (stepType == "Strip") {
      std::string content;
      if (Status s = getString(file, step, "content", stepPath, content, true); !s)
        return s;
      const Json *start = member(step, "start");
      const Json *stop = member(step, "stop");
      if (content != " " || start == nullptr || !start->is_number_unsigned() ||
          start->get<uint64_t>() > 8 || stop == nullptr ||
          !stop->is_number_unsigned() || stop->get<uint64_t>() != 0)
        return unsupported(file, stepPath, "Strip " + showJson(step),
                           "Strip of up to 8 leading spaces");
      stripLeadingSpaces = size_t(start->get<uint64_t>());
      return Status::ok();
    }
    return unsupported(file, stepPath + ".type", showText(stepType),
                       "the decoders ByteLevel, Replace (String), ByteFallback, "
                       "Fuse, Strip and Sequence");
  };
  if (type == "Sequence") {
    const Json *list = member(decoder, "decoders");
    if (list == nullptr || !list->is_array())
      return malformed(file, path + ".decoders", "an array",
                       list ? typeName(*list) : "nothing");
    if (list->size() > CQ4P_TOKENIZER_MAX_STEPS)
      return tooManySteps(file, path + ".decoders", "decoder");
    for (size_t i = 0; i < list->size(); ++i)
      if (Status s = one((*list)[i], path + ".decoders[" + std::to_string(i) + "]"); !s)
        return s;
  } else if (Status s = one(decoder, path); !s) {
    return s;
  }
  buildDecoded(replaces, byteFallbackDecode);
  return Status::ok();
}

void Tokenizer::Impl::buildDecoded(
    const std::vector<std::pair<std::string, std::string>> &replaces,
    bool byteFallbackDecode) {
  decoded.assign(pieces.size(), std::string());
  isByteFallbackPiece.assign(pieces.size(), 0);
  const ByteMap &map = byteMap();
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string &piece = pieces[id];
    std::string &out = decoded[id];
    if (kind == TokenizerKind::ByteLevelBpe) {
      // Every character through the byte map; a piece with a character
      // outside it (an added token's text) stays as it is.
      bool mapped = true;
      for (size_t i = 0; i < piece.size() && mapped;) {
        size_t length;
        uint32_t cp = decodeAt(piece, i, length);
        auto it = map.byteOf.find(cp);
        if (it == map.byteOf.end())
          mapped = false;
        else
          out += char(it->second);
        i += length;
      }
      if (!mapped)
        out = piece;
      continue;
    }
    if (byteFallbackDecode && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 &&
        piece[5] == '>' && std::isxdigit(static_cast<unsigned char>(piece[3])) &&
        std::isxdigit(static_cast<unsigned char>(piece[4]))) {
      out += char(std::stoi(piece.substr(3, 2), nullptr, 16));
      isByteFallbackPiece[id] = 1;
      continue;
    }
    out = piece;
    for (const auto &[from, to] : replaces) {
      std::string replaced;
      size_t at = 0;
      for (size_t found; (found = out.find(from, at)) != std::string::npos;
           at = found + from.size())
        replaced.append(out, at, found - at).append(to);
      replaced.append(out, at, std::string::npos);
      out.swap(replaced);
    }
  }
}

Status Tokenizer::Impl::load(const Json &root) {
  if (Status s = onlyKnownMembers(file, root, "(document)",
                                  {"version", "truncation", "padding",
                                   "added_tokens", "normalizer",
                                   "pre_tokenizer", "post_processor",
                                   "decoder", "model"});
      !s)
    return s;
  for (const char *key : {"truncation", "padding"})
    if (const Json *value = member(root, key); !isAbsent(value))
      return unsupported(file, key, showJson(*value), "null");
  kind = TokenizerKind::SentencePieceBpe;
  if (const Json *normalizer = member(root, "normalizer"))
    if (Status s = loadNormalizer(*normalizer, "normalizer"); !s)
      return s;
  if (const Json *pre = member(root, "pre_tokenizer"))
    if (Status s = loadPreTokenizer(*pre, "pre_tokenizer"); !s)
      return s;
  const Json *model = member(root, "model");
  if (model == nullptr)
    return malformed(file, "model", "an object", "nothing");
  if (Status s = loadModel(*model); !s)
    return s;
  if (const Json *added = member(root, "added_tokens"))
    if (Status s = loadAddedTokens(*added); !s)
      return s;
  if (const Json *post = member(root, "post_processor"))
    if (Status s = loadPostProcessor(*post, "post_processor"); !s)
      return s;
  const Json *decoder = member(root, "decoder");
  if (Status s = loadDecoder(decoder ? *decoder : Json(), "decoder"); !s)
    return s;
  size = int64_t(pieces.size());
  for (int64_t id : prefix)
    if (id >= size)
      return malformed(file, "post_processor", "ids in the vocabulary",
                       std::to_string(id));
  for (int64_t id : suffix)
    if (id >= size)
      return malformed(file, "post_processor", "ids in the vocabulary",
                       std::to_string(id));

  // The model's starting symbols.
  const ByteMap &map = byteMap();
  for (int b = 0; b < 256; ++b) {
    if (kind == TokenizerKind::ByteLevelBpe) {
      std::string ch;
      appendUtf8(map.charOf[b], ch);
      byteIds[b] = idOf(ch);
      if (byteIds[b] < 0)
        return malformed(file, "model.vocab",
                         "the byte-level piece of every byte", "none for byte " +
                                                                   std::to_string(b));
    } else {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byteIds[b] = byteFallback ? idOf(name) : -1;
    }
  }
  if (kind == TokenizerKind::SentencePieceBpe) {
    std::vector<uint64_t> pairs;
    for (size_t id = 0; id < pieces.size(); ++id) {
      const std::string &piece = pieces[id];
      if (piece.empty())
        continue;
      size_t length;
      uint32_t cp = decodeAt(piece, 0, length);
      if (length == piece.size() && !(flags[id] & kAdded))
        charIds.emplace(cp, int32_t(id));
      // Added tokens too: many are also the model's pieces (Gemma's runs of
      // U+2581), and more joinable pairs only split less.
      for (size_t i = length; i < piece.size();) {
        size_t next;
        uint32_t following = decodeAt(piece, i, next);
        pairs.push_back(PairSet::key(cp, following));
        cp = following;
        i += next;
      }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    joinable.build(pairs);
    splitAtUnjoinable = !ignoreMerges;
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

namespace {

/// One BPE pass over symbols, in place. Symbols are ids (-1: a character
/// outside the vocabulary, never merged), linked by prev/next.
struct Symbol {
  int32_t id;
  int32_t prev, next;
  uint32_t start, length; // bytes of the word
};

struct Candidate {
  int32_t rank;
  int32_t position;
  int32_t left, right; // the ids when pushed
  bool operator>(const Candidate &other) const {
    return rank != other.rank ? rank > other.rank : position > other.position;
  }
};

} // namespace

void Tokenizer::Impl::mergeWord(std::string_view word,
                                std::vector<int32_t> &out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  if (kind == TokenizerKind::ByteLevelBpe) {
    for (size_t i = 0; i < word.size(); ++i)
      symbols.push_back({byteIds[static_cast<unsigned char>(word[i])],
                         int32_t(i) - 1, int32_t(i) + 1, uint32_t(i), 1});
  } else {
    for (size_t i = 0; i < word.size();) {
      size_t length;
      uint32_t cp = decodeAt(word, i, length);
      auto it = charIds.find(cp);
      int32_t index = int32_t(symbols.size());
      symbols.push_back({it == charIds.end() ? -1 : it->second, index - 1,
                         index + 1, uint32_t(i), uint32_t(length)});
      i += length;
    }
  }
  if (symbols.empty())
    return;
  symbols.back().next = -1;
  auto greater = [](const Candidate &a, const Candidate &b) { return a > b; };
  auto consider = [&](int32_t position) {
    const Symbol &left = symbols[size_t(position)];
    if (left.next < 0)
      return;
    const Symbol &right = symbols[size_t(left.next)];
    if (const MergeTable::Entry *entry = merges.find(left.id, right.id)) {
      heap.push_back({entry->rank, position, left.id, right.id});
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  };
  for (int32_t i = 0; i + 1 < int32_t(symbols.size()); ++i)
    consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol &left = symbols[size_t(top.position)];
    if (left.length == 0 || left.id != top.left || left.next < 0)
      continue;
    Symbol &right = symbols[size_t(left.next)];
    if (right.id != top.right)
      continue;
    const MergeTable::Entry *entry = merges.find(left.id, right.id);
    left.id = entry->merged;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0)
      symbols[size_t(left.next)].prev = top.position;
    if (left.prev >= 0)
      consider(left.prev);
    consider(top.position);
  }
  bool lastUnk = false;
  for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) {
    const Symbol &symbol = symbols[size_t(i)];
    if (symbol.id >= 0) {
      out.push_back(symbol.id);
      lastUnk = false;
      continue;
    }
    // Outside the vocabulary: its bytes' pieces, or unk.
    bool allBytes = byteFallback;
    for (uint32_t k = 0; k < symbol.length && allBytes; ++k)
      allBytes = byteIds[static_cast<unsigned char>(word[symbol.start + k])] >= 0;
    if (allBytes) {
      for (uint32_t k = 0; k < symbol.length; ++k)
        out.push_back(byteIds[static_cast<unsigned char>(word[symbol.start + k])]);
      lastUnk = false;
    } else if (!(fuseUnk && lastUnk)) {
      out.push_back(unkId); // checked by encode: -1 when there is no unk
      lastUnk = true;
    }
  }
}

void Tokenizer::Impl::encodeWord(std::string_view word,
                                 std::vector<int64_t> &ids) const {
  if (word.empty())
    return;
  bool cacheable = word.size() <= kMaxCachedWordBytes;
  thread_local std::string key;
  if (cacheable) {
    key.assign(word);
    auto it = cache.find(key);
    if (it != cache.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> merged;
  merged.clear();
  int32_t whole = -1;
  if (ignoreMerges) {
    // A word that is a piece of the vocabulary is that piece.
    std::string mapped;
    if (kind == TokenizerKind::ByteLevelBpe) {
      for (unsigned char c : word)
        appendUtf8(byteMap().charOf[c], mapped);
    } else {
      mapped.assign(word);
    }
    whole = idOf(mapped);
  }
  if (whole >= 0)
    merged.push_back(whole);
  else
    mergeWord(word, merged);
  if (cacheable) {
    if (cache.size() >= kMaxCacheEntries)
      cache.clear();
    cache.emplace(key, merged);
  }
  ids.insert(ids.end(), merged.begin(), merged.end());
}

namespace {

/// Calls emit(start, end, match) for the parts of `text` around the split
/// step's matches, in order (`invert` swaps which are matches), until it
/// returns false; sets run.failure when matching failed.
template <typename Emit>
bool forEachSegment(const std::string &file, const PreTokenizerStep &step,
                    std::string_view text, EncodeRun &run, Emit &&emit) {
  size_t last = 0;
  bool going = true;
  auto found = [&](size_t start, size_t end) {
    going = (start == last || emit(last, start, step.invert)) && emit(start, end, !step.invert);
    last = end;
    return going;
  };
  if (step.regex) {
    run.matchBudget += uint64_t(CQ4P_TOKENIZER_MATCH_STEPS_PER_BYTE) * text.size();
    if (int error = step.regex->forEachMatch(text, run.data, run.context, run.matchBudget,
                                             found)) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      std::string what = "encode: " + file + ": " + step.regex->path() + ": ";
      if (error == PCRE2_ERROR_MATCHLIMIT)
        what += "the split pattern needs more work on this text than cq4p's match budget ("
                "CQ4P_TOKENIZER_MATCH_STEPS_BASE " +
                std::to_string(CQ4P_TOKENIZER_MATCH_STEPS_BASE) + " + " +
                std::to_string(CQ4P_TOKENIZER_MATCH_STEPS_PER_BYTE) +
                " a byte of text, in PCRE2's match-limit steps): a pattern this slow is "
                "refused rather than run for minutes";
      else
        what += "the split pattern failed on this text (PCRE2: " +
                std::string(reinterpret_cast<char *>(message)) + ")";
      run.failure = Status(CQ4P_ERROR_UNSUPPORTED, what);
      return false;
    }
  } else {
    for (size_t at = 0; going && (at = text.find(step.literal, at)) != std::string_view::npos;
         at += step.literal.size())
      found(at, at + step.literal.size());
  }
  if (going && last < text.size())
    going = emit(last, text.size(), step.invert);
  return going;
}

/// Joins a split's segments into pieces as its behavior says, passing each
/// piece on as soon as no later segment can join it: at most one piece is
/// held back, so a split takes no memory for the pieces of a long text.
template <typename Pass> class PieceJoiner {
public:
  PieceJoiner(SplitBehavior behavior, std::string_view text, Pass &pass)
      : behavior_(behavior), text_(text), pass_(pass) {}

  bool add(size_t start, size_t end, bool match) {
    switch (behavior_) {
    case SplitBehavior::Isolated:
      return pass_(text_.substr(start, end - start));
    case SplitBehavior::Removed:
      return match || pass_(text_.substr(start, end - start));
    case SplitBehavior::MergedWithPrevious:
    case SplitBehavior::Contiguous: {
      // A match joins the piece before it: after a non-match
      // (MergedWithPrevious) or after a match (Contiguous).
      bool joins = match && held_ &&
                   previousMatch_ == (behavior_ == SplitBehavior::Contiguous);
      previousMatch_ = match;
      if (joins) {
        heldEnd_ = end;
        return true;
      }
      return hold(start, end, match);
    }
    case SplitBehavior::MergedWithNext:
      // A match joins the non-match after it.
      if (held_ && heldMatch_ && !match) {
        held_ = false;
        return pass_(text_.substr(heldStart_, end - heldStart_));
      }
      if (match)
        return hold(start, end, match);
      return flush() && pass_(text_.substr(start, end - start));
    }
    return true;
  }
  bool flush() {
    if (!held_)
      return true;
    held_ = false;
    return pass_(text_.substr(heldStart_, heldEnd_ - heldStart_));
  }

private:
  bool hold(size_t start, size_t end, bool match) {
    if (!flush())
      return false;
    held_ = true;
    heldStart_ = start;
    heldEnd_ = end;
    heldMatch_ = match;
    return true;
  }

  SplitBehavior behavior_;
  std::string_view text_;
  Pass &pass_;
  bool held_ = false, heldMatch_ = false, previousMatch_ = false;
  size_t heldStart_ = 0, heldEnd_ = 0;
};

bool isNfcQuick(std::string_view text) {
  // Characters below U+0300 are NFC and compose with nothing before them.
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0xCC)
      return false;
  }
  return true;
}

} // namespace

bool Tokenizer::Impl::normalize(std::string_view section, std::string &storage,
                                std::string_view &text, EncodeRun &run) const {
  text = section;
  // Before a step writes its text: whether `size` bytes fit in what the
  // encode's normalized sections may take.
  auto fits = [&](const NormalizerStep &step, uint64_t size) {
    if (size <= run.normalizedRoom)
      return true;
    run.failure = Status(
        CQ4P_ERROR_ARGUMENT,
        "encode: " + file + ": " + step.path + " would make the text " +
            std::to_string(size) + " bytes, more than cq4p's limit for the normalized text (" +
            std::to_string(kNormalizedGrowth) + " times the text's bytes plus " +
            std::to_string(kNormalizedSlack) + ")");
    return false;
  };
  for (const NormalizerStep &step : normalizers) {
    switch (step.kind) {
    case NormalizerStep::Kind::Nfc: {
      if (isNfcQuick(text))
        break;
      utf8proc_uint8_t *result = nullptr;
      utf8proc_ssize_t length = utf8proc_map(
          reinterpret_cast<const utf8proc_uint8_t *>(text.data()),
          utf8proc_ssize_t(text.size()), &result,
          utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (length < 0 || result == nullptr) {
        std::free(result);
        run.failure = Status(CQ4P_ERROR_ARGUMENT, "encode: " + file + ": " + step.path +
                                                      ": utf8proc: " +
                                                      utf8proc_errmsg(length < 0 ? length : 0));
        return false;
      }
      bool kept = fits(step, uint64_t(length));
      if (kept)
        storage.assign(reinterpret_cast<char *>(result), size_t(length));
      std::free(result);
      if (!kept)
        return false;
      text = storage;
      break;
    }
    case NormalizerStep::Kind::Replace: {
      uint64_t count = 0;
      for (size_t at = 0; (at = text.find(step.from, at)) != std::string_view::npos;
           at += step.from.size())
        ++count;
      if (count == 0)
        break;
      if (!fits(step, text.size() - count * step.from.size() + count * step.to.size()))
        return false;
      std::string replaced;
      replaced.reserve(size_t(text.size() - count * step.from.size() + count * step.to.size()));
      size_t at = 0;
      for (size_t found; (found = text.find(step.from, at)) != std::string_view::npos;
           at = found + step.from.size())
        replaced.append(text.substr(at, found - at)).append(step.to);
      replaced.append(text.substr(at));
      storage.swap(replaced);
      text = storage;
      break;
    }
    case NormalizerStep::Kind::Prepend:
      if (!text.empty()) {
        if (!fits(step, uint64_t(text.size()) + step.to.size()))
          return false;
        std::string prepended = step.to;
        prepended.append(text);
        storage.swap(prepended);
        text = storage;
      }
      break;
    }
  }
  run.normalizedRoom -= std::min<uint64_t>(run.normalizedRoom, text.size());
  return true;
}

bool Tokenizer::Impl::encodeSection(std::string_view section, EncodeRun &run) const {
  std::string storage;
  std::string_view text;
  if (!normalize(section, storage, text, run))
    return false;
  return text.empty() || preTokenize(0, text, run);
}

/// Pre-tokenizer `step` onwards on `word`, each final piece encoded as it
/// is found: the steps' pieces are never all held at once (50 MiB of
/// digits were 50 million views, twice, and their segments).
bool Tokenizer::Impl::preTokenize(size_t step, std::string_view word, EncodeRun &run) const {
  if (step == preTokenizers.size()) {
    encodePreToken(word, run.ids);
    return true;
  }
  const PreTokenizerStep &pre = preTokenizers[step];
  std::string prefixed;
  SplitBehavior behavior = pre.behavior;
  if (pre.kind == PreTokenizerStep::Kind::ByteLevel) {
    if (pre.addPrefixSpace && (word.empty() || word[0] != ' ')) {
      prefixed.reserve(word.size() + 1);
      prefixed.assign(" ").append(word);
      word = prefixed;
    }
    if (!pre.regex)
      return preTokenize(step + 1, word, run);
    behavior = SplitBehavior::Isolated;
  }
  auto pass = [&](std::string_view piece) { return preTokenize(step + 1, piece, run); };
  PieceJoiner<decltype(pass)> joiner(behavior, word, pass);
  return forEachSegment(file, pre, word, run,
                        [&](size_t start, size_t end, bool match) {
                          return joiner.add(start, end, match);
                        }) &&
         joiner.flush();
}

void Tokenizer::Impl::encodePreToken(std::string_view word, std::vector<int64_t> &ids) const {
  if (word.empty())
    return;
  if (!splitAtUnjoinable) {
    encodeBounded(word, ids);
    return;
  }
  size_t start = 0, length;
  uint32_t previous = decodeAt(word, 0, length);
  for (size_t i = length; i < word.size(); i += length) {
    uint32_t cp = decodeAt(word, i, length);
    if (!joinable.contains(PairSet::key(previous, cp))) {
      encodeBounded(word.substr(start, i - start), ids);
      start = i;
    }
    previous = cp;
  }
  encodeBounded(word.substr(start), ids);
}

/// A word longer than CQ4P_TOKENIZER_MAX_WORD_BYTES is merged in pieces of
/// at most that many bytes, cut between characters: merging is O(n log n)
/// in time and about 40 bytes of memory a byte, and text with such words
/// (a run of one letter, of spaces) is no ordinary text. The reference
/// tokenizers merge a word whole, so ids next to a cut may differ from
/// theirs (docs/TOKENIZER.md).
void Tokenizer::Impl::encodeBounded(std::string_view word, std::vector<int64_t> &ids) const {
  while (word.size() > CQ4P_TOKENIZER_MAX_WORD_BYTES) {
    size_t cut = CQ4P_TOKENIZER_MAX_WORD_BYTES;
    while (cut > 0 && (static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80)
      --cut;
    encodeWord(word.substr(0, cut), ids);
    word.remove_prefix(cut);
  }
  encodeWord(word, ids);
}

//===----------------------------------------------------------------------===//
// Config files and chat
//===----------------------------------------------------------------------===//

namespace {

/// A token named in a config: "text" or {"content": "text", ...}.
std::string tokenText(const Json *value) {
  if (value == nullptr)
    return "";
  if (value->is_string())
    return value->get<std::string>();
  if (const Json *content = member(*value, "content"); content && content->is_string())
    return content->get<std::string>();
  return "";
}

struct ChatMarkers {
  ChatFormat format;
  const char *marker;
  const char *variant; // a second marker that picks the variant below
  ChatFormat variantFormat;
};

} // namespace

Status Tokenizer::Impl::loadConfig(const TokenizerFiles &files) {
  Json config;
  std::string templateText;
  if (!files.tokenizerConfig.empty()) {
    if (Status s = parseJsonFile(files.tokenizerConfig, config, files.noFollow); !s)
      return s;
    const std::string &cfg = files.tokenizerConfig;
    std::string bosName = tokenText(member(config, "bos_token"));
    if (!bosName.empty()) {
      bos = idOf(bosName);
      if (bos < 0)
        return malformed(cfg, "bos_token", "a token of the vocabulary", showText(bosName));
      bosText = bosName;
    }
    std::string eosName = tokenText(member(config, "eos_token"));
    if (!eosName.empty()) {
      int32_t eos = idOf(eosName);
      if (eos < 0)
        return malformed(cfg, "eos_token", "a token of the vocabulary", showText(eosName));
      stops.push_back(eos);
    }
    // clean_up_tokenization_spaces is a decode-time cosmetic cq4p does not
    // apply (docs/TOKENIZER.md); the options below change the ids.
    bool value;
    if (Status s = getBool(cfg, config, "add_prefix_space", "(document)", value, false); !s)
      return s;
    if (value)
      return unsupported(cfg, "add_prefix_space", "true", "false");
    if (Status s = getBool(cfg, config, "do_lower_case", "(document)", value, false); !s)
      return s;
    if (value)
      return unsupported(cfg, "do_lower_case", "true", "false");
    if (const Json *chatTemplate = member(config, "chat_template")) {
      if (chatTemplate->is_string()) {
        templateText = chatTemplate->get<std::string>();
      } else if (chatTemplate->is_array()) {
        for (const Json &entry : *chatTemplate)
          if (tokenText(member(entry, "name")) == "default" ||
              (member(entry, "name") && member(entry, "name")->is_string() &&
               member(entry, "name")->get<std::string>() == "default"))
            if (const Json *t = member(entry, "template"); t && t->is_string())
              templateText = t->get<std::string>();
      }
    }
  }
  if (!files.generationConfig.empty()) {
    Json generation;
    if (Status s = parseJsonFile(files.generationConfig, generation, files.noFollow); !s)
      return s;
    if (const Json *eos = member(generation, "eos_token_id"); !isAbsent(eos)) {
      auto add = [&](const Json &id, const std::string &path) {
        // Unsigned: 2^63 and above were negative as int64 and passed.
        if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(size))
          return malformed(files.generationConfig, path,
                           "an id below " + std::to_string(size) + " (the vocabulary's size)",
                           showJson(id));
        stops.push_back(int64_t(id.get<uint64_t>()));
        return Status::ok();
      };
      if (!eos->is_array()) {
        if (Status s = add(*eos, "eos_token_id"); !s)
          return s;
      } else {
        for (size_t i = 0; i < eos->size(); ++i)
          if (Status s = add((*eos)[i], "eos_token_id[" + std::to_string(i) + "]"); !s)
            return s;
      }
    }
  }
  if (!files.chatTemplate.empty())
    if (Status s = readFile(files.chatTemplate, templateText, files.noFollow); !s)
      return s;

  static const ChatMarkers known[] = {
      {ChatFormat::ChatMl, "<|im_start|>", "You are Qwen, created by Alibaba Cloud",
       ChatFormat::ChatMlQwen},
      {ChatFormat::Llama3, "<|start_header_id|>", "Cutting Knowledge Date",
       ChatFormat::Llama31},
      // Before Gemma 3's marker: a template may mention both.
      {ChatFormat::Gemma4, "<|turn>", nullptr, ChatFormat::None},
      {ChatFormat::Gemma, "<start_of_turn>", nullptr, ChatFormat::None},
  };
  if (templateText.empty()) {
    chatStatus = Status(CQ4P_ERROR_UNSUPPORTED,
                        "chat: the tokenizer has no chat template "
                        "(tokenizer_config.json chat_template or chat_template.jinja)");
  } else {
    for (const ChatMarkers &entry : known)
      if (chat == ChatFormat::None &&
          templateText.find(entry.marker) != std::string::npos) {
        chat = entry.format;
        if (entry.variant && templateText.find(entry.variant) != std::string::npos)
          chat = entry.variantFormat;
      }
    if (chat == ChatFormat::None)
      chatStatus = Status(CQ4P_ERROR_UNSUPPORTED,
                          "chat: the chat template is not one cq4p knows (it has none of "
                          "<|im_start|> (ChatML), <|start_header_id|> (Llama 3), "
                          "<|turn> (Gemma 4), <start_of_turn> (Gemma); cq4p runs no "
                          "template engine): " +
                              showText(templateText.substr(0, 80)));
  }
  if (chat == ChatFormat::Gemma4) {
    // The empty thought channel, as the template's text spells it: inside a
    // Jinja string ("\n" escaped) or written out (a real newline).
    for (const char *empty : {"<|channel>thought\\n<channel|>", "<|channel>thought\n<channel|>"})
      chatEmptyThought |= templateText.find(empty) != std::string::npos;
  }
  if (chat != ChatFormat::None) {
    const char *needed[4] = {};
    switch (chat) {
    case ChatFormat::ChatMl:
    case ChatFormat::ChatMlQwen:
      needed[0] = "<|im_start|>";
      needed[1] = "<|im_end|>";
      break;
    case ChatFormat::Llama3:
    case ChatFormat::Llama31:
      needed[0] = "<|start_header_id|>";
      needed[1] = "<|end_header_id|>";
      needed[2] = "<|eot_id|>";
      break;
    case ChatFormat::Gemma:
      needed[0] = "<start_of_turn>";
      needed[1] = "<end_of_turn>";
      break;
    case ChatFormat::Gemma4:
      needed[0] = "<|turn>";
      needed[1] = "<turn|>";
      if (chatEmptyThought) {
        needed[2] = "<|channel>";
        needed[3] = "<channel|>";
      }
      break;
    case ChatFormat::None:
      break;
    }
    for (const char *token : needed)
      if (token != nullptr && idOf(token) < 0) {
        chatStatus = Status(CQ4P_ERROR_UNSUPPORTED,
                            std::string("chat: the ") + chatFormatName(chat) +
                                " template needs the token " + token +
                                ", which the vocabulary lacks");
        chat = ChatFormat::None;
        break;
      }
  }
  if (chat != ChatFormat::None) {
    chatAddsBos = chat == ChatFormat::Llama3 || chat == ChatFormat::Llama31 ||
                  chat == ChatFormat::Gemma || chat == ChatFormat::Gemma4 ||
                  templateText.find("bos_token") != std::string::npos;
    if (chatAddsBos && bosText.empty()) {
      chatStatus = Status(CQ4P_ERROR_UNSUPPORTED,
                          std::string("chat: the ") + chatFormatName(chat) +
                              " template starts with bos_token, which "
                              "tokenizer_config.json does not name");
      chat = ChatFormat::None;
    }
  }
  // The end of a turn stops generation too.
  const char *endOfTurn = chat == ChatFormat::Gemma    ? "<end_of_turn>"
                          : chat == ChatFormat::Gemma4 ? "<turn|>"
                          : chat == ChatFormat::Llama3 || chat == ChatFormat::Llama31
                              ? "<|eot_id|>"
                          : chat != ChatFormat::None ? "<|im_end|>"
                                                     : nullptr;
  if (endOfTurn != nullptr)
    stops.push_back(idOf(endOfTurn));
  if (chat == ChatFormat::Llama31)
    if (int32_t eom = idOf("<|eom_id|>"); eom >= 0)
      stops.push_back(eom);
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Tokenizer
//===----------------------------------------------------------------------===//

const char *chatFormatName(ChatFormat format) {
  switch (format) {
  case ChatFormat::None: return "none";
  case ChatFormat::ChatMl: return "ChatML";
  case ChatFormat::ChatMlQwen: return "ChatML (Qwen2.5 default system prompt)";
  case ChatFormat::Llama3: return "Llama 3";
  case ChatFormat::Llama31: return "Llama 3.1";
  case ChatFormat::Gemma: return "Gemma";
  case ChatFormat::Gemma4: return "Gemma 4";
  }
  return "unknown";
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Status Tokenizer::open(const TokenizerFiles &files,
                       std::unique_ptr<Tokenizer> &out) {
  if (files.tokenizerJson.empty())
    return Status(CQ4P_ERROR_ARGUMENT, "tokenizer: expected the path of a "
                                       "tokenizer.json, found none");
  auto impl = std::make_unique<Impl>();
  impl->file = files.tokenizerJson;
  {
    Json root;
    if (Status s = parseJsonFile(files.tokenizerJson, root, files.noFollow); !s)
      return s;
    if (Status s = impl->load(root); !s)
      return s;
  }
  if (Status s = impl->loadConfig(files); !s)
    return s;
  out.reset(new Tokenizer(std::move(impl)));
  return Status::ok();
}

namespace {
bool isRegularFile(const std::string &path, bool noFollow) {
  struct stat info;
  return (noFollow ? ::lstat(path.c_str(), &info) : ::stat(path.c_str(), &info)) == 0 &&
         S_ISREG(info.st_mode);
}
} // namespace

bool Tokenizer::directoryHasTokenizer(const std::string &directory) {
  return isRegularFile(directory + "/tokenizer.json", false);
}

Status Tokenizer::openDirectory(const std::string &directory,
                                std::unique_ptr<Tokenizer> &out, bool confined) {
  TokenizerFiles files;
  files.noFollow = confined;
  files.tokenizerJson = directory + "/tokenizer.json";
  if (!isRegularFile(files.tokenizerJson, false))
    return Status(CQ4P_ERROR_NOT_FOUND,
                  directory + ": no tokenizer.json (convert copies it from the "
                              "checkpoint directory)");
  auto optional = [&](const char *name, std::string &path) {
    // Present (a link too, so that a confined open refuses it by name).
    std::string candidate = directory + "/" + name;
    struct stat info;
    if (::lstat(candidate.c_str(), &info) == 0)
      path = candidate;
  };
  optional("tokenizer_config.json", files.tokenizerConfig);
  optional("generation_config.json", files.generationConfig);
  optional("chat_template.jinja", files.chatTemplate);
  return open(files, out);
}

Status Tokenizer::encode(std::string_view text, bool addSpecial,
                         std::vector<int64_t> &ids) const {
  const Impl &impl = *impl_;
  if (text.size() > CQ4P_TOKENIZER_MAX_TEXT_BYTES)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "encode: the text is " + std::to_string(text.size()) +
                      " bytes, more than the limit of " +
                      std::to_string(CQ4P_TOKENIZER_MAX_TEXT_BYTES) +
                      " for one encode (CQ4P_TOKENIZER_MAX_TEXT_BYTES)");
  if (size_t bad = findInvalidUtf8(text); bad != std::string_view::npos)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "encode: the text is not valid UTF-8 at byte " +
                      std::to_string(bad) + " of " + std::to_string(text.size()));
  size_t first = ids.size();
  if (addSpecial)
    ids.insert(ids.end(), impl.prefix.begin(), impl.prefix.end());
  EncodeRun run{ids};
  run.normalizedRoom = kNormalizedGrowth * uint64_t(text.size()) + kNormalizedSlack;
  // The whole match's offsets are all a split reads (a pattern with groups
  // still matches: pcre2_match returns 0, the ovector too small for them).
  bool patterns = false;
  for (const PreTokenizerStep &step : impl.preTokenizers)
    patterns |= step.regex != nullptr;
  if (patterns) {
    run.data = pcre2_match_data_create(1, nullptr);
    run.context = pcre2_match_context_create(nullptr);
    // The interpreter's backtracking memory (JIT code uses its own 32 KiB
    // stack); PCRE2's default is 20 GB.
    pcre2_set_heap_limit(run.context, kMatchHeapKiB);
  }
  bool going = true;
  {
    std::lock_guard<std::mutex> lock(impl.cacheMutex);
    // Added tokens, leftmost-longest: block by block, the longest token at
    // each start (found from the right), then the first start at or after
    // the end of the last token taken.
    size_t sectionStart = 0;
    if (!impl.addedTokens.empty()) {
      const size_t block = std::max(kAddedTokenBlockBytes, impl.addedTokens.longest());
      std::vector<std::pair<size_t, int32_t>> starts; // (start, id), from the right
      std::vector<size_t> lengths;
      for (size_t begin = 0; going && begin < text.size(); begin += block) {
        size_t end = std::min(text.size(), begin + block);
        starts.clear();
        lengths.clear();
        impl.addedTokens.forEachStart(text, begin, end, [&](size_t at, int32_t id, size_t length) {
          starts.emplace_back(at, id);
          lengths.push_back(length);
        });
        for (size_t k = starts.size(); going && k-- > 0;) {
          auto [at, id] = starts[k];
          if (at < sectionStart)
            continue; // inside the token taken last
          going = impl.encodeSection(text.substr(sectionStart, at - sectionStart), run);
          ids.push_back(id);
          sectionStart = at + lengths[k];
        }
      }
    }
    going = going && impl.encodeSection(text.substr(sectionStart), run);
  }
  if (run.data != nullptr)
    pcre2_match_data_free(run.data);
  if (run.context != nullptr)
    pcre2_match_context_free(run.context);
  if (!going) {
    ids.resize(first);
    return run.failure;
  }
  if (addSpecial)
    ids.insert(ids.end(), impl.suffix.begin(), impl.suffix.end());
  for (size_t k = first; k < ids.size(); ++k)
    if (ids[k] < 0) {
      ids.resize(first);
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    "encode: a character is outside the vocabulary and the "
                    "tokenizer has no unk_token or byte fallback");
    }
  return Status::ok();
}

Status Tokenizer::decode(const int64_t *ids, size_t count,
                         std::string &text) const {
  TextDecoder decoder(*this);
  for (size_t i = 0; i < count; ++i)
    if (Status s = decoder.push(ids[i], text); !s)
      return s;
  decoder.finish(text);
  return Status::ok();
}

TokenizerKind Tokenizer::kind() const { return impl_->kind; }
const char *Tokenizer::kindName() const {
  return impl_->kind == TokenizerKind::ByteLevelBpe ? "byte-level BPE"
                                                    : "SentencePiece-style BPE";
}
int64_t Tokenizer::vocabSize() const { return impl_->size; }
std::string_view Tokenizer::piece(int64_t id) const {
  if (id < 0 || id >= impl_->size)
    return {};
  return impl_->pieces[size_t(id)];
}
int64_t Tokenizer::pieceId(std::string_view piece) const {
  return impl_->idOf(piece);
}
bool Tokenizer::isSpecial(int64_t id) const {
  return id >= 0 && id < impl_->size && (impl_->flags[size_t(id)] & kSpecial);
}
std::vector<int64_t> Tokenizer::specialIds() const {
  std::vector<int64_t> out;
  for (size_t id = 0; id < impl_->flags.size(); ++id)
    if (impl_->flags[id] & kSpecial)
      out.push_back(int64_t(id));
  return out;
}
const std::vector<int64_t> &Tokenizer::prefixIds() const { return impl_->prefix; }
const std::vector<int64_t> &Tokenizer::suffixIds() const { return impl_->suffix; }
int64_t Tokenizer::bosId() const { return impl_->bos; }
const std::vector<int64_t> &Tokenizer::stopIds() const { return impl_->stops; }
bool Tokenizer::isStop(int64_t id) const {
  return std::binary_search(impl_->stops.begin(), impl_->stops.end(), id);
}
ChatFormat Tokenizer::chatFormat() const { return impl_->chat; }
const Status &Tokenizer::chatStatus() const { return impl_->chatStatus; }

namespace {
/// What Jinja's trim strips (Python's str.strip()): the characters for
/// which str.isspace() holds.
bool isJinjaSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
         cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/// `text` (valid UTF-8) without its leading and trailing white space.
std::string trimmed(std::string_view text) {
  if (findInvalidUtf8(text) != std::string_view::npos)
    return std::string(text); // not text a template could have been given
  size_t first = 0, length = 0;
  while (first < text.size() && isJinjaSpace(decodeAt(text, first, length)))
    first += length;
  size_t end = first;
  for (size_t i = first; i < text.size(); i += length)
    if (!isJinjaSpace(decodeAt(text, i, length)))
      end = i + length;
  return std::string(text.substr(first, end - first));
}
} // namespace

std::string stripThoughts(std::string_view reply) {
  // As Gemma 4's templates do: split at each close; of a part holding an
  // open, keep what comes before it.
  std::string kept;
  for (size_t begin = 0;;) {
    size_t close = reply.find(kThoughtClose, begin);
    std::string_view part = reply.substr(begin, close == std::string_view::npos
                                                    ? std::string_view::npos
                                                    : close - begin);
    kept.append(part.substr(0, part.find(kThoughtOpen)));
    if (close == std::string_view::npos)
      break;
    begin = close + kThoughtClose.size();
  }
  return trimmed(kept);
}

Status Tokenizer::checkChatOptions(const ChatOptions &options) const {
  const Impl &impl = *impl_;
  if (impl.chat == ChatFormat::None)
    return impl.chatStatus;
  if (!options.enableThinking)
    return Status::ok();
  if (impl.chat != ChatFormat::Gemma4)
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  std::string("chat: thinking: the ") + chatFormatName(impl.chat) +
                      " format has no thinking switch cq4p knows (Gemma 4's has)");
  for (const char *token : {"<|think|>", "<|channel>", "<channel|>"})
    if (impl.idOf(token) < 0)
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    std::string("chat: thinking needs the token ") + token +
                        ", which the vocabulary lacks");
  return Status::ok();
}

bool Tokenizer::chatHasThoughts() const { return impl_->chat == ChatFormat::Gemma4; }

Status Tokenizer::renderChat(const std::vector<ChatMessage> &messages,
                             bool start, bool addGenerationPrompt,
                             std::string &text) const {
  return renderChat(messages, start, addGenerationPrompt, ChatOptions(), text);
}

Status Tokenizer::renderChat(const std::vector<ChatMessage> &messages,
                             bool start, bool addGenerationPrompt,
                             const ChatOptions &options, std::string &text) const {
  const Impl &impl = *impl_;
  if (Status status = checkChatOptions(options); !status)
    return status;
  bool gemma4 = impl.chat == ChatFormat::Gemma4;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string &role = messages[i].role;
    bool developer = gemma4 && role == "developer";
    if (role != "system" && role != "user" && role != "assistant" && !developer)
      return Status(CQ4P_ERROR_ARGUMENT, "chat: message " + std::to_string(i) +
                                             ": role: expected system, user or "
                                             "assistant, found " + showText(role));
    if ((role == "system" || developer) && (i != 0 || !start))
      return Status(CQ4P_ERROR_ARGUMENT,
                    "chat: a system message only opens the conversation "
                    "(found one at message " + std::to_string(i) + ")");
    if (findInvalidUtf8(messages[i].content) != std::string::npos)
      return Status(CQ4P_ERROR_ARGUMENT, "chat: message " + std::to_string(i) +
                                             " is not valid UTF-8");
  }
  size_t first = 0;
  std::string system;
  bool hasSystem = !messages.empty() &&
                   (messages[0].role == "system" || messages[0].role == "developer");
  if (hasSystem) {
    system = messages[0].content;
    first = 1;
  }
  if (start && impl.chatAddsBos)
    text += impl.bosText;
  switch (impl.chat) {
  case ChatFormat::ChatMl:
  case ChatFormat::ChatMlQwen:
    if (start && !hasSystem && impl.chat == ChatFormat::ChatMlQwen)
      text += "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You "
              "are a helpful assistant.<|im_end|>\n";
    if (hasSystem)
      text += "<|im_start|>system\n" + system + "<|im_end|>\n";
    for (size_t i = first; i < messages.size(); ++i)
      text += "<|im_start|>" + messages[i].role + "\n" + messages[i].content +
              "<|im_end|>\n";
    if (addGenerationPrompt)
      text += "<|im_start|>assistant\n";
    break;
  case ChatFormat::Llama3:
  case ChatFormat::Llama31: {
    auto header = [&](const std::string &role) {
      text += "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
    };
    if (impl.chat == ChatFormat::Llama31 && start) {
      header("system");
      text += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" +
              trimmed(system) + "<|eot_id|>";
    } else if (hasSystem) {
      header("system");
      text += trimmed(system) + "<|eot_id|>";
    }
    for (size_t i = first; i < messages.size(); ++i) {
      header(messages[i].role);
      text += trimmed(messages[i].content) + "<|eot_id|>";
    }
    if (addGenerationPrompt)
      header("assistant");
    break;
  }
  case ChatFormat::Gemma:
    for (size_t i = first; i < messages.size(); ++i) {
      const std::string &role = messages[i].role;
      std::string content = trimmed(messages[i].content);
      if (i == first && hasSystem)
        content = system + "\n\n" + content;
      text += "<start_of_turn>" + std::string(role == "assistant" ? "model" : role) +
              "\n" + content + "<end_of_turn>\n";
    }
    if (addGenerationPrompt)
      text += "<start_of_turn>model\n";
    break;
  case ChatFormat::Gemma4:
    // MODELS.md section 6.1a: a system turn of its own, past replies
    // without their thoughts, consecutive replies as one model turn.
    if (start && (hasSystem || options.enableThinking))
      text += "<|turn>system\n" + std::string(options.enableThinking ? "<|think|>\n" : "") +
              trimmed(system) + "<turn|>\n";
    for (size_t i = first; i < messages.size(); ++i) {
      bool reply = messages[i].role == "assistant";
      bool continued = reply && i > first && messages[i - 1].role == "assistant";
      if (!continued)
        text += "<|turn>" + std::string(reply ? "model" : messages[i].role) + "\n";
      text += reply ? stripThoughts(messages[i].content) : trimmed(messages[i].content);
      bool closed = !(reply && i + 1 < messages.size() && messages[i + 1].role == "assistant");
      if (closed)
        text += "<turn|>\n";
    }
    if (addGenerationPrompt) {
      text += "<|turn>model\n";
      if (impl.chatEmptyThought && !options.enableThinking)
        text += std::string(kThoughtOpen) + "thought\n" + std::string(kThoughtClose);
    }
    break;
  case ChatFormat::None:
    break;
  }
  return Status::ok();
}

std::string Tokenizer::endOfAssistantTurn() const {
  switch (impl_->chat) {
  case ChatFormat::ChatMl:
  case ChatFormat::ChatMlQwen: return "<|im_end|>\n";
  case ChatFormat::Llama3:
  case ChatFormat::Llama31: return "<|eot_id|>";
  case ChatFormat::Gemma: return "<end_of_turn>\n";
  case ChatFormat::Gemma4: return "<turn|>\n";
  case ChatFormat::None: return "";
  }
  return "";
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

size_t findInvalidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    int expected, matched;
    inspectSequence(text, i, expected, matched);
    if (expected == 0 || matched != expected)
      return i;
    i += size_t(matched);
  }
  return std::string_view::npos;
}

size_t appendUtf8Lossy(std::string_view bytes, bool final, std::string &text) {
  size_t i = 0;
  while (i < bytes.size()) {
    int expected, matched;
    inspectSequence(bytes, i, expected, matched);
    if (expected > 0 && matched == expected) {
      text.append(bytes.substr(i, size_t(matched)));
      i += size_t(matched);
      continue;
    }
    if (expected > 0 && i + size_t(matched) == bytes.size() && !final)
      return bytes.size() - i; // held until the character completes
    // A maximal invalid subpart is one U+FFFD, as Hugging Face's (Rust's
    // from_utf8_lossy) decoding does.
    text += "\xEF\xBF\xBD";
    i += size_t(std::max(matched, 1));
  }
  return 0;
}

Status TextDecoder::push(int64_t id, std::string &text) {
  const Tokenizer::Impl &impl = *tokenizer_->impl_;
  if (id < 0 || id >= impl.size || impl.pieces[size_t(id)].empty())
    return Status(CQ4P_ERROR_ARGUMENT,
                  "decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(impl.size) + ")");
  pending_ += impl.decoded[size_t(id)];
  emit(text, false);
  return Status::ok();
}

void TextDecoder::emit(std::string &text, bool final) {
  const Tokenizer::Impl &impl = *tokenizer_->impl_;
  if (!started_) {
    // Strip: the decoder's leading spaces, once per sequence.
    size_t strip = 0;
    while (strip < impl.stripLeadingSpaces && strip < pending_.size() &&
           pending_[strip] == ' ')
      ++strip;
    if (strip == pending_.size() && strip < impl.stripLeadingSpaces && !final) {
      return; // more spaces may come
    }
    pending_.erase(0, strip);
    if (pending_.empty() && !final)
      return;
    started_ = true;
  }
  size_t held = appendUtf8Lossy(pending_, final, text);
  pending_.erase(0, pending_.size() - held);
}

void TextDecoder::finish(std::string &text) {
  emit(text, true);
  pending_.clear();
}

void TextDecoder::reset() {
  pending_.clear();
  started_ = false;
}

} // namespace cq4p::runtime
