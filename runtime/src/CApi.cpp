//===- CApi.cpp - the runtime's C API over TensorFile and Model -----------===//

#include "cq4p/cq4p.h"
#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Model.h"
#include "cq4p/runtime/TensorFile.h"

#include "CApiHandles.h"

#include <algorithm>
#include <cstring>

using namespace cq4p::runtime;

struct cq4p_tensor {
  std::unique_ptr<TensorFile> file;
};


namespace {

int fail(const Status &status, char *error, size_t errorSize) {
  copyMessage(status, error, errorSize);
  return status.code();
}

int nullModel(const char *function, char *error, size_t errorSize) {
  return fail(Status(CQ4P_ERROR_ARGUMENT,
                     std::string(function) +
                         ": expected a model, found a null pointer"),
              error, errorSize);
}

/// One of an open tensor's checks (verify, checkMapping) through the C API:
/// its code, and its message copied on failure; a null tensor is an
/// argument error naming `function`.
int checkTensor(const char *function, const cq4p_tensor *tensor,
                Status (TensorFile::*check)() const, char *error,
                size_t errorSize) {
  Status status = tensor == nullptr
                      ? Status(CQ4P_ERROR_ARGUMENT,
                               std::string(function) +
                                   ": expected a tensor, found null")
                      : ((*tensor->file).*check)();
  if (!status)
    copyMessage(status, error, errorSize);
  return status.code();
}

} // namespace

extern "C" {

int cq4p_tensor_open(const char *path, cq4p_tensor **out, char *error,
                     size_t error_size) {
  if (out == nullptr || path == nullptr) {
    copyMessage(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_tensor_open: expected a path and an output "
                       "pointer, found null"),
                error, error_size);
    return CQ4P_ERROR_ARGUMENT;
  }
  *out = nullptr;
  std::unique_ptr<TensorFile> file;
  Status status = TensorFile::open(path, file);
  if (!status) {
    copyMessage(status, error, error_size);
    return status.code();
  }
  *out = new cq4p_tensor{std::move(file)};
  return CQ4P_OK;
}

void cq4p_tensor_close(cq4p_tensor *tensor) { delete tensor; }

int cq4p_tensor_verify(const cq4p_tensor *tensor, char *error,
                       size_t error_size) {
  return checkTensor("cq4p_tensor_verify", tensor, &TensorFile::verify, error,
                     error_size);
}

int cq4p_tensor_check(const cq4p_tensor *tensor, char *error,
                      size_t error_size) {
  return checkTensor("cq4p_tensor_check", tensor, &TensorFile::checkMapping,
                     error, error_size);
}

int cq4p_bundle_verify(const char *bundle_dir, char *error, size_t error_size) {
  if (bundle_dir == nullptr) {
    copyMessage(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_bundle_verify: expected a bundle directory, found null"),
                error, error_size);
    return CQ4P_ERROR_ARGUMENT;
  }
  std::unique_ptr<Bundle> bundle;
  Status status = Bundle::open(bundle_dir, bundle);
  if (status)
    status = bundle->verify(nullptr, Bundle::Residency::ReleaseEach);
  if (!status)
    copyMessage(status, error, error_size);
  return status.code();
}

int cq4p_manifest_check(const char *bundle_dir, char *error, size_t error_size) {
  if (bundle_dir == nullptr) {
    copyMessage(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_manifest_check: expected a bundle directory, found null"),
                error, error_size);
    return CQ4P_ERROR_ARGUMENT;
  }
  std::unique_ptr<Bundle> bundle;
  Status status = Bundle::open(bundle_dir, bundle, Bundle::Reading::ManifestOnly);
  if (!status)
    copyMessage(status, error, error_size);
  return status.code();
}

void cq4p_tensor_get_info(const cq4p_tensor *tensor, cq4p_tensor_info *info) {
  if (tensor != nullptr && info != nullptr)
    *info = tensor->file->info();
}

const void *cq4p_tensor_region(const cq4p_tensor *tensor, int region,
                               uint64_t *bytes) {
  ByteSpan span;
  if (tensor != nullptr && region >= 0 && region < CQ4P_REGION_COUNT)
    span = tensor->file->region(static_cast<cq4p_region>(region));
  if (bytes != nullptr)
    *bytes = span.size;
  return span.data;
}

