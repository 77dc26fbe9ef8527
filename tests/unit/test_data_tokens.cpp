// Token files (strata/data/token_file.hpp) and training windows (strata/data/token_windows.hpp):
// the bytes on disk against the documented layout, every corruption refused by name, windows
// against the ids written and shard_plan's order, data-parallel slices, and a reading
// position that survives a checkpoint's user entries.
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <strata/data/token_file.hpp>
#include <strata/data/token_windows.hpp>
#include <strata/exec/checkpoint_format.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace strata::data;

std::vector<unsigned char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void put_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void put_le(std::vector<unsigned char>& b, std::size_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + std::size_t(i)] = static_cast<unsigned char>(v >> (8 * i));
}
std::string message_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
// ids 0..n-1 scrambled below vocab by a fixed rule (an independent reference for reads)
std::vector<std::uint32_t> sample_ids(std::size_t n, std::uint32_t vocab) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>((i * 7919 + 13) % vocab);
  return v;
}

}  // namespace

TEST_CASE("a token file is the documented bytes, and reads back") {
  temp_dir d;
  const std::string p = d.file("a.tokens");
  const std::vector<std::uint16_t> ids = {0, 1, 299, 256, 7};
  write_token_file(p, ids, 300, 0x0102030405060708ULL);
  // by hand: magic, version 1, dtype 2, count 5, vocab 300, tag, ids little-endian
  std::vector<unsigned char> want = {'S', 'T', 'R', 'T', 'O', 'K', 'E', 'N', 1, 0, 0, 0, 2, 0, 0, 0,
                                     5,   0,   0,   0,   0,   0,   0,   0,   44, 1, 0, 0, 0, 0, 0, 0,
                                     8,   7,   6,   5,   4,   3,   2,   1,   0, 0, 1, 0, 43, 1, 0, 1, 7, 0};
  CHECK(bytes_of(p) == want);
  const token_file f(p);
  CHECK(f.size() == 5);
  CHECK(f.vocab() == 300);
  CHECK(f.tag() == 0x0102030405060708ULL);
  CHECK(f.dtype() == token_dtype::u16);
  CHECK(f.read(0, 5) == std::vector<std::uint32_t>{0, 1, 299, 256, 7});
  CHECK(f.at(2) == 299);
  CHECK_THROWS_AS(f.at(5), std::out_of_range);
  CHECK_THROWS_AS(f.read(3, 3), std::out_of_range);

  // more than 2^16 ids need uint32; the streaming writer appends in pieces
  const std::string q = d.file("b.tokens");
  const std::vector<std::uint32_t> big = sample_ids(100000, 70000);
  {
    token_file_writer w(q, 70000, 9);
    w.append(std::span<const std::uint32_t>(big).first(12345));
    w.append(std::span<const std::uint32_t>(big).subspan(12345));
    CHECK(!std::filesystem::exists(q));  // nothing at the path before finish()
    w.finish();
  }
  CHECK(std::filesystem::file_size(q) == 40 + 4 * big.size());
  const token_file g(q);
  CHECK(g.dtype() == token_dtype::u32);
  CHECK(g.read(0, big.size()) == big);
  CHECK(*std::max_element(big.begin(), big.end()) >= 65536);

  // an empty file of ids is valid
  write_token_file(d.file("empty.tokens"), std::vector<std::uint32_t>{}, 10);
  CHECK(token_file(d.file("empty.tokens")).size() == 0);
}

