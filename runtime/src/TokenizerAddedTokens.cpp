//===- TokenizerAddedTokens.cpp - added and special tokens ----------------===//
//
// Added tokens are cut out of a text before anything else (leftmost-longest,
// an Aho-Corasick automaton of their reversed bytes read from the text's
// end: AddedTokenMatcher, TokenizerInternal.h).
//
//===----------------------------------------------------------------------===//

#include "TokenizerInternal.h"

namespace cq4p::runtime {

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

} // namespace cq4p::runtime
