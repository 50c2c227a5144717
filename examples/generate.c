/*===- examples/generate.c - a model run through cq4p's C API ------------===*
 *
 * Opens a bundle and the model library cq4p-compile built from its
 * model.mlir, prefills a prompt of token ids, then decodes greedily, printing
 * each token as it comes and the prefill and decode rates:
 *
 *   cq4p-generate BUNDLE LIBRARY "ID ID ..." [N [THREADS]]
 *
 * N (default 16) tokens are generated: the first from the prompt's logits,
 * each next one from a decode step of the one before, as cq4p-run does, so
 * both print the same ids for the same bundle and prompt.
 *
 * Built against an installed cq4p (examples/CMakeLists.txt: find_package),
 * or by hand: cc generate.c $(pkg-config --cflags --libs cq4p).
 *
 *===----------------------------------------------------------------------===*/

#define _POSIX_C_SOURCE 200809L

#include <cq4p/cq4p.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Greedy: the lowest id of the largest logit (the runtime's rule). */
static int64_t greedy(const float *logits, uint64_t vocab) {
  uint64_t best = 0;
  for (uint64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best])
      best = i;
  return (int64_t)best;
}

/* A whole decimal integer in [low, high]; names the argument otherwise. */
static int parse_integer(const char *text, const char *what, long long low,
                         long long high, long long *out) {
  char *end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < low ||
      value > high) {
    fprintf(stderr,
            "cq4p-generate: %s must be an integer in [%lld, %lld], found "
            "'%s'\n",
            what, low, high, text);
    return 0;
  }
  *out = value;
  return 1;
}

/* "1 2 3" -> ids; returns the count, or -1 after saying what is wrong. */
static int64_t parse_ids(const char *text, int64_t **ids) {
  size_t length = strlen(text);
  /* At most one id per two characters ("1 2 3"), plus one. */
  *ids = malloc((length / 2 + 1) * sizeof(int64_t));
  char *copy = malloc(length + 1);
  if (*ids == NULL || copy == NULL) {
    fprintf(stderr, "cq4p-generate: out of memory for the prompt\n");
    free(copy);
    return -1;
  }
  memcpy(copy, text, length + 1);
  int64_t count = 0;
  char *save = NULL;
  for (char *word = strtok_r(copy, " \t\n,", &save); word != NULL;
       word = strtok_r(NULL, " \t\n,", &save)) {
    long long id;
    if (!parse_integer(word, "a prompt id", 0, INT64_MAX, &id)) {
      free(copy);
      return -1;
    }
    (*ids)[count++] = (int64_t)id;
  }
  free(copy);
  if (count == 0)
    fprintf(stderr, "cq4p-generate: the prompt holds no id: '%s'\n", text);
  return count > 0 ? count : -1;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6) {
    fprintf(stderr, "usage: %s BUNDLE LIBRARY \"ID ID ...\" [N [THREADS]]\n",
            argv[0]);
    return 2;
  }
  long long new_tokens = 16, threads = 1;
  if (argc > 4 && !parse_integer(argv[4], "N", 1, 1 << 30, &new_tokens))
    return 2;
  if (argc > 5 && !parse_integer(argv[5], "THREADS", 1, 1024, &threads))
    return 2;
  int64_t *prompt = NULL;
  int64_t prompt_count = parse_ids(argv[3], &prompt);
  if (prompt_count < 0) {
    free(prompt);
    return 2;
  }

  char error[4096];
  cq4p_model_options options = {(int32_t)threads, 0, 0};
  cq4p_model *model = NULL;
  if (cq4p_model_open(argv[1], argv[2], &options, &model, error,
                      sizeof error) != CQ4P_OK) {
    fprintf(stderr, "cq4p-generate: %s\n", error);
    free(prompt);
    return 1;
  }
  cq4p_model_info info;
  cq4p_model_get_info(model, &info);
  fprintf(stderr, "cq4p-generate: %s, vocab %llu, %llu layers, context %llu\n",
          info.architecture, (unsigned long long)info.vocab,
          (unsigned long long)info.layers, (unsigned long long)info.context);

  int status = 0;
  float *logits = malloc(info.vocab * sizeof(float));
  if (logits == NULL) {
    fprintf(stderr, "cq4p-generate: out of memory for %llu logits\n",
            (unsigned long long)info.vocab);
    status = 1;
    goto done;
  }

  double start = now_seconds();
  if (cq4p_model_prefill(model, prompt, prompt_count, logits, error,
                         sizeof error) != CQ4P_OK) {
    fprintf(stderr, "cq4p-generate: prefill: %s\n", error);
    status = 1;
    goto done;
  }
  double prefilled = now_seconds();
  int64_t id = greedy(logits, info.vocab);
  double first = now_seconds();
  printf("ids: %lld", (long long)id);
  fflush(stdout);
  for (long long i = 1; i < new_tokens; ++i) {
    if (cq4p_model_decode(model, id, logits, error, sizeof error) != CQ4P_OK) {
      fprintf(stderr, "\ncq4p-generate: decode of token %lld: %s\n", i, error);
      status = 1;
      goto done;
    }
    id = greedy(logits, info.vocab);
    printf(" %lld", (long long)id);
    fflush(stdout);
  }
  double end = now_seconds();
  printf("\nprefill: %.1f tok/s (%lld tokens in %.3f ms), decode: %.1f tok/s "
         "(%lld tokens in %.3f ms)\n",
         (double)prompt_count / (prefilled - start), (long long)prompt_count,
         1e3 * (prefilled - start),
         new_tokens > 1 ? (double)(new_tokens - 1) / (end - first) : 0.0,
         new_tokens - 1, 1e3 * (end - first));

done:
  free(logits);
  free(prompt);
  cq4p_model_close(model);
  return status;
}
