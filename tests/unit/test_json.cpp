// The strict JSON layer of checkpoint headers and indexes (io/json.hpp over nlohmann::json):
// what it adds to nlohmann's parser (duplicate keys and a depth limit are errors), errors that
// name the byte, sizes exact in 64 bits, writers whose output reads back, and the sharded
// index (io/safetensors_index.hpp) read and written with hostile names and damaged files.
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <strata/io/json.hpp>
#include <strata/io/safetensors_index.hpp>

#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

namespace io = strata::io;
namespace json = strata::io::json;

namespace {

struct outcome {
  bool parsed = false;
  std::optional<std::size_t> offset;
  std::string problem, what;
};
outcome parse_of(const std::string& text) {
  try {
    json::parse(text);
    return {true, std::nullopt, "", ""};
  } catch (const json::parse_error& e) {
    return {false, e.offset, e.problem, e.what()};
  }
}

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

}  // namespace

TEST_CASE("json: duplicate keys are errors in every object; the same key in different objects is not") {
  for (const std::string text : {R"({"a":1,"a":2})", R"({"x":{"a":1,"a":2}})", R"([{"k":[{"a":1,"b":2,"a":3}]}])",
                                 R"({"a":1,"b":{},"a":1})"}) {
    CAPTURE(text);
    const auto o = parse_of(text);
    CHECK_FALSE(o.parsed);
    CHECK(o.problem == "duplicate key \"a\"");
    CHECK_FALSE(o.offset.has_value());
  }
  for (const std::string text :
       {R"([{"a":1},{"a":2}])", R"({"a":{"a":1},"b":{"a":2}})", R"({"a":{"b":1},"b":2})", R"({"a":[{"a":1}]})"}) {
    CAPTURE(text);
    CHECK(parse_of(text).parsed);
  }
  // A key escaped differently is the same key.
  CHECK(parse_of(R"({"a":1,"\u0061":2})").problem == "duplicate key \"a\"");
}

TEST_CASE("json: nesting 64 levels below the top, not deeper") {
  const auto nested = [](int levels, bool objects) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += objects ? "{\"k\":" : "[";
    s += "1";
    for (int i = 0; i < levels; ++i) s += objects ? "}" : "]";
    return s;
  };
  for (bool objects : {false, true}) {
    CAPTURE(objects);
    CHECK(parse_of(nested(json::max_depth + 1, objects)).parsed);  // containers at depths 0..64
    const auto o = parse_of(nested(json::max_depth + 2, objects));
    CHECK_FALSE(o.parsed);
    CHECK(o.problem == "nesting deeper than 64");
  }
  CHECK_FALSE(parse_of(std::string(100000, '[') + std::string(100000, ']')).parsed);  // no deep recursion
}

TEST_CASE("json: sizes are exact 64-bit naturals; anything else is not a size") {
  CHECK(json::natural(json::parse("18446744073709551615")) == std::numeric_limits<std::uint64_t>::max());
  CHECK(json::natural(json::parse("9007199254740993")) == 9007199254740993u);  // not representable as double
  CHECK(json::natural(json::parse("0")) == 0u);
  CHECK(json::natural(json::parse("-0")) == 0u);
  for (const char* text : {"18446744073709551616", "-1", "-9223372036854775808", "1.0", "1e3", "\"5\"", "true",
                           "null", "[1]", "{}"}) {
    CAPTURE(text);
    CHECK_FALSE(json::natural(json::parse(text)).has_value());
  }
  CHECK(json::described(json::parse("7")) == "an integer");
  CHECK(json::described(json::parse("-7")) == "an integer");
  CHECK(json::described(json::parse("0.5")) == "a number");
  CHECK(json::described(json::parse("[]")) == "an array");
  CHECK(json::described(json::parse("{}")) == "an object");
  CHECK(json::described(json::parse("\"\"")) == "a string");
  CHECK(json::described(json::parse("false")) == "a boolean");
  CHECK(json::described(json::parse("null")) == "null");
}

