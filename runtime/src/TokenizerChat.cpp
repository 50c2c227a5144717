//===- TokenizerChat.cpp - config files and chat formats ------------------===//

#include "TokenizerInternal.h"

namespace cq4p::runtime {

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

} // namespace cq4p::runtime
