//===- LargeStack.h - running a tool's work on a stack of known size -*- C++ -*-===//
//
// cq4p-opt and cq4p-compile run their work on a thread whose stack they
// choose (docs/TRUST.md): MLIR's parser, verifier and printer recurse with
// the input's nesting, and a main thread's stack is whatever `ulimit -s`
// says. Where no such thread can be made (a data limit below its stack:
// thread stacks count against RLIMIT_DATA), the work runs on the calling
// thread, whose limits the tools check themselves.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TOOLS_LARGESTACK_H
#define CQ4P_TOOLS_LARGESTACK_H

#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstddef>
#include <pthread.h>

namespace mlir::cq4p {

/// Runs `body` on a thread with a `stackBytes` stack, or on this thread when
/// that thread cannot be made; `body`'s result.
inline int runOnLargeStack(size_t stackBytes, llvm::function_ref<int()> body) {
  struct Call {
    llvm::function_ref<int()> body;
    int status = 1;
  } call{body};
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0)
    return body();
  pthread_t thread;
  bool started =
      pthread_attr_setstacksize(&attributes, stackBytes) == 0 &&
      pthread_create(
          &thread, &attributes,
          [](void *argument) -> void * {
            auto *pending = static_cast<Call *>(argument);
            pending->status = pending->body();
            return nullptr;
          },
          &call) == 0;
  pthread_attr_destroy(&attributes);
  if (!started)
    return body();
  pthread_join(thread, nullptr);
  return call.status;
}

} // namespace mlir::cq4p

#endif // CQ4P_TOOLS_LARGESTACK_H
