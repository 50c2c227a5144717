//===- TextGeneration.cpp - text in, streamed text out, and chat ----------===//

#include "cq4p/runtime/TextGeneration.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace cq4p::runtime {
namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// How many trailing bytes of `text` could begin `stop` (a proper prefix).
size_t heldFor(std::string_view text, std::string_view stop) {
  for (size_t length = std::min(stop.size() - 1, text.size()); length > 0; --length)
    if (text.substr(text.size() - length) == stop.substr(0, length))
      return length;
  return 0;
}

/// How many trailing bytes of `text` could begin one of `stops`.
size_t heldForStops(const std::string &text,
                    const std::vector<std::string> &stops) {
  size_t held = 0;
  for (const std::string &stop : stops)
    held = std::max(held, heldFor(text, stop));
  return held;
}

/// Holds Gemma 4's thought channels back from the delivered text: each
/// <|channel>...<channel|>, markers included, is dropped (an unclosed one
/// to the end), and text that may be the start of a marker is held until
/// it is not. The markers are ASCII, so a cut never splits a character.
class ThoughtFilter {
public:
  explicit ThoughtFilter(bool active) : active_(active) {}

  /// Appends to `out` what of `text` may be delivered; `final`: nothing
  /// follows (a held partial marker outside a thought is text).
  void push(std::string_view text, std::string &out, bool final) {
    if (!active_) {
      out.append(text);
      return;
    }
    pending_.append(text);
    for (;;) {
      std::string_view marker = inside_ ? kThoughtClose : kThoughtOpen;
      size_t at = pending_.find(marker);
      if (at != std::string::npos) {
        if (!inside_)
          out.append(pending_, 0, at);
        pending_.erase(0, at + marker.size());
        inside_ = !inside_;
        continue;
      }
      size_t keep = final ? 0 : heldFor(pending_, marker);
      if (!inside_)
        out.append(pending_, 0, pending_.size() - keep);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
  }

private:
  bool active_;
  bool inside_ = false;
  std::string pending_;
};

/// The refusals of a generation, before anything runs: a prompt of
/// `promptSize` ids at `position`.
Status checkGeneration(const Model &model, int64_t position, size_t promptSize,
                       const TextOptions &options) {
  if (options.maxNewTokens < 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "generate: max new tokens: expected >= 0, found " +
                      std::to_string(options.maxNewTokens));
  if (Status status = Sampler::validate(options.sampling); !status)
    return status;
  for (size_t i = 0; i < options.stopStrings.size(); ++i) {
    const std::string &stop = options.stopStrings[i];
    if (stop.empty())
      return Status(CQ4P_ERROR_ARGUMENT, "generate: a stop string is empty");
    // The text is valid UTF-8, so a valid stop string matches only at a
    // character's start, and the text before it is whole characters.
    if (size_t bad = findInvalidUtf8(stop); bad != std::string::npos)
      return Status(CQ4P_ERROR_ARGUMENT,
                    "generate: stop string " + std::to_string(i) +
                        " is not valid UTF-8 at byte " + std::to_string(bad) + " of " +
                        std::to_string(stop.size()) + " (a stop string is text)");
  }
  if (promptSize == 0 && position == 0)
    return Status(CQ4P_ERROR_ARGUMENT,
                  "generate: expected a prompt of at least one token, found none");
  // position + prompt + decode steps <= context, without a sum that can
  // overflow (max new tokens may be up to 2^63 - 1).
  int64_t decodeSteps = std::max<int64_t>(options.maxNewTokens - 1, 0);
  int64_t room = position >= 0 && position <= model.context() ? model.context() - position : 0;
  bool fits = promptSize <= uint64_t(room) && decodeSteps <= room - int64_t(promptSize);
  if (!fits) {
    int64_t needed = 0;
    bool exact = uint64_t(promptSize) <= uint64_t(std::numeric_limits<int64_t>::max()) &&
                 !__builtin_add_overflow(position, int64_t(promptSize), &needed) &&
                 !__builtin_add_overflow(needed, decodeSteps, &needed);
    return Status(CQ4P_ERROR_ARGUMENT,
                  "context overflow: " + std::to_string(position) +
                      " positions used, a prompt of " + std::to_string(promptSize) +
                      " tokens and " + std::to_string(options.maxNewTokens) +
                      " new tokens need " +
                      (exact ? std::to_string(needed) : std::string("more than 2^63 - 1")) +
                      " positions > context " + std::to_string(model.context()));
  }
  return Status::ok();
}

/// generateText under a claim the caller holds on `model` from the first
/// step to the last, so the callback cannot step the model in between.
Status generateClaimed(Model &model, const Model::Claim &claim,
                       const Tokenizer &tokenizer,
                       const std::vector<int64_t> &prompt,
                       const TextOptions &options, TextCallback callback,
                       void *context, GenerateStats *stats,
                       TextResult *result, bool holdThoughts = false) {
  if (Status status = checkGeneration(model, model.position(), prompt.size(), options);
      !status)
    return status;

  GenerateStats local;
  GenerateStats &out = stats != nullptr ? *stats : local;
  out = GenerateStats();
  out.promptTokens = int64_t(prompt.size());
  TextResult localResult;
  TextResult &res = result != nullptr ? *result : localResult;
  res = TextResult();

  auto start = std::chrono::steady_clock::now();
  if (!prompt.empty())
    if (Status status =
            model.prefill(claim, prompt.data(), int64_t(prompt.size()));
        !status)
      return status;
  out.prefillSeconds = secondsSince(start);
  if (options.maxNewTokens == 0)
    return Status::ok();

  Rng rng(options.sampling.seed);
  TextDecoder decoder(tokenizer);
  ThoughtFilter thoughts(holdThoughts);
  std::string held; // decoded, not yet delivered (a stop string may start)
  std::chrono::steady_clock::time_point first;
  bool more = true;
  Status status;
  for (int64_t index = 0; more && index < options.maxNewTokens; ++index) {
    int64_t id = 0;
    if (status = model.sample(claim, options.sampling, rng, id); !status)
      break;
    if (index == 0) {
      first = std::chrono::steady_clock::now();
      out.timeToFirstTokenSeconds = std::chrono::duration<double>(first - start).count();
    }
    res.ids.push_back(id);
    out.generatedTokens = index + 1;
    if (options.stopAtStopIds && tokenizer.isStop(id)) {
      res.stoppedAtStopId = true;
      break;
    }
    // An id the model has and the tokenizer lacks decodes to nothing.
    if (id < tokenizer.vocabSize())
      if (status = decoder.push(id, held); !status)
        break;
    size_t stopAt = std::string::npos;
    for (const std::string &stop : options.stopStrings)
      stopAt = std::min(stopAt, held.find(stop));
    std::string deliver;
    if (stopAt != std::string::npos) {
      thoughts.push(std::string_view(held).substr(0, stopAt), deliver, false);
      held.clear();
      res.stoppedAtStopString = true;
      more = false;
    } else {
      size_t keep = heldForStops(held, options.stopStrings);
      thoughts.push(std::string_view(held).substr(0, held.size() - keep), deliver, false);
      held.erase(0, held.size() - keep);
    }
    res.text += deliver;
    if (callback != nullptr && !callback(context, id, deliver.data(), deliver.size()))
      more = false;
    if (more && index + 1 < options.maxNewTokens)
      if (status = model.decode(claim, id); !status)
        break;
  }
  if (out.generatedTokens > 0)
    out.decodeSeconds = secondsSince(first);
  if (!res.stoppedAtStopString)
    decoder.finish(held);
  std::string rest;
  thoughts.push(held, rest, true);
  if (!rest.empty()) {
    res.text += rest;
    if (callback != nullptr)
      callback(context, -1, rest.data(), rest.size());
  }
  return status;
}

} // namespace

