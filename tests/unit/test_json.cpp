// The strict JSON reader of checkpoint headers (io/json.hpp): what it accepts, decodes
// exactly, and rejects with the byte offset where the input went wrong.
#include <doctest/doctest.h>

#include <strata/io/json.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace json = strata::io::json;
using kind = json::value::kind;

namespace {

// The error of parsing text: its offset and message, or offset npos when it parsed.
json::parse_error error_of(const std::string& text) {
  try {
    json::parse(text);
  } catch (const json::parse_error& e) {
    return e;
  }
  return json::parse_error(std::string::npos, "(parsed)");
}

}  // namespace

TEST_CASE("json: values, nesting, document order and byte ranges") {
  const std::string text = R"( {"b": [1, -2, 0, 1.5e3, true, false, null], "a": {"x": "y"}, "e": {}, "f": []} )";
  const auto v = json::parse(text);
  REQUIRE(v.type == kind::object);
  REQUIRE(v.members.size() == 4);
  CHECK(v.members[0].key == "b");  // document order, not sorted
  CHECK(v.members[1].key == "a");
  const auto& b = *v.find("b");
  REQUIRE(b.items.size() == 7);
  CHECK(b.items[0].type == kind::integer);
  CHECK(b.items[1].integer == -2);
  CHECK(b.items[3].type == kind::number);
  CHECK(b.items[3].number == 1500.0);
  CHECK((b.items[4].type == kind::boolean && b.items[4].boolean));
  CHECK((b.items[5].type == kind::boolean && !b.items[5].boolean));
  CHECK(b.items[6].type == kind::null);
  CHECK(text.substr(b.begin, b.end - b.begin) == "[1, -2, 0, 1.5e3, true, false, null]");
  CHECK(v.find("a")->find("x")->text == "y");
  CHECK(v.find("e")->members.empty());
  CHECK(v.find("f")->items.empty());
  CHECK(v.find("zz") == nullptr);
}

TEST_CASE("json: 64-bit integers are exact") {
  CHECK(json::parse("9223372036854775807").integer == std::numeric_limits<std::int64_t>::max());
  CHECK(json::parse("-9223372036854775808").integer == std::numeric_limits<std::int64_t>::min());
  CHECK(json::parse("281474976710655").integer == 281474976710655);  // would be fine as double, too
  CHECK(json::parse("9007199254740993").integer == 9007199254740993);  // would not
  const auto e = error_of("[9223372036854775808]");
  CHECK(e.offset == 1);
  CHECK(e.problem.find("does not fit in 64 bits") != std::string::npos);
}

TEST_CASE("json: string escapes and UTF-8") {
  CHECK(json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").text == "a\"b\\c/d\b\f\n\r\t");
  CHECK(json::parse(R"("\u00e9\u20AC")").text == "\xC3\xA9\xE2\x82\xAC");
  CHECK(json::parse(R"("\ud83d\ude00")").text == "\xF0\x9F\x98\x80");  // surrogate pair -> U+1F600
  CHECK(json::parse("\"\xC3\xA9\xF0\x9F\x98\x80\"").text == "\xC3\xA9\xF0\x9F\x98\x80");  // raw UTF-8 kept
  CHECK(json::parse(R"("\u0000")").text == std::string(1, '\0'));
}

TEST_CASE("json: malformed input names the byte and the problem") {
  struct bad {
    std::string text;
    std::size_t offset;
    const char* problem;
  };
  const bad cases[] = {
      {"", 0, "expected a value, found the end of the input"},
      {"{", 1, "expected a string key"},
      {R"({"a" 1})", 5, "expected ':' after an object key, found '1'"},
      {R"({"a":1,})", 7, "expected a string key"},
      {R"({"a":1 "b":2})", 7, "expected '}' or ',' in an object"},
      {"[1,2", 4, "expected ']' or ','"},
      {"[1,]", 3, "expected a value, found ']'"},
      {R"({"a":1,"a":2})", 7, "duplicate key \"a\""},
      {"{} x", 3, "unexpected 'x' after the end"},
      {"{}{}", 2, "unexpected '{'"},
      {"01", 0, "leading zero"},
      {"-", 1, "expected a digit"},
      {"1.", 2, "expected a digit after '.'"},
      {"1e", 2, "expected a digit in an exponent"},
      {"+1", 0, "expected a value, found '+'"},
      {"tru", 0, "expected a value"},
      {"nul", 0, "expected a value"},
      {"\"abc", 4, "unterminated string"},
      {"\"a\tb\"", 2, "control character \\x09"},
      {"\"a\\x\"", 2, "unknown escape '\\x'"},
      {R"("\u12G4")", 5, "bad hex digit 'G'"},
      {R"("\u12")", 3, "truncated \\u escape"},
      {R"("\udc00")", 1, "lone low surrogate"},
      {R"("\ud800")", 1, "high surrogate without its low half"},
      {R"("\ud800\u0041")", 1, "high surrogate without its low half"},
      {"\"\xFF\"", 1, "invalid UTF-8 byte \\xff"},
      {"\"\xC0\xAF\"", 1, "invalid UTF-8"},          // overlong '/'
      {"\"\xED\xA0\x80\"", 1, "invalid UTF-8"},      // encoded surrogate
      {"\"\xF4\x90\x80\x80\"", 1, "invalid UTF-8"},  // above U+10FFFF
      {"\"\xE2\x82\"", 1, "invalid UTF-8"},          // cut sequence
      {std::string(100, '[') + std::string(100, ']'), 65, "nesting deeper than 64"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const auto e = error_of(c.text);
    CHECK(e.offset == c.offset);
    CHECK(e.problem.find(c.problem) != std::string::npos);
    CAPTURE(e.what());
    CHECK(std::string(e.what()).starts_with("at byte " + std::to_string(c.offset) + ": "));
  }
}

TEST_CASE("json: append_quoted writes what parse reads back") {
  const std::string samples[] = {"", "plain", "quote\" backslash\\ slash/", std::string("nul\0byte", 8),
                                 "\x01\x1f\n\t\r\b\f", "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80", "\x7f"};
  for (const auto& s : samples) {
    CAPTURE(s);
    const std::string q = json::quoted(s);
    CHECK(json::parse(q).text == s);
    for (char c : q) CHECK((static_cast<unsigned char>(c) >= 0x20));  // no raw control characters
  }
  CHECK(json::quoted("a\"b") == R"("a\"b")");
  CHECK_THROWS_AS(json::quoted("bad \xFF"), std::invalid_argument);
  CHECK_THROWS_AS(json::quoted("\xC3"), std::invalid_argument);
}
