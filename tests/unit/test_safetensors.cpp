// requires: zlib
// safetensors checkpoint files (io/safetensors.hpp, io/safetensors_index.hpp): round trips,
// the exact layout, atomic replacement, and a clear checkpoint_error for every kind of damage
// (every truncation point and every single-byte flip of a file is caught).
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <strata/core/bf16.hpp>
#include <strata/io/safetensors.hpp>
#include <strata/io/safetensors_index.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace io = strata::io;
using io::dtype;
using bytes = std::vector<std::byte>;

namespace {

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

void write_raw(const std::string& path, const bytes& b) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(o.good());
}

bytes read_raw(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(i)), {});
  bytes b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

// The message a reader of this image throws, or "(no error)".
std::string error_of(const bytes& file, const std::string& name = "/ck/rank-0003.safetensors") {
  try {
    io::reader r(file, name);
  } catch (const io::checkpoint_error& e) {
    return e.what();
  }
  return "(no error)";
}

// A file of another writer: header JSON as given (padded), then data.
bytes foreign(const std::string& json, const bytes& data, bool pad = true) {
  std::string h = json;
  if (pad) h.resize((h.size() + 7) / 8 * 8, ' ');
  bytes f(8);
  for (int i = 0; i < 8; ++i)
    f[static_cast<std::size_t>(i)] = std::byte(static_cast<std::uint8_t>(std::uint64_t{h.size()} >> (8 * i)));
  for (char c : h) f.push_back(std::byte(static_cast<unsigned char>(c)));
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

std::uint64_t header_length(const bytes& f) {
  std::uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);
  return n;
}

struct sample {
  std::vector<double> f64{1.0 / 3, -0.0, std::numeric_limits<double>::infinity(), 6.02e23, -1e-310, 42};
  std::vector<float> f32{1.5f, -2.25f, std::numeric_limits<float>::quiet_NaN(), 3e38f};
  std::vector<std::int32_t> i32{1, -2, 3, std::numeric_limits<std::int32_t>::min(), 5, 6};
  std::vector<std::int64_t> scalar{-1234567890123456789};
  std::vector<std::uint8_t> u8{0, 1, 254, 255, 7};
  std::vector<strata::bf16> b16{strata::bf16(1.0f), strata::bf16(-2.5f), strata::bf16(1e-3f)};
  std::vector<std::uint16_t> f16{0x3c00, 0xc000};  // 1.0, -2.0 as IEEE half

