//===- TextCApiTest.cpp - the C API's text calls over the toy model -------===//
//
// The toy model of FakeModel.c (vocab 64) with a small byte-level BPE
// tokenizer written beside it, laid out so that the text these tests use
// (lower-case letters, digits, ChatML's markers) has ids below 64: the
// tokenizer's lazy opening under two threads, the context check of a
// generation against counts that would overflow a sum, stop strings that are
// not UTF-8, a chat whose model was used in between two turns, and
// examples/chat.c reading lines of any length.
//
//===----------------------------------------------------------------------===//

#include "Refusals.h"
#include "TempDir.h"
#include "ToyBundle.h"

#include "cq4p/cq4p.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

using namespace cq4p::test;
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

/// ChatML's two markers at ids 0 and 1, then the bytes of "\n", " ",
/// a-z, 0-9, pieces of 2, 4, ..., 4096 'a's (so that a long line of 'a's
/// is a few ids), the two bytes of "é", then the other bytes (ids 64 and
/// up, which the toy cannot take).
void writeToyTokenizer(const TempDir &dir) {
  Json vocab = Json::object();
  int next = 2;
  std::string first = "\n ";
  for (char c = 'a'; c <= 'z'; ++c)
    first += c;
  for (char c = '0'; c <= '9'; ++c)
    first += c;
  for (char c : first)
    vocab[byteChar((unsigned char)c)] = next++;
  Json merges = Json::array();
  std::string run = "a";
  for (int i = 0; i < 12; ++i) {
    merges.push_back({run, run});
    run += run;
    vocab[run] = next++;
  }
  for (int b : {0xC3, 0xA9})
    vocab[byteChar(b)] = next++;
  for (int b = 0; b < 256; ++b)
    if (!vocab.contains(byteChar(b)))
      vocab[byteChar(b)] = next++;
  Json added = Json::array();
  const char *specials[] = {"<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 2; ++i)
    added.push_back({{"id", i},          {"content", specials[i]}, {"single_word", false},
                     {"lstrip", false},  {"rstrip", false},        {"normalized", false},
                     {"special", true}});
  Json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
        {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}}};
  std::ofstream(dir.file("tokenizer.json")) << root.dump();
  Json config = {{"eos_token", "<|im_end|>"},
                 {"chat_template",
                  "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + "
                  "'\n' + message['content'] + '<|im_end|>\n' -}}{%- endfor -%}"}};
  std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
}

struct Collected {
  std::vector<int64_t> ids;
  std::string text;
  std::vector<std::string> pieces;
};

int collect(void *context, int64_t id, const char *text, size_t length) {
  auto *out = static_cast<Collected *>(context);
  if (id >= 0)
    out->ids.push_back(id);
  out->text.append(text, length);
  out->pieces.emplace_back(text, length);
  return 1;
}

class TextCApiTest : public ::testing::Test {
protected:
  void SetUp() override {
    toy.config = "\"config\": {\"max_position_embeddings\": 2048}, ";
    ASSERT_TRUE(toy.open(bundle)) << "the toy bundle";
    writeToyTokenizer(toy.dir);
  }

  cq4p_model *openModel() {
    cq4p_model_options options = {1, 0, 0};
    cq4p_model *model = nullptr;
    char error[512] = "";
    EXPECT_EQ(cq4p_model_open(toy.dir.path().c_str(), CQ4P_FAKE_MODEL_PATH, &options,
                              &model, error, sizeof(error)),
              CQ4P_OK)
        << error;
    return model;
  }

  static cq4p_text_options greedy(int64_t maxNewTokens) {
    cq4p_text_options options = {};
    options.max_new_tokens = maxNewTokens;
    options.sampling.top_p = 1.0f;
    options.ignore_stop_ids = 1;
    return options;
  }

  ToyBundle toy;
  std::unique_ptr<cq4p::runtime::Bundle> bundle;
};