TEST_CASE("the writer refuses ids outside the vocab and leaves nothing behind") {
  temp_dir d;
  const std::string p = d.file("w.tokens");
  write_token_file(p, std::vector<int>{1, 2, 3}, 4);
  const auto before = bytes_of(p);
  CHECK(message_of([&] { write_token_file(p, std::vector<int>{1, 4, 2}, 4); }) ==
        p + ": id 4 at position 1 is outside [0, 4)");
  CHECK(message_of([&] { write_token_file(p, std::vector<int>{0, -1}, 4); }) == p + ": id -1 at position 1 is outside [0, 4)");
  CHECK(bytes_of(p) == before);  // the old file stays
  CHECK(std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator()) == 1);
  CHECK_THROWS_AS(token_file_writer(d.file("x"), 0), std::invalid_argument);
  CHECK_THROWS_AS(token_file_writer(d.file("x"), 70000, token_dtype::u16, 0), std::invalid_argument);
  CHECK(message_of([&] { token_file_writer(d.path.string() + "/no/such/dir/x", 5); }).starts_with(
      d.path.string() + "/no/such/dir/x: cannot create "));
}

TEST_CASE("a corrupt or truncated token file is refused, naming the file and the problem") {
  temp_dir d;
  const std::string good = d.file("good.tokens");
  write_token_file(good, std::vector<std::uint32_t>{5, 6, 7, 8}, 300);  // 40 + 8 bytes, u16
  const std::vector<unsigned char> base = bytes_of(good);
  REQUIRE(base.size() == 48);
  auto refusal = [&](const std::string& name, auto&& corrupt) {
    std::vector<unsigned char> b = base;
    corrupt(b);
    const std::string p = d.file(name);
    put_bytes(p, b);
    const std::string m = message_of([&] { token_file f(p); });
    REQUIRE(m.starts_with(p + ": "));
    return m.substr(p.size() + 2);
  };
  CHECK(refusal("magic", [](auto& b) { b[3] = 'X'; }) ==
        "not a token file: it starts with bytes 53 54 52 58 4f 4b 45 4e, a token file with \"STRTOKEN\" "
        "(53 54 52 54 4f 4b 45 4e)");
  CHECK(refusal("version", [](auto& b) { put_le(b, 8, 2, 4); }) == "token-file version 2; this reader reads version 1");
  CHECK(refusal("dtype", [](auto& b) { put_le(b, 12, 3, 4); }) == "dtype code 3 is neither 2 (uint16 ids) nor 4 (uint32 ids)");
  // a uint32 code on uint16 data: 8 bytes are 2 ids of 4, not the 4 ids the header says
  CHECK(refusal("wide", [](auto& b) { put_le(b, 12, 4, 4); }) ==
        "the header says 4 ids of 4 bytes (56 bytes in all) but the file is 48 bytes (truncated)");
  CHECK(refusal("truncated", [](auto& b) { b.pop_back(); }) ==
        "the header says 4 ids of 2 bytes (48 bytes in all) but the file is 47 bytes (truncated)");
  CHECK(refusal("count", [](auto& b) { put_le(b, 16, 5, 8); }) ==
        "the header says 5 ids of 2 bytes (50 bytes in all) but the file is 48 bytes (truncated)");
  CHECK(refusal("trailing", [](auto& b) { b.push_back(0); b.push_back(0); }) ==
        "the header says 4 ids of 2 bytes (48 bytes in all) but the file is 50 bytes (bytes beyond the last id)");
  CHECK(refusal("huge", [](auto& b) { put_le(b, 16, 1ULL << 63, 8); }) ==
        "the header says 9223372036854775808 ids of 2 bytes (more than 2^64 bytes in all) but the file is 48 bytes "
        "(truncated)");
  CHECK(refusal("id", [](auto& b) { put_le(b, 44, 300, 2); }) == "id 300 at position 2 is not below the vocab 300");
  CHECK(refusal("vocab0", [](auto& b) { put_le(b, 24, 0, 8); }) == "vocab 0 is outside [1, 65536] for uint16 ids");
  CHECK(refusal("vocab16", [](auto& b) { put_le(b, 24, 65537, 8); }) == "vocab 65537 is outside [1, 65536] for uint16 ids");
  CHECK(refusal("short", [](auto& b) { b.resize(10); }) == "the file is 10 bytes, shorter than the 40-byte token-file header");
  CHECK(refusal("zero", [](auto& b) { b.clear(); }) == "the file is 0 bytes, shorter than the 40-byte token-file header");
  CHECK(message_of([&] { token_file f(d.file("missing")); }) == d.file("missing") + ": cannot open: No such file or directory");
  CHECK(message_of([&] { token_file f(d.path.string()); }) == d.path.string() + ": not a regular file");
  CHECK(token_file(good).read(0, 4) == std::vector<std::uint32_t>{5, 6, 7, 8});  // the original still reads
}