  io::writer make() const {
    io::writer w;
    w.add("layer.f32", {2, 2}, f32);  // added before the F64: the file orders by element size
    w.add("layer.f64", {2, 3}, f64);
    w.add("i32", {3, 1, 2}, i32);
    w.add("bf16", {3}, b16, dtype::BF16);
    w.add("scalar", {}, scalar);
    w.add("u8", {5}, u8);
    w.add("f16", dtype::F16, {2}, f16.data(), f16.size() * 2);
    w.add("empty", dtype::F32, {0, 3}, nullptr, 0);
    w.add_view("empty.i64", dtype::I64, {2, 0}, nullptr, 0);
    w.set_metadata("step", "1200");
    w.set_metadata("note", "caf\xC3\xA9 \"quoted\"\n\ttab \\ end");
    return w;
  }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("round trip: dtypes, scalar and empty shapes, metadata, exact bits") {
  const temp_dir t;
  const sample s;
  const auto path = t.file("rank-0000.safetensors");
  s.make().write(path);
  const io::reader r(path);
  CHECK(r.path() == path);
  CHECK(r.checksummed());
  // Decreasing element size, insertion order within a size.
  CHECK(r.names() == std::vector<std::string>{"layer.f64", "scalar", "empty.i64", "layer.f32", "i32", "empty", "bf16",
                                              "f16", "u8"});
  CHECK(same_bits(r.read<double>("layer.f64"), s.f64));
  CHECK(same_bits(r.read<float>("layer.f32"), s.f32));  // the NaN's payload too
  CHECK(r.read<std::int32_t>("i32") == s.i32);
  CHECK(r.read<std::int64_t>("scalar") == s.scalar);
  CHECK(r.read<std::uint8_t>("u8") == s.u8);
  const auto b16 = r.read<strata::bf16>("bf16", dtype::BF16);
  REQUIRE(b16.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(static_cast<float>(b16[i]) == static_cast<float>(s.b16[i]));
  CHECK(r.read<std::uint16_t>("f16", dtype::F16) == s.f16);
  CHECK(r.read<float>("empty").empty());
  CHECK(r.bytes("empty.i64").empty());

  const auto& info = r.info("i32");
  CHECK(info.type == dtype::I32);
  CHECK(info.shape == std::vector<std::uint64_t>{3, 1, 2});
  CHECK(info.elements() == 6);
  CHECK(info.bytes() == 24);
  CHECK(r.info("scalar").shape.empty());
  CHECK(r.info("scalar").elements() == 1);
  CHECK(r.info("empty").shape == std::vector<std::uint64_t>{0, 3});
  CHECK(r.info("layer.f64").begin == 0);  // the first tensor starts the data buffer
  for (const auto& n : r.names()) {
    const auto& i = r.info(n);
    CHECK(i.begin % (io::bits_of(i.type) / 8) == 0);  // aligned to its element size
  }

  CHECK(r.metadata("step") == "1200");
  CHECK(r.metadata("note") == "caf\xC3\xA9 \"quoted\"\n\ttab \\ end");
  CHECK(r.metadata("strata.format") == "strata-checkpoint-1");
  CHECK(r.metadata("crc32.empty") == "00000000");
  CHECK(r.metadata("crc32.layer.f64")->size() == 8);
  CHECK(r.metadata("strata.header_crc32").has_value());
  CHECK_FALSE(r.metadata("absent").has_value());
  CHECK(r.has("u8"));
  CHECK_FALSE(r.has("U8"));

  // write() and serialize() produce the same bytes.
  CHECK(read_raw(path) == s.make().serialize());
}

TEST_CASE("layout: 8-byte length, '{', space padding to a multiple of 8, data right after") {
  for (std::size_t len = 1; len <= 16; ++len) {  // every padding length 0..7
    io::writer w;
    const std::vector<float> v{1, 2, 3};
    w.add(std::string(len, 'x'), {3}, v);
    const bytes f = w.serialize();
    const std::uint64_t n = header_length(f);
    CHECK(n % 8 == 0);
    CHECK(f.size() == 8 + n + 12);
    CHECK(f[8] == std::byte{'{'});
    std::size_t last = 8 + n - 1;
    while (f[last] == std::byte{' '}) --last;
    CHECK(f[last] == std::byte{'}'});
    CHECK(8 + n - 1 - last < 8);
    CHECK(io::reader(f, "x").read<float>(std::string(len, 'x')) == v);
  }
  // No tensors at all is a valid file.
  const io::reader empty(io::writer().serialize(), "empty");
  CHECK(empty.names().empty());
  CHECK(empty.checksummed());
}

TEST_CASE("reads files of other writers: unpadded header, any entry order, no checksums") {
  // The example of the reference implementation's documentation, byte for byte (unpadded).
  const bytes doc = foreign(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})", bytes(16), false);
  CHECK(header_length(doc) == 60);
  const io::reader r(doc, "doc");
  CHECK_FALSE(r.checksummed());
  CHECK(r.read<std::int32_t>("test") == std::vector<std::int32_t>{0, 0, 0, 0});

  bytes data(12);
  data[0] = std::byte{1};
  data[4] = std::byte{2};
  const io::reader r2(foreign(R"({"b": {"shape": [2], "data_offsets": [4, 12], "dtype": "F32"},
      "__metadata__": {"format": "pt"}, "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                              data),
                      "unordered");
  CHECK(r2.names() == std::vector<std::string>{"a", "b"});
  CHECK(r2.read<std::uint8_t>("a") == std::vector<std::uint8_t>{1, 0, 0, 0});
  CHECK(r2.metadata("format") == "pt");
}

TEST_CASE("atomic write: no temporary left, the old file replaced only when the new one is complete") {
  const temp_dir t;
  const auto path = t.file("ckpt.safetensors");
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(t.path)) names.push_back(e.path().filename().string());
    return names;
  };
  io::writer a;
  a.add("w", {2}, std::vector<double>{1, 2});
  a.write(path);
  CHECK(listing() == std::vector<std::string>{"ckpt.safetensors"});
  io::writer b;
  b.add("w", {3}, std::vector<double>{3, 4, 5});
  b.write(path);
  CHECK(listing() == std::vector<std::string>{"ckpt.safetensors"});
  CHECK(io::reader(path).read<double>("w") == std::vector<double>{3, 4, 5});

