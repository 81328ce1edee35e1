// Text taken from outside (manifest values, JSON error excerpts, paths) made safe for a one-line
// message: every byte stays visible, nothing can cut, split or forge a line.
#pragma once
#include <string>

namespace opforge::loader {

// Escapes control bytes (NUL included), DEL and bytes >= 0x80 as \xNN (a message never carries raw
// outside bytes) and, for a value shown between quotes, '"' and '\\'; shortens text longer than
// max_bytes to its head + "... (N bytes)".
std::string printable(const std::string& text, size_t max_bytes = 120, bool escape_quotes = true);

}  // namespace opforge::loader
