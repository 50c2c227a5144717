//===- TensorFile.h - one CQ4 tensor file, mapped and validated -*- C++ -*-===//
//
// A tensor file (docs/FORMAT.md section 1) mapped read-only: the bytes kernels use are the
// file's own pages, never copied. A file truncated while mapped is detected
// rather than fatal (truncatedWhileMapped, checkMapping; docs/TRUST.md). Every header field, size and offset is
// validated before any region is exposed, in a fixed order shared with the
// Python reader (python/cq4p/io/reader.py), so that both name the same field
// for the same defect.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_TENSORFILE_H
#define CQ4P_RUNTIME_TENSORFILE_H

#include "cq4p/cq4p.h"
#include "cq4p/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cq4p::runtime {

/// A read-only byte range inside a mapping.
struct ByteSpan {
  const uint8_t *data = nullptr;
  uint64_t size = 0;
  bool empty() const { return size == 0; }
};

/// Where each region lies: offsets from the start of the file.
struct RegionTable {
  uint64_t offset[CQ4P_REGION_COUNT] = {};
  uint64_t size[CQ4P_REGION_COUNT] = {};
};

/// Validates the bytes of a whole tensor file held in memory; `path` only
/// names the file in messages. On success fills `info` and `regions`.
Status validateTensorBytes(const std::string &path, const uint8_t *bytes,
                           uint64_t size, cq4p_tensor_info &info,
                           RegionTable &regions);

/// Checks the content rules of docs/FORMAT.md (sections 1, 3 and 4) that
/// opening does not (opening
/// stays O(header) plus the codebook, signs and permutation): zero padding;
/// finite fp16 and fp32 values; for orthogonal panel files rotation_t the
/// transpose of rotation; for panel files norm_panels equal to
/// fp32(norm) * cb_scale and 0.0 past N, index 0 in the channels past N and
/// canonical indices. One full pass over the file; `bytes` as validated by
/// validateTensorBytes, which filled `info` and `regions`.
Status verifyTensorContent(const std::string &path, const uint8_t *bytes,
                           const cq4p_tensor_info &info,
                           const RegionTable &regions);

class TensorFile {
public:
  /// Maps `path` read-only and validates it. A FIFO, a device or anything
  /// else that is not a regular file is refused before it is read.
  static Status open(const std::string &path, std::unique_ptr<TensorFile> &out);

  /// As open, for `name` relative to the directory open as `directoryFd`
  /// (AT_FDCWD: the working directory); with `noFollow` a symbolic link is
  /// refused. `path` names the file in messages. Bundles use this so that
  /// an entry cannot leave the bundle directory.
  static Status openAt(int directoryFd, const std::string &name,
                       const std::string &path, bool noFollow,
                       std::unique_ptr<TensorFile> &out);

  TensorFile(const TensorFile &) = delete;
  TensorFile &operator=(const TensorFile &) = delete;
  ~TensorFile();

  const std::string &path() const { return path_; }
  const cq4p_tensor_info &info() const { return info_; }
  cq4p_layout layout() const { return static_cast<cq4p_layout>(info_.layout); }
  bool isOrthogonal() const { return info_.orthogonal != 0; }
  uint64_t n() const { return info_.dims[0]; }
  uint64_t k() const { return info_.dims[1]; }

  /// verifyTensorContent over the mapped file.
  Status verify() const;

  /// The sha256 of the mapped file's bytes, as 64 lowercase hex digits (a
  /// full pass; what Bundle::verifyIntegrity compares with the manifest).
  Status sha256(std::string &hex) const;

  /// Gives the pages of the mapping back (MADV_DONTNEED): the process's
  /// resident memory no longer counts them; the mapping stays, and a later
  /// read faults the file's pages in again from the page cache. For a pass
  /// over many files (Bundle::verify) whose memory should be one file's.
  void releasePages() const;

  /// Whether a read of the mapping has gone past the file's end since it
  /// was opened: the file was truncated under it, and the runtime's SIGBUS
  /// handler (docs/TRUST.md) mapped zero pages where its pages were, so
  /// whatever was computed from the file since is wrong. One atomic load.
  bool truncatedWhileMapped() const;

  /// Refuses, naming the file and both sizes, a file that was truncated
  /// while mapped or whose size is no longer the mapped size (one stat of
  /// the path; a different file there, such as a replacement renamed into
  /// place, leaves the mapped one intact and is not refused).
  Status checkMapping() const;

  /// The bytes of a region (empty when the file has none).
  ByteSpan region(cq4p_region region) const;

private:
  TensorFile() = default;

  std::string path_;
  const uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
  int guardSlot_ = -1; // MappingGuard.h; -1 for an empty file
  bool noFollow_ = false;
  uint64_t device_ = 0, inode_ = 0; // the mapped file's identity
  cq4p_tensor_info info_ = {};
  RegionTable regions_;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_TENSORFILE_H
