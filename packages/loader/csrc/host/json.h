// Manifest JSON: parsed by nlohmann-json (RFC 8259, UTF-8 checked) through a SAX handler that
// bounds size, nesting and value count, refuses duplicate keys and keeps each number's own text.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace opforge::loader {

constexpr size_t kMaxJsonBytes = size_t(1) << 20;  // a manifest is a few hundred bytes
constexpr int kMaxJsonDepth = 32;
constexpr size_t kMaxJsonValues = 100000;

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  std::string string;       // String; for Number: the number as written in the document
  bool integral = false;    // Number written without fraction or exponent
  bool fits_int64 = false;  // integral and within int64
  int64_t integer = 0;      // valid when fits_int64
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json* find(const std::string& key) const;
  const char* type_name() const;
};

// Returns false and sets error ("line L col C: what", outside bytes escaped) on malformed text.
// Never throws.
bool parse_json(const std::string& text, Json& out, std::string& error);

}  // namespace opforge::loader
