//===- InputNesting.h - a nesting bound on what the tools parse -*- C++ -*-===//
//
// MLIR's parser and llvm::json descend recursively, a chain of stack frames
// per level of nesting: ~10^4 nested attribute arrays, regions or types
// overflow a thread's stack, and the tool dies with a signal instead of a
// diagnostic. cq4p-opt and cq4p-compile therefore scan the text they were
// given, once, before any parser sees it, and refuse nesting beyond a bound
// that real inputs never come near (docs/TRUST.md):
//
//  - textual IR: (), [], {} and <> outside string literals and `//`
//    comments. A converted model.mlir nests at most 4 deep (Gemma 4), its
//    planned steps (--cq4p-lower-model) 7, the pipelines' output 5; nested
//    modules, the costliest, take ~2.8 KiB of stack per level (an 8 MiB
//    stack overflows between 2000 and 4000), so 256 levels need under
//    1 MiB. A '>' of `->` or `>=` closes nothing, and a closer that does not
//    match the innermost opener is skipped, so the scan never counts
//    shallower than the parser.
//  - JSON: [] and {} outside strings, bounded like the runtime's manifest
//    reader (runtime/src/Json.cpp, 64 levels).
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_TOOLS_INPUTNESTING_H
#define CQ4P_TOOLS_INPUTNESTING_H

#include "cq4p/format.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <string>

#include <cstddef>
#include <optional>

namespace mlir::cq4p {

/// The deepest nesting of brackets the tools parse in textual IR.
constexpr unsigned kMaxIrNesting = 256;
/// The deepest nesting of a manifest.json (format.h).
constexpr unsigned kMaxJsonNesting = CQ4P_MAX_MANIFEST_NESTING;

/// The offset of the first opening bracket of `text` that lies deeper than
/// `bound` levels, or nullopt when none does. `json` selects JSON's brackets
/// and strings, else MLIR's.
inline std::optional<size_t> findNestingPast(llvm::StringRef text,
                                             unsigned bound, bool json) {
  llvm::SmallVector<char, 64> open;
  size_t size = text.size();
  for (size_t i = 0; i < size; ++i) {
    char c = text[i];
    if (c == '"') {
      // A string literal: to its closing quote, over escapes (or to the end
      // of the line in MLIR, where the lexer ends an unterminated string).
      for (++i; i < size && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (!json && text[i] == '\n')
          break;
      }
      continue;
    }
    if (!json && c == '/' && i + 1 < size && text[i + 1] == '/') {
      while (i < size && text[i] != '\n')
        ++i;
      continue;
    }
    char closer = 0;
    switch (c) {
    case '[': closer = ']'; break;
    case '{': closer = '}'; break;
    case '(': closer = json ? 0 : ')'; break;
    case '<': closer = json ? 0 : '>'; break;
    default: break;
    }
    if (closer != 0) {
      if (open.size() >= bound)
        return i;
      open.push_back(closer);
      continue;
    }
    if (c == '>' && !json &&
        ((i > 0 && text[i - 1] == '-') || (i + 1 < size && text[i + 1] == '=')))
      continue;
    if (!open.empty() && c == open.back())
      open.pop_back();
  }
  return std::nullopt;
}

/// The diagnostic for IR nested past kMaxIrNesting at `offset` of `text`:
/// "<name>:<line>:<column>: error: ..." (no source line: it may be
/// megabytes long).
inline std::string describeIrNestingPast(llvm::StringRef name,
                                         llvm::StringRef text, size_t offset) {
  llvm::StringRef before = text.take_front(offset);
  size_t line = before.count('\n') + 1;
  size_t lineStart = before.rfind('\n');
  size_t column = offset - (lineStart == llvm::StringRef::npos ? 0 : lineStart + 1) + 1;
  return (name + ":" + llvm::Twine(line) + ":" + llvm::Twine(column) +
          ": error: nesting deeper than " + llvm::Twine(kMaxIrNesting) +
          " levels of (), [], {} and <>; refused before parsing")
      .str();
}

} // namespace mlir::cq4p

#endif // CQ4P_TOOLS_INPUTNESTING_H
