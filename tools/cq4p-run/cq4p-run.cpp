//===- cq4p-run.cpp - runs a bundle: a model's generation, or its tensors -===//
//
// Generation (with --prompt-ids):
//
//   cq4p-run --bundle B --library libmodel.so --prompt-ids "1 2 3" [-n 32]
//            [--threads T] [--context C] [--prefill-chunk N]
//            [--temperature t --top-k k --top-p p --seed s]
//            [--backend auto|neon|sme2] [--sme2-library libmodel-sme2.so]
//
// opens the model library's compiled steps over the bundle (Model.h),
// prefills the prompt, samples (greedy unless --temperature > 0) and
// decodes until -n ids are generated, then prints them (`ids: ...`) and one
// line with the prefill and decode rates and the time to the first token.
// --library is the model library compiled for this machine (the NEON one on
// AArch64); its steps decide every kernel. With --sme2-library, `auto`
// takes the SME2 model library where this CPU runs it and --library
// otherwise, `sme2` insists on it (a refusal where the CPU cannot run it),
// `neon` takes --library. --context is the KV cache's positions (default
// 2048, or fewer when the bundle's config says the model was trained for
// fewer); --prefill-chunk states the chunk the library must have been
// compiled with (a refusal otherwise). --measure-stack runs the generation
// on a thread whose stack is painted first and reports the deepest use
// (what Model::stepStackBytes is measured by, docs/MODEL.md).
//
// From text (the bundle's tokenizer.json, or --tokenizer DIR):
//
//   cq4p-run --bundle B --library libmodel.so --prompt "text" [-n 128]
//            [--stop STRING]... [--ignore-eos] [the sampling flags above]
//   cq4p-run --bundle B --library libmodel.so --chat [--system "text"]
//            [--think] [--show-thinking]
//
// --prompt tokenizes the text (with the post-processor's BOS), generates
// until -n tokens, a stop id (EOS, end of turn) or a --stop string, and
// streams the text to stdout as it is produced; the ids and the rates go
// to stderr. --chat reads one user turn per line of stdin and streams each
// reply in the bundle's chat format, every turn continuing from the KV
// cache of the previous one (TextGeneration.h); each turn's prompt ids, the
// ids generated and the rates go to stderr. --think enables Gemma 4's
// thinking (<|think|> in its system turn); the model's thought channel is
// held back from stdout unless --show-thinking.
//
// Per tensor (without --prompt-ids):
//
//   cq4p-run --bundle B --library libmodel.so [--tensor NAME] [--rows M]
//            [--threads T] [--input x.f32 --output y.f32] [--repeat R]
//            [--backend auto|neon|sme2] [--sme2-library libmodel-sme2.so]
//            [--sme-workers N]
//
// Maps the bundle (zero-copy), opens the kernel library (checked against
// the CPU), binds every packed-panel CQ4 tensor to its kernels (a linear
// layer; the token embedding to its embedding kernel) and runs it: on the
// rows of --input (raw little-endian fp32, [M][K]; embeddings: int64 ids)
// writing --output, or on deterministic random activations, printing the
// time per call.
//
// --library is the NEON library (the host library off AArch64): it always
// quantizes and runs the matmuls of the threads that are not SME workers.
// With the sme2 backend, the SME2 library (--sme2-library) is attached to
// every linear layer and its matmul kernels run on the first --sme-workers
// threads (Linear.h has the rule). `auto` takes SME2 where this CPU runs
// it (KernelLibrary::openForBackend) and NEON otherwise; forcing sme2 where
// the CPU cannot run it is a refusal. The backend chosen, and why SME2 was
// declined, go to stderr before the table.
//
// In both modes, of a library holding several x86-64 levels' code
// (cq4p-compile --target=host without --host-cpu) the widest this CPU runs
// is used, or the level the environment variable CQ4P_HOST_LEVEL names
// (x86-64-v3, x86-64-v3+avxvnni, x86-64-v4+avx512vnni: a refusal where the
// CPU lacks what it needs); stderr says which ("kernels: x86-64-v4+avx512vnni
// (of 3 variants)").
//
// In both modes a library that records the digest of the bundle it was
// compiled for (kernel_abi.h: a model library, or cq4p-compile --bundle) is
// refused for a bundle of another digest; with --require-digest, so is a
// library that records none.
//
// `cq4p-run --help` describes every flag with its range and default.
//
// In both modes any refusal (a tensor without kernels, a library for
// another CPU or another bundle, a file that does not validate, a bad flag
// value) is one line on stderr and exit status 2; it echoes at most 64
// bytes of a value given (excerpt, Status.h). The outputs (--logits-out,
// --output) must be regular files and none of the run's inputs; they are
// checked without blocking (a FIFO is refused, not waited on) before
// anything runs.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/CpuFeatures.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Linear.h"
#include "cq4p/runtime/Model.h"
#include "cq4p/runtime/TextGeneration.h"
#include "cq4p/runtime/ThreadPool.h"
#include "cq4p/runtime/Tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace cq4p::runtime;

