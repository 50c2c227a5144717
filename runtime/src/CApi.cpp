//===- CApi.cpp - the runtime's C API over TensorFile ---------------------===//

#include "cq4p/cq4p.h"
#include "cq4p/runtime/TensorFile.h"

using namespace cq4p::runtime;

struct cq4p_tensor {
  std::unique_ptr<TensorFile> file;
};

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

} // extern "C"
