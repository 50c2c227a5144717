//===- TokenizerTest.cpp - tokenizer.json files written from MODELS.md ----===//
//
// No package ships LFM2's, SmolLM2's or Gemma 4's tokenizer, so these tests
// write small ones with the real layout (MODELS.md section 6): LFM2's
// byte-level BPE with a Llama-3-style split and BOS <|startoftext|> = 1,
// <|im_end|> = 7; SmolLM2's GPT-2 ByteLevel pre-tokenizer; Gemma 4's
// SentencePiece-style BPE with byte fallback and its new special tokens
// (<|image>=255999, <|audio>=256000, <|turn>, <turn|>, the thought channel's
// <|channel>, <channel|> and <|think|>) and its chat format (MODELS.md
// section 6.1a; python/tests/test_gemma4_chat.py checks it against Jinja2
// and through cq4p-run --chat). The real Qwen3,
// Llama 3 and Gemma 3 files are checked against an independent encoder in
// python/tests/test_tokenizer_corpus.py. Also: streaming decoding, and the
// refusals of what the tokenizer does not implement.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Tokenizer.h"

#include "cq4p/cq4p.h"

#include "TempDir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <tuple>
#include <sys/stat.h>
#include <unistd.h>

using namespace cq4p::runtime;
using Json = nlohmann::json;

namespace {

std::string byteChar(int b) {
  // GPT-2's byte-to-character map, spelled independently of the runtime's.
  int n = 0;
  for (int c = 0; c < 256; ++c) {
    bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
    int cp = printable ? c : 256 + n++;
    if (c == b) {
      std::string out;
      if (cp < 0x80) {
        out += char(cp);
      } else {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
      }
      return out;
    }
  }
  return "";
}

Json addedToken(int id, const std::string &content, bool special = true) {
  return {{"id", id},          {"content", content}, {"single_word", false},
          {"lstrip", false},   {"rstrip", false},    {"normalized", false},
          {"special", special}};
}

const char *kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Files {
  cq4p::test::TempDir dir;
  void write(const std::string &name, const std::string &text) {
    std::ofstream(dir.file(name)) << text;
  }
  Status open(std::unique_ptr<Tokenizer> &out) {
    return Tokenizer::openDirectory(dir.path(), out);
  }
};

/// A byte-level vocabulary: specials first, then the 256 byte pieces, then
/// the merges' results.
Json byteLevelModel(int firstByteId, const std::vector<std::pair<std::string, std::string>> &merges,
                    bool ignoreMerges = false) {
  Json vocab = Json::object();
  int next = firstByteId;
  for (int b = 0; b < 256; ++b)
    vocab[byteChar(b)] = next++;
  Json mergeList = Json::array();
  for (const auto &[a, b] : merges) {
    if (!vocab.contains(a + b))
      vocab[a + b] = next++;
    mergeList.push_back({a, b});
  }
  return {{"type", "BPE"},        {"dropout", nullptr},     {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},    {"byte_fallback", false}, {"ignore_merges", ignoreMerges},
          {"vocab", vocab},       {"merges", mergeList}};
}

/// LFM2's layout: byte-level BPE, a Llama-3-style split, BOS added by the
/// post-processor, ChatML with the BOS in the template.
void writeLfm2(Files &files) {
  std::vector<std::string> specials = {"<|pad|>", "<|startoftext|>", "<|endoftext|>",
                                       "<|fim_pre|>", "<|fim_mid|>", "<|fim_suf|>",
                                       "<|im_start|>", "<|im_end|>"};
  Json added = Json::array();
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back(addedToken(int(i), specials[i]));
  Json root = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", added}, {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Split}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|startoftext|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", Json::array()},
        {"special_tokens",
         {{"<|startoftext|>", {{"id", "<|startoftext|>"}, {"ids", {1}},
                               {"tokens", {"<|startoftext|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true},
                   {"trim_offsets", true}, {"use_regex", true}}},
      {"model", byteLevelModel(8, {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                   {byteChar(' '), "w"}, {"1", "2"}, {"12", "3"}})}};
  files.write("tokenizer.json", root.dump());
  Json config = {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|im_end|>"},
                 {"pad_token", "<|pad|>"},
                 {"chat_template",
                  "{{- bos_token -}}{%- for message in messages -%}{{- '<|im_start|>' + "
                  "message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
                  "{%- endfor -%}{%- if add_generation_prompt -%}"
                  "{{- '<|im_start|>assistant\n' -}}{%- endif -%}"}};
  files.write("tokenizer_config.json", config.dump());
  files.write("generation_config.json", Json({{"eos_token_id", 7}}).dump());
}

int64_t idOf(const Tokenizer &t, const std::string &piece) { return t.pieceId(piece); }

TEST(Tokenizer, Lfm2ByteLevelBpeWithBosAndChatMl) {
  Files files;
  writeLfm2(files);
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(t->kind(), TokenizerKind::ByteLevelBpe);
  EXPECT_EQ(t->bosId(), 1);
  EXPECT_EQ(t->stopIds(), std::vector<int64_t>({7}));
  EXPECT_EQ(t->chatFormat(), ChatFormat::ChatMl);

  std::vector<int64_t> ids;
  ASSERT_TRUE(t->encode("hello world 1234", true, ids));
  std::string space = byteChar(' ');
  std::vector<int64_t> expected = {
      1,          idOf(*t, "hello"),     idOf(*t, space + "w"), idOf(*t, "o"),
      idOf(*t, "r"), idOf(*t, "l"),      idOf(*t, "d"),        idOf(*t, space),
      idOf(*t, "123"), idOf(*t, "4")}; // \p{N}{1,3}: "123", "4"
  EXPECT_EQ(ids, expected);
  std::string text;
  ASSERT_TRUE(t->decode(ids.data() + 1, ids.size() - 1, text));
  EXPECT_EQ(text, "hello world 1234");

  // Special tokens in the text are matched before anything else.
  ids.clear();
  ASSERT_TRUE(t->encode("a<|im_end|>b", false, ids));
  EXPECT_EQ(ids, std::vector<int64_t>({idOf(*t, "a"), 7, idOf(*t, "b")}));

  std::string chat;
  ASSERT_TRUE(t->renderChat({{"system", "Be brief."}, {"user", "hi"}}, true, true, chat));
  EXPECT_EQ(chat, "<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n"
                  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Tokenizer, SmolLm2Gpt2SplitKeepsWordsApart) {
  Files files;
  std::string space = byteChar(' ');
  Json added = Json::array({addedToken(0, "<|endoftext|>"), addedToken(1, "<|im_start|>"),
                            addedToken(2, "<|im_end|>")});
  Json root = {{"version", "1.0"},       {"truncation", nullptr},
               {"padding", nullptr},     {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                  {"trim_offsets", true}, {"use_regex", true}}},
               {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true},
                                   {"trim_offsets", false}, {"use_regex", true}}},
               {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true},
                            {"trim_offsets", true}, {"use_regex", true}}},
               {"model", byteLevelModel(3, {{space, space}, {"e", "1"}, {"'", "m"}})}};
  files.write("tokenizer.json", root.dump());
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  ASSERT_TRUE(s) << s.message();

  // GPT-2's pattern: "I", "'m", " ", " here", "123": the two spaces and
  // "e1" are in different words, so neither merge applies; "'m" does.
  std::vector<int64_t> ids;
  ASSERT_TRUE(t->encode("I'm  here123", true, ids));
  std::vector<int64_t> expected = {idOf(*t, "I"), idOf(*t, "'m"), idOf(*t, space),
                                   idOf(*t, space), idOf(*t, "h"), idOf(*t, "e"),
                                   idOf(*t, "r"), idOf(*t, "e"), idOf(*t, "1"),
                                   idOf(*t, "2"), idOf(*t, "3")};
  EXPECT_EQ(ids, expected);
  // Controls: letters and digits are separate words; two spaces at the
  // end are one word, and merge.
  ids.clear();
  ASSERT_TRUE(t->encode("e1", true, ids));
  EXPECT_EQ(ids, std::vector<int64_t>({idOf(*t, "e"), idOf(*t, "1")}));
  ids.clear();
  ASSERT_TRUE(t->encode("x  ", true, ids));
  EXPECT_EQ(ids, std::vector<int64_t>({idOf(*t, "x"), idOf(*t, space + space)}));
  EXPECT_EQ(t->chatFormat(), ChatFormat::None);
  EXPECT_FALSE(t->chatStatus());
}