TEST_CASE("training windows: the ids written, shard_plan's order, the same on every replica") {
  temp_dir d;
  const std::size_t seq = 8, n_ids = 1000;
  const std::vector<std::uint32_t> ids = sample_ids(n_ids, 500);
  write_token_file(d.file("t.tokens"), ids, 500);
  const token_file f(d.file("t.tokens"));
  window_reader one(f, seq, 0, 1, 6, 42);
  CHECK(one.windows() == (n_ids - 1) / seq);  // 124: consecutive windows share one id
  CHECK(one.steps_per_epoch() == 124 / 6);

  // each window is seq inputs and their next ids, read straight from the vector written
  window_reader r(f, seq, 0, 1, 6, 42);
  const std::vector<std::uint64_t> w = r.next_windows(0);
  const token_batch<float> b = r.next<float>();
  REQUIRE(b.samples == 6);
  REQUIRE(b.inputs.size() == 6 * seq);
  REQUIRE(b.labels.size() == 6 * seq);
  for (std::size_t s = 0; s < 6; ++s)
    for (std::size_t t = 0; t < seq; ++t) {
      CHECK(b.inputs[s * seq + t] == float(ids[w[s] * seq + t]));
      CHECK(b.labels[s * seq + t] == std::int32_t(ids[w[s] * seq + t + 1]));
    }

  // over two epochs: step s is shard_plan's step s % steps of epoch s / steps, the windows
  // of an epoch are distinct, and the reader starts epoch 1 after the last full batch
  const shard_plan plan(std::int64_t(one.windows()), 0, 1, 6, 42);
  for (std::uint64_t e = 0; e < 2; ++e) {
    const auto perm = plan.permutation(e);
    std::set<std::uint64_t> seen;
    for (std::int64_t s = 0; s < plan.steps_per_epoch(); ++s) {
      const auto got = one.next_windows(0);
      const auto want = plan.indices(perm, s);
      CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end(),
                       [](std::uint64_t a, std::int64_t b) { return std::int64_t(a) == b; }));
      seen.insert(got.begin(), got.end());
      one.next<float>();
    }
    CHECK(seen.size() == std::size_t(plan.steps_per_epoch()) * 6);
    CHECK(one.position() == window_position{e, std::uint64_t(plan.steps_per_epoch()) * 6});
  }
  one.next<float>();
  CHECK(one.position() == window_position{2, 6});
  CHECK(one.position_after(2 * one.steps_per_epoch() + 1) == window_position{2, 6});

  // another seed, another order; the same seed, the same order
  window_reader a(f, seq, 0, 1, 6, 43), c(f, seq, 0, 1, 6, 42);
  CHECK(a.next_windows(0) != w);
  CHECK(c.next<float>().inputs == b.inputs);
}

