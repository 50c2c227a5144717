//===- Tokenizer.h - Hugging Face tokenizer.json, in the runtime -*- C++ -*-===//
//
// Text in, ids out, and back, for the tokenizers of the families cq4p runs
// (docs/TOKENIZER.md):
//
//   - byte-level BPE (Qwen2/2.5/3, Llama 3.x, LFM2, SmolLM2): the file's
//     split patterns (PCRE2, UTF + UCP; `\s` is Unicode White_Space as in the
//     Rust tokenizers' Oniguruma), the GPT-2 byte-to-character map,
//     `ignore_merges`, an NFC normalizer (utf8proc);
//   - SentencePiece-style BPE (Gemma 3, Gemma 4): a Replace / Prepend
//     normalizer (' ' -> U+2581), byte fallback (<0xXX> pieces), no split;
//   - added tokens (special or not) matched first, leftmost-longest, on the
//     raw text; the post-processor's template (TemplateProcessing: BOS).
//
// The three JSON files are parsed with nlohmann-json. Every member that
// changes what the ids are is read and checked: a normalizer, pre-tokenizer,
// model, post-processor or decoder type, or an option, that the tokenizer
// does not implement is refused at open by name (the file, the member's
// path and the value found), never tokenized approximately.
//
// Everything a file or a text could make it spend is bounded (cq4p.h's
// CQ4P_TOKENIZER_* limits, docs/TOKENIZER.md "Limits"): the JSON's nesting,
// the steps of a pipeline, one encode's text and its normalized size, the
// bytes merged as one word, the split patterns' matching work; added tokens
// are found in linear time. What passes a limit is refused by name.
//
// Encoding takes UTF-8; invalid UTF-8 is refused with the byte offset of
// the first bad sequence. Decoding gives UTF-8: pieces whose bytes are not
// valid UTF-8 (byte-level or byte-fallback pieces the model put in a bad
// order) become U+FFFD, as Hugging Face's decoders do. TextDecoder does the
// same incrementally and never splits a character between two calls.
//
// A Tokenizer is immutable once open except for a cache of encoded words
// behind a mutex: encode() may be called from several threads.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_TOKENIZER_H
#define CQ4P_RUNTIME_TOKENIZER_H

#include "cq4p/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cq4p::runtime {

enum class TokenizerKind { ByteLevelBpe, SentencePieceBpe };

/// The chat formats cq4p knows, recognised from the bundle's chat template
/// by their markers (no template engine runs).
enum class ChatFormat {
  None,       ///< no template, or one cq4p does not know (chatStatus says)
  ChatMl,     ///< <|im_start|>role\n...<|im_end|>\n (Qwen3, LFM2 with BOS)
  ChatMlQwen, ///< ChatML with Qwen2.5's default system prompt
  Llama3,     ///< <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Llama31,    ///< Llama 3.1/3.2: a system header with the knowledge dates
  Gemma,      ///< <start_of_turn>user\n...<end_of_turn>\n, "model" replies
  Gemma4,     ///< <|turn>user\n...<turn|>\n, a system turn, a thought channel
};

const char *chatFormatName(ChatFormat format);

/// The files a tokenizer is read from; empty paths are absent files.
struct TokenizerFiles {
  std::string tokenizerJson;    ///< required
  std::string tokenizerConfig;  ///< tokenizer_config.json
  std::string generationConfig; ///< generation_config.json (stop ids)
  std::string chatTemplate;     ///< chat_template.jinja (wins over the config's)
  /// Refuse symbolic links (a bundle's files, docs/TRUST.md); a model
  /// directory of Hugging Face's cache is made of links.
  bool noFollow = false;
};

struct ChatMessage {
  std::string role; ///< "system", "user" or "assistant" (Gemma 4: "developer" first too)
  std::string content;
};

/// Gemma 4's thought channel: the model's reasoning comes between these
/// markers, before its answer (docs/TOKENIZER.md).
inline constexpr std::string_view kThoughtOpen = "<|channel>";
inline constexpr std::string_view kThoughtClose = "<channel|>";

/// A conversation's options beyond its messages.
struct ChatOptions {
  /// Gemma 4: <|think|> in the system turn, so that the model reasons in
  /// its thought channel before it answers. Other formats refuse it.
  bool enableThinking = false;
  /// Deliver the thought channel, markers included, with the answer; by
  /// default it is held back (the answer alone is streamed).
  bool showThinking = false;
};