namespace {

constexpr long long kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr long long kMaxInt32 = std::numeric_limits<int32_t>::max();
constexpr long long kMaxNewTokens = 1 << 30; ///< -n
constexpr long long kMaxRows = 1 << 20;      ///< --rows
constexpr long long kMaxRepeat = 1000;       ///< --repeat

struct Options {
  std::string bundle, library, sme2Library, tensor, input, output;
  Backend backend = Backend::Auto;
  int64_t rows = 1;
  int threads = 1;
  int repeat = 5;
  int smeWorkers = LinearLayer::kDefaultSmeWorkers;
  // Generation.
  bool generate = false; ///< --prompt-ids given
  bool verify = false;   ///< --verify: check the bundle's content, run nothing
  bool requireDigest = false; ///< --require-digest
  std::vector<int64_t> promptIds;
  // From text.
  bool text = false; ///< --prompt given
  bool chat = false; ///< --chat
  ChatOptions chatOptions; ///< --think, --show-thinking
  std::string prompt, system, tokenizer;
  std::vector<std::string> stops;
  bool ignoreEos = false;
  int64_t maxNewTokens = 32;
  ModelOptions model;
  SamplingOptions sampling;
  std::string logitsOut; ///< --logits-out: every step's logits, fp32
  bool measureStack = false; ///< --measure-stack
  std::vector<std::string> tensorFlags, modelFlags; ///< given, for conflicts
};

/// One entry of --help per flag the argument loop in main() accepts, by
/// section (python/tests/test_help.py checks that every flag the loop
/// compares with has one, and that no other flag is listed). The defaults
/// and bounds shown are the ones Options and the loop use.
struct FlagHelp {
  std::string flags; ///< "--threads", or "-n, --max-new-tokens"
  std::string value; ///< the value's name, empty for a switch
  std::string text;  ///< what it does, its range and default
};

struct HelpSection {
  std::string title;
  std::vector<FlagHelp> flags;
};

std::vector<HelpSection> helpSections() {
  const Options defaults;
  auto number = [](long long value) { return std::to_string(value); };
  // 2^30 rather than its digits, as the Python commands' help writes it.
  auto power = [](long long value) {
    int bits = 0;
    while ((1ll << bits) < value)
      ++bits;
    return "2^" + std::to_string(bits);
  };
  std::string maxThreads = number(ThreadPool::kMaxThreads);
  return {
      {"the bundle and the library (every mode)",
       {{"--bundle", "DIR", "the bundle directory: manifest.json and its tensor files "
                            "(required)"},
        {"--library", "LIB",
         "the model library cq4p-compile built for this machine from the bundle's "
         "model.mlir (required, but with --verify)"},
        {"--threads", "T", "threads of the runtime's pool, 1 to " + maxThreads +
                               " (default " + number(defaults.threads) +
                               "); the results are the same bits for any count"},
        {"--backend", "B", "auto (default: SME2 where this CPU runs it and --sme2-library "
                           "is given), neon or sme2 (needs --sme2-library)"},
        {"--sme2-library", "LIB", "a library cq4p-compile --target=aarch64-sme2 built, for "
                                  "--backend auto or sme2 (default none)"},
        {"--require-digest", "", "refuse a library that records no bundle digest (default: "
                                 "such a library serves any bundle of its shapes)"},
        {"-h, --help", "", "print this help and exit"}}},
      {"generation (--prompt-ids, --prompt or --chat)",
       {{"--prompt-ids", "\"ID ...\"", "the prompt as token ids, separated by spaces or "
                                       "commas; prints the ids generated and the rates"},
        {"-n, --max-new-tokens", "N", "tokens to generate (per reply with --chat), 0 to " +
                                      power(kMaxNewTokens) + " (default " +
                                      number(defaults.maxNewTokens) + ")"},
        {"--context", "C", "KV cache positions, 0 to 2^63 - 1 (default 0: 2048, or the "
                           "model's trained length when its config says fewer)"},
        {"--prefill-chunk", "N", "the prefill chunk the library must have been compiled "
                                 "with, 0 to 2^63 - 1 (default 0: the library's)"},
        {"--temperature", "t", "sampling temperature, a finite number (default 0: greedy, "
                               "as is any value <= 0)"},
        {"--top-k", "k", "sample among the k likeliest, 0 to 2^31 - 1 (default 0: off)"},
        {"--top-p", "p", "nucleus sampling, a number in (0, 1] (default 1: off)"},
        {"--seed", "s", "the sampler's seed, 0 to 2^64 - 1 (default 0)"},
        {"--logits-out", "FILE", "append each sampled position's logits to FILE, raw "
                                 "little-endian fp32 (--prompt-ids; default none)"},
        {"--measure-stack", "", "run on a painted 16 MiB stack and report the deepest use "
                                "(--prompt-ids)"}}},
      {"text (the bundle's tokenizer.json)",
       {{"--prompt", "TEXT", "the prompt as text (with the tokenizer's BOS); the text "
                             "streams to stdout, the ids and rates to stderr"},
        {"--chat", "", "read one user turn per line of stdin and stream each reply in the "
                       "bundle's chat format"},
        {"--system", "TEXT", "a system prompt (--chat; default none)"},
        {"--think", "", "Gemma 4: turn its thinking on (--chat; other formats refuse it)"},
        {"--show-thinking", "", "Gemma 4: stream the thought channel too (--chat; held "
                                "back by default)"},
        {"--stop", "S", "end the text at this string, left out (may be repeated; default "
                        "none)"},
        {"--ignore-eos", "", "do not stop at EOS / end of turn (default: stop)"},
        {"--tokenizer", "DIR", "read tokenizer.json and its configs from DIR instead of the "
                               "bundle"}}},
      {"tensors (without --prompt-ids, --prompt or --chat)",
       {{"--tensor", "NAME", "run only this tensor (default: every packed-panel CQ4 "
                             "tensor)"},
        {"--rows", "M", "activation rows per call, 1 to " + number(kMaxRows) +
                            " (default " + number(defaults.rows) + ")"},
        {"--repeat", "R", "calls per tensor, the fastest reported, 1 to " +
                              number(kMaxRepeat) + " (default " + number(defaults.repeat) +
                              ")"},
        {"--input", "FILE", "the rows to run (raw fp32 [M][K]; embeddings: int64 ids; needs "
                            "--tensor; default: seeded random rows)"},
        {"--output", "FILE", "write the result (raw fp32; needs --tensor)"},
        {"--sme-workers", "N", "threads that run the SME2 matmuls with --backend sme2, 0 to " +
                                   maxThreads + " (default " + number(defaults.smeWorkers) +
                                   "; 0: NEON on every thread)"}}},
      {"verification",
       {{"--verify", "", "check every content rule, file sha256 and the model_digest of "
                         "--bundle (and the digest --library records), run nothing"}}},
  };
}

/// `text` wrapped to kHelpWidth columns, its lines after the first indented
/// to `indent`.
std::string wrapped(const std::string &text, size_t indent) {
  constexpr size_t kHelpWidth = 100;
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    std::string word = text.substr(at, end == std::string::npos ? std::string::npos
                                                                : end - at);
    if (!line.empty() && indent + line.size() + 1 + word.size() > kHelpWidth) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return out + line;
}

void printHelp() {
  constexpr size_t kFlagColumn = 26;
  std::printf(
      "cq4p-run: runs a cq4p bundle with the model library cq4p-compile built for it:\n"
      "generation from token ids or text, a chat on stdin, each tensor through its kernels,\n"
      "or the bundle's full verification. A refusal is one line on stderr and exit status 2.\n"
      "\n"
      "usage: cq4p-run --bundle DIR --library LIB --prompt-ids \"ID ...\" [generation "
      "options]\n"
      "       cq4p-run --bundle DIR --library LIB --prompt TEXT | --chat [text options]\n"
      "       cq4p-run --bundle DIR --library LIB [tensor options]\n"
      "       cq4p-run --bundle DIR --verify [--library LIB]\n");
  for (const HelpSection &section : helpSections()) {
    std::printf("\n%s:\n", section.title.c_str());
    for (const FlagHelp &flag : section.flags) {
      std::string name = "  " + flag.flags + (flag.value.empty() ? "" : " " + flag.value);
      name += name.size() + 2 > kFlagColumn ? "\n" + std::string(kFlagColumn, ' ')
                                            : std::string(kFlagColumn - name.size(), ' ');
      std::printf("%s%s\n", name.c_str(), wrapped(flag.text, kFlagColumn).c_str());
    }
  }
}

int usage(const std::string &message) {
  std::fprintf(stderr,
               "cq4p-run: %s\nusage: cq4p-run --bundle DIR --library LIB "
               "--prompt-ids \"ID ...\" [-n N] [--threads T] [--context C] "
               "[--prefill-chunk N] [--temperature t] [--top-k k] [--top-p p] "
               "[--seed s] [--logits-out FILE] [--measure-stack] [--backend auto|neon|sme2] "
               "[--sme2-library LIB] [--require-digest]\n"
               "       cq4p-run --bundle DIR --library LIB --prompt TEXT | --chat "
               "[--system TEXT] [--think] [--show-thinking] [--tokenizer DIR] [-n N] "
               "[--stop S]... [--ignore-eos] [the sampling flags]\n"
               "       cq4p-run --bundle DIR --library LIB [--tensor NAME] "
               "[--rows M] [--threads T] [--repeat R] [--input FILE --output "
               "FILE] [--backend auto|neon|sme2] [--sme2-library LIB] "
               "[--sme-workers N] [--require-digest]\n"
               "       cq4p-run --bundle DIR --verify [--library LIB]\n"
               "cq4p-run --help describes every flag\n",
               message.c_str());
  return 2;
}

/// "<flag> must be <what>, found '<text>'" (or "needs a value").
int badValue(const std::string &flag, const char *text, const char *what) {
  if (text == nullptr)
    return usage(flag + " needs a value (" + what + ")");
  return usage(flag + " must be " + what + ", found '" + excerpt(text) + "'");
}

bool parseBackend(const std::string &text, Backend &out) {
  for (Backend backend : {Backend::Auto, Backend::Neon, Backend::Sme2})
    if (text == backendName(backend)) {
      out = backend;
      return true;
    }
  return false;
}

int refuse(const std::string &message) {
  std::fprintf(stderr, "cq4p-run: error: %s\n", message.c_str());
  return 2;
}

bool parseInt(const char *text, long long low, long long high, long long &out) {
  char *end = nullptr;
  errno = 0;
  out = std::strtoll(text, &end, 10);
  return errno == 0 && end && *end == '\0' && end != text && out >= low &&
         out <= high;
}

bool parseUnsigned(const char *text, uint64_t &out) {
  // strtoull accepts "-1" as 2^64 - 1: only digits are a seed.
  if (text[0] < '0' || text[0] > '9')
    return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  out = value;
  return errno == 0 && end && *end == '\0';
}

bool parseFloat(const char *text, float &out) {
  char *end = nullptr;
  errno = 0;
  out = std::strtof(text, &end);
  return errno == 0 && end && *end == '\0' && end != text &&
         std::isfinite(out);
}

/// Token ids separated by spaces or commas: "1 2 3", "1,2,3".
bool parseIds(const char *text, std::vector<int64_t> &out, std::string &error) {
  out.clear();
  std::string list = text;
  for (char &c : list)
    if (c == ',' || c == '\t' || c == '\n')
      c = ' ';
  size_t at = 0;
  while (at < list.size()) {
    size_t begin = list.find_first_not_of(' ', at);
    if (begin == std::string::npos)
      break;
    size_t end = list.find(' ', begin);
    std::string item = list.substr(begin, end == std::string::npos
                                              ? std::string::npos
                                              : end - begin);
    long long id = 0;
    if (!parseInt(item.c_str(), 0, kMaxInt64, id)) {
      error = "--prompt-ids: item " + std::to_string(out.size()) + " ('" +
              excerpt(item) + "') is not a token id (an integer >= 0)";
      return false;
    }
    out.push_back(id);
    at = end == std::string::npos ? list.size() : end;
  }
  if (out.empty()) {
    error = std::string("--prompt-ids: expected at least one token id, "
                        "found '") +
            excerpt(text) + "'";
    return false;
  }
  return true;
}

/// What a file that is not a regular one is, for messages.
const char *fileKind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

template <typename T>
bool readRaw(const std::string &path, size_t count, std::vector<T> &out,
             std::string &error) {
  // Non-blocking and checked before a byte is read: a FIFO without a
  // writer would block the open forever, a device read without end.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    error = "--input " + path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat info = {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    error = "--input " + path + ": " + fileKind(info.st_mode) +
            ", expected a regular file";
    ::close(fd);
    return false;
  }
  uint64_t size = uint64_t(info.st_size);
  if (size != count * sizeof(T)) {
    error = "--input " + path + ": expected " + std::to_string(count * sizeof(T)) +
            " bytes (" + std::to_string(count) + " values), found " +
            std::to_string(size);
    ::close(fd);
    return false;
  }
  out.resize(count);
  char *at = reinterpret_cast<char *>(out.data());
  for (uint64_t done = 0; done < size;) {
    ssize_t got = ::read(fd, at + done, size - done);
    if (got <= 0) {
      error = "--input " + path + ": read failed" +
              (got < 0 ? std::string(": ") + std::strerror(errno) : std::string());
      ::close(fd);
      return false;
    }
    done += uint64_t(got);
  }
  ::close(fd);
  return true;
}

