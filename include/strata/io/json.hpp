#pragma once
// strata-header: host-only
// JSON of checkpoint headers and index files (io/safetensors.hpp, io/safetensors_index.hpp,
// exec/checkpoint.hpp): nlohmann::json, read strictly.
//
// Strict because the input decides how bytes of a file are interpreted. nlohmann's parser
// already refuses what RFC 8259 does (invalid UTF-8, lone surrogates, raw control characters,
// leading zeros, trailing bytes); parse() adds duplicate object keys (two readers must never
// disagree on which one wins) and nesting deeper than 64 (hostile, not a checkpoint header).
// Integers stay exact in 64 bits; one beyond them becomes a float, which natural() refuses,
// so a size from a file never rounds through double.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::io::json {

using value = nlohmann::json;

class parse_error : public std::runtime_error {
 public:
  parse_error(std::optional<std::size_t> at, const std::string& what)
      : std::runtime_error(at ? "at byte " + std::to_string(*at) + ": " + what : what), offset(at), problem(what) {}
  std::optional<std::size_t> offset;  // byte of the input where parsing stopped (not for strata's own rules)
  std::string problem;                // what() without the offset
};

namespace detail {

// nlohmann's message without "[json.exception.parse_error.101] parse error at line 1, column 3: ".
inline std::string problem_of(const nlohmann::json::exception& e) {
  std::string_view s = e.what();
  if (s.starts_with("[json.exception.")) s.remove_prefix(std::min(s.size(), s.find("] ") + 2));
  if (s.starts_with("parse error") && s.find(": ") != std::string_view::npos) s.remove_prefix(s.find(": ") + 2);
  return std::string(s);
}

}  // namespace detail

inline constexpr int max_depth = 64;

// Parses one JSON document (surrounding whitespace allowed); throws parse_error.
inline value parse(std::string_view text) {
  using event = value::parse_event_t;
  std::vector<std::set<std::string, std::less<>>> keys;  // of each object being read
  const value::parser_callback_t strict = [&](int depth, event e, value& parsed) {
    if ((e == event::object_start || e == event::array_start) && depth > max_depth)
      throw parse_error(std::nullopt, "nesting deeper than " + std::to_string(max_depth));
    if (e == event::object_start) {
      keys.emplace_back();
    } else if (e == event::object_end) {
      keys.pop_back();
    } else if (e == event::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(key).second) throw parse_error(std::nullopt, "duplicate key \"" + key + "\"");
    }
    return true;
  };
  try {
    return value::parse(text.begin(), text.end(), strict);
  } catch (const nlohmann::json::parse_error& e) {
    throw parse_error(e.byte > 0 ? e.byte - 1 : 0, detail::problem_of(e));  // e.byte counts from 1
  }
}

// A document as text (indent -1: compact); std::invalid_argument for a string in it that is
// not valid UTF-8, so that whatever a writer puts in a file, parse() reads back.
template <class Json>
std::string dump(const Json& doc, int indent = -1) {
  try {
    return doc.dump(indent);
  } catch (const nlohmann::json::type_error& e) {
    throw std::invalid_argument("JSON string is not valid UTF-8: " + detail::problem_of(e));
  }
}

// s as a JSON string literal (std::invalid_argument unless s is valid UTF-8).
inline std::string quoted(std::string_view s) { return dump(value(std::string(s))); }

// The value as a size or count: a non-negative integer that fits in 64 bits, else nothing.
inline std::optional<std::uint64_t> natural(const value& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;  // negative, fractional, beyond 64 bits, or not a number
}

// "an integer", "a string", ... for messages.
inline std::string described(const value& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_null()) return "null";
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

}  // namespace strata::io::json
