//===- MappingGuard.cpp - the SIGBUS handler over tensor mappings ---------===//
//
// Everything the handler touches is a lock-free atomic in static storage
// (zero-initialised, so no constructor runs) or a value written before the
// handler was installed, and it calls only async-signal-safe functions: the
// raw mmap system call (not the libc wrapper, which a sanitizer may
// intercept), sigaction and raise.
//
//===----------------------------------------------------------------------===//

#include "MappingGuard.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cq4p::runtime {
namespace {

enum SlotState : uint32_t { kFree = 0, kClaimed, kLive, kClosing };

struct Slot {
  std::atomic<uint32_t> state;
  /// Handlers between their check of `state` and their last use of the
  /// slot; unguardMapping waits for none.
  std::atomic<uint32_t> active;
  std::atomic<uint32_t> faulted;
  std::atomic<uintptr_t> begin, end; // page-aligned, end exclusive
};

Slot slots[kMaxGuardedMappings];
/// Slots [0, highWater) may be live: the handler looks at no others.
std::atomic<int> highWater{0};
/// Where the next claim starts looking (so that opening many files costs
/// one probe each, not a scan of every live slot).
std::atomic<int> nextClaim{0};
std::atomic<uint64_t> faults{0};

struct sigaction previousAction;
uintptr_t pageSize = 4096;
bool installed = false;
std::once_flag installOnce;

void forward(int signal, siginfo_t *info, void *context) {
  const struct sigaction &previous = previousAction;
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(signal, info, context);
    return;
  }
  bool sent = info->si_code <= 0; // by kill, tkill or sigqueue: no fault
  if (previous.sa_handler == SIG_IGN && sent)
    return;
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
    return;
  }
  // The default action: with it restored, a faulting access faults again
  // when the handler returns and the process dies of SIGBUS at the access,
  // as it would have without the runtime; a sent signal is sent again.
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal, &fallback, nullptr);
  if (sent)
    ::raise(signal);
}

/// Zero pages over [page, end) of a faulting mapping.
bool zeroFill(uintptr_t page, uintptr_t end) {
  long mapped = ::syscall(SYS_mmap, page, end - page, PROT_READ,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return uintptr_t(mapped) == page;
}

void onSigbus(int signal, siginfo_t *info, void *context) {
  int savedErrno = errno;
  bool handled = false;
  if (info->si_code == BUS_ADRERR) {
    uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
    int count = highWater.load(std::memory_order_acquire);
    for (int i = 0; i < count && !handled; ++i) {
      Slot &slot = slots[i];
      if (slot.state.load(std::memory_order_acquire) != kLive)
        continue;
      // Announce, then check again: unguardMapping marks the slot closing
      // before it waits for `active`, so either it waits for this handler
      // or this handler sees the slot closing (both sequentially
      // consistent).
      slot.active.fetch_add(1);
      if (slot.state.load() == kLive) {
        uintptr_t begin = slot.begin.load(std::memory_order_relaxed);
        uintptr_t end = slot.end.load(std::memory_order_relaxed);
        if (address >= begin && address < end &&
            zeroFill(address & ~(pageSize - 1), end)) {
          slot.faulted.store(1, std::memory_order_release);
          faults.fetch_add(1, std::memory_order_release);
          handled = true;
        }
      }
      slot.active.fetch_sub(1);
    }
  }
  if (!handled)
    forward(signal, info, context);
  errno = savedErrno;
}

void install() {
  long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0)
    pageSize = uintptr_t(page);
  // The previous action is read before ours is installed: the handler may
  // forward to it as soon as it is.
  if (::sigaction(SIGBUS, nullptr, &previousAction) != 0)
    return;
  struct sigaction action = {};
  action.sa_sigaction = onSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  installed = ::sigaction(SIGBUS, &action, nullptr) == 0;
}

} // namespace

int guardMapping(const void *base, uint64_t bytes) {
  std::call_once(installOnce, install);
  if (!installed)
    return -1;
  uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  uintptr_t end = begin + ((bytes + pageSize - 1) & ~uint64_t(pageSize - 1));
  int start = nextClaim.load(std::memory_order_relaxed);
  for (int probe = 0; probe < kMaxGuardedMappings; ++probe) {
    int i = (start + probe) % kMaxGuardedMappings;
    Slot &slot = slots[i];
    uint32_t expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kClaimed))
      continue;
    slot.faulted.store(0, std::memory_order_relaxed);
    slot.begin.store(begin, std::memory_order_relaxed);
    slot.end.store(end, std::memory_order_relaxed);
    int seen = highWater.load();
    while (seen < i + 1 && !highWater.compare_exchange_weak(seen, i + 1)) {
    }
    slot.state.store(kLive, std::memory_order_release);
    nextClaim.store((i + 1) % kMaxGuardedMappings, std::memory_order_relaxed);
    return i;
  }
  return -1;
}

void unguardMapping(int slot) {
  if (slot < 0 || slot >= kMaxGuardedMappings)
    return;
  Slot &s = slots[slot];
  s.state.store(kClosing);
  while (s.active.load() != 0)
    ::sched_yield();
  s.state.store(kFree, std::memory_order_release);
}

bool mappingFaulted(int slot) {
  return slot >= 0 && slot < kMaxGuardedMappings &&
         slots[slot].faulted.load(std::memory_order_acquire) != 0;
}

uint64_t guardedFaults() { return faults.load(std::memory_order_acquire); }

} // namespace cq4p::runtime