TEST_CASE("data-parallel replicas read disjoint slices whose union is the one-replica batch") {
  temp_dir d;
  const std::size_t seq = 5;
  write_token_file(d.file("t.tokens"), sample_ids(2000, 1000), 1000);
  const token_file f(d.file("t.tokens"));
  window_reader whole(f, seq, 0, 1, 8, 7), r0(f, seq, 0, 2, 4, 7), r1(f, seq, 1, 2, 4, 7);
  REQUIRE(whole.steps_per_epoch() == 399 / 8);
  for (std::uint64_t s = 0; s < 2 * whole.steps_per_epoch() + 3; ++s) {  // across two epoch ends
    CHECK(r0.next_windows(1) == r1.next_windows(1));  // every replica knows the global batch
    const auto a = r0.next_windows(0), b = r1.next_windows(1), all = whole.next_windows(0);
    std::vector<std::uint64_t> joined = a;
    joined.insert(joined.end(), b.begin(), b.end());
    CHECK(joined == all);
    CHECK(std::set<std::uint64_t>(joined.begin(), joined.end()).size() == 8);
    const auto ba = r0.next<double>(), bb = r1.next<double>(), bw = whole.next<double>();
    std::vector<double> inputs = ba.inputs;
    inputs.insert(inputs.end(), bb.inputs.begin(), bb.inputs.end());
    CHECK(inputs == bw.inputs);
    CHECK(r0.position() == whole.position());
  }
}

TEST_CASE("the reading position survives a checkpoint's user entries") {
  temp_dir d;
  const std::size_t seq = 6;
  write_token_file(d.file("t.tokens"), sample_ids(3000, 777), 777, 5);
  const token_file f(d.file("t.tokens"));
  window_reader run(f, seq, 1, 2, 3, 2026);
  const std::uint64_t n = run.steps_per_epoch() + 4;  // past an epoch's end
  for (std::uint64_t s = 0; s < n; ++s) run.next<float>();
  strata::checkpoint_info info;
  info.step = static_cast<long long>(n);
  info.user = run.checkpoint_entries();
  info.user["data.position"] = std::to_string(n);  // the job's own entries stay beside them
  CHECK(info.user.at("data.epoch") == "1");
  CHECK(info.user.at("data.offset") == "24");
  CHECK(info.user.at("data.ids") == "3000");

  window_reader resumed(f, seq, 1, 2, 3, 2026);
  resumed.restore(info.user);
  CHECK(resumed.position() == run.position());
  CHECK(run.position_after(n) == run.position());
  for (int s = 0; s < 30; ++s) {
    const auto x = run.next<float>(), y = resumed.next<float>();
    CHECK(x.inputs == y.inputs);
    CHECK(x.labels == y.labels);
  }

  // resumed on one replica of batch 6: the same windows, replica 1's slice being the second half
  window_reader again(f, seq, 1, 2, 3, 2026), single(f, seq, 0, 1, 6, 2026);
  again.restore(info.user);
  single.restore(info.user);
  for (int s = 0; s < 5; ++s) {
    const auto all = single.next_windows(0), mine = again.next_windows(1);
    CHECK(std::vector<std::uint64_t>(all.begin() + 3, all.end()) == mine);
    single.next<float>(), again.next<float>();
  }

  // entries for other windows, or none, are refused by name
  auto refusal = [&](auto&& edit) {
    auto u = info.user;
    edit(u);
    window_reader x(f, seq, 1, 2, 3, 2026);
    return message_of([&] { x.restore(u); });
  };
  const std::string p = f.path() + ": ";
  CHECK(refusal([](auto& u) { u.erase("data.offset"); }) ==
        p + "the checkpoint has no entry data.offset (no reading position saved)");
  CHECK(refusal([](auto& u) { u["data.epoch"] = "1x"; }) == p + "checkpoint entry data.epoch \"1x\" is not a whole number");
  CHECK(refusal([](auto& u) { u["data.epoch"] = "-1"; }) == p + "checkpoint entry data.epoch \"-1\" is not a whole number");
  CHECK(refusal([](auto& u) { u["data.seq"] = "7"; }) ==
        p + "the checkpoint's reading position is for other windows: its data.seq is 7, this reader's 6");
  CHECK(refusal([](auto& u) { u["data.seed"] = "1"; }) ==
        p + "the checkpoint's reading position is for other windows: its data.seed is 1, this reader's 2026");
  CHECK(refusal([](auto& u) { u["data.tag"] = "6"; }) ==
        p + "the checkpoint's reading position is for other windows: its data.tag is 6, this reader's 5");
  CHECK(refusal([](auto& u) { u["data.offset"] = "500"; }) ==
        p + "checkpoint entry data.offset 500 is beyond the 499 windows of an epoch");
}