TEST_F(TextCApiTest, TheToyTokenizerFitsTheToy) {
  cq4p_model *model = openModel();
  ASSERT_NE(model, nullptr);
  char error[512] = "";
  cq4p_text_options options = greedy(4);
  Collected out;
  ASSERT_EQ(cq4p_model_generate_text(model, nullptr, "hello 42", &options, collect, &out,
                                     nullptr, error, sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(out.ids.size(), 4u);
  cq4p_model_close(model);
}

TEST_F(TextCApiTest, TheBundlesTokenizerOpensOnceUnderTwoThreads) {
  // Before: the lazy opening raced; one thread's tokenizer replaced (and
  // freed) the other's while in use: a SIGSEGV in about half the runs.
  for (int run = 0; run < 40; ++run) {
    cq4p_model *model = openModel();
    ASSERT_NE(model, nullptr);
    std::atomic<int> ready{0};
    const cq4p_tokenizer *seen = nullptr;
    int seenCode = -1, generated = -1;
    char errorA[512] = "", errorB[512] = "";
    std::thread a([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      seenCode = cq4p_model_tokenizer(model, &seen, errorA, sizeof(errorA));
      if (seenCode == CQ4P_OK) {
        // Used while the other thread generates with it.
        int64_t ids[16];
        size_t count = 0;
        seenCode = cq4p_tokenizer_encode(seen, "hello", 5, 1, ids, 16, &count, errorA,
                                         sizeof(errorA));
      }
    });
    std::thread b([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      cq4p_text_options options = greedy(2);
      Collected out;
      generated = cq4p_model_generate_text(model, nullptr, "hi", &options, collect, &out,
                                           nullptr, errorB, sizeof(errorB));
    });
    a.join();
    b.join();
    EXPECT_EQ(seenCode, CQ4P_OK) << errorA;
    EXPECT_EQ(generated, CQ4P_OK) << errorB;
    const cq4p_tokenizer *again = nullptr;
    char error[512] = "";
    ASSERT_EQ(cq4p_model_tokenizer(model, &again, error, sizeof(error)), CQ4P_OK) << error;
    EXPECT_EQ(again, seen) << "the model's tokenizer was replaced";
    cq4p_model_close(model);
    if (HasFailure())
      break;
  }
}

TEST_F(TextCApiTest, CountsThatWouldOverflowTheContextSumAreRefused) {
  // Before: position + prompt + max_new_tokens - 1 wrapped negative, so
  // the check passed and the generation ran until the context was full.
  cq4p_model *model = openModel();
  ASSERT_NE(model, nullptr);
  char error[512] = "";
  for (int64_t count : {std::numeric_limits<int64_t>::max(),
                        std::numeric_limits<int64_t>::max() - 1, int64_t(1) << 62}) {
    cq4p_text_options options = greedy(count);
    Collected out;
    cq4p_generate_stats stats = {};
    EXPECT_EQ(cq4p_model_generate_text(model, nullptr, "hi", &options, collect, &out,
                                       &stats, error, sizeof(error)),
              CQ4P_ERROR_ARGUMENT);
    EXPECT_TRUE(contains(error, "context overflow")) << error;
    EXPECT_TRUE(contains(error, std::to_string(count) + " new tokens")) << error;
    EXPECT_EQ(stats.generated_tokens, 0);
    EXPECT_TRUE(out.ids.empty());

    cq4p_chat *chat = nullptr;
    ASSERT_EQ(cq4p_chat_open(model, nullptr, nullptr, &chat, error, sizeof(error)),
              CQ4P_OK)
        << error;
    EXPECT_EQ(cq4p_chat_send(chat, "hi", &options, collect, &out, &stats, error,
                             sizeof(error)),
              CQ4P_ERROR_ARGUMENT);
    EXPECT_TRUE(contains(error, "context overflow")) << error;
    EXPECT_TRUE(out.ids.empty());
    cq4p_chat_close(chat);
  }
  cq4p_model_close(model);
}

TEST_F(TextCApiTest, AStopStringThatIsNotUtf8IsRefused) {
  // Before: accepted; a stop string of one continuation byte matched inside
  // a character, so the callback received the character's first byte alone.
  cq4p_model *model = openModel();
  ASSERT_NE(model, nullptr);
  char error[512] = "";
  for (const char *stop : {"\xBF", "ab\xC3", "\xC0\x80", "\xED\xA0\x80"}) {
    const char *stops[] = {"zz", stop};
    cq4p_text_options options = greedy(4);
    options.stop_strings = stops;
    options.stop_string_count = 2;
    Collected out;
    EXPECT_EQ(cq4p_model_generate_text(model, nullptr, "hi", &options, collect, &out,
                                       nullptr, error, sizeof(error)),
              CQ4P_ERROR_ARGUMENT)
        << stop;
    EXPECT_TRUE(contains(error, "stop string 1 is not valid UTF-8 at byte")) << error;
    EXPECT_EQ(std::strchr(error, '\n'), nullptr);
    EXPECT_TRUE(out.ids.empty());

    cq4p_chat *chat = nullptr;
    ASSERT_EQ(cq4p_chat_open(model, nullptr, nullptr, &chat, error, sizeof(error)),
              CQ4P_OK)
        << error;
    EXPECT_EQ(cq4p_chat_send(chat, "hi", &options, collect, &out, nullptr, error,
                             sizeof(error)),
              CQ4P_ERROR_ARGUMENT);
    EXPECT_TRUE(contains(error, "stop string 1 is not valid UTF-8")) << error;
    EXPECT_TRUE(out.ids.empty());
    cq4p_chat_close(chat);
  }
  cq4p_model_close(model);
}

/// The chat's second reply after `between` used the model.
template <typename Between>
std::vector<int64_t> secondReply(cq4p_model *model, Between between,
                                 std::vector<int64_t> *history = nullptr) {
  char error[512] = "";
  cq4p_chat *chat = nullptr;
  EXPECT_EQ(cq4p_chat_open(model, nullptr, nullptr, &chat, error, sizeof(error)), CQ4P_OK)
      << error;
  cq4p_text_options options = {};
  options.max_new_tokens = 5;
  options.sampling.top_p = 1.0f;
  options.ignore_stop_ids = 1;
  Collected first, second;
  EXPECT_EQ(cq4p_chat_send(chat, "hello there", &options, collect, &first, nullptr, error,
                           sizeof(error)),
            CQ4P_OK)
      << error;
  between(model);
  EXPECT_EQ(cq4p_chat_send(chat, "and 42", &options, collect, &second, nullptr, error,
                           sizeof(error)),
            CQ4P_OK)
      << error;
  if (history != nullptr) {
    history->resize(cq4p_chat_history(chat, nullptr, 0));
    cq4p_chat_history(chat, history->data(), history->size());
  }
  cq4p_chat_close(chat);
  return second.ids;
}

TEST_F(TextCApiTest, AChatNoticesItsModelWasUsedInBetween) {
  // Before: a model reset and refilled with as many other ids between two
  // turns answered from the other ids (the position matched); a different
  // count was refused. Now the chat prefills its conversation again.
  cq4p_model *model = openModel();
  ASSERT_NE(model, nullptr);
  std::vector<int64_t> history;
  std::vector<int64_t> expected = secondReply(model, [](cq4p_model *) {}, &history);
  ASSERT_EQ(expected.size(), 5u);
  // The history's ids afresh give the same reply.
  {
    std::vector<int64_t> prompt(history.begin(), history.end() - 5);
    std::vector<int64_t> again(5);
    cq4p_sampling sampling = {0.0f, 0, 1.0f, 0};
    char error[512] = "";
    ASSERT_EQ(cq4p_model_generate(model, prompt.data(), int64_t(prompt.size()), 5,
                                  &sampling, again.data(), nullptr, error, sizeof(error)),
              CQ4P_OK)
        << error;
    EXPECT_EQ(again, expected);
  }
  auto refill = [](int64_t shift) {
    return [shift](cq4p_model *m) {
      cq4p_model_info info;
      cq4p_model_get_info(m, &info);
      std::vector<int64_t> other(info.position + shift);
      for (size_t i = 0; i < other.size(); ++i)
        other[i] = int64_t(10 + i % 20);
      ASSERT_EQ(cq4p_model_reset(m), CQ4P_OK);
      char error[512] = "";
      ASSERT_EQ(cq4p_model_prefill(m, other.data(), other.size(), nullptr, error,
                                   sizeof(error)),
                CQ4P_OK)
          << error;
    };
  };
  EXPECT_EQ(secondReply(model, refill(0)), expected) << "the same count of other ids";
  EXPECT_EQ(secondReply(model, refill(3)), expected) << "more ids";
  EXPECT_EQ(secondReply(model, [](cq4p_model *m) { cq4p_model_reset(m); }), expected)
      << "a reset";
  EXPECT_EQ(secondReply(model,
                        [](cq4p_model *m) {
                          int64_t prompt[3] = {5, 6, 7}, out[2];
                          char error[512] = "";
                          ASSERT_EQ(cq4p_model_generate(m, prompt, 3, 2, nullptr, out,
                                                        nullptr, error, sizeof(error)),
                                    CQ4P_OK)
                              << error;
                        }),
            expected)
      << "a generation";
  EXPECT_EQ(secondReply(model,
                        [](cq4p_model *m) {
                          cq4p_text_options options = greedy(3);
                          Collected out;
                          char error[512] = "";
                          ASSERT_EQ(cq4p_model_generate_text(m, nullptr, "other", &options,
                                                             collect, &out, nullptr, error,
                                                             sizeof(error)),
                                    CQ4P_OK)
                              << error;
                        }),
            expected)
      << "a text generation";
  // Two chats on one model, turn about.
  {
    char error[512] = "";
    cq4p_chat *a = nullptr, *b = nullptr;
    ASSERT_EQ(cq4p_chat_open(model, nullptr, nullptr, &a, error, sizeof(error)), CQ4P_OK);
    ASSERT_EQ(cq4p_chat_open(model, nullptr, nullptr, &b, error, sizeof(error)), CQ4P_OK);
    cq4p_text_options options = greedy(5);
    Collected first, other, second;
    ASSERT_EQ(cq4p_chat_send(a, "hello there", &options, collect, &first, nullptr, error,
                             sizeof(error)),
              CQ4P_OK);
    ASSERT_EQ(cq4p_chat_send(b, "something else", &options, collect, &other, nullptr,
                             error, sizeof(error)),
              CQ4P_OK);
    ASSERT_EQ(cq4p_chat_send(a, "and 42", &options, collect, &second, nullptr, error,
                             sizeof(error)),
              CQ4P_OK)
        << error;
    EXPECT_EQ(second.ids, expected) << "two chats on one model";
    cq4p_chat_close(a);
    cq4p_chat_close(b);
  }
  cq4p_model_close(model);
}

/// A callback that, on its first piece, sends another turn to the same chat
/// (refused) and counts how often another thread read the history meanwhile.
struct Reentrant {
  cq4p_chat *chat = nullptr;
  int sendCode = CQ4P_OK;
  std::string sendError;
  Collected collected;
};

int sendFromTheCallback(void *context, int64_t id, const char *text, size_t length) {
  auto *r = static_cast<Reentrant *>(context);
  if (r->collected.ids.empty() && id >= 0) {
    char error[512] = "";
    cq4p_text_options options = {};
    options.max_new_tokens = 2;
    options.sampling.top_p = 1.0f;
    r->sendCode = cq4p_chat_send(r->chat, "again", &options, nullptr, nullptr, nullptr, error,
                                 sizeof(error));
    r->sendError = error;
  }
  return collect(&r->collected, id, text, length);
}

TEST_F(TextCApiTest, AChatTakesOneTurnAtATimeAndItsHistoryReadsFromAnyThread) {
  // Before: a second cq4p_chat_send during a turn touched the conversation
  // unguarded, and cq4p_chat_history read it while the turn appended to it.
  cq4p_model *model = openModel();
  ASSERT_NE(model, nullptr);
  char error[512] = "";
  cq4p_chat *chat = nullptr;
  ASSERT_EQ(cq4p_chat_open(model, nullptr, nullptr, &chat, error, sizeof(error)), CQ4P_OK)
      << error;
  cq4p_text_options options = greedy(6);
  Reentrant reentrant;
  reentrant.chat = chat;
  // A reader of the history on another thread for the whole turn: every
  // read is the conversation before the turn (empty) or after it, whole.
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    std::vector<int64_t> ids(4096);
    while (!done.load()) {
      size_t n = cq4p_chat_history(chat, ids.data(), ids.size());
      if (n != 0 && n < 7)  // the turn's prompt and its 6 ids, or nothing
        torn.fetch_add(1);
    }
  });
  int code = cq4p_chat_send(chat, "hello there", &options, sendFromTheCallback, &reentrant,
                            nullptr, error, sizeof(error));
  done.store(true);
  reader.join();
  EXPECT_EQ(code, CQ4P_OK) << error;
  EXPECT_EQ(reentrant.sendCode, CQ4P_ERROR_BUSY);
  EXPECT_TRUE(contains(reentrant.sendError.c_str(), "one turn at a time per chat"))
      << reentrant.sendError;
  EXPECT_EQ(reentrant.collected.ids.size(), 6u);
  EXPECT_EQ(torn.load(), 0);
  // The conversation ends with the reply, and a next turn still runs.
  std::vector<int64_t> history(cq4p_chat_history(chat, nullptr, 0));
  cq4p_chat_history(chat, history.data(), history.size());
  ASSERT_GE(history.size(), 6u);
  EXPECT_TRUE(std::equal(reentrant.collected.ids.begin(), reentrant.collected.ids.end(),
                         history.end() - 6));
  Collected next;
  EXPECT_EQ(cq4p_chat_send(chat, "and 42", &options, collect, &next, nullptr, error,
                           sizeof(error)),
            CQ4P_OK)
      << error;
  EXPECT_EQ(next.ids.size(), 6u);
  cq4p_chat_close(chat);
  cq4p_model_close(model);
}