/// What Gemma 4's templates keep of a past reply: the text outside its
/// thought channels (each <|channel>...<channel|>; an unclosed one runs to
/// the end), trimmed.
std::string stripThoughts(std::string_view reply);

class Tokenizer {
public:
  /// Refuses a tokenizer whose vocabulary is larger than this.
  static constexpr int64_t kMaxVocab = int64_t(1) << 24;

  static Status open(const TokenizerFiles &files,
                     std::unique_ptr<Tokenizer> &out);
  /// The files of `directory` (a bundle or a Hugging Face model directory):
  /// tokenizer.json and, when present, the other three. `confined`: a
  /// bundle's, where symbolic links are refused.
  static Status openDirectory(const std::string &directory,
                              std::unique_ptr<Tokenizer> &out,
                              bool confined = false);
  /// Whether `directory` has a tokenizer.json.
  static bool directoryHasTokenizer(const std::string &directory);

  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;
  ~Tokenizer();

  /// Appends the ids of `text` to `ids`; with `addSpecial`, the
  /// post-processor's tokens too (BOS where the file's template adds it).
  Status encode(std::string_view text, bool addSpecial,
                std::vector<int64_t> &ids) const;
  /// The UTF-8 text of `ids` (special tokens as their text), appended.
  Status decode(const int64_t *ids, size_t count, std::string &text) const;

  TokenizerKind kind() const;
  const char *kindName() const;
  /// Largest id + 1 over the model's vocabulary and the added tokens.
  int64_t vocabSize() const;
  /// The piece of `id` as the file spells it ("" for an unknown id).
  std::string_view piece(int64_t id) const;
  /// The id of a piece or added token, -1 when there is none.
  int64_t pieceId(std::string_view piece) const;
  bool isSpecial(int64_t id) const;
  /// The added tokens marked special, by id.
  std::vector<int64_t> specialIds() const;
  /// The ids the post-processor puts before and after the text.
  const std::vector<int64_t> &prefixIds() const;
  const std::vector<int64_t> &suffixIds() const;
  /// BOS from the config's bos_token, -1 when none.
  int64_t bosId() const;
  /// Where generation stops: the config's eos_token, every
  /// generation_config eos_token_id, and the chat format's end of turn.
  const std::vector<int64_t> &stopIds() const;
  bool isStop(int64_t id) const;

  ChatFormat chatFormat() const;
  /// Why chat is unavailable (ok when chatFormat() != None).
  const Status &chatStatus() const;
  /// The text of `messages` in the chat format, the opening of an assistant
  /// turn after it when `addGenerationPrompt`, the conversation's start
  /// (BOS, a default system turn) when `start`.
  Status renderChat(const std::vector<ChatMessage> &messages, bool start,
                    bool addGenerationPrompt, std::string &text) const;
  Status renderChat(const std::vector<ChatMessage> &messages, bool start,
                    bool addGenerationPrompt, const ChatOptions &options,
                    std::string &text) const;
  /// Whether the chat format takes `options` (thinking: Gemma 4 with a
  /// <|think|> token); the refusal names the format or the token.
  Status checkChatOptions(const ChatOptions &options) const;
  /// Whether the model's replies may hold a thought channel (Gemma 4).
  bool chatHasThoughts() const;
  /// The text that closes an assistant turn whose ids are already known.
  std::string endOfAssistantTurn() const;

  struct Impl;

private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class TextDecoder;
};

/// Streams ids to text: push() appends the text the ids so far complete,
/// holding back the bytes of a character a later id will finish; finish()
/// flushes what is held (a sequence that never completed becomes U+FFFD).
class TextDecoder {
public:
  explicit TextDecoder(const Tokenizer &tokenizer) : tokenizer_(&tokenizer) {}
  Status push(int64_t id, std::string &text);
  void finish(std::string &text);
  void reset();

private:
  void emit(std::string &text, bool final);
  const Tokenizer *tokenizer_;
  std::string pending_;
  bool started_ = false;
};

/// Appends the valid UTF-8 prefix of `bytes` to `text` with every invalid
/// sequence replaced by U+FFFD; returns how many trailing bytes form an
/// incomplete (so far valid) sequence when `final` is false (left out).
size_t appendUtf8Lossy(std::string_view bytes, bool final, std::string &text);

/// The byte offset of the first invalid UTF-8 sequence, or npos.
size_t findInvalidUtf8(std::string_view text);

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_TOKENIZER_H
