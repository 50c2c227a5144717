//===- Json.cpp - manifest.json through nlohmann-json, strictly -----------===//
//
// nlohmann-json reads the document (RFC 8259 syntax, strings checked as
// UTF-8, no comments, numbers outside the double range refused); a SAX
// handler builds the Value tree and adds the rules a bundle needs on top:
// the nesting limit, no duplicate member names, no byte order mark, and the
// whole text well-formed UTF-8 before anything is parsed. Every refusal
// names the line and column.
//
//===----------------------------------------------------------------------===//

#include "Json.h"

#include "cq4p/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
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

/// Line and column (1-based) of byte `offset` of `text`.
std::string lineColumn(const std::string &text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

/// A forward iterator over the text that records, in `*read`, how far
/// nlohmann-json's lexer has read: the handler below reports where a
/// refusal is from it (the library's SAX interface gives no position).
class TrackingIterator {
public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char *;
  using reference = const char &;

  TrackingIterator(const char *at, const char **read) : at_(at), read_(read) {}
  reference operator*() const { return *at_; }
  TrackingIterator &operator++() {
    *read_ = ++at_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackingIterator &other) const {
    return at_ == other.at_;
  }
  bool operator!=(const TrackingIterator &other) const {
    return at_ != other.at_;
  }

private:
  const char *at_;
  const char **read_;
};

/// Builds a Value from nlohmann-json's SAX events, adding what the library
/// does not check: the nesting limit and unique member names. A refusal is
/// kept in `status`, placed at the byte the lexer had read last.
class TreeBuilder {
public:
  using Json = nlohmann::json;

  TreeBuilder(const std::string &what, const std::string &text, Value &root)
      : what_(what), text_(text), root_(root), read_(text.data()) {}

  const char **readPointer() { return &read_; }
  Status status = Status::ok();

  bool null() { return leaf(Value()); }
  bool boolean(bool value) {
    Value leafValue;
    leafValue.kind = Value::Kind::Bool;
    leafValue.boolean = value;
    return leaf(std::move(leafValue));
  }
  bool number_integer(Json::number_integer_t value) {
    return leaf(integer(value, std::to_string(value)));
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    if (value <= uint64_t(INT64_MAX))
      return leaf(integer(int64_t(value), std::to_string(value)));
    // Exact as written (pythonJson), but not an int64.
    Value number;
    number.kind = Value::Kind::Number;
    number.number = double(value);
    number.literal = std::to_string(value);
    return leaf(std::move(number));
  }
  bool number_float(Json::number_float_t value, const std::string &literal) {
    Value number;
    number.kind = Value::Kind::Number;
    number.number = value;
    number.literal = literal;
    return leaf(std::move(number));
  }
  bool string(std::string &value) {
    Value text;
    text.kind = Value::Kind::String;
    text.string = std::move(value);
    return leaf(std::move(text));
  }
  bool binary(Json::binary_t &) { return refuse("binary value"); }
  bool start_object(std::size_t) { return open(Value::Kind::Object); }
  bool key(std::string &name) {
    // Readers that took the first or the last of two equal names would act
    // on different files; RFC 8259 leaves it open, so it is refused.
    if (!names_.back().insert(name).second)
      return refuse("duplicate member name \"" + name + "\"",
                    openingQuoteBefore(read_));
    open_.back()->object.emplace_back(std::move(name), Value());
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(Value::Kind::Array); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &error) {
    // "[json.exception.parse_error.101] parse error at line 2, column 16:
    // syntax error ..." -> "syntax error ...": the place is said once.
    std::string message = error.what();
    if (size_t tag = message.find("] "); tag != std::string::npos)
      message.erase(0, tag + 2);
    if (message.rfind("parse error", 0) == 0)
      if (size_t colon = message.find(": "); colon != std::string::npos)
        message.erase(0, colon + 2);
    if (status)
      refuse(message);
    return false;
  }

private:
  /// Where the next value goes: the root, the last member or a new element.
  Value *slot() {
    if (open_.empty())
      return &root_;
    Value *parent = open_.back();
    if (parent->kind == Value::Kind::Object)
      return &parent->object.back().second;
    parent->array.emplace_back();
    return &parent->array.back();
  }
  bool deeperThanAllowed() {
    if (open_.size() <= size_t(CQ4P_MAX_MANIFEST_NESTING))
      return false;
    refuse("nesting deeper than " + std::to_string(CQ4P_MAX_MANIFEST_NESTING));
    return true;
  }
  bool leaf(Value value) {
    if (deeperThanAllowed())
      return false;
    *slot() = std::move(value);
    return true;
  }
  bool open(Value::Kind kind) {
    if (deeperThanAllowed())
      return false;
    Value *container = slot();
    container->kind = kind;
    open_.push_back(container);
    names_.emplace_back();
    return true;
  }
  bool close() {
    open_.pop_back();
    names_.pop_back();
    return true;
  }
  /// The opening quote of the string token that ends just before `end`.
  const char *openingQuoteBefore(const char *end) const {
    const char *begin = text_.data();
    for (const char *at = end - 2; at >= begin; --at) {
      if (*at != '"')
        continue;
      size_t backslashes = 0;
      while (at - backslashes > begin && at[-1 - std::ptrdiff_t(backslashes)] == '\\')
        ++backslashes;
      if (backslashes % 2 == 0)
        return at;
    }
    return begin;
  }
  bool refuse(const std::string &message) {
    // The last byte read is the one that made the document invalid.
    return refuse(message, read_ > text_.data() ? read_ - 1 : read_);
  }
  bool refuse(const std::string &message, const char *at) {
    status = Status(CQ4P_ERROR_FORMAT,
                    what_ + ":" + lineColumn(text_, size_t(at - text_.data())) +
                        ": invalid JSON: " + message);
    return false;
  }
  static Value integer(int64_t value, std::string literal) {
    Value number;
    number.kind = Value::Kind::Number;
    number.number = double(value);
    number.isInteger = true;
    number.integer = value;
    number.literal = std::move(literal);
    return number;
  }

  const std::string &what_;
  const std::string &text_;
  Value &root_;
  const char *read_;
  std::vector<Value *> open_;
  std::vector<std::set<std::string>> names_;
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
  // nlohmann-json skips a byte order mark; RFC 8259 forbids one, and
  // Python's json.loads refuses it.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0)
    return Status(CQ4P_ERROR_FORMAT,
                  what + ":1:1: invalid JSON: a UTF-8 byte order mark");
  TreeBuilder builder(what, text, out);
  const char *begin = text.data(), *end = begin + text.size();
  bool parsed = nlohmann::json::sax_parse(
      TrackingIterator(begin, builder.readPointer()),
      TrackingIterator(end, builder.readPointer()), &builder);
  if (!builder.status)
    return builder.status;
  if (!parsed)
    return Status(CQ4P_ERROR_FORMAT, what + ": invalid JSON");
  return Status::ok();
}

} // namespace cq4p::runtime::json
