// requires: zlib
// IDX / gzip reader: every fixture is generated at run time in a private temp
// directory, and every failure mode must name the file and the numbers.
#include <doctest/doctest.h>

#include "temp_dir.hpp"
#include <zlib.h>

#include "fashion_mnist/idx.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using fashion_mnist::data_error;
using bytes = std::vector<std::uint8_t>;

namespace {

void put_be32(bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

bytes idx(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const bytes& payload) {
  bytes b;
  put_be32(b, magic);
  for (auto d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

bytes iota_bytes(std::size_t n, unsigned mod = 256) {
  bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i % mod);
  return b;
}

void write_gz(const std::string& path, const bytes& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!data.empty()) REQUIRE(gzwrite(f, data.data(), static_cast<unsigned>(data.size())) == static_cast<int>(data.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

void write_raw(const std::string& path, const bytes& data) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  REQUIRE(o.good());
}

bytes read_raw(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(i), {});
}

bytes gz_bytes(const temp_dir& t, const bytes& data) {
  const auto p = t.file("scratch.gz");
  write_gz(p, data);
  return read_raw(p);
}

// doctest::Contains takes a doctest::String, which has no std::string constructor.
doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

std::string message_of(const std::string& path, int rank) {
  try {
    fashion_mnist::read_idx_u8(path, rank);
  } catch (const data_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

using fashion_mnist::read_gzip;
using fashion_mnist::read_idx_images;
using fashion_mnist::read_idx_labels;
using fashion_mnist::read_idx_u8;

TEST_CASE("data_error is a std::runtime_error") {
  const temp_dir t;
  CHECK_THROWS_AS(read_gzip(t.file("nope.gz")), std::runtime_error);
}

TEST_CASE("well-formed image and label files parse to their dims and payload") {
  const temp_dir t;
  const auto ip = t.file("images.gz"), lp = t.file("labels.gz");
  const bytes pixels = iota_bytes(3 * 4 * 5);
  write_gz(ip, idx(0x00000803, {3, 4, 5}, pixels));
  write_gz(lp, idx(0x00000801, {3}, {7, 0, 9}));

  const auto img = read_idx_images(ip);
  CHECK(img.path == ip);
  CHECK(img.dims == std::vector<std::uint32_t>{3, 4, 5});
  CHECK(img.count() == 3);
  CHECK(img.item_size() == 20);
  CHECK(img.header_size == 16);
  CHECK(bytes(img.values().begin(), img.values().end()) == pixels);

  const auto lab = read_idx_labels(lp, 10);
  CHECK(lab.dims == std::vector<std::uint32_t>{3});
  CHECK(bytes(lab.values().begin(), lab.values().end()) == bytes{7, 0, 9});
  CHECK_NOTHROW(fashion_mnist::check_same_count(img, lab));
}

TEST_CASE("zero items is a valid, empty file") {
  const temp_dir t;
  const auto p = t.file("empty-images.gz");
  write_gz(p, idx(0x00000803, {0, 28, 28}, {}));
  const auto img = read_idx_images(p);
  CHECK(img.count() == 0);
  CHECK(img.values().empty());
}

TEST_CASE("read_gzip: large payload and concatenated gzip members") {
  const temp_dir t;
  const bytes a = iota_bytes(300000, 251), b = iota_bytes(1000, 7);
  const auto pa = t.file("a.gz");
  write_gz(pa, a);
  CHECK(read_gzip(pa) == a);

  bytes both = gz_bytes(t, a);
  const bytes second = gz_bytes(t, b);
  both.insert(both.end(), second.begin(), second.end());
  const auto pc = t.file("concat.gz");
  write_raw(pc, both);
  bytes expect = a;
  expect.insert(expect.end(), b.begin(), b.end());
  CHECK(read_gzip(pc) == expect);
}

TEST_CASE("missing file and non-regular file") {
  const temp_dir t;
  const auto p = t.file("train-images-idx3-ubyte.gz");
  CHECK_THROWS_WITH_AS(read_idx_images(p), has(p + ": file not found"), data_error);
  CHECK_THROWS_WITH_AS(read_gzip(t.path.string()), has(t.path.string() + ": not a regular file"),
                       data_error);
}

TEST_CASE("plain (uncompressed) and empty files are rejected as not gzip") {
  const temp_dir t;
  const auto plain = t.file("plain-idx.gz");
  write_raw(plain, idx(0x00000801, {2}, {1, 2}));
  CHECK_THROWS_WITH_AS(read_idx_labels(plain, 10),
                       has(plain + ": not a gzip file (starts with bytes 0x00 0x00, gzip starts with 0x1f 0x8b)"),
                       data_error);
  const auto empty = t.file("empty.gz");
  write_raw(empty, {});
  CHECK_THROWS_WITH_AS(read_gzip(empty), has(empty + ": not a gzip file (file is empty)"), data_error);
  const auto one = t.file("one.gz");
  write_raw(one, {0x1f});
  CHECK_THROWS_WITH_AS(read_gzip(one), has(one + ": not a gzip file (starts with byte 0x1f"), data_error);
}

TEST_CASE("truncated gzip streams") {
  const temp_dir t;
  const bytes whole = gz_bytes(t, idx(0x00000803, {50, 28, 28}, iota_bytes(50 * 784, 253)));
  REQUIRE(whole.size() > 100);

  SUBCASE("cut in the middle of the deflate data") {
    const auto p = t.file("half.gz");
    write_raw(p, bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(whole.size() / 2)));
    CHECK_THROWS_WITH_AS(read_idx_images(p),
                         has(p + ": gzip stream is truncated: the " + std::to_string(whole.size() / 2) +
                                           " bytes of compressed input end before the end-of-stream marker"),
                         data_error);
  }
  SUBCASE("only the 8-byte CRC/size trailer missing") {
    const auto p = t.file("notrailer.gz");
    write_raw(p, bytes(whole.begin(), whole.end() - 8));
    CHECK_THROWS_WITH_AS(read_idx_images(p), has(p + ": gzip stream is truncated"), data_error);
    // All the data was there, so the message reports it.
    CHECK(message_of(p, 3).find("(" + std::to_string(16 + 50 * 784) + " bytes decompressed so far)") !=
          std::string::npos);
  }
  SUBCASE("just the gzip magic") {
    const auto p = t.file("magiconly.gz");
    write_raw(p, {0x1f, 0x8b});
    CHECK_THROWS_WITH_AS(read_gzip(p), has(p + ": gzip stream is truncated: the 2 bytes"), data_error);
  }
}

TEST_CASE("corrupt gzip data and junk after the stream") {
  const temp_dir t;
  const bytes whole = gz_bytes(t, idx(0x00000801, {1000}, iota_bytes(1000, 10)));

  const auto crc = t.file("badcrc.gz");
  bytes b = whole;
  b[b.size() - 8] ^= 0xff;  // first CRC32 byte of the trailer
  write_raw(crc, b);
  CHECK_THROWS_WITH_AS(read_gzip(crc), has(crc + ": corrupt gzip data at compressed offset"), data_error);
  CHECK(message_of(crc, 1).find("incorrect data check") != std::string::npos);

  const auto junk = t.file("junk.gz");
  b = whole;
  b.insert(b.end(), {'x', 'y', 'z'});
  write_raw(junk, b);
  CHECK_THROWS_WITH_AS(read_gzip(junk),
                       has(junk + ": 3 bytes of non-gzip data after the end of the gzip stream at "
                                                "compressed offset " + std::to_string(whole.size())),
                       data_error);
}

TEST_CASE("wrong magic, element type and rank") {
  const temp_dir t;
  const auto p = t.file("x.gz");

  write_gz(p, idx(0x12345678, {1, 1, 1}, {0}));
  CHECK_THROWS_WITH_AS(read_idx_images(p),
                       has(p + ": bad IDX magic 0x12345678 (first two bytes must be zero; expected "
                                             "0x00000803: unsigned byte IDX of rank 3)"),
                       data_error);

  write_gz(p, idx(0x00000d03, {1, 1, 1}, {0, 0, 0, 0}));
  CHECK_THROWS_WITH_AS(read_idx_images(p),
                       has(p + ": bad IDX magic 0x00000d03: element type 0x0d (float32) is not supported"),
                       data_error);

  write_gz(p, idx(0x00000801, {3}, {1, 2, 3}));  // a label file where images are expected
  CHECK_THROWS_WITH_AS(read_idx_images(p),
                       has(p + ": IDX rank is 1 (magic 0x00000801) but rank 3 was expected"), data_error);
  write_gz(p, idx(0x00000803, {1, 1, 1}, {0}));  // and the reverse
  CHECK_THROWS_WITH_AS(read_idx_labels(p, 10),
                       has(p + ": IDX rank is 3 (magic 0x00000803) but rank 1 was expected"), data_error);
}

TEST_CASE("streams too short for the magic or the header") {
  const temp_dir t;
  const auto p = t.file("short.gz");
  write_gz(p, {0, 0, 8});
  CHECK_THROWS_WITH_AS(read_idx_images(p),
                       has(p + ": decompressed stream holds only 3 bytes, too short for the 4-byte IDX "
                                             "magic number"),
                       data_error);
  write_gz(p, {0, 0, 8, 3, 0, 0, 0, 1, 0, 0});
  CHECK_THROWS_WITH_AS(read_idx_images(p),
                       has(p + ": stream ends inside the IDX header: 10 bytes but a rank-3 header needs 16"),
                       data_error);
}

TEST_CASE("dims that disagree with the amount of data") {
  const temp_dir t;

  SUBCASE("labels one byte short (the documented example)") {
    const auto p = t.file("train-labels-idx1-ubyte.gz");
    write_gz(p, idx(0x00000801, {60000}, iota_bytes(59999, 10)));
    CHECK_THROWS_WITH_AS(read_idx_labels(p, 10),
                         has(p + ": header says 60000 items but the stream holds 59999 bytes of data "
                                               "(1 byte missing: truncated)"),
                         data_error);
  }
  SUBCASE("labels with trailing data") {
    const auto p = t.file("labels.gz");
    write_gz(p, idx(0x00000801, {5}, iota_bytes(7, 10)));
    CHECK_THROWS_WITH_AS(read_idx_labels(p, 10),
                         has(p + ": header says 5 items but the stream holds 7 bytes of data (2 bytes of "
                                               "trailing data)"),
                         data_error);
  }
  SUBCASE("images short by one pixel") {
    const auto p = t.file("images.gz");
    write_gz(p, idx(0x00000803, {3, 4, 5}, iota_bytes(59)));
    CHECK_THROWS_WITH_AS(read_idx_images(p),
                         has(p + ": header says 3 items of 4x5 = 60 bytes but the stream holds 59 bytes "
                                               "of data (1 byte missing: truncated)"),
                         data_error);
  }
  SUBCASE("dims whose product overflows 64 bits") {
    const auto p = t.file("huge.gz");
    write_gz(p, idx(0x00000803, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
    CHECK_THROWS_WITH_AS(read_idx_images(p),
                         has(p + ": header says 4294967295 items of 4294967295x4294967295, which overflows"),
                         data_error);
  }
}

TEST_CASE("label values outside the class range") {
  const temp_dir t;
  const auto p = t.file("labels.gz");
  write_gz(p, idx(0x00000801, {6}, {0, 9, 12, 3, 10, 1}));
  CHECK_THROWS_WITH_AS(read_idx_labels(p, 10),
                       has(p + ": label 12 at item 2 is out of range 0..9 for 10 classes (2 bad labels "
                                             "in total)"),
                       data_error);
  CHECK_NOTHROW(read_idx_labels(p, 13));

  // Same check through a regex, as a pattern for callers matching loosely.
  try {
    read_idx_labels(p, 10);
    FAIL("expected data_error");
  } catch (const data_error& e) {
    CHECK(std::regex_search(e.what(), std::regex(R"(labels\.gz: label \d+ at item \d+ is out of range 0\.\.9)")));
  }
}

TEST_CASE("image and label counts must match") {
  const temp_dir t;
  const auto ip = t.file("imgs.gz"), lp = t.file("labs.gz");
  write_gz(ip, idx(0x00000803, {4, 2, 2}, iota_bytes(16)));
  write_gz(lp, idx(0x00000801, {3}, {1, 2, 3}));
  const auto img = read_idx_images(ip);
  const auto lab = read_idx_labels(lp, 10);
  CHECK_THROWS_WITH_AS(fashion_mnist::check_same_count(img, lab),
                       has(lp + ": holds 3 labels but " + ip + " holds 4 images; the counts must match"),
                       data_error);
}

TEST_CASE("parse_idx_u8 rejects a nonsensical expected rank") {
  CHECK_THROWS_AS(fashion_mnist::parse_idx_u8({0, 0, 8, 0}, "mem", 0), std::invalid_argument);
}
