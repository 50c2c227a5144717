//===- Bundle.cpp - reading a bundle --------------------------------------===//

#include "cq4p/runtime/Bundle.h"
#include "cq4p/runtime/KernelLibrary.h"

#include "Json.h"
#include "SafeOpen.h"
#include "Sha256.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace cq4p::runtime {
namespace {

/// Whether `name` exists in the directory open as `directoryFd`, in any
/// form: a symbolic link or a FIFO counts, so that the loader refuses it by
/// name instead of falling through to the next candidate.
bool existsIn(int directoryFd, const std::string &name) {
  struct stat st;
  return ::fstatat(directoryFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/// The candidate names a logical `<stem>.weights` resolves to, in order.
std::vector<std::string> weightFileCandidates(const std::string &logicalFile) {
  static const std::string kSuffix = ".weights";
  std::vector<std::string> candidates;
  if (logicalFile.size() > kSuffix.size() &&
      logicalFile.compare(logicalFile.size() - kSuffix.size(), kSuffix.size(),
                          kSuffix) == 0) {
    std::string stem = logicalFile.substr(0, logicalFile.size() - kSuffix.size());
    candidates.push_back(stem + ".cq4p.weights");
    candidates.push_back(stem + ".cq4.weights");
  }
  candidates.push_back(logicalFile);
  return candidates;
}

/// The first candidate present in the directory, or "".
std::string resolveIn(int directoryFd, const std::string &logicalFile) {
  for (const std::string &candidate : weightFileCandidates(logicalFile))
    if (existsIn(directoryFd, candidate))
      return candidate;
  return "";
}

/// Closes a descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Reads the whole of an open regular file of `size` bytes; a file that
/// grows or shrinks while it is read is an error, not a partial document.
Status readWhole(int fd, const std::string &path, uint64_t size,
                 std::string &text) {
  text.assign(size, '\0');
  uint64_t got = 0;
  while (got <= size) {
    char extra;
    char *target = got < size ? &text[got] : &extra;
    size_t want = got < size ? size_t(size - got) : 1;
    ssize_t count = ::read(fd, target, want);
    if (count < 0 && errno == EINTR)
      continue;
    if (count < 0)
      return Status(CQ4P_ERROR_IO, path + ": cannot read: " + std::strerror(errno));
    if (count == 0)
      break;
    got += uint64_t(count);
  }
  if (got != size)
    return Status(CQ4P_ERROR_IO, path + ": changed while read: expected " +
                                     std::to_string(size) + " bytes, read " +
                                     std::to_string(got));
  return Status::ok();
}

bool isSha256Hex(const std::string &text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string formatShape(const uint64_t *dims, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// Gemma 4's per-layer embedding table is stored as rows of one layer each
/// ([vocab * layers, width], the checkpoint's [vocab, layers * width] in
/// manifest original_shape). A CQ4 table stored with the checkpoint's rows
/// is the layout converters wrote before, whose one layers * width wide
/// rotation each token read: refused, naming the fix. With one layer the two
/// layouts are the same rows, and nothing is refused.
template <typename Refuse>
Status checkPerLayerTable(const json::Value &entry, const BundleTensor &tensor,
                          const json::Value *config, const Refuse &refuse,
                          const std::string &where) {
  static constexpr char kSuffix[] = "embed_tokens_per_layer.weight";
  const std::string &name = tensor.name;
  size_t suffix = sizeof(kSuffix) - 1;
  if (tensor.dtype != "CQ4" || tensor.shape.size() != 2 || name.size() < suffix ||
      name.compare(name.size() - suffix, suffix, kSuffix) != 0)
    return Status::ok();
  const json::Value *original = entry.get("original_shape");
  if (!original || original->kind != json::Value::Kind::Array ||
      original->array.size() != 2 || !original->array[0].isInteger ||
      uint64_t(original->array[0].integer) != tensor.shape[0])
    return Status::ok();
  // The layer count, from the config or its text_config (Gemma 4's).
  const json::Value *text = config && config->kind == json::Value::Kind::Object
                                ? config->get("text_config")
                                : nullptr;
  for (const json::Value *fields : {text, config}) {
    if (!fields || fields->kind != json::Value::Kind::Object)
      continue;
    const json::Value *layers = fields->get("num_hidden_layers");
    if (layers && layers->isInteger && layers->integer == 1)
      return Status::ok();
    if (layers)
      break;
  }
  return refuse(where + ": the per-layer embedding table is stored as one " +
                formatShape(tensor.shape.data(), 2) +
                " orthogonal tensor, a layout this cq4p no longer runs (a " +
                std::to_string(tensor.shape[1]) + " x " + std::to_string(tensor.shape[1]) +
                " rotation read for every token); reconvert the checkpoint with "
                "`python -m cq4p convert`, which stores it as rows of one layer each");
}

/// A manifest value in a message: its JSON (ASCII, as Python's json.dumps
/// writes it), at most 80 characters (python/cq4p/io/bundle.py shown()).
std::string shownJson(const json::Value &value) {
  std::string text = json::pythonJson(value);
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

/// Hashes the regular file `name` directly inside the directory open as
/// `directoryFd`, never through a symbolic link.
Status hashShippedFile(int directoryFd, const std::string &name,
                       const std::string &path, std::string &hex) {
  int fd = -1;
  uint64_t size = 0;
  if (Status status = openRegularFile(directoryFd, name, path, true, fd, size);
      !status)
    return status;
  FdCloser closer{fd};
  Sha256 hash;
  std::vector<char> block(1 << 20);
  for (;;) {
    ssize_t count = ::read(fd, block.data(), block.size());
    if (count < 0 && errno == EINTR)
      continue;
    if (count < 0)
      return Status(CQ4P_ERROR_IO, path + ": cannot read: " + std::strerror(errno));
    if (count == 0)
      break;
    hash.update(block.data(), size_t(count));
  }
  hex = hash.hexDigest();
  return Status::ok();
}

const char *precisionName(uint32_t precision) {
  switch (precision) {
  case CQ4P_PRECISION_FP16: return "FP16";
  case CQ4P_PRECISION_FP32: return "FP32";
  case CQ4P_PRECISION_CQ4: return "CQ4";
  default: return "?";
  }
}

const char *layoutName(uint32_t layout) {
  switch (layout) {
  case CQ4P_LAYOUT_PANELS: return "panels";
  case CQ4P_LAYOUT_ROW_MAJOR: return "row_major";
  case CQ4P_LAYOUT_INTERLEAVED_4ROW: return "interleaved4row";
  default: return "dense";
  }
}

} // namespace

const std::vector<std::string> &Bundle::shippedFileNames() {
  // python/cq4p/io/bundle.py SHIPPED_FILES: model.mlir, then the tokenizer's.
  static const std::vector<std::string> names = {
      "model.mlir",           "tokenizer.model",        "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
      "chat_template.jinja"};
  return names;
}

Status Bundle::checkShippedFiles(Integrity &out) const {
  int directoryFd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0)
    return Status(CQ4P_ERROR_NOT_FOUND,
                  directory_ + ": cannot open the bundle directory: " +
                      std::strerror(errno));
  FdCloser closer{directoryFd};
  if (!hasFilesSha256_) {
    std::string ignored;
    for (const std::string &name : tokenizerFiles_)
      if (Status status =
              hashShippedFile(directoryFd, name, directory_ + "/" + name, ignored);
          !status)
        return status;
    for (const std::string &name : shippedFileNames())
      if (existsIn(directoryFd, name))
        out.shippedUncovered.push_back(name);
    return Status::ok();
  }
  out.shippedRecorded = true;
  for (const auto &[name, recorded] : filesSha256_) {
    std::string path = directory_ + "/" + name;
    std::string found;
    if (Status status = hashShippedFile(directoryFd, name, path, found); !status)
      return status;
    if (found != recorded)
      return Status(CQ4P_ERROR_FORMAT,
                    path + ": sha256 " + recorded +
                        " in manifest.json files_sha256, but the file gives " +
                        found + " (the file was changed after conversion)");
    ++out.shippedHashed;
  }
  for (const std::string &name : shippedFileNames()) {
    bool listed = std::any_of(filesSha256_.begin(), filesSha256_.end(),
                              [&](const auto &entry) { return entry.first == name; });
    if (!listed && existsIn(directoryFd, name))
      return Status(CQ4P_ERROR_FORMAT,
                    directory_ + "/" + name +
                        ": not in manifest.json files_sha256 (added after "
                        "conversion; cq4p reads it)");
  }
  return Status::ok();
}

std::string Bundle::resolveWeightFile(const std::string &directory,
                                      const std::string &logicalFile) {
  if (!isPlainFileName(logicalFile))
    return "";
  int directoryFd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0)
    return "";
  FdCloser closer{directoryFd};
  std::string name = resolveIn(directoryFd, logicalFile);
  return name.empty() ? "" : directory + "/" + name;
}

Status Bundle::verify(Integrity *integrity, Residency residency) const {
  Integrity local;
  Integrity &out = integrity != nullptr ? *integrity : local;
  out = Integrity();
  // The first sha256 failure waits for the content checks of the files
  // after it, which take precedence; no file is hashed after it.
  Status hashFailure = Status::ok();
  for (const BundleTensor &tensor : tensors_) {
    if (Status status = tensor.file->verify(); !status)
      return Status(status.code(), "tensor '" + tensor.name + "': " + status.message());
    if (hashFailure)
      hashFailure = checkSha256(tensor, out);
    if (residency == Residency::ReleaseEach)
      tensor.file->releasePages();
  }
  if (!hashFailure)
    return hashFailure;
  if (Status status = checkModelDigest(out); !status)
    return status;
  return checkShippedFiles(out);
}

std::string Bundle::computeModelDigest() const {
  // Open parsed this text already; it parses again the same way.
  json::Value manifest;
  if (!json::parse(directory_ + "/manifest.json", manifestText_, manifest))
    return "";
  json::Value content;
  content.kind = json::Value::Kind::Object;
  const json::Value *config = manifest.get("config");
  content.object.emplace_back("config", config ? *config : json::Value());
  content.object.emplace_back("tensors", *manifest.get("tensors"));
  std::string canonical = json::pythonJson(content);
  return Sha256::hex(canonical.data(), canonical.size());
}

Status Bundle::checkSha256(const BundleTensor &tensor, Integrity &out) const {
  if (tensor.sha256.empty()) {
    ++out.filesUnrecorded;
    return Status::ok();
  }
  std::string found;
  if (Status status = tensor.file->sha256(found); !status)
    return Status(status.code(), "tensor '" + tensor.name + "': " + status.message());
  if (found != tensor.sha256)
    return Status(CQ4P_ERROR_FORMAT,
                  directory_ + ": tensor '" + tensor.name + "': sha256 " +
                      tensor.sha256 + " in manifest.json, but " + found +
                      " for " + tensor.resolvedPath +
                      " (the file is not the one converted)");
  ++out.filesHashed;
  return Status::ok();
}

Status Bundle::checkModelDigest(Integrity &out) const {
  out.digest = computeModelDigest();
  out.digestRecorded = hasModelDigest_;
  if (hasModelDigest_ && out.digest != modelDigest_)
    return Status(CQ4P_ERROR_FORMAT,
                  directory_ + "/manifest.json: model_digest " + modelDigest_ +
                      " recorded, but the config and tensor list give " +
                      out.digest +
                      " (the manifest was edited after conversion)");
  return Status::ok();
}

Status Bundle::verifyIntegrity(Integrity *integrity) const {
  Integrity local;
  Integrity &out = integrity != nullptr ? *integrity : local;
  out = Integrity();
  for (const BundleTensor &tensor : tensors_)
    if (Status status = checkSha256(tensor, out); !status)
      return status;
  if (Status status = checkModelDigest(out); !status)
    return status;
  return checkShippedFiles(out);
}

Status Bundle::checkLibraryAgainst(const KernelLibrary &library,
                                   const std::string &digest) const {
  const std::string &recorded = library.bundleDigest();
  if (recorded.empty() || recorded == digest)
    return Status::ok();
  return Status(CQ4P_ERROR_UNSUPPORTED,
                library.path() + ": library built for bundle digest " +
                    recorded + ", this bundle's content gives " + digest +
                    " (" + directory_ + ")");
}

Status Bundle::checkLibrary(const KernelLibrary &library,
                            bool requireDigest) const {
  const std::string &digest = library.bundleDigest();
  if (digest.empty() && requireDigest)
    return Status(CQ4P_ERROR_UNSUPPORTED,
                  library.path() +
                      ": records no bundle digest, and one is required "
                      "(compile it from the bundle's model.mlir or with "
                      "cq4p-compile --bundle " +
                      directory_ + ")");
  if (digest.empty() || digest == modelDigest_)
    return Status::ok();
  return Status(CQ4P_ERROR_UNSUPPORTED,
                library.path() + ": library built for bundle digest " + digest +
                    (hasModelDigest_
                         ? ", this bundle's is " + modelDigest_
                         : ", this bundle has none (no model_digest in its "
                           "manifest.json)") +
                    " (" + directory_ + ")");
}

const BundleTensor *Bundle::find(const std::string &name) const {
  for (const BundleTensor &tensor : tensors_)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

std::optional<int64_t> Bundle::configInteger(const std::string &key) const {
  for (const auto &[name, value] : configIntegers_)
    if (name == key)
      return value;
  return std::nullopt;
}

std::optional<int64_t>
Bundle::textConfigInteger(const std::string &key) const {
  for (const auto &[name, value] : textConfigIntegers_)
    if (name == key)
      return value;
  return std::nullopt;
}

Status Bundle::open(const std::string &directory, std::unique_ptr<Bundle> &out,
                    Reading reading) {
  out.reset();
  std::string manifestPath = directory + "/manifest.json";
  // Every file is opened relative to this descriptor, so a directory
  // renamed or replaced while the bundle opens cannot redirect the reads.
  int directoryFd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0)
    return Status(CQ4P_ERROR_NOT_FOUND,
                  directory + ": cannot open the bundle directory: " +
                      std::strerror(errno));
  FdCloser directoryCloser{directoryFd};
  std::string text;
  {
    int fd = -1;
    uint64_t size = 0;
    if (!existsIn(directoryFd, "manifest.json"))
      return Status(CQ4P_ERROR_NOT_FOUND,
                    manifestPath + ": cannot open: " + std::strerror(errno));
    if (Status status = openRegularFile(directoryFd, "manifest.json",
                                        manifestPath, true, fd, size);
        !status)
      return status;
    FdCloser closer{fd};
    if (size > kMaxManifestBytes)
      return Status(CQ4P_ERROR_FORMAT,
                    manifestPath + ": size: expected at most " +
                        std::to_string(kMaxManifestBytes) + " bytes, found " +
                        std::to_string(size));
    if (Status status = readWhole(fd, manifestPath, size, text); !status)
      return status;
  }
  json::Value manifest;
  if (Status status = json::parse(manifestPath, text, manifest); !status)
    return status;

  auto refuse = [&](const std::string &message) {
    return Status(CQ4P_ERROR_FORMAT, manifestPath + ": " + message);
  };
  if (manifest.kind != json::Value::Kind::Object)
    return refuse("expected a JSON object at the top");
  const json::Value *format = manifest.get("format");
  if (!format || format->kind != json::Value::Kind::String ||
      format->string != "cq4p-bundle")
    return refuse("format: expected \"cq4p-bundle\"");
  const json::Value *version = manifest.get("version");
  if (!version || !version->isInteger || version->integer != kManifestVersion)
    return refuse("version: expected " + std::to_string(kManifestVersion) +
                  ", found " +
                  (version && version->kind == json::Value::Kind::Number
                       ? std::to_string(version->number)
                       : std::string("none")));
  const json::Value *entries = manifest.get("tensors");
  if (!entries || entries->kind != json::Value::Kind::Array)
    return refuse("tensors: expected an array");

  std::unique_ptr<Bundle> bundle(new Bundle());
  bundle->directory_ = directory;
  bundle->manifestText_ = text;
  if (const json::Value *digest = manifest.get("model_digest")) {
    if (digest->kind != json::Value::Kind::String || digest->string.empty())
      return refuse("model_digest: expected a non-empty string");
    bundle->modelDigest_ = digest->string;
    bundle->hasModelDigest_ = true;
  }
  if (const json::Value *config = manifest.get("config")) {
    if (config->kind != json::Value::Kind::Object)
      return refuse("config: expected an object");
    for (const auto &[key, value] : config->object)
      if (value.isInteger)
        bundle->configIntegers_.emplace_back(key, value.integer);
    const json::Value *text = config->get("text_config");
    if (text == nullptr || text->kind != json::Value::Kind::Object)
      text = config;
    for (const auto &[key, value] : text->object)
      if (value.isInteger)
        bundle->textConfigIntegers_.emplace_back(key, value.integer);
  }
  // tokenizer_files and files_sha256 name files like every other member: plain
  // names inside the bundle (python/cq4p/io/bundle.py _check_shipped_members).
  auto isShippedName = [](const json::Value &name) {
    return name.kind == json::Value::Kind::String && isPlainFileName(name.string) &&
           name.string != "manifest.json";
  };
  const json::Value *tokenizerFiles = manifest.get("tokenizer_files");
  if (tokenizerFiles) {
    if (tokenizerFiles->kind != json::Value::Kind::Array)
      return refuse("tokenizer_files: expected an array of file names");
    for (size_t i = 0; i < tokenizerFiles->array.size(); ++i) {
      const json::Value &name = tokenizerFiles->array[i];
      std::string where = "tokenizer_files[" + std::to_string(i) + "]";
      if (!isShippedName(name))
        return refuse(where + ": expected the name of a file inside the bundle "
                              "(not manifest.json), found " +
                      shownJson(name));
      if (std::find(bundle->tokenizerFiles_.begin(), bundle->tokenizerFiles_.end(),
                    name.string) != bundle->tokenizerFiles_.end())
        return refuse(where + ": " + shownJson(name) + " listed twice");
      bundle->tokenizerFiles_.push_back(name.string);
    }
  }
  if (const json::Value *digests = manifest.get("files_sha256")) {
    if (digests->kind != json::Value::Kind::Object)
      return refuse("files_sha256: expected an object of file names and sha256 "
                    "digests");
    for (const auto &[key, value] : digests->object) {
      json::Value name;
      name.kind = json::Value::Kind::String;
      name.string = key;
      if (!isShippedName(name))
        return refuse("files_sha256: expected the name of a file inside the "
                      "bundle (not manifest.json), found " +
                      shownJson(name));
      if (value.kind != json::Value::Kind::String || !isSha256Hex(value.string))
        return refuse("files_sha256: " + shownJson(name) +
                      ": expected 64 lowercase hex digits");
      bundle->filesSha256_.emplace_back(key, value.string);
    }
    bundle->hasFilesSha256_ = true;
    for (size_t i = 0; i < bundle->tokenizerFiles_.size(); ++i) {
      const std::string &file = bundle->tokenizerFiles_[i];
      if (std::none_of(bundle->filesSha256_.begin(), bundle->filesSha256_.end(),
                       [&](const auto &entry) { return entry.first == file; }))
        return refuse("tokenizer_files[" + std::to_string(i) + "]: " +
                      shownJson(tokenizerFiles->array[i]) +
                      " has no sha256 in files_sha256");
    }
  }
  for (size_t i = 0; i < entries->array.size(); ++i) {
    const json::Value &entry = entries->array[i];
    std::string where = "tensors[" + std::to_string(i) + "]";
    const json::Value *name = entry.get("name");
    const json::Value *file = entry.get("file");
    const json::Value *shape = entry.get("shape");
    const json::Value *dtype = entry.get("dtype");
    if (!name || name->kind != json::Value::Kind::String || name->string.empty())
      return refuse(where + ": expected a non-empty \"name\"");
    where = "tensor '" + name->string + "'";
    if (bundle->find(name->string))
      return refuse(where + ": listed twice");
    if (!file || file->kind != json::Value::Kind::String ||
        !isPlainFileName(file->string))
      return refuse(where + ": expected \"file\" to be a file name inside the "
                            "bundle");
    if (!dtype || dtype->kind != json::Value::Kind::String ||
        (dtype->string != "CQ4" && dtype->string != "FP16" &&
         dtype->string != "FP32"))
      return refuse(where + ": expected \"dtype\" CQ4, FP16 or FP32");
    if (!shape || shape->kind != json::Value::Kind::Array ||
        shape->array.empty() || shape->array.size() > CQ4P_MAX_SHAPE_DIMS)
      return refuse(where + ": expected \"shape\" to list 1 to " +
                    std::to_string(CQ4P_MAX_SHAPE_DIMS) + " dimensions");

    BundleTensor tensor;
    tensor.name = name->string;
    tensor.logicalFile = file->string;
    tensor.dtype = dtype->string;
    for (const json::Value &dim : shape->array) {
      if (!dim.isInteger || dim.integer <= 0)
        return refuse(where + ": expected positive integer dimensions in "
                              "\"shape\"");
      tensor.shape.push_back(static_cast<uint64_t>(dim.integer));
    }
    if (Status status =
            checkPerLayerTable(entry, tensor, manifest.get("config"), refuse, where);
        !status)
      return status;
    const json::Value *sha256 = entry.get("sha256");
    if (sha256 && (sha256->kind != json::Value::Kind::String ||
                   !isSha256Hex(sha256->string)))
      return refuse(where + ": expected \"sha256\" to be 64 lowercase hex "
                            "digits");
    if (sha256)
      tensor.sha256 = sha256->string;
    if (reading == Reading::ManifestOnly) {
      bundle->tensors_.push_back(std::move(tensor));
      continue;
    }

    std::string resolved = resolveIn(directoryFd, tensor.logicalFile);
    if (resolved.empty())
      return Status(CQ4P_ERROR_NOT_FOUND,
                    directory + ": " + where + ": no file for '" +
                        tensor.logicalFile +
                        "' (looked for the .cq4p.weights, .cq4.weights and "
                        "plain names)");
    tensor.resolvedPath = directory + "/" + resolved;
    if (Status status = TensorFile::openAt(directoryFd, resolved,
                                           tensor.resolvedPath, true, tensor.file);
        !status)
      return Status(status.code(), where + ": " + status.message());

    const cq4p_tensor_info &info = tensor.file->info();
    if (tensor.shape.size() != info.ndim ||
        !std::equal(tensor.shape.begin(), tensor.shape.end(), info.dims))
      return Status(CQ4P_ERROR_FORMAT,
                    directory + ": " + where + ": shape " +
                        formatShape(tensor.shape.data(), tensor.shape.size()) +
                        " in manifest.json, but " +
                        formatShape(info.dims, info.ndim) + " in " +
                        tensor.resolvedPath);
    if (tensor.dtype != precisionName(info.precision))
      return Status(CQ4P_ERROR_FORMAT,
                    directory + ": " + where + ": dtype " + tensor.dtype +
                        " in manifest.json, but " +
                        precisionName(info.precision) + " in " +
                        tensor.resolvedPath);
    if (info.precision == CQ4P_PRECISION_CQ4) {
      const json::Value *rotation = entry.get("rotation");
      const char *fileRotation = info.orthogonal ? "orthogonal" : "hadamard";
      if (rotation && (rotation->kind != json::Value::Kind::String ||
                       rotation->string != fileRotation))
        return Status(CQ4P_ERROR_FORMAT,
                      directory + ": " + where + ": rotation '" +
                          rotation->string + "' in manifest.json, but " +
                          fileRotation + " in " + tensor.resolvedPath);
      const json::Value *layout = entry.get("layout");
      if (layout && (layout->kind != json::Value::Kind::String ||
                     layout->string != layoutName(info.layout)))
        return Status(CQ4P_ERROR_FORMAT,
                      directory + ": " + where + ": layout '" +
                          layout->string + "' in manifest.json, but " +
                          layoutName(info.layout) + " in " +
                          tensor.resolvedPath);
    }
    bundle->tensors_.push_back(std::move(tensor));
  }
  out = std::move(bundle);
  return Status::ok();
}

} // namespace cq4p::runtime
