// Text that came from outside (a plug-in's name, a file path, an attribute read from a golden)
// made safe to print and to put in JSON: a message must never echo raw bytes to a terminal, and
// the JSON writer refuses invalid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace mla {

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_utf8(std::string_view s);

// `s` with every byte that is not part of well-formed UTF-8, and every control character but
// tab, written as \xNN. Valid text, non-ASCII letters included, is returned unchanged.
std::string printable(std::string_view s);

}  // namespace mla