/// Gemma 4's special tokens in a SentencePiece-style BPE with byte fallback;
/// `leaveOut`: a special token the vocabulary lacks. The byte pieces come
/// after Gemma 4's low special ids (98, 105...), as in its vocabulary.
constexpr int kGemma4FirstByte = 238;

void writeGemma4(Files &files, const std::string &chatTemplate,
                 const std::string &eos = "<turn|>", const std::string &leaveOut = "") {
  Json vocab = Json::object();
  std::vector<std::string> first = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (size_t i = 0; i < first.size(); ++i)
    vocab[first[i]] = int(i);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = kGemma4FirstByte + b;
  }
  int next = kGemma4FirstByte + 256;
  for (const char *piece : {"\xE2\x96\x81", "h", "e", "l", "o", "u", "s", "r", "i", "\n"})
    vocab[piece] = next++;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\xE2\x96\x81", "hello"},
      {"u", "s"}, {"us", "e"}, {"use", "r"}};
  Json mergeList = Json::array();
  for (const auto &[a, b] : merges) {
    if (!vocab.contains(a + b))
      vocab[a + b] = next++;
    mergeList.push_back({a, b});
  }
  Json added = Json::array({addedToken(0, "<pad>"), addedToken(1, "<eos>"),
                            addedToken(2, "<bos>"), addedToken(3, "<unk>")});
  const std::pair<int, const char *> gemma4[] = {
      {98, "<|think|>"},   {105, "<|turn>"},      {106, "<turn|>"},
      {107, "<|channel>"}, {108, "<channel|>"},   {109, "<|tool_call>"},
      {255999, "<|image>"}, {256000, "<|audio>"}};
  for (const auto &[id, token] : gemma4)
    if (token != leaveOut)
      added.push_back(addedToken(id, token));
  Json root = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                      {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}},
                         {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", Json::array()},
        {"special_tokens",
         {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}},
                       {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}}}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                 {"vocab", vocab}, {"merges", mergeList}}}};
  files.write("tokenizer.json", root.dump());
  files.write("tokenizer_config.json",
              Json({{"bos_token", "<bos>"}, {"eos_token", eos},
                    {"add_bos_token", true}, {"backend", "tokenizers"}})
                  .dump());
  files.write("chat_template.jinja", chatTemplate);
}

TEST(Tokenizer, Gemma4SpecialTokensAndByteFallback) {
  Files files;
  writeGemma4(files, "{{ bos_token }}{% for m in messages %}<|turn>{{ m.role }}\n"
                     "{{ m.content }}<turn|>\n{% endfor %}");
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(t->kind(), TokenizerKind::SentencePieceBpe);
  EXPECT_EQ(t->vocabSize(), 256001);
  EXPECT_TRUE(t->isSpecial(255999));
  EXPECT_TRUE(t->isStop(106));

  std::vector<int64_t> ids;
  ASSERT_TRUE(t->encode("<|turn>user\n hello<turn|><|image>", true, ids));
  std::vector<int64_t> expected = {2,   105, idOf(*t, "user"), idOf(*t, "\n"),
                                   idOf(*t, "\xE2\x96\x81hello"), 106, 255999};
  EXPECT_EQ(ids, expected);

  // Characters outside the vocabulary fall back to their bytes' pieces.
  ids.clear();
  ASSERT_TRUE(t->encode("h\xF0\x9F\x98\x80", false, ids)); // h + U+1F600
  EXPECT_EQ(ids, std::vector<int64_t>({idOf(*t, "h"), kGemma4FirstByte + 0xF0,
                                       kGemma4FirstByte + 0x9F, kGemma4FirstByte + 0x98,
                                       kGemma4FirstByte + 0x80}));
  std::string text;
  ASSERT_TRUE(t->decode(ids.data(), ids.size(), text));
  EXPECT_EQ(text, "h\xF0\x9F\x98\x80");
  text.clear();
  std::vector<int64_t> spaced;
  ASSERT_TRUE(t->encode(" hello hello", false, spaced));
  ASSERT_TRUE(t->decode(spaced.data(), spaced.size(), text));
  EXPECT_EQ(text, " hello hello");

  EXPECT_EQ(t->chatFormat(), ChatFormat::Gemma4);
}

