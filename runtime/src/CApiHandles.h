//===- CApiHandles.h - the C API's opaque handles ---------------*- C++ -*-===//

#ifndef CQ4P_RUNTIME_SRC_CAPIHANDLES_H
#define CQ4P_RUNTIME_SRC_CAPIHANDLES_H

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"
#include "cq4p/runtime/Model.h"

#include <memory>
#include <mutex>

// A tokenizer handle is the text library's (TextCApi.cpp): the core library
// holds the bundle's tokenizer without knowing its type, with the function
// that deletes it, set by the text library when it opens one. So closing a
// model needs no tokenizer code, and a program that runs token ids through
// the core library alone links none (nor PCRE2 and utf8proc).
struct cq4p_tokenizer;
using TokenizerHandle =
    std::unique_ptr<cq4p_tokenizer, void (*)(cq4p_tokenizer *)>;

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
  TokenizerHandle tokenizer{nullptr, nullptr};
};

#endif // CQ4P_RUNTIME_SRC_CAPIHANDLES_H
