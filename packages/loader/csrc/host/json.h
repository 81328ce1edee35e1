// Minimal strict JSON reader for manifests (RFC 8259 subset: no duplicate-key semantics).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace opforge::loader {

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object };
  Type type = Type::Null;
  bool boolean = false;
  double number = 0.0;
  bool integral = false;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json* find(const std::string& key) const;
  const char* type_name() const;
};

// Returns false and sets error ("line L col C: what") on malformed text.
bool parse_json(const std::string& text, Json& out, std::string& error);

}  // namespace opforge::loader