  // A writer that fails half way: the old file stays, whole, and the temporary goes.
  CHECK_THROWS_WITH_AS(io::write_atomic(path,
                                        [&](io::atomic_file_sink& sink) {
                                          sink.write("partial", 7);
                                          throw io::checkpoint_error(path, "disk on fire");
                                        }),
                       has("disk on fire"), io::checkpoint_error);
  CHECK(listing() == std::vector<std::string>{"ckpt.safetensors"});
  CHECK(io::reader(path).read<double>("w") == std::vector<double>{3, 4, 5});

  // The rename fails (the target is a non-empty directory): reported, temporary removed.
  fs::create_directory(t.path / "dir.safetensors");
  write_raw(t.file("dir.safetensors/x"), bytes(1));
  CHECK_THROWS_WITH_AS(a.write(t.file("dir.safetensors")), has("cannot rename"), io::checkpoint_error);
  CHECK(listing().size() == 2);
  // No such directory.
  CHECK_THROWS_WITH_AS(a.write(t.file("nope/ckpt.safetensors")), has("No such file or directory"),
                       io::checkpoint_error);
}

TEST_CASE("missing file, empty file, directory") {
  const temp_dir t;
  CHECK_THROWS_WITH_AS(io::reader(t.file("absent.safetensors")),
                       has("checkpoint " + t.file("absent.safetensors") + ": cannot open: No such file or directory"),
                       io::checkpoint_error);
  write_raw(t.file("empty"), {});
  CHECK_THROWS_WITH_AS(io::reader(t.file("empty")), has("truncated: the file holds 0 bytes"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(io::reader(t.path.string()), has("not a regular file"), std::runtime_error);
}

TEST_CASE("truncation at every byte says 'truncated', with the numbers") {
  const bytes f = sample().make().serialize();
  const std::uint64_t n = header_length(f);
  for (std::size_t cut = 0; cut < f.size(); ++cut) {
    const std::string msg = error_of(bytes(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(cut)));
    CAPTURE(cut);
    CAPTURE(msg);
    CHECK(msg.starts_with("checkpoint /ck/rank-0003.safetensors: truncated: "));
  }
  CHECK(
      error_of(bytes(f.begin(), f.begin() + 5)) ==
      "checkpoint /ck/rank-0003.safetensors: truncated: the file holds 5 bytes, fewer than the 8 of the header length");
  CHECK(error_of(bytes(f.begin(), f.begin() + 100)) ==
        "checkpoint /ck/rank-0003.safetensors: truncated: the header length is " + std::to_string(n) +
            " bytes, the file holds only 92 after the length");
  const std::size_t data = f.size() - 8 - n;
  CHECK(error_of(bytes(f.begin(), f.end() - 10)) ==
        "checkpoint /ck/rank-0003.safetensors: truncated: the header says " + std::to_string(data) +
            " bytes of tensor data, the file holds " + std::to_string(data - 10));
  bytes longer = f;
  longer.push_back(std::byte{0});
  CHECK(error_of(longer).find("1 stray bytes after the last tensor") != std::string::npos);
}

TEST_CASE("every single-byte flip is caught; in the data, the CRC names the tensor") {
  const bytes f = sample().make().serialize();
  const std::uint64_t n = header_length(f);
  const io::reader good(f, "good");
  for (std::size_t at = 0; at < f.size(); ++at) {
    for (unsigned mask : {0x01u, 0x20u, 0x80u}) {
      bytes g = f;
      g[at] ^= std::byte(mask);
      const std::string msg = error_of(g);
      CAPTURE(at);
      CAPTURE(mask);
      CAPTURE(msg);
      CHECK(msg.starts_with("checkpoint /ck/rank-0003.safetensors: "));
      if (at < 8 + n) continue;  // header: some clear error (parse, CRC, limit, truncation)
      const std::uint64_t off = at - 8 - n;
      for (const auto& name : good.names()) {
        const auto& i = good.info(name);
        if (off >= i.begin && off < i.end)
          CHECK(msg.find("tensor '" + name + "' fails its CRC32 check (stored ") != std::string::npos);
      }
      CHECK(msg.ends_with("): the file is corrupt"));
    }
  }
  // A flip inside the JSON text that keeps it valid JSON is caught by the header CRC.
  bytes g = f;
  const std::string text(reinterpret_cast<const char*>(g.data()) + 8, n);
  g[8 + text.find("1200")] = std::byte{'3'};
  const std::string msg = error_of(g);
  CHECK(msg.find("the header fails its CRC32 check (stored ") != std::string::npos);
  CHECK(msg.ends_with("): the file is corrupt"));
  g = f;
  g[8 + text.find("\"shape\":[2,3]") + 9] = std::byte{'4'};
  CHECK(error_of(g).find("the header fails its CRC32 check") != std::string::npos);
  g = f;
  g[8 + text.find("{")] = std::byte{'['};
  CHECK(error_of(g).find("the header does not start with '{'") != std::string::npos);
  g = f;
  g[8 + text.find("\"dtype\"")] = std::byte{'x'};
  CHECK(error_of(g).find("the header JSON is malformed at byte ") != std::string::npos);
}

TEST_CASE("the header CRC's digits are found whatever the names around them") {
  // A tensor and metadata that spell the CRC's key: the reader still zeroes the right digits.
  io::writer w;
  w.add("strata.header_crc32", {1}, std::vector<float>{1});
  w.set_metadata("k", "\"strata.header_crc32\":\"00000000\"");
  const io::reader r(w.serialize(), "names");
  CHECK(r.checksummed());
  CHECK(r.read<float>("strata.header_crc32") == std::vector<float>{1});
  CHECK(r.metadata("k") == "\"strata.header_crc32\":\"00000000\"");
}

TEST_CASE("random damage: every outcome is a valid file or a checkpoint_error") {
  const bytes f = sample().make().serialize();
  std::mt19937 rng(12345);
  const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  for (int trial = 0; trial < 3000; ++trial) {
    bytes g = f;
    for (std::size_t k = 0, m = 1 + pick(4); k < m; ++k)
      g[pick(g.size())] = std::byte(static_cast<unsigned char>(pick(256)));
    if (trial % 3 == 0) g.resize(pick(g.size() + 16));
    CAPTURE(trial);
    try {
      const io::reader r(g, "fuzz");
      for (const auto& n : r.names()) CHECK(r.bytes(n).size() == r.info(n).bytes());
    } catch (const io::checkpoint_error&) {
    }
  }
}

TEST_CASE("structural errors in a header, each with its own message") {
  const auto check = [](const std::string& json, std::size_t data, const std::string& expected) {
    CAPTURE(json);
    CHECK(error_of(foreign(json, bytes(data))).find(expected) != std::string::npos);
  };
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  check("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12,
        "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' ([0, 8])");
  check("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16,
        "a gap of 4 bytes before tensor 'b' (data_offsets [12, 16]): the data must be contiguous");
  check(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "a gap of 4 bytes before tensor 'b'");
  check(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
        "tensor 'a': shape [3] of F32 is 12 bytes, but its data_offsets [0, 8] span 8");
  check(R"({"a":{"dtype":"F128","shape":[2],"data_offsets":[0,32]}})", 32, "tensor 'a' has an unknown dtype \"F128\"");
  check(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0,
        "tensor 'a': \"shape\" holds something other than a non-negative integer");
  check(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "non-negative integer");
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", 4,
        "\"data_offsets\" must hold 2 integers, it holds 3");
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, "data_offsets [4, 0] end before they begin");
  check(R"({"a":{"dtype":"F32","shape":[1]}})", 0, "tensor 'a' has no \"data_offsets\"");
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4, "tensor 'a' has an unknown field \"x\"");
  check(R"({"a":[1]})", 0, "tensor 'a' is described by an array, not an object");
  check(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2, "is not a whole number of bytes");
  check(R"({"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", 2, "(no error)");  // sub-byte dtypes are fine whole
  check(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "overflows");
  check(R"({"__metadata__":{"k":1}})", 0, "__metadata__ entry 'k' is an integer; metadata values must be strings");
  check(R"({"__metadata__":"x"})", 0, "__metadata__ is a string, not an object");
  check(R"({"__metadata__":{"strata.format":"strata-checkpoint-9","strata.header_crc32":"00000000"}})", 0,
        "unsupported strata.format 'strata-checkpoint-9' (this reader knows strata-checkpoint-1)");
  check(R"({"__metadata__":{"strata.format":"strata-checkpoint-1"}})", 0,
        "a strata checkpoint without its strata.header_crc32");
  check(R"({"__metadata__":{"strata.header_crc32":"00000000"}})", 0, "has strata.header_crc32 but no strata.format");
  check(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
        1, "the header JSON is malformed: duplicate key \"a\"");
  check("[]", 0, "the header does not start with '{'");
  check(" {}", 0, "the header does not start with '{'");
  check("{}x", 0, "malformed at byte 2 of the header (file offset 10): syntax error while parsing value");
  check("", 0, "the header does not start with '{'");
  // The length prefix.
  bytes big = foreign("{}", {});
  big[3] = std::byte{0x10};  // 268 MB
  CHECK(error_of(big).find("the header length 268435464 is over the format's limit of 100000000 bytes") !=
        std::string::npos);
}

