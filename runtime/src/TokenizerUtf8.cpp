//===- TokenizerUtf8.cpp - UTF-8 and GPT-2's byte map ---------------------===//

#include "TokenizerInternal.h"

namespace cq4p::runtime {
namespace tokenizer_internal {

//===----------------------------------------------------------------------===//
// UTF-8
//===----------------------------------------------------------------------===//

/// Decodes one valid code point at text[i] (the text was validated).
uint32_t decodeAt(std::string_view text, size_t i, size_t &length) {
  unsigned char c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    length = 1;
    return c;
  }
  if (c < 0xE0) {
    length = 2;
    return (uint32_t(c & 0x1F) << 6) | (uint32_t(text[i + 1]) & 0x3F);
  }
  if (c < 0xF0) {
    length = 3;
    return (uint32_t(c & 0x0F) << 12) | ((uint32_t(text[i + 1]) & 0x3F) << 6) |
           (uint32_t(text[i + 2]) & 0x3F);
  }
  length = 4;
  return (uint32_t(c & 0x07) << 18) | ((uint32_t(text[i + 1]) & 0x3F) << 12) |
         ((uint32_t(text[i + 2]) & 0x3F) << 6) | (uint32_t(text[i + 3]) & 0x3F);
}

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

/// The UTF-8 sequence at bytes[i]: how long its lead byte says it is (0 for
/// a byte that cannot lead) and how many of its bytes are valid so far (the
/// lead and the continuation bytes that follow it correctly).
void inspectSequence(std::string_view bytes, size_t i, int &expected,
                     int &matched) {
  unsigned char c = static_cast<unsigned char>(bytes[i]);
  matched = 1;
  unsigned char low = 0x80, high = 0xBF;
  if (c < 0x80) {
    expected = 1;
    return;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    expected = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    expected = 3;
    low = c == 0xE0 ? 0xA0 : 0x80;
    high = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    expected = 4;
    low = c == 0xF0 ? 0x90 : 0x80;
    high = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    expected = 0;
    return;
  }
  while (matched < expected && i + size_t(matched) < bytes.size()) {
    unsigned char next = static_cast<unsigned char>(bytes[i + size_t(matched)]);
    if (next < (matched == 1 ? low : 0x80) || next > (matched == 1 ? high : 0xBF))
      return;
    ++matched;
  }
}

//===----------------------------------------------------------------------===//
// GPT-2's byte-to-character map
//===----------------------------------------------------------------------===//

const ByteMap &byteMap() {
  static const ByteMap map;
  return map;
}

} // namespace tokenizer_internal

} // namespace cq4p::runtime