// Gemma 4's templates as far as cq4p reads them: the markers, and whether
// the empty thought channel follows the generation prompt (a string of the
// template, "\n" escaped as Jinja source has it).
const char *kGemma4Template =
    "{{- bos_token -}}{%- for m in messages -%}{{- '<|turn>' + m['role'] + '\\n' -}}"
    "{{- m['content'] | trim -}}{{- '<turn|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}";
const char *kGemma4EmptyThoughtTemplate =
    "{{- bos_token -}}{%- for m in messages -%}{{- '<|turn>' + m['role'] + '\\n' -}}"
    "{{- m['content'] | trim -}}{{- '<turn|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}"
    "{%- if not enable_thinking -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}"
    "{%- endif -%}";

std::string render(const Tokenizer &t, const std::vector<ChatMessage> &messages,
                   bool thinking = false) {
  std::string text;
  ChatOptions options;
  options.enableThinking = thinking;
  Status s = t.renderChat(messages, true, true, options, text);
  EXPECT_TRUE(s) << s.message();
  return text;
}

TEST(Tokenizer, Gemma4ChatLayout) {
  Files files;
  writeGemma4(files, kGemma4Template, "<eos>");
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(t->chatFormat(), ChatFormat::Gemma4);
  EXPECT_STREQ(chatFormatName(t->chatFormat()), "Gemma 4");
  // EOS and the end of a turn both stop generation.
  EXPECT_EQ(t->stopIds(), std::vector<int64_t>({1, 106}));
  EXPECT_EQ(t->endOfAssistantTurn(), "<turn|>\n");

  EXPECT_EQ(render(*t, {{"user", " hi\n"}}),
            "<bos><|turn>user\nhi<turn|>\n<|turn>model\n");
  // A system turn of its own, and <|think|> when thinking is on (with or
  // without a system message); "developer" opens it as "system" does.
  EXPECT_EQ(render(*t, {{"system", " Be brief. "}, {"user", "hi"}}),
            "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
  EXPECT_EQ(render(*t, {{"developer", "Be brief."}, {"user", "hi"}}, true),
            "<bos><|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\nhi<turn|>\n"
            "<|turn>model\n");
  EXPECT_EQ(render(*t, {{"user", "hi"}}, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
  // Past replies lose their thoughts; consecutive replies are one turn.
  EXPECT_EQ(render(*t, {{"user", "a"},
                        {"assistant", "<|channel>thought\nhmm<channel|> Yes. "},
                        {"assistant", "And no."},
                        {"user", "b"}}),
            "<bos><|turn>user\na<turn|>\n<|turn>model\nYes.And no.<turn|>\n"
            "<|turn>user\nb<turn|>\n<|turn>model\n");
  // A later turn (start false): no BOS, no system turn.
  std::string later;
  ASSERT_TRUE(t->renderChat({{"user", "again"}}, false, true, later));
  EXPECT_EQ(later, "<|turn>user\nagain<turn|>\n<|turn>model\n");

  // A system message only opens the conversation.
  std::string text;
  s = t->renderChat({{"user", "a"}, {"developer", "b"}}, true, true, text);
  EXPECT_EQ(s.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(s.message().find("found one at message 1"), std::string::npos) << s.message();
}

TEST(Tokenizer, Gemma4EmptyThoughtChannelFollowsTheTemplate) {
  Files files;
  writeGemma4(files, kGemma4EmptyThoughtTemplate);
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(files.open(t));
  ASSERT_EQ(t->chatFormat(), ChatFormat::Gemma4);
  EXPECT_EQ(render(*t, {{"user", "hi"}}),
            "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  // Thinking on: the bare opener, where the model writes its thought.
  EXPECT_EQ(render(*t, {{"user", "hi"}}, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");

  // The same template spelled with real newlines.
  Files written;
  std::string spelled = kGemma4EmptyThoughtTemplate;
  for (size_t at; (at = spelled.find("\\n")) != std::string::npos;)
    spelled.replace(at, 2, "\n");
  writeGemma4(written, spelled);
  ASSERT_TRUE(written.open(t));
  EXPECT_EQ(render(*t, {{"user", "hi"}}),
            "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");

  // Gemma 4's marker is looked for before Gemma 3's.
  Files both;
  writeGemma4(both, std::string(kGemma4Template) + "{# not <start_of_turn> #}");
  ASSERT_TRUE(both.open(t));
  EXPECT_EQ(t->chatFormat(), ChatFormat::Gemma4);
}

TEST(Tokenizer, Gemma4RefusesWhatItLacksByName) {
  for (const char *token : {"<|turn>", "<turn|>"}) {
    Files files;
    writeGemma4(files, kGemma4Template, "<eos>", token);
    std::unique_ptr<Tokenizer> t;
    ASSERT_TRUE(files.open(t));
    EXPECT_EQ(t->chatFormat(), ChatFormat::None);
    EXPECT_EQ(t->chatStatus().message(),
              std::string("chat: the Gemma 4 template needs the token ") + token +
                  ", which the vocabulary lacks");
  }
  // Thinking needs <|think|>; the empty thought channel needs its markers.
  Files noThink;
  writeGemma4(noThink, kGemma4Template, "<eos>", "<|think|>");
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(noThink.open(t));
  EXPECT_TRUE(t->checkChatOptions(ChatOptions()));
  ChatOptions thinking;
  thinking.enableThinking = true;
  std::string text;
  Status s = t->renderChat({{"user", "hi"}}, true, true, thinking, text);
  EXPECT_EQ(s.code(), CQ4P_ERROR_UNSUPPORTED);
  EXPECT_EQ(s.message(), "chat: thinking needs the token <|think|>, which the vocabulary lacks");
  Files noChannel;
  writeGemma4(noChannel, kGemma4EmptyThoughtTemplate, "<eos>", "<channel|>");
  ASSERT_TRUE(noChannel.open(t));
  EXPECT_EQ(t->chatFormat(), ChatFormat::None);
  EXPECT_NE(t->chatStatus().message().find("needs the token <channel|>"), std::string::npos);

  // Other formats have no thinking switch.
  Files lfm2;
  writeLfm2(lfm2);
  ASSERT_TRUE(lfm2.open(t));
  s = t->checkChatOptions(thinking);
  EXPECT_EQ(s.code(), CQ4P_ERROR_UNSUPPORTED);
  EXPECT_EQ(s.message(),
            "chat: thinking: the ChatML format has no thinking switch cq4p knows (Gemma 4's has)");
}

TEST(Tokenizer, StripThoughtsAsGemma4sTemplatesDo) {
  EXPECT_EQ(stripThoughts("<|channel>thought\nabc<channel|>Answer"), "Answer");
  EXPECT_EQ(stripThoughts(" A <|channel>x<channel|> B <|channel>y<channel|>\n"), "A  B");
  // An unclosed thought runs to the end; a stray close is dropped.
  EXPECT_EQ(stripThoughts("Yes<|channel>thought\nstill"), "Yes");
  EXPECT_EQ(stripThoughts("a<channel|>b"), "ab");
  // Jinja's trim: Python's white space, U+3000 and U+00A0 included.
  EXPECT_EQ(stripThoughts("\xE3\x80\x80x\xC2\xA0"), "x");
}

TEST(Tokenizer, StreamingNeverSplitsACharacter) {
  Files files;
  writeLfm2(files);
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(files.open(t));
  // U+1F600 as four byte pieces, then "é" as two.
  std::string bytes = "\xF0\x9F\x98\x80\xC3\xA9";
  std::vector<int64_t> ids;
  for (char c : bytes)
    ids.push_back(idOf(*t, byteChar(static_cast<unsigned char>(c))));
  TextDecoder decoder(*t);
  std::vector<std::string> pieces;
  for (int64_t id : ids) {
    std::string piece;
    ASSERT_TRUE(decoder.push(id, piece));
    pieces.push_back(piece);
  }
  std::vector<std::string> expected = {"", "", "", "\xF0\x9F\x98\x80", "", "\xC3\xA9"};
  EXPECT_EQ(pieces, expected);

  // A character that never completes, and a stray continuation byte, are
  // U+FFFD (as Hugging Face's lossy decoding).
  std::string text;
  std::vector<int64_t> bad = {idOf(*t, byteChar(0xF0)), idOf(*t, byteChar(0x9F)),
                              idOf(*t, "a"), idOf(*t, byteChar(0x80))};
  ASSERT_TRUE(t->decode(bad.data(), bad.size(), text));
  EXPECT_EQ(text, "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD");
  std::string tail;
  TextDecoder held(*t);
  ASSERT_TRUE(held.push(idOf(*t, byteChar(0xC3)), tail));
  EXPECT_EQ(tail, "");
  held.finish(tail);
  EXPECT_EQ(tail, "\xEF\xBF\xBD");

  std::string out;
  int64_t unknown = 9999;
  Status s = decoder.push(unknown, out);
  EXPECT_EQ(s.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(s.message().find("id 9999"), std::string::npos);
}

TEST(Tokenizer, InvalidUtf8IsRefusedWithItsOffset) {
  Files files;
  writeLfm2(files);
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(files.open(t));
  std::vector<int64_t> ids;
  Status s = t->encode(std::string_view("abc\xC3(", 5), true, ids);
  EXPECT_EQ(s.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(s.message().find("not valid UTF-8 at byte 3 of 5"), std::string::npos) << s.message();
  EXPECT_TRUE(ids.empty());
}

/// Each refusal names the member and the value.
struct Refusal {
  const char *member; // JSON pointer into the LFM2 file
  Json value;
  const char *expected;
};

/// Opens the LFM2 tokenizer.json with the refusal's member set to its value.
Status openEdited(const Refusal &refusal, std::unique_ptr<Tokenizer> &t) {
  Files files;
  writeLfm2(files);
  std::ifstream in(files.dir.file("tokenizer.json"));
  Json root = Json::parse(in);
  root[Json::json_pointer(refusal.member)] = refusal.value;
  files.write("tokenizer.json", root.dump());
  return files.open(t);
}

TEST(Tokenizer, RefusesWhatItDoesNotImplementByName) {
  const Refusal refusals[] = {
      {"/normalizer", {{"type", "NFKC"}}, "normalizer.type: 'NFKC'"},
      {"/pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "_"}},
       "pre_tokenizer.type: 'Metaspace'"},
      {"/model/type", "WordPiece", "model.type: 'WordPiece'"},
      {"/model/dropout", 0.1, "model.dropout: 0.1"},
      {"/model/continuing_subword_prefix", "##", "model.continuing_subword_prefix: '##'"},
      {"/post_processor", {{"type", "RobertaProcessing"}},
       "post_processor.type: 'RobertaProcessing'"},
      {"/decoder", {{"type", "WordPiece"}}, "decoder.type: 'WordPiece'"},
      {"/truncation", {{"max_length", 512}}, "truncation"},
      {"/added_tokens/0/lstrip", true, "added_tokens[0]"},
      {"/pre_tokenizer/pretokenizers/0/behavior", "Sideways", "behavior: 'Sideways'"},
  };
  for (const Refusal &refusal : refusals) {
    std::unique_ptr<Tokenizer> t;
    Status s = openEdited(refusal, t);
    EXPECT_FALSE(s) << refusal.member;
    EXPECT_NE(s.message().find(refusal.expected), std::string::npos)
        << refusal.member << ": " << s.message();
  }
  Files broken;
  broken.write("tokenizer.json", "{\"model\": [1, 2");
  std::unique_ptr<Tokenizer> t;
  Status s = broken.open(t);
  EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT);
  EXPECT_NE(s.message().find("not valid JSON"), std::string::npos);
  Files empty;
  s = empty.open(t);
  EXPECT_EQ(s.code(), CQ4P_ERROR_NOT_FOUND);
}

/// A SentencePiece-style BPE (byte fallback, ' ' -> U+2581) whose
/// pre-tokenizer is `preTokenizer`: the shape of Gemma's file, small.
void writePieces(Files &files, const Json &preTokenizer) {
  Json vocab = {{"<unk>", 0}, {"<bos>", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 2 + b;
  }
  int next = 258;
  for (const char *piece : {"\xE2\x96\x81", "a", "b", "x", "\xC3\xA9", "ab"})
    vocab[piece] = next++;
  Json root = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", Json::array({addedToken(1, "<bos>")})},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                      {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer", preTokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}},
                                  {"content", " "}},
                                 {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                 {"vocab", vocab}, {"merges", Json::array({Json::array({"a", "b"})})}}}};
  files.write("tokenizer.json", root.dump());
}

Json splitRegex(const std::string &regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"},
          {"invert", false}};
}

TEST(Tokenizer, SplitPatternsThatCouldCutACharacterAreRefused) {
  // Before: \C matched single bytes, so words began inside a character:
  // a read past the word's end (AddressSanitizer) and ids that decoded to
  // other text, with no error. \C is refused wherever it appears; the
  // empty pattern (which split forever until memory ran out) too.
  const std::pair<const char *, const char *> refused[] = {
      {"\\C", "pre_tokenizer.pattern.Regex: the pattern '\\C'"},
      {"a|\\C", "pre_tokenizer.pattern.Regex: the pattern 'a|\\C'"},
      {"(?<=\\C)", "pre_tokenizer.pattern.Regex: the pattern '(?<=\\C)'"},
      {"", "pre_tokenizer.pattern.Regex: expected a non-empty pattern, found ''"},
  };
  for (const auto &[regex, expected] : refused) {
    Files files;
    writePieces(files, splitRegex(regex));
    std::unique_ptr<Tokenizer> t;
    Status s = files.open(t);
    if (s) {
      for (std::string text : {"\xC3\xA9", "x\xC3\xA9\xE8\xAA\x9E", "ab"}) {
        // The text in a buffer of its exact size, as a caller may pass it.
        std::vector<char> exact(text.begin(), text.end());
        std::vector<int64_t> ids;
        std::string back;
        if (t->encode(std::string_view(exact.data(), exact.size()), false, ids) &&
            t->decode(ids.data(), ids.size(), back))
          EXPECT_EQ(back, text) << regex;
      }
    }
    EXPECT_FALSE(s) << regex;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  }
  // Patterns that match whole characters keep every character whole.
  for (const char *regex : {".", "\\X", "[^a]+|a", "\\p{L}+"}) {
    Files files;
    writePieces(files, splitRegex(regex));
    std::unique_ptr<Tokenizer> t;
    Status s = files.open(t);
    ASSERT_TRUE(s) << regex << ": " << s.message();
    for (std::string text : {"\xC3\xA9", "x\xC3\xA9\xE8\xAA\x9E", "ab b\xF0\x9F\x98\x80"}) {
      std::vector<int64_t> ids;
      std::string back;
      ASSERT_TRUE(t->encode(text, false, ids)) << regex;
      ASSERT_TRUE(t->decode(ids.data(), ids.size(), back));
      EXPECT_EQ(back, text) << regex;
    }
  }
}

/// The LFM2 file's text with `value` (JSON text) as the member at `pointer`.
std::string lfm2With(const std::string &pointer, const std::string &value) {
  Files files;
  writeLfm2(files);
  std::ifstream in(files.dir.file("tokenizer.json"));
  Json root = Json::parse(in);
  root[Json::json_pointer(pointer)] = "@@value@@";
  std::string text = root.dump();
  text.replace(text.find("\"@@value@@\""), 11, value);
  return text;
}

TEST(Tokenizer, JsonIsReadWithinItsLimits) {
  // Nesting: the document is level 1, so 63 arrays inside a member are
  // read (and truncation refused as such); 64 are past the limit. Before,
  // 200,000 overflowed the stack when the value was printed or copied.
  auto nested = [](int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); };
  Files files;
  writeLfm2(files);
  std::unique_ptr<Tokenizer> t;
  files.write("tokenizer.json", lfm2With("/truncation", nested(63)));
  Status s = files.open(t);
  EXPECT_EQ(s.code(), CQ4P_ERROR_UNSUPPORTED);
  EXPECT_NE(s.message().find("truncation: [[[[[[[[[[[[[[[[[[[[[[[[[["), std::string::npos) << s.message();
  EXPECT_LT(s.message().size(), 400u);
  for (int depth : {64, 200000}) {
    files.write("tokenizer.json", lfm2With("/truncation", nested(depth)));
    s = files.open(t);
    EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT);
    EXPECT_NE(s.message().find("tokenizer.json: truncation[0][0][0][0][0]...: expected at most "
                               "64 levels of nested [] and {} (CQ4P_TOKENIZER_MAX_NESTING), "
                               "found a level deeper"),
              std::string::npos)
        << s.message();
  }
  files.write("tokenizer.json", lfm2With("/model/merges/0", nested(100)));
  s = files.open(t);
  EXPECT_NE(s.message().find("tokenizer.json: model.merges[0][0][0][0]...: expected at most 64"),
            std::string::npos) << s.message();
  writeLfm2(files);
  files.write("generation_config.json", "{\"eos_token_id\": " + nested(100000) + "}");
  s = files.open(t);
  EXPECT_NE(s.message().find("generation_config.json: eos_token_id[0][0][0][0][0]...: expected "
                             "at most 64"), std::string::npos) << s.message();

  // A NUL ends nlohmann-json's reading: what follows it is refused.
  writeLfm2(files);
  std::ifstream in(files.dir.file("tokenizer.json"));
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  files.write("tokenizer.json", good + std::string("\0{]", 3));
  s = files.open(t);
  EXPECT_EQ(s.message(), files.dir.file("tokenizer.json") +
                             ": (document): expected nothing after the JSON document but white "
                             "space, found a NUL byte at byte " + std::to_string(good.size()) +
                             " of " + std::to_string(good.size() + 3));

  // Each member name once; a parse error names the member being read and
  // quotes the bytes as valid UTF-8.
  files.write("tokenizer.json", lfm2With("/padding", "{\"a\": 1, \"a\": 2}"));
  s = files.open(t);
  EXPECT_NE(s.message().find("tokenizer.json: padding.a: expected each member name once, found "
                             "'a' twice"), std::string::npos) << s.message();
  std::string broken = lfm2With("/added_tokens/0/content", "\"<|pad\xFF|>\"");
  files.write("tokenizer.json", broken);
  s = files.open(t);
  EXPECT_NE(s.message().find("tokenizer.json: added_tokens[0].content: not valid JSON: parse "
                             "error at line 1, column"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("last read: '\"<|pad\\xFF'"), std::string::npos) << s.message();
  EXPECT_EQ(findInvalidUtf8(s.message()), std::string::npos);
}

TEST(Tokenizer, EachIdIsOnePieceAndStopIdsAreInTheVocabulary) {
  const Refusal refusals[] = {
      // Before: each was accepted, and one of two pieces decoded as the other.
      {"/model/vocab/zz", 8, "expected an id no other piece has, found 8, the id of"},
      {"/added_tokens/1/id", 0, "added_tokens[1].id: expected an id no other added token has, "
                                "found 0, the id of the added token '<|pad|>'"},
      {"/added_tokens/7/id", 8 + 0xC3, "added_tokens[7].id: expected the id of the piece "
                                       "'<|im_end|>' or an id no piece has, found 203"},
  };
  for (const Refusal &refusal : refusals) {
    std::unique_ptr<Tokenizer> t;
    Status s = openEdited(refusal, t);
    EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT) << refusal.member;
    EXPECT_NE(s.message().find(refusal.expected), std::string::npos) << s.message();
  }
  // generation_config.json's ids compare as unsigned: 2^63 and 2^64 - 1
  // were negative as int64, so "below" the vocabulary's size.
  for (const char *eos : {"9223372036854775808", "18446744073709551615", "[7, 9223372036854775808]"}) {
    Files files;
    writeLfm2(files);
    files.write("generation_config.json", std::string("{\"eos_token_id\": ") + eos + "}");
    std::unique_ptr<Tokenizer> t;
    Status s = files.open(t);
    EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT) << eos;
    EXPECT_NE(s.message().find("expected an id below 271 (the vocabulary's size), found"),
              std::string::npos) << s.message();
  }
}

