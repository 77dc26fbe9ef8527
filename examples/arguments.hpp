// Command-line numbers of the example jobs, read strictly: every rank reads the same
// arguments, so a bad one is the same agreed_error everywhere, before any collective.
#pragma once
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include <strata/core/agreed_error.hpp>

namespace examples {

// A whole number in [1, 10^9] written as decimal text ("1abc", "", "-3" refused).
inline int positive_int(const std::string& what, std::string_view text) {
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || n < 1 || n > 1000000000)
    throw strata::agreed_error(what + " must be a positive integer, not '" + std::string(text) + "'");
  return n;
}

}  // namespace examples
