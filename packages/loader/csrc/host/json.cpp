#include "json.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "text.h"

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

using nlohmann::json;

bool is_integral_text(const std::string& s) { return s.find_first_of(".eE") == std::string::npos; }

// Builds a Json tree from nlohmann's SAX events. Returning false stops the parser at once.
class TreeBuilder final : public nlohmann::json_sax<json> {
 public:
  explicit TreeBuilder(Json& root) : root_(root) {}
  const std::string& error() const { return error_; }
  size_t error_position() const { return error_position_; }
  bool has_position() const { return has_position_; }

  bool null() override { return add(Json{}); }
  bool boolean(bool v) override {
    Json j;
    j.type = Json::Type::Bool;
    j.boolean = v;
    return add(std::move(j));
  }
  bool number_integer(number_integer_t v) override { return add(integer(std::to_string(v), true, v)); }
  bool number_unsigned(number_unsigned_t v) override {
    const bool fits = v <= static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max());
    return add(integer(std::to_string(v), fits, fits ? static_cast<int64_t>(v) : 0));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (!std::isfinite(v)) return fail("number " + printable(text) + " is out of range (not finite as a double)");
    // An integer literal beyond 64 bits arrives here; its text is kept so messages can show it.
    Json j = integer(text, false, 0);
    j.integral = is_integral_text(text);
    return add(std::move(j));
  }
  bool string(string_t& v) override {
    Json j;
    j.type = Json::Type::String;
    j.string = std::move(v);
    return add(std::move(j));
  }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return open(Json::Type::Object); }
  bool key(string_t& k) override {
    Json& obj = *stack_.back();
    if (obj.object.count(k)) return fail("duplicate key \"" + printable(k) + "\"");
    pending_key_ = &obj.object[k];
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::Type::Array); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& ex) override {
    error_position_ = token_start(position, last_token);
    has_position_ = true;
    return fail(reason_of(ex.what()));
  }

 private:
  Json& root_;
  std::vector<Json*> stack_;
  Json* pending_key_ = nullptr;
  bool have_root_ = false;
  size_t values_ = 0;
  std::string error_;
  size_t error_position_ = 0;
  bool has_position_ = false;

  static Json integer(const std::string& text, bool fits, int64_t v) {
    Json j;
    j.type = Json::Type::Number;
    j.string = text;
    j.integral = true;
    j.fits_int64 = fits;
    j.integer = v;
    return j;
  }

  // nlohmann reports how many bytes it read; messages point at the first byte of the offending
  // token instead ("line 1 col 2" for `{not json`), as the reader before it did. The token text
  // may start with the structural character before it and shows control bytes as <U+XXXX>.
  static size_t token_start(size_t bytes_read, const std::string& token) {
    size_t i = token.find_first_not_of("{[,: \t\r\n");
    size_t length = 0;
    while (i != std::string::npos && i < token.size()) {
      i += token.compare(i, 3, "<U+") == 0 && i + 8 <= token.size() ? 8 : 1;
      ++length;
    }
    return length == 0 ? bytes_read : bytes_read - std::min(bytes_read, length - 1) - 1;
  }

  // nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: what": keep what.
  static std::string reason_of(std::string what) {
    if (!what.empty() && what[0] == '[' && what.find("] ") != std::string::npos) what.erase(0, what.find("] ") + 2);
    const size_t column = what.find(", column ");
    const size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
    if (colon != std::string::npos) what.erase(0, colon + 2);
    return printable(what, 240, /*escape_quotes=*/false);
  }

  bool fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return false;
  }

  // Places a finished value: the root, the next array element or the value of the pending key.
  Json* place(Json&& v) {
    if (++values_ > kMaxJsonValues) {
      fail("more than " + std::to_string(kMaxJsonValues) + " values");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      have_root_ = true;
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.type == Json::Type::Array) {
      parent.array.push_back(std::move(v));
      return &parent.array.back();
    }
    *pending_key_ = std::move(v);
    return pending_key_;
  }
  bool add(Json&& v) { return place(std::move(v)) != nullptr; }

  bool open(Json::Type type) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth))
      return fail("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    Json j;
    j.type = type;
    Json* placed = place(std::move(j));
    if (!placed) return false;
    stack_.push_back(placed);
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
};

// "line L col C" (both 1-based) of the byte at offset (0-based; the end of the text allowed).
std::string where(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + " col " + std::to_string(offset - line_start + 1);
}

}  // namespace

bool parse_json(const std::string& text, Json& out, std::string& error) {
  out = Json{};
  if (text.size() > kMaxJsonBytes) {
    error = "larger than " + std::to_string(kMaxJsonBytes) + " bytes (" + std::to_string(text.size()) + ")";
    return false;
  }
  // nlohmann reads a NUL byte as the end of input: `{...}\0junk` would pass as `{...}`.
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    error = where(text, nul) + ": a NUL byte (never valid in JSON text; inside a string write \\u0000)";
    return false;
  }
  TreeBuilder builder(out);
  try {
    if (json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true)) return true;
    error = builder.has_position() ? where(text, builder.error_position()) + ": " + builder.error() : builder.error();
  } catch (const std::exception& e) {
    error = std::string("cannot parse: ") + e.what();
  }
  out = Json{};
  return false;
}

}  // namespace opforge::loader