TEST_CASE("accessor and writer misuse") {
  const io::reader r(sample().make().serialize(), "/ck/x.safetensors");
  CHECK_THROWS_WITH_AS(r.info("nope"),
                       has("checkpoint /ck/x.safetensors: no tensor 'nope' (it holds 9 tensors: 'layer.f64'"),
                       io::checkpoint_error);
  CHECK_THROWS_WITH_AS(r.read<float>("layer.f64"), has("tensor 'layer.f64' is F64, not F32"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(r.read<std::uint16_t>("bf16"), has("tensor 'bf16' is BF16, not U16"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(r.read<strata::bf16>("bf16"), has("has no dtype of its own"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(r.read<float>("bf16", dtype::BF16), has("a 4-byte element type cannot hold BF16"),
                       io::checkpoint_error);
  std::vector<double> small(2);
  CHECK_THROWS_WITH_AS(r.read_into("layer.f64", std::span<double>(small)), has("has 6 elements, the destination 2"),
                       io::checkpoint_error);

  io::writer w;
  const std::vector<float> v{1, 2};
  w.add("a", {2}, v);
  CHECK_THROWS_WITH_AS(w.add("a", {2}, v), has("tensor 'a': added twice"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.add("b", {3}, v), has("shape [3] of F32 needs 12 bytes, got 8"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.add("__metadata__", {2}, v), has("reserved"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.add("bad\xFF", {2}, v), has("UTF-8"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.add("c", {2}, v, dtype::F64), has("a 4-byte element type cannot hold F64"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.add("d", dtype::F4, {3}, v.data(), 1), has("not a whole number of bytes"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.set_metadata("crc32.a", "0"), has("reserved"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.set_metadata("strata.format", "0"), has("reserved"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(w.set_metadata("k", "\xC3"), has("UTF-8"), std::invalid_argument);
}

TEST_CASE("sharded checkpoint index: Hugging Face layout, round trip, errors") {
  const temp_dir t;
  const auto path = t.file("model.safetensors.index.json");
  io::safetensors_index idx;
  idx.total_size = 123456789012;
  idx.metadata["strata.step"] = "1200";
  idx.weight_map["layer.0.w"] = "rank-0000.safetensors";
  idx.weight_map["layer.1.w \"q\""] = "rank-0001.safetensors";
  io::write_index(path, idx);
  const std::string text = io::to_json(idx);
  CHECK(text == "{\n  \"metadata\": {\n    \"strata.step\": \"1200\",\n    \"total_size\": 123456789012\n  },\n"
                "  \"weight_map\": {\n    \"layer.0.w\": \"rank-0000.safetensors\",\n"
                "    \"layer.1.w \\\"q\\\"\": \"rank-0001.safetensors\"\n  }\n}\n");
  const auto back = io::read_index(path);
  CHECK(back.total_size == idx.total_size);
  CHECK(back.metadata == idx.metadata);
  CHECK(back.weight_map == idx.weight_map);
  CHECK(io::to_json(io::safetensors_index{}) == "{\n  \"metadata\": {},\n  \"weight_map\": {}\n}\n");

  // As transformers writes it: other metadata values kept as their JSON text.
  const auto hf = io::parse_index(R"({"metadata": {"total_parameters": 42, "total_size": 168},
      "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}})", "hf");
  CHECK(hf.metadata.at("total_parameters") == "42");
  CHECK(hf.total_size == 168u);
  CHECK(hf.weight_map.at("lm_head.weight") == "model-00002-of-00002.safetensors");

  CHECK_THROWS_WITH_AS(io::parse_index(R"({"metadata": {}})", "i.json"),
                       has("checkpoint i.json: the index has no \"weight_map\""), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(io::parse_index(R"({"weight_map": {"a": 1}})", "i.json"),
                       has("weight_map entry 'a' is not a file name"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(io::parse_index(R"({"metadata": {"total_size": -1}, "weight_map": {}})", "i.json"),
                       has("metadata.total_size is not a non-negative integer"), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(io::parse_index(text.substr(0, text.size() - 3), "i.json"),
                       has("checkpoint i.json: the index JSON is malformed at byte "), io::checkpoint_error);
  CHECK_THROWS_WITH_AS(io::read_index(t.file("none.json")), has("cannot open"), io::checkpoint_error);
  idx.metadata["total_size"] = "1";
  CHECK_THROWS_AS(io::to_json(idx), std::invalid_argument);
}