/// Opens `path` for the output `flag` writes, refusing before anything is
/// touched: a FIFO (a writer would block until a reader comes, forever),
/// a device, a directory or socket (anything but a regular file), and a
/// file that is one of `inputs` (the same device and inode, whatever the
/// path: writing it would destroy what is read). Truncated once accepted.
Status openOutput(const std::string &flag, const std::string &path,
                  const std::vector<std::string> &inputs, FILE *&out) {
  out = nullptr;
  std::string where = flag + " " + path;
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0666);
  if (fd < 0) {
    int error = errno;
    struct stat info = {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
      return Status(CQ4P_ERROR_ARGUMENT, where + ": " + fileKind(info.st_mode) +
                                             ", expected a regular file");
    return Status(CQ4P_ERROR_IO, where + ": cannot create: " + std::strerror(error));
  }
  struct stat info = {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status(CQ4P_ERROR_ARGUMENT, where + ": " + fileKind(info.st_mode) +
                                           ", expected a regular file");
  }
  for (const std::string &input : inputs) {
    struct stat other;
    if (::stat(input.c_str(), &other) == 0 && other.st_dev == info.st_dev &&
        other.st_ino == info.st_ino) {
      ::close(fd);
      return Status(CQ4P_ERROR_ARGUMENT,
                    where + " is the input " + input + ": refusing to overwrite it");
    }
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (::ftruncate(fd, 0) != 0) {
    int error = errno;
    ::close(fd);
    return Status(CQ4P_ERROR_IO, where + ": cannot truncate: " + std::strerror(error));
  }
  out = ::fdopen(fd, "wb");
  if (out == nullptr) {
    int error = errno;
    ::close(fd);
    return Status(CQ4P_ERROR_IO, where + ": cannot open: " + std::strerror(error));
  }
  return Status::ok();
}

/// What a run reads, for openOutput: every file in the bundle directory,
/// the libraries and --input.
std::vector<std::string> inputsOf(const Options &options) {
  std::vector<std::string> inputs;
  if (DIR *dir = ::opendir(options.bundle.c_str())) {
    while (dirent *entry = ::readdir(dir)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..")
        inputs.push_back(options.bundle + "/" + name);
    }
    ::closedir(dir);
  }
  for (const std::string *path : {&options.library, &options.sme2Library, &options.input,
                                  &options.tokenizer})
    if (!path->empty())
      inputs.push_back(*path);
  return inputs;
}

bool isEmbedding(const std::string &name) {
  return name.find("embed_tokens") != std::string::npos;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

void printRates(const GenerateStats &stats) {
  std::fprintf(stderr,
               "prefill: %.1f tok/s (%lld tokens in %.3f ms), decode: %.1f "
               "tok/s (%lld tokens in %.3f ms), time to first token: %.3f ms\n",
               stats.prefillTokensPerSecond(), (long long)stats.promptTokens,
               stats.prefillSeconds * 1e3, stats.decodeTokensPerSecond(),
               (long long)std::max<int64_t>(stats.generatedTokens - 1, 0),
               stats.decodeSeconds * 1e3, stats.timeToFirstTokenSeconds * 1e3);
}

bool streamText(void *, int64_t, const char *text, size_t length) {
  std::fwrite(text, 1, length, stdout);
  std::fflush(stdout);
  return true;
}

/// --prompt and --chat: text in, streamed text out.
int runText(const Options &options, const Bundle &bundle, Model &model) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (Status status = Tokenizer::openDirectory(
          options.tokenizer.empty() ? bundle.directory() : options.tokenizer,
          tokenizer, /*confined=*/options.tokenizer.empty());
      !status)
    return refuse(status.message());
  TextOptions text;
  text.maxNewTokens = options.maxNewTokens;
  text.sampling = options.sampling;
  text.stopStrings = options.stops;
  text.stopAtStopIds = !options.ignoreEos;
  if (!options.chat) {
    std::vector<int64_t> ids;
    if (Status status = tokenizer->encode(options.prompt, true, ids); !status)
      return refuse(status.message());
    TextResult result;
    GenerateStats stats;
    if (Status status = model.reset(); !status)
      return refuse(status.message());
    if (Status status = generateText(model, *tokenizer, ids, text, streamText,
                                     nullptr, &stats, &result);
        !status)
      return refuse(status.message());
    std::printf("\n");
    std::fprintf(stderr, "prompt ids:");
    for (int64_t id : ids)
      std::fprintf(stderr, " %lld", (long long)id);
    std::fprintf(stderr, "\nids:");
    for (int64_t id : result.ids)
      std::fprintf(stderr, " %lld", (long long)id);
    std::fprintf(stderr, "\n");
    printRates(stats);
    return 0;
  }
  if (Status status = tokenizer->checkChatOptions(options.chatOptions); !status)
    return refuse(status.message());
  std::fprintf(stderr, "cq4p-run: chat (%s format%s); one turn per line, end "
                       "with end of input\n",
               chatFormatName(tokenizer->chatFormat()),
               options.chatOptions.enableThinking ? ", thinking" : "");
  ChatSession session(model, *tokenizer, options.system, options.chatOptions);
  std::string line;
  for (int c; (c = std::fgetc(stdin)) != EOF || !line.empty();) {
    if (c != EOF && c != '\n') {
      line += char(c);
      continue;
    }
    if (!line.empty()) {
      GenerateStats stats;
      TextResult result;
      if (Status status = session.send(line, text, streamText, nullptr, &stats, &result);
          !status)
        return refuse(status.message());
      std::printf("\n");
      std::fflush(stdout);
      std::fprintf(stderr, "prompt ids:");
      for (int64_t id : session.lastPrompt())
        std::fprintf(stderr, " %lld", (long long)id);
      std::fprintf(stderr, "\nids:");
      for (int64_t id : result.ids)
        std::fprintf(stderr, " %lld", (long long)id);
      std::fprintf(stderr, "\n");
      printRates(stats);
    }
    line.clear();
    if (c == EOF)
      break;
  }
  return 0;
}

/// Which code variant of `library` runs (cq4p_kernel_variants), when it
/// holds several x86-64 levels' code.
void printVariant(const KernelLibrary &library) {
  if (library.variantCount() == 0)
    return;
  std::fprintf(stderr, "cq4p-run: kernels: %s (of %zu variant%s)\n",
               library.variant().c_str(), library.variantCount(),
               library.variantCount() == 1 ? "" : "s");
}

/// Generation: the model library's steps over the bundle.
/// --measure-stack: the stack the measured thread gets, painted with a
/// pattern before it starts; its deepest use is the lowest byte changed.
constexpr uint64_t kMeasuredStackBytes = 16ull << 20;

template <typename Function>
Status measureStack(Function &function, uint64_t &used) {
  constexpr unsigned char kPaint = 0xA5;
  void *stack = ::mmap(nullptr, kMeasuredStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED)
    return Status(CQ4P_ERROR_IO, "--measure-stack: cannot map " +
                                     std::to_string(kMeasuredStackBytes) +
                                     " bytes of stack");
  std::memset(stack, kPaint, kMeasuredStackBytes);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstack(&attributes, stack, kMeasuredStackBytes);
  pthread_t thread;
  int error = pthread_create(
      &thread, &attributes,
      [](void *context) -> void * {
        (*static_cast<Function *>(context))();
        return nullptr;
      },
      &function);
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    ::munmap(stack, kMeasuredStackBytes);
    return Status(CQ4P_ERROR_IO, std::string("--measure-stack: cannot start "
                                             "a thread: ") +
                                     std::strerror(error));
  }
  pthread_join(thread, nullptr);
  const auto *bytes = static_cast<const unsigned char *>(stack);
  uint64_t untouched = 0;
  while (untouched < kMeasuredStackBytes && bytes[untouched] == kPaint)
    ++untouched;
  used = kMeasuredStackBytes - untouched;
  ::munmap(stack, kMeasuredStackBytes);
  return Status::ok();
}