/// The pieces `t` gives `text` (ids mapped back to their pieces).
std::vector<std::string> piecesOf(const Tokenizer &t, const std::string &text) {
  std::vector<int64_t> ids;
  Status s = t.encode(text, false, ids);
  EXPECT_TRUE(s) << s.message();
  std::vector<std::string> out;
  for (int64_t id : ids)
    out.emplace_back(t.piece(id));
  return out;
}

TEST(Tokenizer, SplitBehaviorsJoinPiecesAsHuggingFacesDo) {
  // Hugging Face's example: "the-final--countdown" split at "-". With
  // ignore_merges, a word that is a piece is that piece, so the ids show
  // where the words are.
  Json model = byteLevelModel(0, {}, /*ignoreMerges=*/true);
  int next = 256;
  for (const char *piece : {"the", "final", "countdown", "the-", "final-", "-final",
                            "-countdown", "--", "final--"})
    model["vocab"][piece] = next++;
  using Pieces = std::vector<std::string>;
  const std::tuple<const char *, const char *, bool, Pieces> cases[] = {
      {"Removed", "-", false, {"the", "final", "countdown"}},
      {"Isolated", "-", false, {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", "-", false, {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", "-", false, {"the", "-final", "-", "-countdown"}},
      {"Contiguous", "-", false, {"the", "-", "final", "--", "countdown"}},
      // Inverted: the dashes are the "matches", the letters are kept.
      {"MergedWithPrevious", "[a-z]+", true, {"the-", "final--", "countdown"}},
      {"Removed", "[a-z]+", true, {"the", "final", "countdown"}},
  };
  for (const auto &[behavior, regex, invert, expected] : cases) {
    Files files;
    Json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                 {"added_tokens", Json::array()}, {"normalizer", nullptr},
                 {"pre_tokenizer",
                  {{"type", "Sequence"},
                   {"pretokenizers",
                    {{{"type", "Split"}, {"pattern", {{"Regex", regex}}},
                      {"behavior", behavior}, {"invert", invert}},
                     {{"type", "ByteLevel"}, {"add_prefix_space", false},
                      {"use_regex", false}}}}}},
                 {"post_processor", nullptr}, {"decoder", {{"type", "ByteLevel"}}},
                 {"model", model}};
    files.write("tokenizer.json", root.dump());
    std::unique_ptr<Tokenizer> t;
    Status s = files.open(t);
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(piecesOf(*t, "the-final--countdown"), expected) << behavior << " " << regex;
  }
}