TEST_CASE("too few ids for the windows or the batch, or ids a float cannot hold, are refused") {
  temp_dir d;
  write_token_file(d.file("s.tokens"), sample_ids(20, 50), 50);
  const token_file f(d.file("s.tokens"));
  const std::string p = f.path() + ": ";
  CHECK(message_of([&] { window_reader(f, 20, 0, 1, 1, 0); }) == p + "holds 20 ids; a window of context 20 needs 21");
  CHECK(message_of([&] { window_reader(f, 6, 0, 2, 2, 0); }) ==
        p + "holds 20 ids, 3 windows of context 6, fewer than a global batch of 4 (2 replicas x 2)");
  CHECK_NOTHROW(window_reader(f, 6, 1, 3, 1, 0));
  CHECK_THROWS_AS(window_reader(f, 6, 2, 2, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(window_reader(f, 0, 0, 1, 1, 0), std::invalid_argument);

  // 2^24 + 1 is the first id a float does not hold exactly
  write_token_file(d.file("wide.tokens"), std::vector<std::uint32_t>{1, 2, 16777216, 3}, 16777217);
  write_token_file(d.file("wider.tokens"), std::vector<std::uint32_t>{1, 2, 16777217, 3}, 16777218);
  const token_file ok(d.file("wide.tokens")), wide(d.file("wider.tokens"));
  window_reader fits(ok, 1, 0, 1, 3, 0), wf(wide, 1, 0, 1, 3, 0), wd(wide, 1, 0, 1, 3, 0);
  CHECK(fits.next<float>().samples == 3);
  CHECK(message_of([&] { wf.next<float>(); }) ==
        wide.path() + ": ids up to 16777217 (vocab 16777218) are not all exact as input values of this element type");
  const auto exact = wd.next<double>();
  CHECK(std::find(exact.inputs.begin(), exact.inputs.end(), 16777217.0) != exact.inputs.end());
}

TEST_CASE("evaluation windows: in file order, each once over the replicas, padded") {
  temp_dir d;
  const std::vector<std::uint32_t> ids = sample_ids(101, 97);
  write_token_file(d.file("v.tokens"), ids, 97);
  const token_file f(d.file("v.tokens"));
  // 101 ids = 10 windows of context 10; at most 7 of them; 3 replicas, batches a multiple of 2
  std::multiset<float> firsts;
  std::size_t valid = 0;
  for (int r = 0; r < 3; ++r) {
    const auto s = evaluation_windows<float>(f, 10, 7, r, 3, 2);
    CHECK(s.valid == (r == 0 ? 3u : 2u));
    CHECK(s.batch.samples == (r == 0 ? 4u : 2u));
    for (std::size_t i = 0; i < s.batch.samples; ++i) {
      const std::size_t w = i < s.valid ? std::size_t(r) + 3 * i : 0;  // padding repeats window 0
      for (std::size_t t = 0; t < 10; ++t) {
        CHECK(s.batch.inputs[i * 10 + t] == float(ids[w * 10 + t]));
        CHECK(s.batch.labels[i * 10 + t] == std::int32_t(ids[w * 10 + t + 1]));
      }
      if (i < s.valid) firsts.insert(s.batch.inputs[i * 10]);
    }
    valid += s.valid;
  }
  CHECK(valid == 7);
  std::multiset<float> want;
  for (std::size_t w = 0; w < 7; ++w) want.insert(float(ids[w * 10]));
  CHECK(firsts == want);
  // a replica with no window of its own still gets a (padding) batch
  const auto none = evaluation_windows<float>(f, 10, 2, 2, 3, 4);
  CHECK(none.valid == 0);
  CHECK(none.batch.samples == 4);
}
