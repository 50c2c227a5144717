//===- MappingGuard.h - tensor mappings that survive truncation -*- C++ -*-===//
//
// A tensor file is the file's own pages (TensorFile.h). When the file is
// truncated while mapped, a read of a page past its new end raises SIGBUS,
// which by default kills the process. The runtime installs one process-wide
// SIGBUS handler (the first time a mapping is registered) that, for a fault
// inside a registered mapping, maps anonymous zero pages over the mapping
// from the faulting page to its end, records the fault in the mapping's
// slot and returns, so the interrupted read finishes on zeros. Every entry
// point that ran kernels over a mapping then asks whether it faulted and
// returns an error naming the file instead of results (docs/TRUST.md).
//
// A fault anywhere else (another mapping, a kernel library, a signal sent
// by kill) goes to the handler that was installed before the runtime's, or
// to the default action (the process dies of SIGBUS as it would have).
//
// The registry is a fixed table of slots claimed and released with atomic
// operations only, so that the handler, which may run on any thread at any
// moment, never waits for a lock and never sees a slot half written, and a
// mapping is never unmapped while a handler is writing over it.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_MAPPINGGUARD_H
#define CQ4P_RUNTIME_SRC_MAPPINGGUARD_H

#include <cstddef>
#include <cstdint>

namespace cq4p::runtime {

/// Mappings registered at once, over the whole process.
constexpr int kMaxGuardedMappings = 1 << 16;

/// Registers [base, base + bytes) (a whole mapping, page-aligned base) and
/// installs the SIGBUS handler if it is not yet. Returns the slot, or -1
/// when all kMaxGuardedMappings slots are in use or the handler cannot be
/// installed.
int guardMapping(const void *base, uint64_t bytes);

/// Unregisters the slot and waits until no handler is using it; after this
/// the mapping may be unmapped.
void unguardMapping(int slot);

/// Whether a read inside the slot's mapping faulted (and found zeros).
bool mappingFaulted(int slot);

/// Faults handled over the process's life, over every mapping: a caller
/// that remembers this count can skip looking at its mappings until it
/// changes.
uint64_t guardedFaults();

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_MAPPINGGUARD_H
