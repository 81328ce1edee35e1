#include "json.h"

#include <cmath>
#include <cstdlib>

namespace opforge::loader {

const Json* Json::find(const std::string& key) const {
  if (type != Type::Object) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

const char* Json::type_name() const {
  switch (type) {
    case Type::Null: return "null";
    case Type::Bool: return "boolean";
    case Type::Number: return integral ? "integer" : "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  bool parse(Json& out, std::string& error) {
    bool ok = value(out, 0);
    if (ok) {
      skip_ws();
      if (pos_ != s_.size()) ok = fail("trailing characters after the JSON value");
    }
    if (!ok) error = where() + ": " + error_;
    return ok;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;

  std::string where() const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return "line " + std::to_string(line) + " col " + std::to_string(col);
  }
  bool fail(const std::string& what) { error_ = what; return false; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return fail(std::string("invalid literal, expected ") + word);
    pos_ += n;
    return true;
  }

  bool value(Json& out, int depth) {
    if (depth > 64) return fail("nesting deeper than 64");
    skip_ws();
    if (pos_ >= s_.size()) return fail("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') { out.type = Json::Type::String; return string(out.string); }
    if (c == 't') { out.type = Json::Type::Bool; out.boolean = true; return literal("true"); }
    if (c == 'f') { out.type = Json::Type::Bool; out.boolean = false; return literal("false"); }
    if (c == 'n') { out.type = Json::Type::Null; return literal("null"); }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    return fail(std::string("unexpected character '") + c + "'");
  }

  bool object(Json& out, int depth) {
    out.type = Json::Type::Object;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return true; }
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
      std::string key;
      if (!string(key)) return false;
      if (out.object.count(key)) return fail("duplicate key \"" + key + "\"");
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      if (!value(out.object[key], depth + 1)) return false;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return true; }
      return fail("expected ',' or '}'");
    }
  }

  bool array(Json& out, int depth) {
    out.type = Json::Type::Array;
    ++pos_;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return true; }
    for (;;) {
      out.array.emplace_back();
      if (!value(out.array.back(), depth + 1)) return false;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return true; }
      return fail("expected ',' or ']'");
    }
  }

  bool string(std::string& out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') { out.push_back(c); continue; }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return fail("short \\u escape");
          unsigned cp = std::strtoul(s_.substr(pos_, 4).c_str(), nullptr, 16);
          pos_ += 4;
          if (cp < 0x80) { out.push_back(static_cast<char>(cp)); }
          else if (cp < 0x800) { out.push_back(static_cast<char>(0xC0 | (cp >> 6))); out.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
          else { out.push_back(static_cast<char>(0xE0 | (cp >> 12))); out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F))); out.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
          break;
        }
        default: return fail(std::string("invalid escape \\") + e);
      }
    }
    return fail("unterminated string");
  }

  bool number(Json& out) {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool integral = true;
    auto digits = [&] { size_t b = pos_; while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_; return pos_ > b; };
    if (!digits()) return fail("invalid number");
    if (pos_ < s_.size() && s_[pos_] == '.') { ++pos_; integral = false; if (!digits()) return fail("invalid number"); }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_; integral = false;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("invalid number");
    }
    out.type = Json::Type::Number;
    out.integral = integral;
    out.number = std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    if (!std::isfinite(out.number)) return fail("number out of range");
    return true;
  }
};

}  // namespace

bool parse_json(const std::string& text, Json& out, std::string& error) {
  out = Json{};
  return Parser(text).parse(out, error);
}

}  // namespace opforge::loader