TEST(Tokenizer, EncodingIsBoundedInTextAndWork) {
  Files files;
  writeLfm2(files);
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(files.open(t));
  // One encode takes at most CQ4P_TOKENIZER_MAX_TEXT_BYTES.
  std::string text(size_t(CQ4P_TOKENIZER_MAX_TEXT_BYTES) + 1, '1');
  std::vector<int64_t> ids;
  Status s = t->encode(text, false, ids);
  EXPECT_EQ(s.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_EQ(s.message(), "encode: the text is 33554433 bytes, more than the limit of 33554432 "
                         "for one encode (CQ4P_TOKENIZER_MAX_TEXT_BYTES)");
  EXPECT_TRUE(ids.empty());

  // A pre-token longer than CQ4P_TOKENIZER_MAX_WORD_BYTES is merged in
  // pieces of at most that many bytes, cut between characters.
  const size_t word = CQ4P_TOKENIZER_MAX_WORD_BYTES;
  std::string run;
  for (size_t i = 0; run.size() < 2 * word + 5; ++i)
    run += i % 7 == 6 ? "\xC3\xA9" : "l";
  ASSERT_TRUE(t->encode(run, false, ids));
  std::string back;
  ASSERT_TRUE(t->decode(ids.data(), ids.size(), back));
  EXPECT_EQ(back, run);
  std::vector<int64_t> pieces;
  size_t start = 0;
  while (start < run.size()) {
    size_t cut = std::min(run.size() - start, word);
    while (start + cut < run.size() && (static_cast<unsigned char>(run[start + cut]) & 0xC0) == 0x80)
      --cut;
    ASSERT_TRUE(t->encode(run.substr(start, cut), false, pieces));
    start += cut;
  }
  EXPECT_EQ(ids, pieces);

  // The normalized text of an encode is at most 4 times the text plus
  // 64 KiB: a Replace of one byte by 64 is refused on 2,000 of them.
  Files growing;
  writePieces(growing, nullptr);
  std::ifstream in(growing.dir.file("tokenizer.json"));
  Json root = Json::parse(in);
  root["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", {root["normalizer"],
                                         {{"type", "Replace"}, {"pattern", {{"String", "a"}}},
                                          {"content", std::string(64, 'b')}}}}};
  growing.write("tokenizer.json", root.dump());
  ASSERT_TRUE(growing.open(t));
  ids.clear();
  s = t->encode(std::string(2000, 'a'), false, ids);
  EXPECT_EQ(s.code(), CQ4P_ERROR_ARGUMENT);
  EXPECT_NE(s.message().find("tokenizer.json: normalizer.normalizers[1] would make the text "
                             "128000 bytes, more than cq4p's limit for the normalized text "
                             "(4 times the text's bytes plus 65536)"),
            std::string::npos) << s.message();
  ids.clear();
  EXPECT_TRUE(t->encode(std::string(1000, 'a'), false, ids));

  // At most CQ4P_TOKENIZER_MAX_STEPS steps of a kind.
  Json replace = {{"type", "Replace"}, {"pattern", {{"String", "x"}}}, {"content", "y"}};
  root["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", Json::array()}};
  for (int i = 0; i < 33; ++i)
    root["normalizer"]["normalizers"].push_back(replace);
  growing.write("tokenizer.json", root.dump());
  s = growing.open(t);
  EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT);
  EXPECT_NE(s.message().find("tokenizer.json: normalizer.normalizers[32]: expected at most 32 "
                             "normalizer steps (CQ4P_TOKENIZER_MAX_STEPS), found more"),
            std::string::npos) << s.message();
}

