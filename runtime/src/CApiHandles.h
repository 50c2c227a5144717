//===- CApiHandles.h - the C API's opaque handles ---------------*- C++ -*-===//

#ifndef CQ4P_RUNTIME_SRC_CAPIHANDLES_H
#define CQ4P_RUNTIME_SRC_CAPIHANDLES_H

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Model.h"
#include "cq4p/runtime/Tokenizer.h"

#include <memory>
#include <mutex>

struct cq4p_tokenizer {
  std::unique_ptr<cq4p::runtime::Tokenizer> tokenizer;
};

// Declared in this order so that the model goes first, then the library
// its steps live in, then the mapped tensors they read. The bundle's
// tokenizer is opened on first use (cq4p_model_tokenizer, or a text call
// given none) under tokenizerMutex, whatever thread asks first, and is
// never replaced: every caller gets the one tokenizer, which lives as long
// as the model.
struct cq4p_model {
  std::unique_ptr<cq4p::runtime::Bundle> bundle;
  std::unique_ptr<cq4p::runtime::KernelLibrary> library;
  std::unique_ptr<cq4p::runtime::Model> model;
  std::mutex tokenizerMutex;
  std::unique_ptr<cq4p_tokenizer> tokenizer;
};

#endif // CQ4P_RUNTIME_SRC_CAPIHANDLES_H
