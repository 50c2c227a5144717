/* A chat through cq4p's C API: text in, streamed text out.
 *
 *   cq4p-chat BUNDLE LIBRARY [MAX_NEW_TOKENS]
 *
 * Opens the bundle and its model library, takes the bundle's tokenizer
 * (tokenizer.json, copied by `cq4p convert`), and answers each line of
 * standard input (of any length) in the model's chat format, streaming the reply as it is
 * generated. Each turn continues from the KV cache of the previous one.
 * The rates go to standard error. */
#define _POSIX_C_SOURCE 200809L /* getline */

#include <cq4p/cq4p.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_text(void *context, int64_t id, const char *text, size_t length) {
  (void)context;
  (void)id;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  char error[1024];
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s BUNDLE LIBRARY [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  long long max_new = 64;
  if (argc == 4) {
    char *end = NULL;
    errno = 0;
    max_new = strtoll(argv[3], &end, 10);
    if (errno != 0 || end == argv[3] || *end != '\0' || max_new < 1 ||
        max_new > (1LL << 30)) {
      fprintf(stderr,
              "cq4p-chat: MAX_NEW_TOKENS must be an integer in [1, 1073741824], found '%.64s'%s\n",
              argv[3], strlen(argv[3]) > 64 ? "..." : "");
      return 2;
    }
  }
  cq4p_model *model = NULL;
  if (cq4p_model_open(argv[1], argv[2], NULL, &model, error, sizeof error) != CQ4P_OK) {
    fprintf(stderr, "cq4p-chat: %s\n", error);
    return 2;
  }
  cq4p_chat *chat = NULL;
  if (cq4p_chat_open(model, NULL, NULL, &chat, error, sizeof error) != CQ4P_OK) {
    fprintf(stderr, "cq4p-chat: %s\n", error);
    cq4p_model_close(model);
    return 2;
  }
  cq4p_text_options options;
  memset(&options, 0, sizeof options);
  options.max_new_tokens = max_new;
  options.sampling.top_p = 1.0f; /* greedy: temperature 0 */
  /* One turn per line, of any length (getline grows the buffer). */
  char *line = NULL;
  size_t capacity = 0;
  ssize_t length;
  int status = 0;
  while ((length = getline(&line, &capacity, stdin)) != -1) {
    if (length > 0 && line[length - 1] == '\n')
      line[--length] = '\0';
    if (length == 0)
      continue;
    if (strlen(line) != (size_t)length) {
      fprintf(stderr, "cq4p-chat: a line holds a NUL byte (at byte %zu); a turn is text\n",
              strlen(line));
      status = 2;
      break;
    }
    cq4p_generate_stats stats;
    if (cq4p_chat_send(chat, line, &options, print_text, NULL, &stats, error,
                       sizeof error) != CQ4P_OK) {
      fprintf(stderr, "cq4p-chat: %s\n", error);
      status = 2;
      break;
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prefill %.1f tok/s (%lld tokens), decode %.1f tok/s (%lld tokens)\n",
            stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0.0,
            (long long)stats.prompt_tokens,
            stats.decode_seconds > 0 ? (stats.generated_tokens - 1) / stats.decode_seconds : 0.0,
            (long long)stats.generated_tokens);
  }
  free(line);
  cq4p_chat_close(chat);
  cq4p_model_close(model);
  return status;
}
