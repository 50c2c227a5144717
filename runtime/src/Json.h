//===- Json.h - manifest.json as a tree, strictly ---------------*- C++ -*-===//
//
// A bundle manifest read by nlohmann-json into a small tree, strictly:
// RFC 8259 syntax, well-formed UTF-8, a nesting limit (format.h's
// CQ4P_MAX_MANIFEST_NESTING), no duplicate member names, integers kept exact
// up to 2^63 and every number's text as written (for pythonJson). Errors
// are Status values naming the line and column.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_RUNTIME_SRC_JSON_H
#define CQ4P_RUNTIME_SRC_JSON_H

#include "cq4p/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cq4p::runtime::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  bool isInteger = false; // an integral literal that fits int64
  int64_t integer = 0;
  std::string literal; // a number's text as written (pythonJson spells it)
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;

  /// The member named `key` of an object, or null.
  const Value *get(const std::string &key) const;
};

/// Parses `text`; `what` names the document in messages.
Status parse(const std::string &what, const std::string &text, Value &out);

/// `value` as Python's `json.dumps(value, sort_keys=True, separators=(",",
/// ":"), ensure_ascii=True)` writes the value `json.loads` reads from the
/// same text: members sorted by name (code points: UTF-8 byte order), no
/// whitespace, every character outside printable ASCII a \u escape
/// (surrogate pairs past U+FFFF), integers as written (any size), other
/// numbers in Python's shortest round-trip repr (`1e-05`, `500000.0`,
/// `Infinity` for a literal past the double range). The manifest's
/// model_digest is the sha256 of such a text (python/cq4p/io/bundle.py).
std::string pythonJson(const Value &value);

} // namespace cq4p::runtime::json

#endif // CQ4P_RUNTIME_SRC_JSON_H