int runModel(const Options &options, const Bundle &bundle) {
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> library;
  Backend chosen = Backend::Neon;
  std::string declined;
  if (Status status = KernelLibrary::openForBackend(
          options.backend, options.library, options.sme2Library, cpu, library,
          chosen, &declined);
      !status)
    return refuse(std::string("backend ") + backendName(options.backend) +
                  ": " + status.message());
  if (chosen == Backend::Sme2)
    std::fprintf(stderr, "cq4p-run: model library %s (SME2)\n",
                 options.sme2Library.c_str());
  else if (!declined.empty())
    std::fprintf(stderr, "cq4p-run: model library %s; SME2 declined: %s\n",
                 options.library.c_str(), declined.c_str());
  else
    std::fprintf(stderr, "cq4p-run: model library %s\n",
                 options.library.c_str());
  printVariant(*library);

  if (Status status = bundle.checkLibrary(*library, options.requireDigest);
      !status)
    return refuse(status.message());
  std::unique_ptr<Model> model;
  if (Status status = Model::open(bundle, *library, options.model, model);
      !status)
    return refuse(status.message());
  const cq4p_model_desc &desc = model->desc();
  std::fprintf(stderr,
               "cq4p-run: %s model: vocab %llu, hidden %llu, %llu layers, "
               "KV %s; context %lld, prefill chunk %lld, %d thread(s)\n",
               desc.architecture, (unsigned long long)desc.vocab,
               (unsigned long long)desc.hidden, (unsigned long long)desc.layers,
               kvDtypeName(desc.kv_dtype).c_str(), (long long)model->context(),
               (long long)model->prefillChunk(), model->pool().threadCount());

  if (options.text || options.chat)
    return runText(options, bundle, *model);

  std::vector<int64_t> ids(size_t(options.maxNewTokens));
  GenerateStats stats;
  // With --logits-out, each sampled token's logits (the prompt's last, then
  // every decode step's) are appended to the file as raw little-endian fp32,
  // vocab values per step: what tests compare across backends bit for bit.
  struct Sink {
    Model *model;
    std::vector<int64_t> *ids;
    FILE *file;
    bool failed;
  } sink{model.get(), &ids, nullptr, false};
  if (!options.logitsOut.empty())
    if (Status status = openOutput("--logits-out", options.logitsOut, inputsOf(options),
                                   sink.file);
        !status)
      return refuse(status.message());
  Model::TokenCallback record = [](void *context, int64_t index, int64_t id) {
    auto *sink = static_cast<Sink *>(context);
    (*sink->ids)[size_t(index)] = id;
    if (sink->file) {
      size_t vocab = size_t(sink->model->vocab());
      sink->failed |= std::fwrite(sink->model->logits(), sizeof(float), vocab,
                                  sink->file) != vocab;
    }
    return !sink->failed;
  };
  Status generated;
  auto run = [&] {
    generated = model->generate(
        options.promptIds.data(), int64_t(options.promptIds.size()),
        options.maxNewTokens, options.sampling, record, &sink, &stats);
  };
  if (options.measureStack) {
    uint64_t used = 0;
    if (Status status = measureStack(run, used); !status)
      return refuse(status.message());
    std::fprintf(stderr,
                 "cq4p-run: stack: the generating thread used %llu bytes "
                 "(%.0f KiB) of its %llu; the runtime asks a caller for %llu\n",
                 (unsigned long long)used, double(used) / 1024.0,
                 (unsigned long long)kMeasuredStackBytes,
                 (unsigned long long)model->stackBytes());
  } else {
    run();
  }
  if (sink.file && std::fclose(sink.file) != 0)
    sink.failed = true;
  if (!generated)
    return refuse(generated.message());
  if (sink.failed)
    return refuse("--logits-out " + options.logitsOut + ": write failed");
  std::printf("ids:");
  for (int64_t i = 0; i < stats.generatedTokens; ++i)
    std::printf(" %lld", (long long)ids[size_t(i)]);
  std::printf("\n");
  std::printf("prefill: %.1f tok/s (%lld tokens in %.3f ms), decode: %.1f "
              "tok/s (%lld tokens in %.3f ms), time to first token: %.3f ms\n",
              stats.prefillTokensPerSecond(), (long long)stats.promptTokens,
              stats.prefillSeconds * 1e3, stats.decodeTokensPerSecond(),
              (long long)std::max<int64_t>(stats.generatedTokens - 1, 0),
              stats.decodeSeconds * 1e3,
              stats.timeToFirstTokenSeconds * 1e3);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      printHelp();
      return 0;
    }
    auto value = [&]() -> const char * {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    long long number = 0;
    if (arg == "--tensor" || arg == "--input" || arg == "--output" ||
        arg == "--rows" || arg == "--repeat" || arg == "--sme-workers")
      options.tensorFlags.push_back(arg);
    if (arg == "-n" || arg == "--max-new-tokens" || arg == "--context" ||
        arg == "--prefill-chunk" || arg == "--temperature" ||
        arg == "--top-k" || arg == "--top-p" || arg == "--seed" ||
        arg == "--logits-out" || arg == "--stop" || arg == "--system" ||
        arg == "--tokenizer" || arg == "--ignore-eos" || arg == "--think" ||
        arg == "--show-thinking" || arg == "--measure-stack")
      options.modelFlags.push_back(arg);
    if (arg == "--bundle" || arg == "--library" || arg == "--tensor" ||
        arg == "--input" || arg == "--output" || arg == "--sme2-library") {
      const char *text = value();
      if (!text)
        return usage(arg + " needs a value");
      (arg == "--bundle"         ? options.bundle
       : arg == "--library"      ? options.library
       : arg == "--sme2-library" ? options.sme2Library
       : arg == "--tensor"       ? options.tensor
       : arg == "--input"        ? options.input
                                 : options.output) = text;
    } else if (arg == "--backend") {
      const char *text = value();
      if (!text || !parseBackend(text, options.backend))
        return badValue(arg, text, "auto, neon or sme2");
    } else if (arg == "--sme-workers") {
      const char *text = value();
      if (!text || !parseInt(text, 0, ThreadPool::kMaxThreads, number))
        return badValue(arg, text,
                        "an integer in [0, 1024] (0 disables the SME workers)");
      options.smeWorkers = int(number);
    } else if (arg == "--rows") {
      const char *text = value();
      if (!text || !parseInt(text, 1, kMaxRows, number))
        return badValue(arg, text, "an integer in [1, 1048576]");
      options.rows = number;
    } else if (arg == "--threads") {
      const char *text = value();
      if (!text || !parseInt(text, 1, ThreadPool::kMaxThreads, number))
        return badValue(arg, text, "an integer in [1, 1024]");
      options.threads = int(number);
    } else if (arg == "--repeat") {
      const char *text = value();
      if (!text || !parseInt(text, 1, kMaxRepeat, number))
        return badValue(arg, text, "an integer in [1, 1000]");
      options.repeat = int(number);
    } else if (arg == "--prompt-ids") {
      const char *text = value();
      if (!text)
        return usage("--prompt-ids needs a value (token ids, e.g. \"1 2 3\")");
      std::string error;
      if (!parseIds(text, options.promptIds, error))
        return usage(error);
      options.generate = true;
    } else if (arg == "--prompt" || arg == "--system" || arg == "--stop" ||
               arg == "--tokenizer") {
      const char *text = value();
      if (!text)
        return usage(arg + " needs a value");
      if (arg == "--prompt") {
        options.prompt = text;
        options.text = options.generate = true;
      } else if (arg == "--system") {
        options.system = text;
      } else if (arg == "--tokenizer") {
        options.tokenizer = text;
      } else if (*text == '\0') {
        return usage("--stop needs a non-empty string");
      } else {
        options.stops.push_back(text);
      }
      // Text, refused here rather than after the model opened (a stop
      // string that is not UTF-8 would match inside a character).
      if (arg != "--tokenizer")
        if (size_t bad = findInvalidUtf8(text); bad != std::string::npos)
          return usage(arg + ": not valid UTF-8 at byte " + std::to_string(bad) + " of " +
                       std::to_string(std::strlen(text)) + " (the value is text)");
    } else if (arg == "--chat") {
      options.chat = options.generate = true;
    } else if (arg == "--ignore-eos") {
      options.ignoreEos = true;
    } else if (arg == "--think") {
      options.chatOptions.enableThinking = true;
    } else if (arg == "--show-thinking") {
      options.chatOptions.showThinking = true;
    } else if (arg == "-n" || arg == "--max-new-tokens") {
      const char *text = value();
      if (!text || !parseInt(text, 0, kMaxNewTokens, number))
        return badValue(arg, text, "an integer in [0, 1073741824]");
      options.maxNewTokens = number;
    } else if (arg == "--measure-stack") {
      options.measureStack = true;
    } else if (arg == "--logits-out") {
      const char *text = value();
      if (!text || !*text)
        return usage("--logits-out needs a file name");
      options.logitsOut = text;
    } else if (arg == "--context") {
      const char *text = value();
      if (!text || !parseInt(text, 0, kMaxInt64, number))
        return badValue(arg, text, "an integer >= 0 (0: the default)");
      options.model.context = number;
    } else if (arg == "--prefill-chunk") {
      const char *text = value();
      if (!text || !parseInt(text, 0, kMaxInt64, number))
        return badValue(arg, text, "an integer >= 0 (0: the library's)");
      options.model.expectedPrefillChunk = number;
    } else if (arg == "--temperature") {
      const char *text = value();
      if (!text || !parseFloat(text, options.sampling.temperature))
        return badValue(arg, text, "a finite number (<= 0: greedy)");
    } else if (arg == "--top-k") {
      const char *text = value();
      if (!text || !parseInt(text, 0, kMaxInt32, number))
        return badValue(arg, text, "an integer >= 0 (0: off)");
      options.sampling.topK = int32_t(number);
    } else if (arg == "--top-p") {
      const char *text = value();
      if (!text || !parseFloat(text, options.sampling.topP) ||
          !(options.sampling.topP > 0.0f && options.sampling.topP <= 1.0f))
        return badValue(arg, text, "a number in (0, 1] (1: off)");
    } else if (arg == "--verify") {
      options.verify = true;
    } else if (arg == "--require-digest") {
      options.requireDigest = true;
    } else if (arg == "--seed") {
      const char *text = value();
      if (!text || !parseUnsigned(text, options.sampling.seed))
        return badValue(arg, text, "an integer in [0, 2^64)");
    } else {
      return usage("unknown argument '" + excerpt(arg) + "'");
    }
  }
  if (options.verify) {
    // Every content rule of docs/FORMAT.md over every tensor, each file's sha256
    // and the model_digest recomputed (a full pass, which running leaves
    // out), and with --library the digest the library records against the
    // recomputed one; nothing else may be asked for at the same time.
    if (options.bundle.empty() ||
        argc != (options.library.empty() ? 4 : 6))
      return usage("--verify takes --bundle DIR, optionally --library LIB, "
                   "and nothing else");
    std::unique_ptr<Bundle> bundle;
    Status status = Bundle::open(options.bundle, bundle);
    Bundle::Integrity integrity;
    if (status)
      status = bundle->verify(&integrity, Bundle::Residency::ReleaseEach);
    std::unique_ptr<KernelLibrary> library;
    if (status && !options.library.empty()) {
      status = KernelLibrary::open(options.library, library);
      if (status)
        status = bundle->checkLibraryAgainst(*library, integrity.digest);
    }
    if (!status)
      return refuse(status.message());
    std::printf("%s: %zu tensors verified; sha256 of %zu files matches the "
                "manifest%s; model_digest %s\n",
                options.bundle.c_str(), bundle->tensors().size(),
                integrity.filesHashed,
                integrity.filesUnrecorded
                    ? (" (" + std::to_string(integrity.filesUnrecorded) +
                       " entries record none)")
                          .c_str()
                    : "",
                integrity.digestRecorded
                    ? (integrity.digest + " matches the manifest").c_str()
                    : "not recorded");
    if (integrity.shippedRecorded)
      std::printf("%s: %zu other files (model.mlir, tokenizer files) match "
                  "files_sha256\n",
                  options.bundle.c_str(), integrity.shippedHashed);
    if (!integrity.shippedUncovered.empty()) {
      std::string names;
      for (const std::string &name : integrity.shippedUncovered)
        names += (names.empty() ? "" : ", ") + name;
      std::printf("%s: not covered by any digest: %s (the manifest predates "
                  "files_sha256; convert the checkpoint again to cover them)\n",
                  options.bundle.c_str(), names.c_str());
    }
    if (library)
      std::printf("%s: %s\n", options.library.c_str(),
                  library->bundleDigest().empty()
                      ? "records no bundle digest (serves any bundle of its "
                        "shapes)"
                      : "built for this bundle's digest");
    return 0;
  }
  if (options.bundle.empty() || options.library.empty())
    return usage("--bundle and --library are required");
  if (options.generate && !options.tensorFlags.empty())
    return usage(options.tensorFlags[0] +
                 " is for running tensors; it does not apply with "
                 "--prompt-ids");
  if (!options.generate && !options.modelFlags.empty())
    return usage(options.modelFlags[0] + " needs --prompt-ids (generation)");
  if (int(options.text) + int(options.chat) + int(!options.promptIds.empty()) > 1)
    return usage("--prompt-ids, --prompt and --chat are one of a kind: give one");
  if (!options.text && !options.chat)
    for (const std::string &flag : options.modelFlags)
      if (flag == "--stop" || flag == "--system" || flag == "--tokenizer" ||
          flag == "--ignore-eos")
        return usage(flag + " needs --prompt or --chat");
  if (!options.chat)
    for (const std::string &flag : options.modelFlags)
      if (flag == "--system" || flag == "--think" || flag == "--show-thinking")
        return usage(flag + " needs --chat");
  if ((!options.input.empty() || !options.output.empty()) &&
      options.tensor.empty())
    return usage("--input and --output need --tensor");
  if (options.backend == Backend::Sme2 && options.sme2Library.empty())
    return usage("--backend sme2 needs --sme2-library");

  std::unique_ptr<Bundle> bundle;
  if (Status status = Bundle::open(options.bundle, bundle); !status)
    return refuse(status.message());
  options.model.threads = options.threads;
  if (options.generate)
    return runModel(options, *bundle);

  // The NEON library always; the SME2 one as well when it is chosen.
  CpuFeatures cpu = detectCpuFeatures();
  std::unique_ptr<KernelLibrary> library, sme2Library;
  Backend chosen = Backend::Neon;
  std::string declined;
  if (Status status = KernelLibrary::openForBackend(
          options.backend, options.library, options.sme2Library, cpu,
          sme2Library, chosen, &declined);
      !status)
    return refuse(std::string("backend ") + backendName(options.backend) +
                  ": " + status.message());
  if (chosen == Backend::Neon)
    library = std::move(sme2Library);
  else if (Status status = KernelLibrary::open(options.library, cpu, library);
           !status)
    return refuse(status.message());
  for (const KernelLibrary *opened : {library.get(), sme2Library.get()})
    if (opened != nullptr)
      if (Status status = bundle->checkLibrary(*opened, options.requireDigest);
          !status)
        return refuse(status.message());

  int smeThreads =
      chosen == Backend::Sme2
          ? LinearLayer::smeThreadCount(options.smeWorkers, options.threads)
          : 0;
  if (chosen == Backend::Sme2 && smeThreads == 0)
    std::fprintf(stderr, "cq4p-run: backend sme2 with --sme-workers 0: NEON "
                         "on every thread\n");
  else if (chosen == Backend::Sme2)
    std::fprintf(stderr,
                 "cq4p-run: backend sme2: SME2 matmuls on %d of %d thread(s), "
                 "NEON matmuls on %d; quantizing on NEON\n",
                 smeThreads, options.threads, options.threads - smeThreads);
  else if (options.backend == Backend::Neon)
    std::fprintf(stderr, "cq4p-run: backend neon (as asked)\n");
  else if (options.sme2Library.empty())
    std::fprintf(stderr, "cq4p-run: backend neon: no --sme2-library given\n");
  else
    std::fprintf(stderr, "cq4p-run: backend neon: SME2 declined: %s\n",
                 declined.c_str());
  printVariant(*library);
  std::unique_ptr<ThreadPool> pool;
  if (Status status = ThreadPool::create(options.threads, pool); !status)
    return refuse(status.message());

  std::vector<const BundleTensor *> selected;
  for (const BundleTensor &tensor : bundle->tensors()) {
    bool panels = tensor.file->layout() == CQ4P_LAYOUT_PANELS;
    if (options.tensor.empty() ? panels : tensor.name == options.tensor)
      selected.push_back(&tensor);
  }
  if (selected.empty())
    return refuse(options.tensor.empty()
                      ? options.bundle + ": no packed-panel CQ4 tensor"
                      : options.bundle + ": no tensor '" + options.tensor + "'");

  // Opened (and refused) before anything runs.
  FILE *output = nullptr;
  if (!options.output.empty())
    if (Status status = openOutput("--output", options.output, inputsOf(options), output);
        !status)
      return refuse(status.message());

  std::printf("%-48s %-12s %5s %6s %12s %10s\n", "tensor", "N x K", "gs",
              "rows", "ms/call", "SME2 tasks");
  ActivationScratch scratch;
  std::mt19937 rng(1);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  for (const BundleTensor *tensor : selected) {
    const TensorFile &file = *tensor->file;
    uint64_t n = file.n(), k = file.k();
    std::vector<float> out;
    // The last call's phase-2 tasks run by SME2, of all (linear layers).
    std::string sme2Tasks = "-";
    LinearRunTrace trace;
    auto timeCalls = [&](auto &&call) -> Status {
      double best = 1e30;
      for (int r = 0; r < options.repeat; ++r) {
        auto start = std::chrono::steady_clock::now();
        if (Status status = call(); !status)
          return status;
        best = std::min(best, secondsSince(start));
      }
      if (!trace.matmulTasks.empty())
        sme2Tasks = std::to_string(trace.tasksOn(Backend::Sme2)) + "/" +
                    std::to_string(trace.matmulTasks.size());
      std::printf("%-48s %-12s %5u %6lld %12.3f %10s\n", tensor->name.c_str(),
                  (std::to_string(n) + "x" + std::to_string(k)).c_str(),
                  file.info().group_size, (long long)options.rows, best * 1e3,
                  sme2Tasks.c_str());
      return Status::ok();
    };
    Status status;
    if (isEmbedding(tensor->name)) {
      std::unique_ptr<EmbeddingLayer> layer;
      if (status = EmbeddingLayer::bind(*library, file, layer); !status)
        return refuse(status.message());
      std::vector<int64_t> ids(size_t(options.rows));
      std::string error;
      if (!options.input.empty()) {
        if (!readRaw(options.input, ids.size(), ids, error))
          return refuse(error);
      } else {
        for (int64_t &id : ids)
          id = int64_t(rng() % n);
      }
      out.assign(ids.size() * k, 0.0f);
      status = timeCalls([&] {
        return layer->run(ids.data(), out.data(), int64_t(ids.size()));
      });
    } else {
      std::unique_ptr<LinearLayer> layer;
      if (status = LinearLayer::bind(*library, file, layer); !status)
        return refuse(status.message());
      if (sme2Library != nullptr) {
        if (status = layer->attachSme2(*sme2Library); !status)
          return refuse(status.message());
      }
      if (status = layer->setSmeWorkers(options.smeWorkers); !status)
        return refuse(status.message());
      std::vector<float> x;
      std::string error;
      if (!options.input.empty()) {
        if (!readRaw(options.input, size_t(options.rows) * k, x, error))
          return refuse(error);
      } else {
        x.resize(size_t(options.rows) * k);
        for (float &v : x)
          v = gaussian(rng);
      }
      out.assign(size_t(options.rows) * n, 0.0f);
      status = timeCalls([&] {
        return layer->run(*pool, x.data(), out.data(), options.rows, scratch,
                          &trace);
      });
    }
    if (!status)
      return refuse(status.message());
    if (output != nullptr) {
      bool written = std::fwrite(out.data(), sizeof(float), out.size(), output) ==
                     out.size();
      if (std::fclose(output) != 0 || !written)
        return refuse("--output " + options.output + ": write failed");
      output = nullptr;
    }
  }
  return 0;
}
