//===- TextGeneration.h - text in, streamed text out, and chat --*- C++ -*-===//
//
// Generation from text over a Model and a Tokenizer, using only the Model's
// public steps (prefill, sample, decode), so it continues from whatever the
// KV cache holds:
//
//   - generateText(): the prompt's ids appended at the model's position,
//     then sample / decode until max_new_tokens, a stop id (not delivered)
//     or a stop string (the text before it delivered, the rest not); each
//     id goes to the callback with the text it completes (TextDecoder: never
//     a broken character; text that may be the start of a stop string is
//     held until it is not).
//   - ChatSession: a conversation in the tokenizer's chat format. The first
//     turn starts the sequence (BOS, system prompt); each later turn
//     prefills only what is new: the close of the previous reply and the
//     user's turn, after the ids already in the KV cache. history() is the
//     whole sequence, so a fresh prefill of it reproduces the cache. A
//     model used by anything else between two turns (a reset, a prefill, a
//     generation, another chat; Model::cacheVersion) no longer holds the
//     conversation, whatever its position: the turn then prefills the
//     whole history again, from position 0, before the new turn.
//
// Gemma 4's thought channel (<|channel>thought\n...<channel|>, before the
// answer) is held back from the delivered text unless ChatOptions::
// showThinking: the callback and TextResult::text get the answer alone,
// never part of a marker. Stop strings are matched on the model's whole
// text, thought included, so showing it never changes where a reply ends.
// Gemma 4's templates drop a past reply's thoughts from the conversation;
// the KV cache cannot drop positions, so the turn after a reply that held
// a thought re-renders the conversation (its replies without thoughts) and
// prefills it from position 0.
//
// As in Model::generate, the last id sampled is not decoded (it is not in
// the cache); a chat's next turn prefills it first.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_TEXTGENERATION_H
#define CQ4P_RUNTIME_TEXTGENERATION_H

#include "cq4p/runtime/Model.h"
#include "cq4p/runtime/Tokenizer.h"

#include <string>
#include <vector>

namespace cq4p::runtime {

struct TextOptions {
  int64_t maxNewTokens = 128;
  SamplingOptions sampling;
  std::vector<std::string> stopStrings;
  /// Stop at the tokenizer's stop ids (EOS, end of turn).
  bool stopAtStopIds = true;
};

/// Called with each generated id and the text it completes (maybe empty);
/// returning false stops the generation after it.
using TextCallback = bool (*)(void *context, int64_t id, const char *text,
                              size_t length);

struct TextResult {
  std::vector<int64_t> ids; ///< every id sampled, the stop id included
  bool stoppedAtStopId = false;
  bool stoppedAtStopString = false;
  std::string text; ///< the text delivered
};

/// Appends `prompt` at the model's position and generates (see above),
/// holding the model from the first step to the last: a callback that
/// calls into the model is refused (CQ4P_ERROR_BUSY, Model.h).
Status generateText(Model &model, const Tokenizer &tokenizer,
                    const std::vector<int64_t> &prompt,
                    const TextOptions &options, TextCallback callback,
                    void *context, GenerateStats *stats, TextResult *result);
/// The same under a claim the caller already holds (e.g. with a reset
/// before it).
Status generateText(Model &model, const Model::Claim &held,
                    const Tokenizer &tokenizer,
                    const std::vector<int64_t> &prompt,
                    const TextOptions &options, TextCallback callback,
                    void *context, GenerateStats *stats, TextResult *result);

class ChatSession {
public:
  /// tokenizer.checkChatOptions(options) says whether send() will take
  /// `options` (send refuses them otherwise).
  ChatSession(Model &model, const Tokenizer &tokenizer, std::string system,
              ChatOptions options = ChatOptions())
      : model_(model), tokenizer_(tokenizer), system_(std::move(system)),
        options_(options) {}

  /// One user turn and the streamed reply.
  Status send(const std::string &user, const TextOptions &options,
              TextCallback callback, void *context, GenerateStats *stats,
              TextResult *result = nullptr);
  /// The conversation's ids: prefilled and sampled, in order.
  const std::vector<int64_t> &history() const { return history_; }
  /// The ids the last send() prefilled: the close of the previous reply and
  /// the new turn, or the whole conversation when it was prefilled anew.
  const std::vector<int64_t> &lastPrompt() const { return lastPrompt_; }
  int64_t turns() const { return turns_; }

private:
  Model &model_;
  const Tokenizer &tokenizer_;
  std::string system_;
  ChatOptions options_;
  /// The conversation as text (a reply as the model wrote it), for the
  /// re-rendering that drops a reply's thoughts.
  std::vector<ChatMessage> messages_;
  bool replyHadThought_ = false;
  std::vector<int64_t> history_;
  std::vector<int64_t> lastPrompt_;
  int64_t lastId_ = -1; ///< sampled, not yet in the cache
  int64_t turns_ = 0;
  /// The model's cacheVersion() after this chat's last turn.
  uint64_t cacheVersion_ = 0;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_TEXTGENERATION_H