Status generateText(Model &model, const Tokenizer &tokenizer,
                    const std::vector<int64_t> &prompt,
                    const TextOptions &options, TextCallback callback,
                    void *context, GenerateStats *stats, TextResult *result) {
  if (stats != nullptr)
    *stats = GenerateStats();
  if (result != nullptr)
    *result = TextResult();
  Model::Claim held;
  if (Status status = model.claim("generate", held); !status)
    return status;
  return generateClaimed(model, held, tokenizer, prompt, options, callback,
                         context, stats, result);
}

Status generateText(Model &model, const Model::Claim &held,
                    const Tokenizer &tokenizer,
                    const std::vector<int64_t> &prompt,
                    const TextOptions &options, TextCallback callback,
                    void *context, GenerateStats *stats, TextResult *result) {
  return generateClaimed(model, held, tokenizer, prompt, options, callback,
                         context, stats, result);
}

Status ChatSession::send(const std::string &user, const TextOptions &options,
                         TextCallback callback, void *context,
                         GenerateStats *stats, TextResult *result) {
  // Claimed before the chat's state is read: a send from a callback, or
  // from another thread while one runs, is refused before it sees a turn
  // half recorded.
  Model::Claim held;
  if (Status status = model_.claim("chat", held); !status)
    return status;
  if (Status status = tokenizer_.checkChatOptions(options_); !status)
    return status;
  bool start = turns_ == 0;
  // After a reply that held a thought, the whole conversation again.
  bool rerender = !start && replyHadThought_;
  // The model was used since the last turn (a reset, a prefill, a
  // generation, another chat): whatever its position, its cache no longer
  // holds this conversation, so the conversation's ids are prefilled anew.
  bool refill = !start && !rerender && model_.cacheVersion() != cacheVersion_;
  bool fresh = start || rerender || refill;
  std::vector<ChatMessage> messages;
  if (rerender)
    messages = messages_;
  else if (start && !system_.empty())
    messages.push_back({"system", system_});
  messages.push_back({"user", user});
  std::string turn;
  if (Status status = tokenizer_.renderChat(messages, start || rerender, true, options_, turn);
      !status)
    return status;

  std::vector<int64_t> prompt;
  if (!start && !rerender) {
    if (refill)
      prompt.assign(history_.begin(), history_.end() - (lastId_ >= 0 ? 1 : 0));
    // Close the previous reply: its last id (not yet in the cache), then
    // the end of an assistant turn unless that id was it.
    std::vector<int64_t> close;
    if (Status status = tokenizer_.encode(tokenizer_.endOfAssistantTurn(), false, close);
        !status)
      return status;
    if (lastId_ >= 0 && !close.empty() && lastId_ == close[0]) {
      prompt.insert(prompt.end(), close.begin(), close.end());
    } else {
      if (lastId_ >= 0 && !tokenizer_.isStop(lastId_))
        prompt.push_back(lastId_);
      prompt.insert(prompt.end(), close.begin(), close.end());
    }
  }
  if (Status status = tokenizer_.encode(turn, false, prompt); !status)
    return status;
  if (fresh) {
    // Refused before the cache is given up.
    if (Status status = checkGeneration(model_, 0, prompt.size(), options); !status)
      return status;
    if (Status status = model_.reset(held); !status)
      return status;
  }

  TextResult local;
  TextResult &res = result != nullptr ? *result : local;
  // What the cache will hold: the history without the last sampled id, then
  // the new turn.
  int64_t before = model_.position();
  bool hold = tokenizer_.chatHasThoughts() && !options_.showThinking;
  Status status = generateClaimed(model_, held, tokenizer_, prompt, options,
                                  callback, context, stats, &res, hold);
  if (!status && model_.position() == before && res.ids.empty())
    return status; // refused before anything ran (after a reset, the next turn refills)
  cacheVersion_ = model_.cacheVersion();
  if (fresh)
    history_.clear();
  else if (lastId_ >= 0)
    history_.pop_back();
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  history_.insert(history_.end(), res.ids.begin(), res.ids.end());
  lastPrompt_ = std::move(prompt);
  lastId_ = res.ids.empty() ? -1 : res.ids.back();
  ++turns_;
  if (tokenizer_.chatHasThoughts()) {
    // The reply as text, without the stop id that ended it (ids the model
    // has and the tokenizer lacks decode to nothing, as they streamed).
    std::vector<int64_t> ids;
    for (size_t i = 0; i + (res.stoppedAtStopId ? 1 : 0) < res.ids.size(); ++i)
      if (res.ids[i] < tokenizer_.vocabSize())
        ids.push_back(res.ids[i]);
    std::string reply;
    if (Status decoded = tokenizer_.decode(ids.data(), ids.size(), reply); !decoded && status)
      status = decoded;
    if (!rerender)
      messages_.insert(messages_.end(), messages.begin(), messages.end());
    else
      messages_ = messages;
    messages_.push_back({"assistant", reply});
    replyHadThought_ = reply.find(kThoughtOpen) != std::string::npos ||
                       reply.find(kThoughtClose) != std::string::npos;
  }
  return status;
}

} // namespace cq4p::runtime