TEST(Tokenizer, ASplitPatternSpendsAtMostItsMatchBudget) {
  // Just under PCRE2's own match limit at every character: 6.5 ms each,
  // 130 s for 20 KB, before the budget.
  Files files;
  writePieces(files, splitRegex("(?:(?:a|aa){0,20}b|.)"));
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(files.open(t));
  std::vector<int64_t> ids;
  auto start = std::chrono::steady_clock::now();
  Status s = t->encode(std::string(20000, 'a'), false, ids);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(s.code(), CQ4P_ERROR_UNSUPPORTED);
  EXPECT_EQ(s.message(),
            "encode: " + files.dir.file("tokenizer.json") +
                ": pre_tokenizer.pattern.Regex: the split pattern needs more work on this text "
                "than cq4p's match budget (CQ4P_TOKENIZER_MATCH_STEPS_BASE 1048576 + 128 a byte "
                "of text, in PCRE2's match-limit steps): a pattern this slow is refused rather "
                "than run for minutes");
  EXPECT_TRUE(ids.empty());
  // Text it matches without backtracking much is encoded.
  std::string text;
  for (int i = 0; i < 10000; ++i)
    text += "ab";
  ASSERT_TRUE(t->encode(text, false, ids));
  EXPECT_EQ(ids, std::vector<int64_t>(10000, t->pieceId("ab")));
}

