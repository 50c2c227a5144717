//===- TokenizerJson.cpp - reading and validating tokenizer.json ----------===//
//
// nlohmann-json's SAX parser feeds a tree builder that bounds the nesting
// (CQ4P_TOKENIZER_MAX_NESTING), refuses a member named twice and names the
// member of any error; no exception is thrown (the runtime builds with
// -fno-exceptions), and every member is type-checked before it is read,
// since a wrong-typed read would abort.
//
//===----------------------------------------------------------------------===//

#include "TokenizerInternal.h"

#include "SafeOpen.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cq4p::runtime {
namespace tokenizer_internal {

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

} // namespace tokenizer_internal

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

} // namespace cq4p::runtime
