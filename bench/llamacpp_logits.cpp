// The last position's logits of a prompt, from a llama.cpp build: the peer's
// side of bench/model --llamacpp's agreement check (cq4p's oracle and
// llama.cpp must read the same checkpoint before their speeds are compared).
//
//   llamacpp_logits MODEL.gguf OUT.f32 ID [ID ...]
//
// Writes vocab float32 values to OUT.f32. Compiled by bench/model against
// the llama.cpp build it is given (llama.h and libllama); not part of the
// cq4p build.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llamacpp_logits MODEL.gguf OUT.f32 ID [ID ...]\n");
    return 2;
  }
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; ++i)
    ids.push_back(static_cast<llama_token>(std::atoi(argv[i])));

  llama_backend_init();
  llama_model_params modelParams = llama_model_default_params();
  llama_model *model = llama_model_load_from_file(argv[1], modelParams);
  if (model == nullptr) {
    std::fprintf(stderr, "llamacpp_logits: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params contextParams = llama_context_default_params();
  contextParams.n_ctx = 64;
  contextParams.n_batch = 64;
  contextParams.n_ubatch = 64;
  contextParams.n_threads = 2;
  contextParams.n_threads_batch = 2;
  llama_context *context = llama_init_from_model(model, contextParams);
  if (context == nullptr) {
    std::fprintf(stderr, "llamacpp_logits: cannot create a context\n");
    return 1;
  }
  llama_batch batch = llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()));
  if (llama_decode(context, batch) != 0) {
    std::fprintf(stderr, "llamacpp_logits: llama_decode failed\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const float *logits = llama_get_logits_ith(context, -1);
  FILE *out = std::fopen(argv[2], "wb");
  if (out == nullptr ||
      std::fwrite(logits, sizeof(float), static_cast<size_t>(vocab), out) !=
          static_cast<size_t>(vocab) ||
      std::fclose(out) != 0) {
    std::fprintf(stderr, "llamacpp_logits: cannot write %s\n", argv[2]);
    return 1;
  }
  llama_free(context);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
