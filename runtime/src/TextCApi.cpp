//===- TextCApi.cpp - the C API's tokenizer, text generation and chat -----===//

#include "cq4p/cq4p.h"
#include "cq4p/runtime/TextGeneration.h"
#include "cq4p/runtime/Tokenizer.h"

#include "CApiHandles.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <vector>

using namespace cq4p::runtime;

struct cq4p_tokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
};

struct cq4p_chat {
  cq4p_model *model;
  std::unique_ptr<ChatSession> session;
  /// A turn is under way: a second cq4p_chat_send (another thread, or the
  /// turn's own callback) is refused before it touches the session.
  std::atomic<bool> sending{false};
  /// The conversation's ids as of the last finished turn: what
  /// cq4p_chat_history reads, from any thread, even during a turn.
  mutable std::mutex historyMutex;
  std::vector<int64_t> history;
};

namespace {

int fail(const Status &status, char *error, size_t errorSize) {
  copyMessage(status, error, errorSize);
  return status.code();
}

int nullArgument(const char *function, const char *what, char *error,
                 size_t errorSize) {
  return fail(Status(CQ4P_ERROR_ARGUMENT, std::string(function) + ": expected " +
                                              what + ", found a null pointer"),
              error, errorSize);
}

TextOptions textOptions(const cq4p_text_options *options) {
  TextOptions out;
  if (options == nullptr)
    return out;
  out.maxNewTokens = options->max_new_tokens;
  out.sampling.temperature = options->sampling.temperature;
  out.sampling.topK = options->sampling.top_k;
  out.sampling.topP = options->sampling.top_p;
  out.sampling.seed = options->sampling.seed;
  for (size_t i = 0; options->stop_strings != nullptr && i < options->stop_string_count; ++i)
    if (options->stop_strings[i] != nullptr)
      out.stopStrings.emplace_back(options->stop_strings[i]);
  out.stopAtStopIds = options->ignore_stop_ids == 0;
  return out;
}

void copyStats(const GenerateStats &from, cq4p_generate_stats *to) {
  if (to == nullptr)
    return;
  to->prompt_tokens = from.promptTokens;
  to->generated_tokens = from.generatedTokens;
  to->prefill_seconds = from.prefillSeconds;
  to->decode_seconds = from.decodeSeconds;
  to->time_to_first_token_seconds = from.timeToFirstTokenSeconds;
}

struct CallbackBridge {
  cq4p_text_fn callback;
  void *context;
  static bool call(void *self, int64_t id, const char *text, size_t length) {
    auto *bridge = static_cast<CallbackBridge *>(self);
    return bridge->callback == nullptr ||
           bridge->callback(bridge->context, id, text, length) != 0;
  }
};

/// The options of a cq4p_chat_options of `options->size` bytes (cq4p.h:
/// the fields it covers; past the ones known here, zeros only).
Status chatOptions(const cq4p_chat_options *options, const char *function,
                   ChatOptions &out) {
  out = ChatOptions();
  if (options == nullptr)
    return Status::ok();
  size_t size = options->size;
  if (size < sizeof(options->size))
    return Status(CQ4P_ERROR_ARGUMENT,
                  std::string(function) + ": cq4p_chat_options.size: expected >= " +
                      std::to_string(sizeof(options->size)) + " (sizeof(cq4p_chat_options) is " +
                      std::to_string(sizeof(cq4p_chat_options)) + "), found " +
                      std::to_string(size));
  const unsigned char *bytes = reinterpret_cast<const unsigned char *>(options);
  for (size_t i = sizeof(cq4p_chat_options); i < size; ++i)
    if (bytes[i] != 0)
      return Status(CQ4P_ERROR_UNSUPPORTED,
                    std::string(function) + ": cq4p_chat_options of " + std::to_string(size) +
                        " bytes sets byte " + std::to_string(i) + ", past the " +
                        std::to_string(sizeof(cq4p_chat_options)) +
                        " this runtime knows (an option it does not implement)");
  auto covers = [&](size_t offset, size_t length) { return offset + length <= size; };
  if (covers(offsetof(cq4p_chat_options, enable_thinking), sizeof(int32_t)))
    out.enableThinking = options->enable_thinking != 0;
  if (covers(offsetof(cq4p_chat_options, show_thinking), sizeof(int32_t)))
    out.showThinking = options->show_thinking != 0;
  return Status::ok();
}

/// The bundle's tokenizer, opened by the first caller (of any thread);
/// `handle`, when given, gets its C handle.
Status modelTokenizer(cq4p_model *model, const Tokenizer *&out,
                      const cq4p_tokenizer **handle = nullptr) {
  std::lock_guard<std::mutex> lock(model->tokenizerMutex);
  if (!model->tokenizer) {
    std::unique_ptr<Tokenizer> tokenizer;
    if (Status status = Tokenizer::openDirectory(model->bundle->directory(), tokenizer,
                                                 /*confined=*/true);
        !status)
      return status;
    model->tokenizer = TokenizerHandle(new cq4p_tokenizer{std::move(tokenizer)},
                                       [](cq4p_tokenizer *handle) { delete handle; });
  }
  out = model->tokenizer->tokenizer.get();
  if (handle != nullptr)
    *handle = model->tokenizer.get();
  return Status::ok();
}

} // namespace

