//===- Json.cpp - a small strict JSON reader ------------------------------===//

#include "Json.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace cq4p::runtime::json {

const Value *Value::get(const std::string &key) const {
  if (kind != Kind::Object)
    return nullptr;
  for (const auto &member : object)
    if (member.first == key)
      return &member.second;
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
  Parser(const std::string &what, const std::string &text)
      : what_(what), text_(text) {}

  Status document(Value &out) {
    if (Status status = value(out, 0); !status)
      return status;
    skipSpace();
    if (pos_ != text_.size())
      return error("unexpected text after the document");
    return Status::ok();
  }

private:
  Status error(const std::string &message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return Status(CQ4P_ERROR_FORMAT, what_ + ":" + std::to_string(line) + ":" +
                                         std::to_string(column) +
                                         ": invalid JSON: " + message);
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(const char *literal) {
    size_t length = std::char_traits<char>::length(literal);
    if (text_.compare(pos_, length, literal) != 0)
      return false;
    pos_ += length;
    return true;
  }

  Status value(Value &out, int depth) {
    if (depth > kMaxDepth)
      return error("nesting deeper than " + std::to_string(kMaxDepth));
    skipSpace();
    if (pos_ >= text_.size())
      return error("unexpected end of input");
    char c = text_[pos_];
    if (c == '{')
      return objectValue(out, depth);
    if (c == '[')
      return arrayValue(out, depth);
    if (c == '"') {
      out.kind = Value::Kind::String;
      return stringValue(out.string);
    }
    if (consume("true")) {
      out.kind = Value::Kind::Bool;
      out.boolean = true;
      return Status::ok();
    }
    if (consume("false")) {
      out.kind = Value::Kind::Bool;
      return Status::ok();
    }
    if (consume("null")) {
      out.kind = Value::Kind::Null;
      return Status::ok();
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return numberValue(out);
    return error(std::string("unexpected character '") + c + "'");
  }

  Status objectValue(Value &out, int depth) {
    out.kind = Value::Kind::Object;
    std::set<std::string> names;
    ++pos_;
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return Status::ok();
    }
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return error("expected a member name");
      std::string key;
      size_t keyStart = pos_;
      if (Status status = stringValue(key); !status)
        return status;
      // Readers that took the first or the last of two equal names would
      // act on different files; RFC 8259 leaves it open, so it is refused.
      if (!names.insert(key).second) {
        pos_ = keyStart;
        return error("duplicate member name \"" + key + "\"");
      }
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return error("expected ':'");
      ++pos_;
      Value member;
      if (Status status = value(member, depth + 1); !status)
        return status;
      out.object.emplace_back(std::move(key), std::move(member));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return Status::ok();
      }
      return error("expected ',' or '}'");
    }
  }

  Status arrayValue(Value &out, int depth) {
    out.kind = Value::Kind::Array;
    ++pos_;
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    while (true) {
      Value element;
      if (Status status = value(element, depth + 1); !status)
        return status;
      out.array.push_back(std::move(element));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return error("expected ',' or ']'");
    }
  }

  static void appendUtf8(std::string &out, uint32_t code) {
    if (code < 0x80) {
      out += char(code);
    } else if (code < 0x800) {
      out += char(0xC0 | (code >> 6));
      out += char(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += char(0xE0 | (code >> 12));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    } else {
      out += char(0xF0 | (code >> 18));
      out += char(0x80 | ((code >> 12) & 0x3F));
      out += char(0x80 | ((code >> 6) & 0x3F));
      out += char(0x80 | (code & 0x3F));
    }
  }

  bool hex4(uint32_t &code) {
    if (pos_ + 4 > text_.size())
      return false;
    code = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9')
        code |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f')
        code |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        code |= uint32_t(h - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  Status stringValue(std::string &out) {
    ++pos_; // opening quote
    while (pos_ < text_.size()) {
      unsigned char c = static_cast<unsigned char>(text_[pos_++]);
      if (c == '"')
        return Status::ok();
      if (c < 0x20)
        return error("control character in a string");
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (pos_ >= text_.size())
        break;
      char escape = text_[pos_++];
      switch (escape) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t code;
        if (!hex4(code))
          return error("bad \\u escape");
        if (code >= 0xD800 && code < 0xDC00) {
          uint32_t low;
          if (!consume("\\u") || !hex4(low) || low < 0xDC00 || low >= 0xE000)
            return error("unpaired surrogate in \\u escape");
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code < 0xE000) {
          return error("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, code);
        break;
      }
      default:
        return error(std::string("bad escape '\\") + escape + "'");
      }
    }
    return error("unterminated string");
  }

  Status numberValue(Value &out) {
    size_t start = pos_;
    bool integral = true;
    if (text_[pos_] == '-')
      ++pos_;
    if (pos_ >= text_.size())
      return error("bad number");
    if (text_[pos_] == '0') {
      ++pos_;
    } else if (text_[pos_] >= '1' && text_[pos_] <= '9') {
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
    } else {
      return error("bad number");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      size_t digits = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      if (pos_ == digits)
        return error("bad number");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      size_t digits = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      if (pos_ == digits)
        return error("bad number");
    }
    std::string literal = text_.substr(start, pos_ - start);
    out.kind = Value::Kind::Number;
    out.number = std::strtod(literal.c_str(), nullptr);
    out.literal = literal;
    if (integral) {
      errno = 0;
      long long parsed = std::strtoll(literal.c_str(), nullptr, 10);
      if (errno == 0) {
        out.isInteger = true;
        out.integer = parsed;
      }
    }
    return Status::ok();
  }

  const std::string &what_;
  const std::string &text_;
  size_t pos_ = 0;
};

/// The offset of the first byte that is not part of well-formed UTF-8
/// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF),
/// or text.size().
size_t firstInvalidUtf8(const std::string &text) {
  size_t i = 0, size = text.size();
  while (i < size) {
    auto byte = [&](size_t at) { return static_cast<unsigned char>(text[at]); };
    unsigned char lead = byte(i);
    size_t length;
    unsigned char low = 0x80, high = 0xBF; // the second byte's range
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + length > size || byte(i + 1) < low || byte(i + 1) > high)
      return i;
    for (size_t k = 2; k < length; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF)
        return i;
    i += length;
  }
  return size;
}

/// Python's repr of a finite double: the shortest digits that read back
/// as it, fixed notation for a decimal exponent in [-4, 16), else d.ddde+XX.
std::string pythonFloat(double value) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value < 0 ? "-Infinity" : "Infinity";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value,
                              std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.')
      digits += c;
  // value = 0.digits * 10^point
  int point = exponent + 1;
  if (point > -4 && point <= 16) {
    std::string out;
    if (point <= 0) {
      out = "0." + std::string(size_t(-point), '0') + digits;
    } else if (size_t(point) >= digits.size()) {
      out = digits + std::string(size_t(point) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1)
    out += "." + digits.substr(1);
  char power[16];
  std::snprintf(power, sizeof(power), "e%c%02d", exponent < 0 ? '-' : '+',
                exponent < 0 ? -exponent : exponent);
  return sign + out + power;
}

void appendEscape(std::string &out, uint32_t unit) {
  char escape[8];
  std::snprintf(escape, sizeof(escape), "\\u%04x", unsigned(unit));
  out += escape;
}

/// A parsed (so well-formed UTF-8) string, quoted with ensure_ascii.
void appendPythonString(std::string &out, const std::string &text) {
  out += '"';
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    uint32_t code;
    size_t length = byte < 0x80 ? 1 : byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
    code = length == 1 ? byte
           : length == 2 ? byte & 0x1F
           : length == 3 ? byte & 0x0F
                         : byte & 0x07;
    for (size_t k = 1; k < length && i + k < text.size(); ++k)
      code = (code << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    i += length;
    switch (code) {
    case '"': out += "\\\""; continue;
    case '\\': out += "\\\\"; continue;
    case '\n': out += "\\n"; continue;
    case '\r': out += "\\r"; continue;
    case '\t': out += "\\t"; continue;
    case '\b': out += "\\b"; continue;
    case '\f': out += "\\f"; continue;
    default: break;
    }
    if (code >= 0x20 && code < 0x7F) {
      out += char(code);
    } else if (code < 0x10000) {
      appendEscape(out, code);
    } else {
      code -= 0x10000;
      appendEscape(out, 0xD800 | (code >> 10));
      appendEscape(out, 0xDC00 | (code & 0x3FF));
    }
  }
  out += '"';
}

void appendPythonJson(std::string &out, const Value &value) {
  switch (value.kind) {
  case Value::Kind::Null: out += "null"; return;
  case Value::Kind::Bool: out += value.boolean ? "true" : "false"; return;
  case Value::Kind::Number:
    if (value.literal.find_first_of(".eE") == std::string::npos)
      // Python reads an integral literal as an int of any size.
      out += value.literal == "-0" ? std::string("0") : value.literal;
    else
      out += pythonFloat(value.number);
    return;
  case Value::Kind::String: appendPythonString(out, value.string); return;
  case Value::Kind::Array:
    out += '[';
    for (size_t i = 0; i < value.array.size(); ++i) {
      if (i)
        out += ',';
      appendPythonJson(out, value.array[i]);
    }
    out += ']';
    return;
  case Value::Kind::Object: {
    std::vector<const std::pair<std::string, Value> *> members;
    for (const auto &member : value.object)
      members.push_back(&member);
    std::sort(members.begin(), members.end(), [](const auto *a, const auto *b) {
      return a->first < b->first;
    });
    out += '{';
    for (size_t i = 0; i < members.size(); ++i) {
      if (i)
        out += ',';
      appendPythonString(out, members[i]->first);
      out += ':';
      appendPythonJson(out, members[i]->second);
    }
    out += '}';
    return;
  }
  }
}

} // namespace

std::string pythonJson(const Value &value) {
  std::string out;
  appendPythonJson(out, value);
  return out;
}

Status parse(const std::string &what, const std::string &text, Value &out) {
  out = Value();
  // RFC 8259 documents are UTF-8; a reader that let other bytes through
  // would hand names to the file system that another reader refuses.
  if (size_t bad = firstInvalidUtf8(text); bad != text.size())
    return Status(CQ4P_ERROR_FORMAT, what + ": invalid JSON: not UTF-8 at byte " +
                                         std::to_string(bad));
  return Parser(what, text).document(out);
}

} // namespace cq4p::runtime::json
