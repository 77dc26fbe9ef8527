// The C++ half of python.safetensors_interop (safetensors_interop.py has the other):
//   write <dir>   writes <dir>/strata.safetensors and <dir>/model.safetensors.index.json
//   check <file>  loads a file numpy's safetensors wrote; every tensor and metadata entry
//                 must be exactly what safetensors_interop.py put there
// The values come from the same formulas on both sides, compared bit for bit.
#include <strata/io/safetensors.hpp>
#include <strata/io/safetensors_index.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace io = strata::io;
using io::dtype;

namespace {

const std::string note = "caf\xC3\xA9 \"q\"\n";

std::vector<double> f64() {  // shape [2, 3]
  std::vector<double> v;
  for (int i = 0; i < 6; ++i) v.push_back((i + 1) / 7.0);
  v[4] = std::numeric_limits<double>::infinity();
  v[5] = -0.0;
  return v;
}
std::vector<float> f32() {  // shape [4]
  std::vector<float> v;
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<float>(i + 1) / 7.0f);
  return v;
}
std::vector<std::int32_t> i32() {  // shape [3, 2]
  std::vector<std::int32_t> v;
  for (int i = 0; i < 6; ++i) v.push_back((i - 3) * 1000003);
  return v;
}
const std::vector<std::int64_t> i64{-1234567890123456789};  // shape []
const std::vector<std::uint8_t> u8{0, 1, 128, 255};         // shape [4]
const std::vector<std::uint16_t> bf16{0x3f80, 0xc020, 0x7f80, 0x0001, 0x8000};  // 1, -2.5, inf, tiny, -0
const std::vector<std::uint16_t> f16{0x3c00, 0xc000, 0x3800};                    // 1, -2, 0.5 (numpy's float16)
const std::vector<std::uint8_t> boolean{1, 0, 1};

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("MISMATCH: %s\n", what.c_str());
    ++failures;
  }
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
void expect_tensor(const io::reader& r, const std::string& name, dtype type, std::vector<std::uint64_t> shape,
                   const std::vector<T>& want) {
  if (!r.has(name)) return expect(false, "no tensor " + name);
  expect(r.info(name).type == type, name + ": dtype " + std::string(io::name_of(r.info(name).type)));
  expect(r.info(name).shape == shape, name + ": shape " + io::detail::shape_text(r.info(name).shape));
  if (r.info(name).type == type) expect(same_bits(r.read<T>(name, type), want), name + ": values");
}

int write(const std::string& dir) {
  io::writer w;
  w.add("f64", {2, 3}, f64());
  w.add("f32", {4}, f32());
  w.add("i32", {3, 2}, i32());
  w.add("i64", {}, i64);
  w.add("u8", {4}, u8);
  w.add("bf16", {5}, bf16, dtype::BF16);
  w.add("empty", dtype::F32, {0, 3}, nullptr, 0);
  w.set_metadata("model", "gpt");
  w.set_metadata("note", note);
  w.write(dir + "/strata.safetensors");

  io::safetensors_index index;
  index.total_size = 0;
  const io::reader r(dir + "/strata.safetensors");
  for (const auto& name : r.names()) {
    index.weight_map[name] = "strata.safetensors";
    *index.total_size += r.info(name).bytes();
  }
  index.metadata["format"] = "strata";
  io::write_index(dir + "/model.safetensors.index.json", index);
  return 0;
}

int check(const std::string& path) {
  const io::reader r(path);
  expect(!r.checksummed(), "a numpy-written file has no strata checksums");
  expect(r.names().size() == 8, std::to_string(r.names().size()) + " tensors, expected 8");
  expect_tensor(r, "f64", dtype::F64, {2, 3}, f64());
  expect_tensor(r, "f32", dtype::F32, {4}, f32());
  expect_tensor(r, "i32", dtype::I32, {3, 2}, i32());
  expect_tensor(r, "i64", dtype::I64, {}, i64);
  expect_tensor(r, "u8", dtype::U8, {4}, u8);
  expect_tensor(r, "empty", dtype::F32, {0, 3}, std::vector<float>{});
  expect_tensor(r, "f16", dtype::F16, {3}, f16);
  expect_tensor(r, "bool", dtype::BOOL, {3}, boolean);
  expect(r.metadata("source") == "numpy", "metadata source");
  expect(r.metadata("note") == note, "metadata note");
  std::printf("check %s: %zu tensors, %s\n", path.c_str(), r.names().size(), failures ? "MISMATCH" : "all equal");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  try {
    if (mode == "write") return write(argv[2]);
    if (mode == "check") return check(argv[2]);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  std::printf("usage: %s write <dir> | check <file>\n", argv[0]);
  return 2;
}