TEST_CASE("json: malformed input names the byte and the problem") {
  struct bad {
    std::string text;
    std::size_t offset;
    const char* problem;
  };
  const bad cases[] = {
      {"", 0, "unexpected end of input"},
      {"{", 1, "expected string literal"},
      {R"({"a" 1})", 5, "expected ':'"},
      {R"({"a":1,})", 7, "unexpected '}'; expected string literal"},
      {"[1,2", 4, "expected ']'"},
      {"{}x", 2, "expected end of input"},
      {"{}{}", 2, "expected end of input"},
      {"01", 1, "expected end of input"},  // no leading zeros
      {"1.", 2, "expected digit after '.'"},
      {"+1", 0, "invalid literal"},
      {"tru", 3, "invalid literal"},
      {"NaN", 0, "invalid literal"},
      {"// comment\n{}", 0, "invalid literal"},  // no comments
      {"\"abc", 4, "missing closing quote"},
      {"\"a\tb\"", 2, "control character U+0009"},
      {"\"a\\x\"", 3, "forbidden character after backslash"},
      {R"("\udc00")", 6, "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
      {R"("\ud800")", 7, "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"\"\xFF\"", 1, "ill-formed UTF-8 byte"},
      {"\"\xC0\xAF\"", 1, "ill-formed UTF-8 byte"},          // overlong '/'
      {"\"\xED\xA0\x80\"", 2, "ill-formed UTF-8 byte"},      // an encoded surrogate
      {"\"\xF4\x90\x80\x80\"", 2, "ill-formed UTF-8 byte"},  // above U+10FFFF
      {"\"\xE2\x82\"", 3, "ill-formed UTF-8 byte"},          // a cut sequence
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const auto o = parse_of(c.text);
    CAPTURE(o.what);
    REQUIRE_FALSE(o.parsed);
    CHECK(o.offset == c.offset);
    CHECK(o.problem.find(c.problem) != std::string::npos);
    CHECK(o.what.starts_with("at byte " + std::to_string(c.offset) + ": "));
    CHECK(o.problem.find("[json.exception") == std::string::npos);  // nlohmann's prefix is dropped
  }
}

TEST_CASE("json: what quoted() and dump() write, parse() reads back; invalid UTF-8 is refused") {
  const std::string samples[] = {"", "plain", "quote\" backslash\\ slash/", std::string("nul\0byte", 8),
                                 "\x01\x1f\n\t\r\b\f", "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80", "\x7f"};
  for (const auto& s : samples) {
    CAPTURE(s);
    const std::string q = json::quoted(s);
    CHECK(json::parse(q).get<std::string>() == s);
    for (char c : q) CHECK((static_cast<unsigned char>(c) >= 0x20));  // no raw control characters
    const json::value doc = {{s, s}};
    CHECK(json::parse(json::dump(doc)).at(s) == s);
  }
  CHECK(json::quoted("a\"b") == R"("a\"b")");
  CHECK_THROWS_WITH_AS(json::quoted("bad \xFF"), has("not valid UTF-8"), std::invalid_argument);
  CHECK_THROWS_AS(json::quoted("\xC3"), std::invalid_argument);
  CHECK_THROWS_AS(json::dump(json::value{{"k", "\xED\xA0\x80"}}), std::invalid_argument);
}

TEST_CASE("sharded index: hostile names round trip; every damaged file is a checkpoint_error naming it") {
  const temp_dir t;
  io::safetensors_index idx;
  idx.total_size = std::numeric_limits<std::uint64_t>::max();
  idx.metadata["note"] = "caf\xC3\xA9 \"quoted\"\n\ttab \\ end";
  idx.metadata[std::string("nul\0key", 7)] = std::string(1, '\0');
  idx.weight_map["layer.0.w \"q\""] = "shard \\ 1.safetensors";
  idx.weight_map["\xF0\x9F\x98\x80"] = "\xE2\x82\xAC.safetensors";
  const auto path = t.file("model.safetensors.index.json");
  io::write_index(path, idx);
  const auto back = io::read_index(path);
  CHECK(back.total_size == idx.total_size);
  CHECK(back.metadata == idx.metadata);
  CHECK(back.weight_map == idx.weight_map);
  idx.weight_map["bad\xFF"] = "x";
  CHECK_THROWS_WITH_AS(io::write_index(path, idx), has("UTF-8"), std::invalid_argument);
  CHECK(io::read_index(path).weight_map == back.weight_map);  // the old file stays

  const std::string text = io::to_json(back);
  struct damaged {
    std::string text;
    const char* message;
  };
  const damaged cases[] = {
      {text.substr(0, text.size() / 2), "the index JSON is malformed at byte "},
      {"", "the index JSON is malformed at byte 0: "},
      {text + "}", "the index JSON is malformed at byte "},
      {R"({"weight_map": {"a": "x", "a": "y"}})", "the index JSON is malformed: duplicate key \"a\""},
      {std::string(70, '[') + std::string(70, ']'), "the index JSON is malformed: nesting deeper than 64"},
      {"{\"weight_map\": {\"a\": \"\xFF\"}}", "ill-formed UTF-8 byte"},
      {"[]", "the index is not a JSON object"},
      {R"({"metadata": []})", "\"metadata\" is not an object"},
      {R"({"metadata": {}})", "the index has no \"weight_map\""},
      {R"({"weight_map": []})", "\"weight_map\" is not an object"},
      {R"({"weight_map": {"a": ""}})", "weight_map entry 'a' is not a file name"},
      {R"({"metadata": {"total_size": 18446744073709551616}, "weight_map": {}})",
       "metadata.total_size is not a non-negative integer"},
      {R"({"metadata": {"total_size": 1.5}, "weight_map": {}})", "metadata.total_size is not a non-negative integer"},
      {R"({"metadata": {"total_size": "12"}, "weight_map": {}})", "metadata.total_size is not a non-negative integer"},
  };
  const auto bad = t.file("bad.index.json");
  for (const auto& c : cases) {
    CAPTURE(c.text);
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << c.text;
    CHECK_THROWS_WITH_AS(io::read_index(bad), has("checkpoint " + bad + ": "), io::checkpoint_error);
    CHECK_THROWS_WITH_AS(io::read_index(bad), has(c.message), io::checkpoint_error);
  }
}
