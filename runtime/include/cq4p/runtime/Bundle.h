//===- Bundle.h - a converted model: manifest.json + tensor files -*- C++ -*-===//
//
// A bundle is a directory with manifest.json and one file per tensor. The
// manifest names each tensor's logical file `<stem>.weights`; the loader
// resolves it as the format says: `<stem>.cq4p.weights` (packed panels),
// then `<stem>.cq4.weights` (legacy CQ4), then the plain name. Opening a
// bundle maps and validates every tensor and refuses, by name, a tensor that
// is missing or whose file disagrees with the manifest.
//
// The bundle is confined to its directory (docs/TRUST.md): manifest.json and
// every tensor file are plain names opened relative to the directory, never
// through a symbolic link, and only as regular files (a FIFO or a device is
// refused before it is read); a manifest with a duplicate member name or
// larger than kMaxManifestBytes is refused. Python's reader applies the
// same rules (python/cq4p/io/bundle.py).
//
// Files must not change while a bundle is open: the tensors are the files'
// own pages, mapped read-only. A file rewritten in place changes what the
// kernels read (never where: the runtime keeps its own copy of every index
// that drives an address); a file truncated under the mapping is detected
// (TensorFile::checkMapping, and the runtime's SIGBUS handler turns a read
// past the new end into zeros and an error from the call that made it;
// docs/TRUST.md).
// Writers replace files by renaming a new one into place, which leaves an
// open bundle's mapping intact.
//
// The manifest's `tokenizer_files` and `files_sha256` (the sha256 of
// model.mlir and each tokenizer file) name plain files inside the bundle,
// like every tensor's file; verify() hashes those files too.
//
// Besides the tensors, the manifest may carry `model_digest` (the digest a
// model library's steps were compiled for; older bundles have none) and
// `config` (the checkpoint's configuration), of which the integer members
// are kept.
//
// Integrity (docs/TRUST.md): each manifest entry may record the sha256 of
// its file, and model_digest is the sha256 of the manifest's config and
// tensor list in Python's canonical JSON (python/cq4p/io/bundle.py), so it
// covers every file's sha256 and every config value. Opening checks what
// is cheap (every header, size and offset; the manifest against each
// file's header); verifyIntegrity() hashes every file and recomputes
// model_digest, a full pass over the bundle made on request (verify(),
// cq4p-run --verify, cq4p_bundle_verify, cq4p_model_verify).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_BUNDLE_H
#define CQ4P_RUNTIME_BUNDLE_H

#include "cq4p/format.h"
#include "cq4p/runtime/Status.h"
#include "cq4p/runtime/TensorFile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cq4p::runtime {

class KernelLibrary;

struct BundleTensor {
  std::string name;
  std::string logicalFile;  ///< as the manifest names it
  std::string resolvedPath; ///< the file actually mapped
  std::vector<uint64_t> shape;
  std::string dtype; ///< "CQ4", "FP16" or "FP32"
  std::string sha256; ///< as the manifest records it ("" when it does not)
  std::unique_ptr<TensorFile> file;
};

class Bundle {
public:
  static constexpr int kManifestVersion = 1;
  /// manifest.json larger than this is refused before it is read (a
  /// manifest lists tensors: a few hundred bytes each).
  static constexpr uint64_t kMaxManifestBytes = CQ4P_MAX_MANIFEST_BYTES;

  /// What Bundle::open reads.
  enum class Reading {
    ManifestAndTensors, ///< manifest.json, then every tensor file mapped
    ManifestOnly,       ///< manifest.json's checks alone: no tensor opened
  };

  /// Reads `directory`/manifest.json and maps every tensor (with
  /// Reading::ManifestOnly: checks the manifest and each entry's fields
  /// only; the bundle then has no files to read).
  static Status open(const std::string &directory, std::unique_ptr<Bundle> &out,
                     Reading reading = Reading::ManifestAndTensors);

  /// The file a logical `<stem>.weights` name resolves to in `directory`,
  /// or an empty string when none of the candidates exists (or the name is
  /// not a plain file name). A candidate that exists as a symbolic link, a
  /// FIFO or a device is returned, so that opening refuses it by name.
  static std::string resolveWeightFile(const std::string &directory,
                                       const std::string &logicalFile);

  /// The files a bundle ships besides manifest.json and the tensors
  /// (model.mlir and the tokenizer's files), whose sha256 the manifest
  /// records under `files_sha256`.
  static const std::vector<std::string> &shippedFileNames();

