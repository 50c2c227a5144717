//===- LargePages.h - mappings placed for 2 MiB pages -----------*- C++ -*-===//
//
// A decode step reads every weight once and, at a long context, every cached
// key and value of every layer: hundreds of megabytes spread over pages that
// no TLB holds as 4 KiB entries. The runtime places its large mappings (the
// tensor files, the KV cache) at 2 MiB-aligned addresses and advises them
// MADV_HUGEPAGE, so that a kernel with transparent huge pages in `madvise`
// mode (the common default) backs them with 2 MiB pages where it can. It is
// advice only: a kernel that says no leaves the mapping as it is.
// CQ4P_LARGE_PAGES=0 turns it off, to measure the difference.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_LARGEPAGES_H
#define CQ4P_RUNTIME_SRC_LARGEPAGES_H

#include <cstdint>

namespace cq4p::runtime {

/// 2 MiB: the page size of a PMD mapping on x86-64 and of AArch64 with 4 KiB
/// base pages.
inline constexpr uint64_t kLargePage = uint64_t(2) << 20;

/// Whether large mappings are placed and advised for large pages (the
/// environment variable CQ4P_LARGE_PAGES=0 says no).
bool largePagesWanted();

/// mmap(nullptr, size, prot, flags, fd, 0), at a 2 MiB-aligned address and
/// advised MADV_HUGEPAGE when size is at least 2 MiB and large pages are
/// wanted; a plain mmap otherwise. Returns MAP_FAILED (errno set) on failure.
/// The mapping is released with munmap(result, size) as any other.
void *mapForLargePages(uint64_t size, int prot, int flags, int fd);

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_SRC_LARGEPAGES_H
