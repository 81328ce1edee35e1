#include "text.h"

namespace opforge::loader {

std::string printable(const std::string& text, size_t max_bytes, bool escape_quotes) {
  static const char* hex = "0123456789abcdef";
  const bool shorten = text.size() > max_bytes;
  const size_t shown = shorten ? max_bytes : text.size();
  std::string out;
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (escape_quotes && (c == '"' || c == '\\')) {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0xf]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (shorten) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace opforge::loader