TEST(Tokenizer, AddedTokensAreFoundLeftmostLongestInLinearTime) {
  // Overlapping tokens over a..e (which no merge of the LFM2 file joins,
  // so every other byte is its own id), checked against the definition:
  // from the left, the first position where a token starts, the longest
  // token there, then on after it. The text crosses the 64 KiB blocks the
  // tokens are looked for in.
  Files files;
  writeLfm2(files);
  std::ifstream in(files.dir.file("tokenizer.json"));
  Json root = Json::parse(in);
  std::string longToken;
  for (int i = 0; i < 40; ++i)
    longToken += "abcde"[i % 5];
  std::vector<std::string> tokens = {"ab", "abc", "bcd", "c", "abcde", "dd", "eea", longToken};
  int next = 1000;
  for (const std::string &token : tokens)
    root["added_tokens"].push_back(addedToken(next++, token));
  files.write("tokenizer.json", root.dump());
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  ASSERT_TRUE(s) << s.message();

  std::string text;
  uint32_t seed = 7;
  while (text.size() < 200000) {
    seed = seed * 1103515245 + 12345;
    if ((seed >> 16) % 97 == 0)
      text += longToken.substr(0, 20 + (seed >> 8) % 21);
    else
      text += "abcde"[(seed >> 16) % 5];
  }
  std::vector<int64_t> expected;
  for (size_t i = 0; i < text.size();) {
    size_t best = 0;
    int64_t id = -1;
    for (size_t k = 0; k < tokens.size(); ++k)
      if (tokens[k].size() > best && text.compare(i, tokens[k].size(), tokens[k]) == 0) {
        best = tokens[k].size();
        id = 1000 + int64_t(k);
      }
    if (id < 0) {
      expected.push_back(idOf(*t, std::string(1, text[i])));
      ++i;
    } else {
      expected.push_back(id);
      i += best;
    }
  }
  std::vector<int64_t> ids;
  ASSERT_TRUE(t->encode(text, false, ids));
  EXPECT_EQ(ids, expected);

  // A long token that almost matches everywhere costs no more than a
  // short one: 4 KiB of "a...ab" over 1 MB of "a" (a trie walked from
  // every byte took 26 s).
  root["added_tokens"].push_back(addedToken(next++, std::string(4095, 'a') + "b"));
  files.write("tokenizer.json", root.dump());
  ASSERT_TRUE(files.open(t));
  ids.clear();
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(t->encode(std::string(1 << 20, 'a'), false, ids));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_EQ(ids, std::vector<int64_t>(size_t(1) << 20, idOf(*t, "a")));
}

