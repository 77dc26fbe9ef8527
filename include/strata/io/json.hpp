#pragma once
// A strict JSON (RFC 8259) reader and the escaping half of a writer, for checkpoint
// headers and index files (io/safetensors.hpp, io/safetensors_index.hpp).
//
// Strict because its input decides how bytes of a file are interpreted: invalid
// UTF-8, lone surrogates, control characters in strings, leading zeros, duplicate
// object keys, trailing garbage and nesting deeper than 64 are all errors, and every
// error names the byte offset where the parser gave up. Integers without fraction or
// exponent are kept exactly as int64 (a tensor shape must never round through double).
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::io::json {

class parse_error : public std::runtime_error {
 public:
  parse_error(std::size_t at, const std::string& what)
      : std::runtime_error("at byte " + std::to_string(at) + ": " + what), offset(at), problem(what) {}
  std::size_t offset;   // byte of the input where parsing stopped
  std::string problem;  // what() without the offset
};

struct member;

struct value {
  enum class kind { null, boolean, integer, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  std::int64_t integer = 0;  // kind::integer
  double number = 0;         // kind::number (has a fraction or an exponent)
  std::string text;          // kind::string, decoded
  std::vector<value> items;  // kind::array
  std::vector<member> members;  // kind::object, in document order
  std::size_t begin = 0, end = 0;  // [begin, end): the value's bytes in the parsed input

  const value* find(std::string_view key) const;  // the object member named key, or null
};

// Separate from value (not a std::pair) so that value is complete before it is used.
struct member {
  std::string key;
  value val;
};

inline const value* value::find(std::string_view key) const {
  for (const auto& m : members)
    if (m.key == key) return &m.val;
  return nullptr;
}

inline const char* kind_name(value::kind k) {
  constexpr const char* names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
  return names[static_cast<int>(k)];
}

namespace detail {

// Appends code point cp as UTF-8.
inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), 0 when it is malformed.
inline std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = b(0);
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return b(k) >= lo && b(k) <= hi; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

class parser {
 public:
  explicit parser(std::string_view s) : s_(s) {}

  value document() {
    skip_ws();
    value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected '" + shown(i_) + "' after the end of the JSON value");
    return v;
  }

 private:
  static constexpr int max_depth = 64;  // deeper input is hostile, not a checkpoint header
  std::string_view s_;
  std::size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const { throw parse_error(i_, what); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const { throw parse_error(at, what); }

  // A byte for a message: printable ASCII as itself, anything else as \xNN.
  std::string shown(std::size_t at) const {
    const auto c = static_cast<unsigned char>(s_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
    constexpr char hex[] = "0123456789abcdef";
    return std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
  }
  std::string found() const { return i_ < s_.size() ? "'" + shown(i_) + "'" : "the end of the input"; }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c, const char* context) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "' " + context + ", found " + found());
    ++i_;
  }

  value parse_value(int depth) {
    if (depth > max_depth) fail("nesting deeper than " + std::to_string(max_depth));
    value v;
    v.begin = i_;
    if (i_ >= s_.size()) fail("expected a value, found the end of the input");
    const char c = s_[i_];
    if (c == '{') {
      parse_object(v, depth);
    } else if (c == '[') {
      v.type = value::kind::array;
      ++i_;
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
      } else {
        for (;;) {
          skip_ws();
          v.items.push_back(parse_value(depth + 1));
          skip_ws();
          if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
          expect(']', "or ',' in an array");
          break;
        }
      }
    } else if (c == '"') {
      v.type = value::kind::string;
      v.text = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(v);
    } else if (s_.substr(i_, 4) == "true" || s_.substr(i_, 5) == "false") {
      v.type = value::kind::boolean;
      v.boolean = c == 't';
      i_ += v.boolean ? 4 : 5;
    } else if (s_.substr(i_, 4) == "null") {
      i_ += 4;
    } else {
      fail("expected a value, found " + found());
    }
    v.end = i_;
    return v;
  }

  void parse_object(value& v, int depth) {
    v.type = value::kind::object;
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') { ++i_; return; }
    for (;;) {
      skip_ws();
      const std::size_t key_at = i_;
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key in an object, found " + found());
      std::string key = parse_string();
      // Duplicates are rejected: two readers must never disagree on which one wins.
      if (v.find(key)) fail_at(key_at, "duplicate key \"" + key + "\"");
      skip_ws();
      expect(':', "after an object key");
      skip_ws();
      value element = parse_value(depth + 1);
      v.members.push_back({std::move(key), std::move(element)});
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
      expect('}', "or ',' in an object");
      return;
    }
  }

  std::uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    std::uint32_t cp = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      const char c = s_[i_];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex digit '" + shown(i_) + "' in a \\u escape");
      cp = cp * 16 + static_cast<std::uint32_t>(d);
    }
    return cp;
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') { ++i_; return out; }
      if (c < 0x20) fail("control character \\x" + shown(i_).substr(2) + " inside a string (must be escaped)");
      if (c != '\\') {
        const std::size_t n = utf8_length(s_, i_);
        if (n == 0) fail("invalid UTF-8 byte " + shown(i_) + " in a string");
        out.append(s_.substr(i_, n));
        i_ += n;
        continue;
      }
      const std::size_t esc_at = i_++;
      if (i_ >= s_.size()) fail("unterminated string");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(esc_at, "lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // must be followed by \u of a low surrogate
            if (s_.substr(i_, 2) != "\\u") fail_at(esc_at, "high surrogate without its low half in a \\u escape");
            i_ += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail_at(esc_at, "high surrogate without its low half in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail_at(esc_at, "unknown escape '\\" + shown(i_ - 1) + "'");
      }
    }
  }

  void parse_number(value& v) {
    const std::size_t start = i_;
    const auto digits = [&] {
      const std::size_t from = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - from;
    };
    if (s_[i_] == '-') ++i_;
    const std::size_t int_at = i_;
    const std::size_t n = digits();
    if (n == 0) fail("expected a digit, found " + found());
    if (n > 1 && s_[int_at] == '0') fail_at(int_at, "leading zero in a number");
    bool integral = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) fail("expected a digit after '.', found " + found());
      integral = false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("expected a digit in an exponent, found " + found());
      integral = false;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    if (integral) {
      v.type = value::kind::integer;
      if (std::from_chars(first, last, v.integer).ec != std::errc{})
        fail_at(start, "integer " + std::string(first, last) + " does not fit in 64 bits");
    } else {
      v.type = value::kind::number;
      if (std::from_chars(first, last, v.number).ec != std::errc{})
        fail_at(start, "number " + std::string(first, last) + " is out of range");
    }
  }
};

}  // namespace detail

// Parses one JSON document (surrounding whitespace allowed); throws parse_error.
inline value parse(std::string_view text) { return detail::parser(text).document(); }

// Appends s as a JSON string literal. s must be valid UTF-8 (checked, std::invalid_argument
// otherwise) so that whatever this writes, parse() reads back.
inline void append_quoted(std::string& out, std::string_view s) {
  constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      const std::size_t n = detail::utf8_length(s, i);
      if (n == 0) throw std::invalid_argument("JSON string is not valid UTF-8 at byte " + std::to_string(i));
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  out += '"';
}

inline std::string quoted(std::string_view s) {
  std::string out;
  append_quoted(out, s);
  return out;
}

}  // namespace strata::io::json
