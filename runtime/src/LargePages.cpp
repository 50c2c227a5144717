//===- LargePages.cpp - mappings placed for 2 MiB pages -------------------===//

#include "LargePages.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace cq4p::runtime {

bool largePagesWanted() {
  static const bool wanted = [] {
    const char *value = std::getenv("CQ4P_LARGE_PAGES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return wanted;
}

void *mapForLargePages(uint64_t size, int prot, int flags, int fd) {
  if (!largePagesWanted() || size < kLargePage)
    return ::mmap(nullptr, size, prot, flags, fd, 0);
  // Reserve a 2 MiB more than needed, map over its first aligned address,
  // then give back the reservation's head and tail.
  uint64_t span = size + kLargePage;
  void *reserved = ::mmap(nullptr, span, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED)
    return ::mmap(nullptr, size, prot, flags, fd, 0);
  uintptr_t start = reinterpret_cast<uintptr_t>(reserved);
  uintptr_t aligned = (start + kLargePage - 1) & ~uintptr_t(kLargePage - 1);
  void *mapping = ::mmap(reinterpret_cast<void *>(aligned), size, prot,
                         flags | MAP_FIXED, fd, 0);
  if (mapping == MAP_FAILED) {
    int error = errno;
    ::munmap(reserved, span);
    errno = error;
    return MAP_FAILED;
  }
  if (aligned > start)
    ::munmap(reserved, aligned - start);
  uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  uintptr_t end = aligned + (size + page - 1) / page * page;
  if (start + span > end)
    ::munmap(reinterpret_cast<void *>(end), start + span - end);
#ifdef MADV_HUGEPAGE
  // Advice only: a kernel without transparent huge pages (for files, or at
  // all) says EINVAL and the mapping stays as it is.
  (void)::madvise(mapping, size, MADV_HUGEPAGE);
#endif
  return mapping;
}

} // namespace cq4p::runtime