  /// What verifyIntegrity found.
  struct Integrity {
    size_t filesHashed = 0;     ///< files whose sha256 matched the manifest
    size_t filesUnrecorded = 0; ///< entries without a sha256 (not checked)
    bool digestRecorded = false; ///< the manifest has a model_digest
    std::string digest;          ///< model_digest recomputed
    /// Files of files_sha256 whose sha256 matched (model.mlir, the
    /// tokenizer's files).
    size_t shippedHashed = 0;
    bool shippedRecorded = false; ///< the manifest has files_sha256
    /// Shipped files present that no digest covers: those of a bundle
    /// converted before manifests recorded files_sha256.
    std::vector<std::string> shippedUncovered;
  };

  /// What verify leaves mapped in memory.
  enum class Residency {
    Keep,        ///< every file's pages, read once, stay (a model runs them)
    ReleaseEach, ///< each file's pages leave the process once it is checked
                 ///< (TensorFile::releasePages): resident memory is bounded
                 ///< by the largest file, not the bundle
  };

  /// Every tensor's content against docs/FORMAT.md's rules (TensorFile::verify),
  /// the first failure named by its tensor, then verifyIntegrity()'s
  /// checks. Opening leaves both out. One pass, file by file: each file's
  /// content is checked, then hashed while its pages are fresh; the result
  /// is the same as checking every file's content before hashing any (a
  /// content failure anywhere is reported before a sha256 mismatch).
  Status verify(Integrity *integrity = nullptr,
                Residency residency = Residency::Keep) const;

  /// Hashes every tensor file and compares it with its entry's sha256, then
  /// recomputes model_digest from the manifest's config and tensor list and
  /// compares it with the recorded one: a file swapped for another (even
  /// one of the same shape) or a config edited after conversion is refused,
  /// naming the tensor or the digest and both values. Then the shipped
  /// files (checkShippedFiles).
  Status verifyIntegrity(Integrity *integrity = nullptr) const;

  /// model_digest as the manifest's content defines it (cheap: the
  /// manifest only), whether or not the manifest records one.
  std::string computeModelDigest() const;

  /// Refuses a library whose recorded bundle digest is not `digest` (a
  /// digest verifyIntegrity recomputed): the library was compiled for other
  /// weights or another config, whatever the manifest says. A library that
  /// records none passes.
  Status checkLibraryAgainst(const KernelLibrary &library,
                             const std::string &digest) const;

  const std::string &directory() const { return directory_; }
  const std::vector<BundleTensor> &tensors() const { return tensors_; }
  /// The tensor named `name`, or null.
  const BundleTensor *find(const std::string &name) const;

  /// manifest.json's top-level `model_digest` (empty when it has none).
  const std::string &modelDigest() const { return modelDigest_; }
  bool hasModelDigest() const { return hasModelDigest_; }

  /// Refuses a library compiled for another bundle: one that records a
  /// bundle digest (KernelLibrary::bundleDigest) other than this bundle's
  /// model_digest, or records one when this bundle has none. A library that
  /// records none serves any bundle, unless `requireDigest`.
  Status checkLibrary(const KernelLibrary &library,
                      bool requireDigest = false) const;

  /// The integer member `key` of manifest.json's `config` object, if there
  /// is one (e.g. "max_position_embeddings").
  std::optional<int64_t> configInteger(const std::string &key) const;
  /// The same from the decoder's config: `config.text_config` when the
  /// config has that object (multimodal wrappers), else `config`.
  std::optional<int64_t> textConfigInteger(const std::string &key) const;

private:
  Bundle() = default;
  /// One tensor's sha256 against its entry (counted in `out`).
  Status checkSha256(const BundleTensor &tensor, Integrity &out) const;
  /// model_digest recomputed and compared with the recorded one.
  Status checkModelDigest(Integrity &out) const;
  /// Each file of files_sha256 hashed and compared with its digest, and no
  /// shipped file present that files_sha256 leaves out (one added after
  /// conversion); without files_sha256 (an older bundle), each of
  /// tokenizer_files opened as a regular file inside the bundle and the
  /// shipped files present listed in `out.shippedUncovered`.
  Status checkShippedFiles(Integrity &out) const;
  bool hasFilesSha256_ = false;
  std::vector<std::pair<std::string, std::string>> filesSha256_;
  std::vector<std::string> tokenizerFiles_;
  std::string directory_;
  std::vector<BundleTensor> tensors_;
  std::string modelDigest_;
  bool hasModelDigest_ = false;
  std::string manifestText_; // for computeModelDigest
  std::vector<std::pair<std::string, int64_t>> configIntegers_;
  std::vector<std::pair<std::string, int64_t>> textConfigIntegers_;
};

} // namespace cq4p::runtime

#endif // CQ4P_RUNTIME_BUNDLE_H