extern "C" {

int cq4p_tokenizer_open(const char *tokenizer_json, const char *tokenizer_config,
                        const char *generation_config, const char *chat_template,
                        cq4p_tokenizer **out, char *error, size_t error_size) {
  if (out == nullptr || tokenizer_json == nullptr)
    return nullArgument("cq4p_tokenizer_open", "a tokenizer.json path and an output pointer",
                        error, error_size);
  *out = nullptr;
  TokenizerFiles files;
  files.tokenizerJson = tokenizer_json;
  files.tokenizerConfig = tokenizer_config ? tokenizer_config : "";
  files.generationConfig = generation_config ? generation_config : "";
  files.chatTemplate = chat_template ? chat_template : "";
  std::unique_ptr<Tokenizer> tokenizer;
  if (Status status = Tokenizer::open(files, tokenizer); !status)
    return fail(status, error, error_size);
  *out = new cq4p_tokenizer{std::move(tokenizer)};
  return CQ4P_OK;
}

int cq4p_tokenizer_open_dir(const char *directory, cq4p_tokenizer **out,
                            char *error, size_t error_size) {
  if (out == nullptr || directory == nullptr)
    return nullArgument("cq4p_tokenizer_open_dir", "a directory and an output pointer",
                        error, error_size);
  *out = nullptr;
  std::unique_ptr<Tokenizer> tokenizer;
  if (Status status = Tokenizer::openDirectory(directory, tokenizer); !status)
    return fail(status, error, error_size);
  *out = new cq4p_tokenizer{std::move(tokenizer)};
  return CQ4P_OK;
}

void cq4p_tokenizer_close(cq4p_tokenizer *tokenizer) { delete tokenizer; }

void cq4p_tokenizer_get_info(const cq4p_tokenizer *tokenizer,
                             cq4p_tokenizer_info *info) {
  if (tokenizer == nullptr || info == nullptr)
    return;
  const Tokenizer &t = *tokenizer->tokenizer;
  *info = cq4p_tokenizer_info();
  info->kind = t.kind() == TokenizerKind::ByteLevelBpe ? CQ4P_TOKENIZER_BYTE_LEVEL_BPE
                                                        : CQ4P_TOKENIZER_SENTENCEPIECE_BPE;
  info->vocab = t.vocabSize();
  info->bos = t.bosId();
  info->stop_count = uint32_t(t.stopIds().size());
  for (size_t i = 0; i < t.stopIds().size() && i < 16; ++i)
    info->stop_ids[i] = t.stopIds()[i];
  info->prefix_count = uint32_t(t.prefixIds().size());
  for (size_t i = 0; i < t.prefixIds().size() && i < 4; ++i)
    info->prefix_ids[i] = t.prefixIds()[i];
  const char *chat = chatFormatName(t.chatFormat());
  size_t length = std::min(std::strlen(chat), sizeof(info->chat_format) - 1);
  std::memcpy(info->chat_format, chat, length);
  info->chat_format[length] = '\0';
}

size_t cq4p_tokenizer_special_ids(const cq4p_tokenizer *tokenizer, int64_t *ids,
                                  size_t capacity) {
  if (tokenizer == nullptr)
    return 0;
  std::vector<int64_t> special = tokenizer->tokenizer->specialIds();
  if (ids != nullptr)
    std::copy_n(special.begin(), std::min(capacity, special.size()), ids);
  return special.size();
}

int cq4p_model_tokenizer(cq4p_model *model, const cq4p_tokenizer **out,
                         char *error, size_t error_size) {
  if (model == nullptr || out == nullptr)
    return nullArgument("cq4p_model_tokenizer", "a model and an output pointer", error,
                        error_size);
  *out = nullptr;
  const Tokenizer *tokenizer = nullptr;
  if (Status status = modelTokenizer(model, tokenizer, out); !status)
    return fail(status, error, error_size);
  return CQ4P_OK;
}

int cq4p_tokenizer_encode(const cq4p_tokenizer *tokenizer, const char *text,
                          size_t length, int add_special, int64_t *ids,
                          size_t capacity, size_t *count, char *error,
                          size_t error_size) {
  if (tokenizer == nullptr || count == nullptr || (text == nullptr && length > 0))
    return nullArgument("cq4p_tokenizer_encode", "a tokenizer, text and a count pointer",
                        error, error_size);
  std::vector<int64_t> out;
  if (Status status = tokenizer->tokenizer->encode(
          std::string_view(text == nullptr ? "" : text, length), add_special != 0, out);
      !status)
    return fail(status, error, error_size);
  *count = out.size();
  if (out.size() > capacity || (ids == nullptr && !out.empty()))
    return fail(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_tokenizer_encode: the text has " + std::to_string(out.size()) +
                           " ids, room for " + std::to_string(capacity)),
                error, error_size);
  std::copy(out.begin(), out.end(), ids);
  return CQ4P_OK;
}