#if defined(CQ4P_EXAMPLE_CHAT_PATH) && !defined(CQ4P_TEST_EMULATED)
/// examples/chat.c over the toy: (exit status, stdout, stderr).
struct Ran {
  int status;
  std::string out, err;
};

Ran runChat(const TempDir &dir, const std::string &input) {
  std::string in = dir.file("input.txt"), out = dir.file("out.txt"),
              err = dir.file("err.txt");
  std::ofstream(in, std::ios::binary) << input;
  std::string command = std::string(CQ4P_EXAMPLE_CHAT_PATH) + " '" + dir.path() + "' '" +
                        CQ4P_FAKE_MODEL_PATH + "' 3 <'" + in + "' >'" + out + "' 2>'" + err +
                        "'";
  int status = std::system(command.c_str());
  auto read = [](const std::string &path) {
    std::ifstream file(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), {});
  };
  Ran ran{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(out), read(err)};
  for (const std::string &path : {in, out, err})
    std::remove(path.c_str());
  return ran;
}

size_t countOf(const std::string &text, const std::string &part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++count;
  return count;
}

TEST_F(TextCApiTest, TheChatExampleReadsLinesOfAnyLength) {
  // Before: lines were read 4,095 bytes at a time: a longer line became two
  // turns, and one whose 4,096th byte fell inside a character was refused
  // as invalid UTF-8.
  std::string cut = std::string(4094, 'a') + "\xC3\xA9" + std::string(10, 'a') + "\n";
  Ran ran = runChat(toy.dir, cut);
  EXPECT_EQ(ran.status, 0) << ran.err;
  EXPECT_EQ(countOf(ran.err, "prefill "), 1u) << ran.err;
  EXPECT_EQ(countOf(ran.out, "\n"), 1u);

  ran = runChat(toy.dir, std::string(9000, 'a') + "\nhello\n\nlast line without an end");
  EXPECT_EQ(ran.status, 0) << ran.err;
  EXPECT_EQ(countOf(ran.err, "prefill "), 3u) << ran.err;
  EXPECT_EQ(countOf(ran.out, "\n"), 3u);

  // MAX_NEW_TOKENS: an integer in [1, 2^30], nothing else.
  for (const char *bad : {"0", "5x", "99999999999999999999", "1073741825", ""}) {
    std::string command = std::string(CQ4P_EXAMPLE_CHAT_PATH) + " '" + toy.dir.path() +
                          "' '" + CQ4P_FAKE_MODEL_PATH + "' '" + bad +
                          "' </dev/null >/dev/null 2>&1";
    int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << "'" << bad << "'";
  }
}
#endif

} // namespace
