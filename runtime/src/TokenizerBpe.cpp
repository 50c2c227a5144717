//===- TokenizerBpe.cpp - the vocabulary, merges and BPE ------------------===//
//
// The vocabulary becomes id-indexed pieces, one to an id; merges become an
// open-addressing table from a pair of ids to (rank, merged id). Each word
// is merged by rank: a heap of adjacent pairs, lowest rank then leftmost
// first, the order of Hugging Face's BPE. Byte-level words start from one
// symbol per byte (the GPT-2 byte-to-character map); SentencePiece words
// from one symbol per character, characters missing from the vocabulary
// falling back to their <0xXX> byte pieces. Words longer than
// CQ4P_TOKENIZER_MAX_WORD_BYTES are merged in pieces; short words' ids are
// cached.
//
//===----------------------------------------------------------------------===//

#include "TokenizerInternal.h"

#include <unordered_set>

namespace cq4p::runtime {

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

} // namespace cq4p::runtime