int cq4p_tokenizer_decode(const cq4p_tokenizer *tokenizer, const int64_t *ids,
                          size_t count, char *text, size_t capacity,
                          size_t *length, char *error, size_t error_size) {
  if (tokenizer == nullptr || length == nullptr || (ids == nullptr && count > 0))
    return nullArgument("cq4p_tokenizer_decode", "a tokenizer, ids and a length pointer",
                        error, error_size);
  std::string out;
  if (Status status = tokenizer->tokenizer->decode(ids, count, out); !status)
    return fail(status, error, error_size);
  *length = out.size();
  if (text == nullptr || out.size() + 1 > capacity)
    return fail(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_tokenizer_decode: the text needs " +
                           std::to_string(out.size() + 1) + " bytes, room for " +
                           std::to_string(capacity)),
                error, error_size);
  std::memcpy(text, out.data(), out.size());
  text[out.size()] = '\0';
  return CQ4P_OK;
}

int cq4p_tokenizer_render_chat(const cq4p_tokenizer *tokenizer, const char *const *roles,
                               const char *const *contents, size_t count,
                               int add_generation_prompt, char *text, size_t capacity,
                               size_t *length, char *error, size_t error_size) {
  return cq4p_tokenizer_render_chat_with(tokenizer, roles, contents, count,
                                         add_generation_prompt, nullptr, text, capacity,
                                         length, error, error_size);
}

int cq4p_tokenizer_render_chat_with(const cq4p_tokenizer *tokenizer,
                                    const char *const *roles, const char *const *contents,
                                    size_t count, int add_generation_prompt,
                                    const cq4p_chat_options *options, char *text,
                                    size_t capacity, size_t *length, char *error,
                                    size_t error_size) {
  const char *function = options == nullptr ? "cq4p_tokenizer_render_chat"
                                            : "cq4p_tokenizer_render_chat_with";
  if (tokenizer == nullptr || length == nullptr ||
      (count > 0 && (roles == nullptr || contents == nullptr)))
    return nullArgument(function, "a tokenizer, the messages and a length pointer", error,
                        error_size);
  ChatOptions chat;
  if (Status status = chatOptions(options, function, chat); !status)
    return fail(status, error, error_size);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < count; ++i) {
    if (roles[i] == nullptr || contents[i] == nullptr)
      return nullArgument(function, "every role and content", error, error_size);
    messages.push_back({roles[i], contents[i]});
  }
  std::string out;
  if (Status status = tokenizer->tokenizer->renderChat(messages, true,
                                                       add_generation_prompt != 0, chat, out);
      !status)
    return fail(status, error, error_size);
  *length = out.size();
  if (text == nullptr || out.size() + 1 > capacity)
    return fail(Status(CQ4P_ERROR_ARGUMENT,
                       std::string(function) + ": the text needs " +
                           std::to_string(out.size() + 1) + " bytes, room for " +
                           std::to_string(capacity)),
                error, error_size);
  std::memcpy(text, out.data(), out.size());
  text[out.size()] = '\0';
  return CQ4P_OK;
}

