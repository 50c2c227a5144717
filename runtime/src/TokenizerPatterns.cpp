//===- TokenizerPatterns.cpp - normalization and split patterns -----------===//
//
// Each section of a text between added tokens is normalized, then
// pre-tokenized (PCRE2 matches of the file's split patterns, under a match
// budget scaled to the text; each step passes a piece on as soon as no
// later match can join it, so no list of words is held).
//
//===----------------------------------------------------------------------===//

#include "TokenizerInternal.h"

#include <utf8proc.h>

namespace cq4p::runtime {
namespace tokenizer_internal {

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

} // namespace tokenizer_internal

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

} // namespace cq4p::runtime
