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

#include "TokenizerInternal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cq4p::runtime {

//===----------------------------------------------------------------------===//
// Tokenizer
//===----------------------------------------------------------------------===//

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

} // namespace cq4p::runtime