int cq4p_model_generate_text(cq4p_model *model, const cq4p_tokenizer *tokenizer,
                             const char *prompt, const cq4p_text_options *options,
                             cq4p_text_fn callback, void *context,
                             cq4p_generate_stats *stats, char *error,
                             size_t error_size) {
  if (model == nullptr || prompt == nullptr)
    return nullArgument("cq4p_model_generate_text", "a model and a prompt", error,
                        error_size);
  // One claim over everything, the bundle's tokenizer opened on first use
  // included: a callback cannot step the model between the reset and the
  // generation, nor another thread use it meanwhile.
  Model::Claim held;
  if (Status status = model->model->claim("cq4p_model_generate_text", held);
      !status)
    return fail(status, error, error_size);
  const Tokenizer *t = tokenizer != nullptr ? tokenizer->tokenizer.get() : nullptr;
  if (t == nullptr)
    if (Status status = modelTokenizer(model, t); !status)
      return fail(status, error, error_size);
  std::vector<int64_t> ids;
  if (Status status = t->encode(prompt, options == nullptr || options->add_special != 0, ids);
      !status)
    return fail(status, error, error_size);
  TextOptions text = textOptions(options);
  CallbackBridge bridge{callback, context};
  GenerateStats result;
  Status status = model->model->reset(held);
  if (status)
    status = generateText(*model->model, held, *t, ids, text,
                          CallbackBridge::call, &bridge, &result, nullptr);
  copyStats(result, stats);
  return status ? CQ4P_OK : fail(status, error, error_size);
}

int cq4p_chat_open(cq4p_model *model, const cq4p_tokenizer *tokenizer,
                   const char *system_prompt, cq4p_chat **out, char *error,
                   size_t error_size) {
  return cq4p_chat_open_with(model, tokenizer, system_prompt, nullptr, out, error,
                             error_size);
}

int cq4p_chat_open_with(cq4p_model *model, const cq4p_tokenizer *tokenizer,
                        const char *system_prompt, const cq4p_chat_options *options,
                        cq4p_chat **out, char *error, size_t error_size) {
  const char *function = options == nullptr ? "cq4p_chat_open" : "cq4p_chat_open_with";
  if (model == nullptr || out == nullptr)
    return nullArgument(function, "a model and an output pointer", error, error_size);
  *out = nullptr;
  ChatOptions chat;
  if (Status status = chatOptions(options, function, chat); !status)
    return fail(status, error, error_size);
  const Tokenizer *t = tokenizer != nullptr ? tokenizer->tokenizer.get() : nullptr;
  if (t == nullptr)
    if (Status status = modelTokenizer(model, t); !status)
      return fail(status, error, error_size);
  if (Status status = t->checkChatOptions(chat); !status)
    return fail(status, error, error_size);
  auto *opened = new cq4p_chat;
  opened->model = model;
  opened->session = std::make_unique<ChatSession>(*model->model, *t,
                                                  system_prompt ? system_prompt : "", chat);
  *out = opened;
  return CQ4P_OK;
}

int cq4p_chat_send(cq4p_chat *chat, const char *user_text,
                   const cq4p_text_options *options, cq4p_text_fn callback,
                   void *context, cq4p_generate_stats *stats, char *error,
                   size_t error_size) {
  if (chat == nullptr || user_text == nullptr)
    return nullArgument("cq4p_chat_send", "a chat and the user's text", error,
                        error_size);
  if (chat->sending.exchange(true))
    return fail(Status(CQ4P_ERROR_BUSY,
                       "cq4p_chat_send: the chat is answering a turn (on another thread, "
                       "or this is its callback): one turn at a time per chat"),
                error, error_size);
  CallbackBridge bridge{callback, context};
  GenerateStats result;
  Status status = chat->session->send(user_text, textOptions(options),
                                      CallbackBridge::call, &bridge, &result);
  {
    std::lock_guard<std::mutex> lock(chat->historyMutex);
    chat->history = chat->session->history();
  }
  chat->sending.store(false);
  copyStats(result, stats);
  return status ? CQ4P_OK : fail(status, error, error_size);
}

size_t cq4p_chat_history(const cq4p_chat *chat, int64_t *ids, size_t capacity) {
  if (chat == nullptr)
    return 0;
  std::lock_guard<std::mutex> lock(chat->historyMutex);
  const std::vector<int64_t> &history = chat->history;
  if (ids != nullptr)
    std::copy_n(history.begin(), std::min(capacity, history.size()), ids);
  return history.size();
}

void cq4p_chat_close(cq4p_chat *chat) { delete chat; }

} // extern "C"