int cq4p_model_open(const char *bundle_dir, const char *library_path,
                    const cq4p_model_options *options, cq4p_model **out,
                    char *error, size_t error_size) {
  if (out == nullptr || bundle_dir == nullptr || library_path == nullptr)
    return fail(Status(CQ4P_ERROR_ARGUMENT,
                       "cq4p_model_open: expected a bundle directory, a "
                       "library path and an output pointer, found null"),
                error, error_size);
  *out = nullptr;
  ModelOptions modelOptions;
  if (options != nullptr) {
    modelOptions.threads = options->threads;
    modelOptions.context = options->context;
    modelOptions.expectedPrefillChunk = options->prefill_chunk;
  }
  std::unique_ptr<cq4p_model> handle(new cq4p_model());
  if (Status status = Bundle::open(bundle_dir, handle->bundle); !status)
    return fail(status, error, error_size);
  if (Status status = KernelLibrary::open(library_path, handle->library);
      !status)
    return fail(status, error, error_size);
  if (Status status = Model::open(*handle->bundle, *handle->library,
                                  modelOptions, handle->model);
      !status)
    return fail(status, error, error_size);
  *out = handle.release();
  return CQ4P_OK;
}

void cq4p_model_close(cq4p_model *model) { delete model; }

int cq4p_model_verify(const cq4p_model *model, char *error,
                      size_t error_size) {
  if (model == nullptr)
    return nullModel("cq4p_model_verify", error, error_size);
  Bundle::Integrity integrity;
  Status status = model->bundle->verify(&integrity);
  if (status)
    status = model->bundle->checkLibraryAgainst(*model->library,
                                                integrity.digest);
  return status ? CQ4P_OK : fail(status, error, error_size);
}

void cq4p_model_get_info(const cq4p_model *model, cq4p_model_info *info) {
  if (model == nullptr || info == nullptr)
    return;
  const Model &m = *model->model;
  const cq4p_model_desc &desc = m.desc();
  *info = cq4p_model_info();
  info->vocab = desc.vocab;
  info->hidden = desc.hidden;
  info->layers = desc.layers;
  info->context = uint64_t(m.context());
  info->prefill_chunk = desc.prefill_chunk;
  info->position = uint64_t(m.position());
  info->kv_dtype = desc.kv_dtype;
  info->target = desc.target;
  size_t length = std::min(std::strlen(desc.architecture),
                           sizeof(info->architecture) - 1);
  std::memcpy(info->architecture, desc.architecture, length);
  info->architecture[length] = '\0';
}

const char *cq4p_model_kernel_variant(const cq4p_model *model,
                                      uint32_t *variant_count) {
  if (variant_count != nullptr)
    *variant_count = model != nullptr
                         ? uint32_t(model->library->variantCount())
                         : 0;
  return model != nullptr ? model->library->variant().c_str() : "";
}

int cq4p_model_reset(cq4p_model *model) {
  if (model == nullptr)
    return CQ4P_ERROR_ARGUMENT;
  return model->model->reset().code();
}

int cq4p_model_prefill(cq4p_model *model, const int64_t *ids, int64_t count,
                       float *logits, char *error, size_t error_size) {
  if (model == nullptr)
    return nullModel("cq4p_model_prefill", error, error_size);
  if (Status status = model->model->prefill(ids, count, logits); !status)
    return fail(status, error, error_size);
  return CQ4P_OK;
}

int cq4p_model_decode(cq4p_model *model, int64_t id, float *logits,
                      char *error, size_t error_size) {
  if (model == nullptr)
    return nullModel("cq4p_model_decode", error, error_size);
  if (Status status = model->model->decode(id, logits); !status)
    return fail(status, error, error_size);
  return CQ4P_OK;
}

int cq4p_model_generate(cq4p_model *model, const int64_t *prompt,
                        int64_t prompt_count, int64_t max_new_tokens,
                        const cq4p_sampling *sampling, int64_t *out_ids,
                        cq4p_generate_stats *stats, char *error,
                        size_t error_size) {
  if (model == nullptr)
    return nullModel("cq4p_model_generate", error, error_size);
  // NULL: greedy; so is a zero-filled struct (Sampler::validate).
  SamplingOptions options;
  if (sampling != nullptr) {
    options.temperature = sampling->temperature;
    options.topK = sampling->top_k;
    options.topP = sampling->top_p;
    options.seed = sampling->seed;
  }
  GenerateStats result;
  Status status = model->model->generate(prompt, prompt_count, max_new_tokens,
                                         options, out_ids, &result);
  if (stats != nullptr) {
    stats->prompt_tokens = result.promptTokens;
    stats->generated_tokens = result.generatedTokens;
    stats->prefill_seconds = result.prefillSeconds;
    stats->decode_seconds = result.decodeSeconds;
    stats->time_to_first_token_seconds = result.timeToFirstTokenSeconds;
  }
  if (!status)
    return fail(status, error, error_size);
  return CQ4P_OK;
}

} // extern "C"
