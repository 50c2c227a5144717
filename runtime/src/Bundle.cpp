//===- Bundle.cpp - reading a bundle --------------------------------------===//

#include "cq4p/runtime/Bundle.h"

#include "Json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace cq4p::runtime {
namespace {

bool isRegularFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string formatShape(const uint64_t *dims, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
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

/// A manifest file name must stay inside the bundle directory.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name != "." && name != "..";
}

} // namespace

std::string Bundle::resolveWeightFile(const std::string &directory,
                                      const std::string &logicalFile) {
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
  for (const std::string &candidate : candidates) {
    std::string path = directory + "/" + candidate;
    if (isRegularFile(path))
      return path;
  }
  return "";
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

Status Bundle::open(const std::string &directory, std::unique_ptr<Bundle> &out) {
  out.reset();
  std::string manifestPath = directory + "/manifest.json";
  std::ifstream stream(manifestPath, std::ios::binary);
  if (!stream)
    return Status(CQ4P_ERROR_NOT_FOUND,
                  manifestPath + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << stream.rdbuf();
  json::Value manifest;
  if (Status status = json::parse(manifestPath, text.str(), manifest); !status)
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
        shape->array.empty() || shape->array.size() > 8)
      return refuse(where + ": expected \"shape\" to list 1 to 8 dimensions");

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

    tensor.resolvedPath = resolveWeightFile(directory, tensor.logicalFile);
    if (tensor.resolvedPath.empty()) {
      std::string stem = tensor.logicalFile;
      return Status(CQ4P_ERROR_NOT_FOUND,
                    directory + ": " + where + ": no file for '" +
                        tensor.logicalFile +
                        "' (looked for the .cq4p.weights, .cq4.weights and "
                        "plain names)");
    }
    if (Status status = TensorFile::open(tensor.resolvedPath, tensor.file);
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