TEST(Tokenizer, ABundlesFilesAreRegularFilesInsideIt) {
  Files files;
  writeLfm2(files);
  // A FIFO is refused by name, without blocking on it.
  ::unlink(files.dir.file("generation_config.json").c_str());
  ASSERT_EQ(::mkfifo(files.dir.file("generation_config.json").c_str(), 0600), 0);
  std::unique_ptr<Tokenizer> t;
  Status s = files.open(t);
  EXPECT_EQ(s.code(), CQ4P_ERROR_IO);
  EXPECT_NE(s.message().find("generation_config.json: a FIFO"), std::string::npos)
      << s.message();
  ::unlink(files.dir.file("generation_config.json").c_str());

  // A symbolic link: followed in a model directory, refused in a bundle.
  ASSERT_EQ(::rename(files.dir.file("tokenizer_config.json").c_str(),
                     files.dir.file("config-target").c_str()), 0);
  ASSERT_EQ(::symlink("config-target", files.dir.file("tokenizer_config.json").c_str()), 0);
  EXPECT_TRUE(Tokenizer::openDirectory(files.dir.path(), t, /*confined=*/false));
  s = Tokenizer::openDirectory(files.dir.path(), t, /*confined=*/true);
  EXPECT_EQ(s.code(), CQ4P_ERROR_FORMAT);
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.message();
}

/// Everything one thread gets from a tokenizer through the C API: each
/// text's ids, their decoded text, and a conversation's rendering.
struct CApiResults {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::string> decoded;
  std::string chat;
  std::string error;
};

CApiResults throughTheCApi(const cq4p_tokenizer *t, const std::vector<std::string> &texts) {
  CApiResults out;
  char error[512] = "";
  for (const std::string &text : texts) {
    std::vector<int64_t> ids(text.size() + 8);
    size_t count = 0;
    if (cq4p_tokenizer_encode(t, text.data(), text.size(), 1, ids.data(), ids.size(), &count,
                              error, sizeof(error)) != CQ4P_OK) {
      out.error = error;
      return out;
    }
    ids.resize(count);
    std::string decoded(text.size() * 4 + 64, '\0');
    size_t length = 0;
    if (cq4p_tokenizer_decode(t, ids.data(), ids.size(), decoded.data(), decoded.size(), &length,
                              error, sizeof(error)) != CQ4P_OK) {
      out.error = error;
      return out;
    }
    decoded.resize(length);
    out.ids.push_back(std::move(ids));
    out.decoded.push_back(std::move(decoded));
  }
  const char *roles[] = {"system", "user", "assistant", "user"};
  const char *contents[] = {"be brief", "hello 123", "hello world", texts.back().c_str()};
  std::string chat(4096 + texts.back().size(), '\0');
  size_t length = 0;
  if (cq4p_tokenizer_render_chat(t, roles, contents, 4, 1, chat.data(), chat.size(), &length,
                                 error, sizeof(error)) != CQ4P_OK) {
    out.error = error;
    return out;
  }
  chat.resize(length);
  out.chat = std::move(chat);
  return out;
}

TEST(Tokenizer, ThreadsOpenAndEncodeConcurrentlyThroughTheCApi) {
  // The C API's promise (cq4p.h): a tokenizer is immutable once open, so
  // any number of threads encode, decode and render with one, and opens run
  // side by side. Four threads each open their own and share one, and every
  // result equals the one a single thread got before. The ThreadSanitizer
  // build (test/fuzz) runs this too, so a shared scratch buffer or a lazily
  // filled cache without a lock fails it even when the results agree.
  Files files;
  writeLfm2(files);
  const std::vector<std::string> texts = {
      "hello world 123", "Hello, hello: 12345!\n\n  tabs\tand spaces",
      "caf\xc3\xa9 \xe2\x82\xac 5 \xf0\x9f\x98\x80 <|im_start|>user\nhi<|im_end|>",
      std::string(3000, 'l') + " hello"};
  char error[512] = "";
  cq4p_tokenizer *shared = nullptr;
  ASSERT_EQ(cq4p_tokenizer_open_dir(files.dir.path().c_str(), &shared, error, sizeof(error)),
            CQ4P_OK)
      << error;
  const CApiResults expected = throughTheCApi(shared, texts);
  ASSERT_EQ(expected.error, "");
  ASSERT_EQ(expected.decoded.size(), texts.size());
  // The reference is worth comparing with: the texts round-trip and the
  // special tokens inside a text are single ids.
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(expected.decoded[i], "<|startoftext|>" + texts[i]);
  EXPECT_NE(expected.chat.find("<|im_start|>assistant\n"), std::string::npos);

  constexpr int kThreads = 4;
  std::vector<CApiResults> own(kThreads), viaShared(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      char threadError[512] = "";
      cq4p_tokenizer *mine = nullptr;
      if (cq4p_tokenizer_open_dir(files.dir.path().c_str(), &mine, threadError,
                                  sizeof(threadError)) != CQ4P_OK) {
        own[i].error = threadError;
        return;
      }
      for (int round = 0; round < 3; ++round) {
        viaShared[i] = throughTheCApi(shared, texts);
        own[i] = throughTheCApi(mine, texts);
      }
      cq4p_tokenizer_close(mine);
    });
  }
  for (std::thread &thread : threads)
    thread.join();
  for (int i = 0; i < kThreads; ++i) {
    for (const CApiResults *got : {&own[i], &viaShared[i]}) {
      EXPECT_EQ(got->error, "") << "thread " << i;
      EXPECT_EQ(got->ids, expected.ids) << "thread " << i;
      EXPECT_EQ(got->decoded, expected.decoded) << "thread " << i;
      EXPECT_EQ(got->chat, expected.chat) << "thread " << i;
    }
  }
  cq4p_tokenizer_close(shared);
}

} // namespace
