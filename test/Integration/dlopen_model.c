/*===- dlopen_model.c - a model loaded by a program without libm ----------===*
 *
 *   cq4p-dlopen-model libcq4p_runtime.so BUNDLE libmodel.so
 *
 * Loads the runtime with dlopen(RTLD_NOW | RTLD_LOCAL), opens the model
 * through it and decodes token 1, printing the vocabulary size and the id
 * of the largest logit. The program links neither libm nor the runtime:
 * the runtime's dependencies stay local to it, and the runtime loads the
 * model library RTLD_LOCAL as well, so the model library's calls into the
 * system libraries (libc's memcpy and memset; libm's, were a kernel to call
 * one) resolve only through the libraries it names itself (DT_NEEDED). A
 * library that names none fails to load here wherever they are not
 * already global.
 *
 *===----------------------------------------------------------------------===*/

#include "cq4p/cq4p.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*open_fn)(const char *, const char *, const cq4p_model_options *,
                       cq4p_model **, char *, size_t);
typedef void (*info_fn)(const cq4p_model *, cq4p_model_info *);
typedef int (*decode_fn)(cq4p_model *, int64_t, float *, char *, size_t);
typedef void (*close_fn)(cq4p_model *);

static void *symbol(void *handle, const char *name) {
  void *found = dlsym(handle, name);
  if (found == NULL)
    fprintf(stderr, "cq4p-dlopen-model: the runtime has no %s\n", name);
  return found;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cq4p-dlopen-model RUNTIME.so BUNDLE LIBRARY.so\n");
    return 2;
  }
  void *runtime = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (runtime == NULL) {
    fprintf(stderr, "cq4p-dlopen-model: %s\n", dlerror());
    return 1;
  }
  open_fn open_model = (open_fn)symbol(runtime, "cq4p_model_open");
  info_fn info = (info_fn)symbol(runtime, "cq4p_model_get_info");
  decode_fn decode = (decode_fn)symbol(runtime, "cq4p_model_decode");
  close_fn close_model = (close_fn)symbol(runtime, "cq4p_model_close");
  if (!open_model || !info || !decode || !close_model)
    return 1;
  char error[1024];
  cq4p_model *model = NULL;
  if (open_model(argv[2], argv[3], NULL, &model, error, sizeof(error)) != CQ4P_OK) {
    fprintf(stderr, "cq4p-dlopen-model: %s\n", error);
    return 1;
  }
  cq4p_model_info described;
  info(model, &described);
  float *logits = malloc(described.vocab * sizeof(float));
  if (logits == NULL ||
      decode(model, 1, logits, error, sizeof(error)) != CQ4P_OK) {
    fprintf(stderr, "cq4p-dlopen-model: %s\n",
            logits ? error : "out of memory");
    return 1;
  }
  uint64_t largest = 0;
  for (uint64_t i = 1; i < described.vocab; ++i)
    if (logits[i] > logits[largest])
      largest = i;
  printf("vocab %llu, largest logit at %llu\n",
         (unsigned long long)described.vocab, (unsigned long long)largest);
  free(logits);
  close_model(model);
  dlclose(runtime);
  return 0;
}
