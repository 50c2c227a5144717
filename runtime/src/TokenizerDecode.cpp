//===- TokenizerDecode.cpp - the decoder and streamed text ----------------===//

#include "TokenizerInternal.h"

namespace cq4p::runtime {

Status Tokenizer::Impl::loadDecoder(const Json &decoder, const std::string &path) {
  if (isAbsent(&decoder))
    return unsupported(file, path, "no decoder", "ByteLevel or a Sequence of "
                                                 "Replace, ByteFallback, Fuse, Strip");
  std::string type;
  if (Status s = getString(file, decoder, "type", path, type, true); !s)
    return s;
  std::vector<std::pair<std::string, std::string>> replaces;
  bool byteFallbackDecode = false;
  auto one = [&](const Json &step, const std::string &stepPath) -> Status {
    std::string stepType;
    if (Status s = getString(file, step, "type", stepPath, stepType, true); !s)
      return s;
    if (stepType == "ByteLevel") {
      if (kind != TokenizerKind::ByteLevelBpe)
        return unsupported(file, stepPath + ".type", "ByteLevel without a ByteLevel "
                                                     "pre-tokenizer", "both or neither");
      return Status::ok();
    }
    if (kind == TokenizerKind::ByteLevelBpe)
      return unsupported(file, stepPath + ".type", showText(stepType) +
                                                       " after a ByteLevel pre-tokenizer",
                         "the ByteLevel decoder");
    if (stepType == "Replace") {
      std::string literal, regex, content;
      if (Status s = getPattern(file, step, stepPath, literal, regex); !s)
        return s;
      if (!regex.empty())
        return unsupported(file, stepPath + ".pattern.Regex", showText(regex),
                           "Replace with a String pattern");
      if (Status s = getString(file, step, "content", stepPath, content, true); !s)
        return s;
      replaces.emplace_back(literal, content);
      return Status::ok();
    }
    if (stepType == "ByteFallback") {
      byteFallbackDecode = true;
      return Status::ok();
    }
    if (stepType == "Fuse")
      return Status::ok();
    if (stepType == "Strip") {
      std::string content;
      if (Status s = getString(file, step, "content", stepPath, content, true); !s)
        return s;
      const Json *start = member(step, "start");
      const Json *stop = member(step, "stop");
      if (content != " " || start == nullptr || !start->is_number_unsigned() ||
          start->get<uint64_t>() > 8 || stop == nullptr ||
          !stop->is_number_unsigned() || stop->get<uint64_t>() != 0)
        return unsupported(file, stepPath, "Strip " + showJson(step),
                           "Strip of up to 8 leading spaces");
      stripLeadingSpaces = size_t(start->get<uint64_t>());
      return Status::ok();
    }
    return unsupported(file, stepPath + ".type", showText(stepType),
                       "the decoders ByteLevel, Replace (String), ByteFallback, "
                       "Fuse, Strip and Sequence");
  };
  if (type == "Sequence") {
    const Json *list = member(decoder, "decoders");
    if (list == nullptr || !list->is_array())
      return malformed(file, path + ".decoders", "an array",
                       list ? typeName(*list) : "nothing");
    if (list->size() > CQ4P_TOKENIZER_MAX_STEPS)
      return tooManySteps(file, path + ".decoders", "decoder");
    for (size_t i = 0; i < list->size(); ++i)
      if (Status s = one((*list)[i], path + ".decoders[" + std::to_string(i) + "]"); !s)
        return s;
  } else if (Status s = one(decoder, path); !s) {
    return s;
  }
  buildDecoded(replaces, byteFallbackDecode);
  return Status::ok();
}

void Tokenizer::Impl::buildDecoded(
    const std::vector<std::pair<std::string, std::string>> &replaces,
    bool byteFallbackDecode) {
  decoded.assign(pieces.size(), std::string());
  isByteFallbackPiece.assign(pieces.size(), 0);
  const ByteMap &map = byteMap();
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string &piece = pieces[id];
    std::string &out = decoded[id];
    if (kind == TokenizerKind::ByteLevelBpe) {
      // Every character through the byte map; a piece with a character
      // outside it (an added token's text) stays as it is.
      bool mapped = true;
      for (size_t i = 0; i < piece.size() && mapped;) {
        size_t length;
        uint32_t cp = decodeAt(piece, i, length);
        auto it = map.byteOf.find(cp);
        if (it == map.byteOf.end())
          mapped = false;
        else
          out += char(it->second);
        i += length;
      }
      if (!mapped)
        out = piece;
      continue;
    }
    if (byteFallbackDecode && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 &&
        piece[5] == '>' && std::isxdigit(static_cast<unsigned char>(piece[3])) &&
        std::isxdigit(static_cast<unsigned char>(piece[4]))) {
      out += char(std::stoi(piece.substr(3, 2), nullptr, 16));
      isByteFallbackPiece[id] = 1;
      continue;
    }
    out = piece;
    for (const auto &[from, to] : replaces) {
      std::string replaced;
      size_t at = 0;
      for (size_t found; (found = out.find(from, at)) != std::string::npos;
           at = found + from.size())
        replaced.append(out, at, found - at).append(to);
      replaced.append(out, at, std::string::npos);
      out.swap(replaced);
    }
  }
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

size_t findInvalidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    int expected, matched;
    inspectSequence(text, i, expected, matched);
    if (expected == 0 || matched != expected)
      return i;
    i += size_t(matched);
  }
  return std::string_view::npos;
}

size_t appendUtf8Lossy(std::string_view bytes, bool final, std::string &text) {
  size_t i = 0;
  while (i < bytes.size()) {
    int expected, matched;
    inspectSequence(bytes, i, expected, matched);
    if (expected > 0 && matched == expected) {
      text.append(bytes.substr(i, size_t(matched)));
      i += size_t(matched);
      continue;
    }
    if (expected > 0 && i + size_t(matched) == bytes.size() && !final)
      return bytes.size() - i; // held until the character completes
    // A maximal invalid subpart is one U+FFFD, as Hugging Face's (Rust's
    // from_utf8_lossy) decoding does.
    text += "\xEF\xBF\xBD";
    i += size_t(std::max(matched, 1));
  }
  return 0;
}

Status TextDecoder::push(int64_t id, std::string &text) {
  const Tokenizer::Impl &impl = *tokenizer_->impl_;
  if (id < 0 || id >= impl.size || impl.pieces[size_t(id)].empty())
    return Status(CQ4P_ERROR_ARGUMENT,
                  "decode: id " + std::to_string(id) + " is not in the vocabulary (size " +
                      std::to_string(impl.size) + ")");
  pending_ += impl.decoded[size_t(id)];
  emit(text, false);
  return Status::ok();
}

void TextDecoder::emit(std::string &text, bool final) {
  const Tokenizer::Impl &impl = *tokenizer_->impl_;
  if (!started_) {
    // Strip: the decoder's leading spaces, once per sequence.
    size_t strip = 0;
    while (strip < impl.stripLeadingSpaces && strip < pending_.size() &&
           pending_[strip] == ' ')
      ++strip;
    if (strip == pending_.size() && strip < impl.stripLeadingSpaces && !final) {
      return; // more spaces may come
    }
    pending_.erase(0, strip);
    if (pending_.empty() && !final)
      return;
    started_ = true;
  }
  size_t held = appendUtf8Lossy(pending_, final, text);
  pending_.erase(0, pending_.size() - held);
}

void TextDecoder::finish(std::string &text) {
  emit(text, true);
  pending_.clear();
}

void TextDecoder::reset() {
  pending_.clear();
  started_ = false;
}

} // namespace cq4p::runtime
