// requires: sentencepiece fortunes
// SentencePiece BPE on the GPT example's text (strata/data/sentencepiece.hpp): training twice
// gives byte-identical models, decode(encode(s)) == s on the held-out fortunes, the caches
// are reused only when what made them is unchanged, and the library's errors come back as
// data_errors naming the file; the example's agreed_prepare (examples/gpt/token_data.hpp).
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include "gpt/text_data.hpp"
#include "gpt/token_data.hpp"
#include <strata/comm/self.hpp>
#include <strata/core/agreed_error.hpp>
#include <strata/data/sentencepiece.hpp>
#include <strata/data/token_windows.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace strata::data;

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const gpt_text::corpus& fortunes() {
  static const gpt_text::corpus c = gpt_text::load();
  return c;
}
// the 512-piece model of the training entries, trained once for the whole file
const std::string& model512() {
  static const std::string m = train_bpe(fortunes().train_entries, {.vocab_size = 512});
  return m;
}

}  // namespace

TEST_CASE("BPE training is deterministic and encoding is lossless on the held-out fortunes") {
  const gpt_text::corpus& c = fortunes();
  REQUIRE(c.train_entries.size() > 10000);
  REQUIRE(c.validation_entries.size() > 500);
  const std::string& a = model512();
  const std::string b = train_bpe(c.train_entries, {.vocab_size = 512});
  CHECK(a == b);  // byte-identical serialized models
  const sentencepiece_model m = sentencepiece_model::from_bytes(a, "m512");
  CHECK(m.vocab_size() == 512);
  CHECK(m.piece(0) == "<unk>");
  CHECK(m.piece(3) == "<0x00>");
  CHECK(m.piece(258) == "<0xFF>");
  CHECK(m.piece(10 + 3) == "<0x0A>");

  std::size_t tokens = 0, bytes = 0;
  for (const std::string& s : c.validation_entries) {
    const std::vector<std::uint32_t> ids = m.encode(s);
    CHECK(m.decode(ids) == s);
    tokens += ids.size(), bytes += s.size();
  }
  // BPE merges: fewer tokens than bytes (byte-level would be 1.0)
  CHECK(double(tokens) / double(bytes) < 0.7);
  // characters never seen in training fall back to their bytes and still come back
  const std::string unseen = "na\xc3\xafve \xe2\x82\xac 5\tx\x07\n";
  CHECK(m.decode(m.encode(unseen)) == unseen);
}

TEST_CASE("the model and the token files are cached, and rebuilt when what made them changes") {
  const gpt_text::corpus& c = fortunes();
  temp_dir d;
  const std::string model_path = d.file("fortunes.model");
  cache_note note;
  const sentencepiece_model m = cached_bpe(c.train_entries, {.vocab_size = 512}, model_path, &note);
  CHECK(!note.reused);
  CHECK(note.reason == "no " + model_path + ".json");
  CHECK(read_bytes(model_path) == model512());
  const sentencepiece_model again = cached_bpe(c.train_entries, {.vocab_size = 512}, model_path, &note);
  CHECK(note.reused);
  CHECK(again.bytes() == m.bytes());

  // what invalidates it (on the first 2000 entries, to train fast)
  const std::string small_path = d.file("small.model");
  std::vector<std::string> some(c.train_entries.begin(), c.train_entries.begin() + 2000);
  cached_bpe(some, {.vocab_size = 400}, small_path, &note);
  cached_bpe(some, {.vocab_size = 420}, small_path, &note);
  CHECK(!note.reused);
  CHECK(note.reason == "other options");
  some.pop_back();
  cached_bpe(some, {.vocab_size = 420}, small_path, &note);
  CHECK(note.reason == "other sentences");
  std::ofstream(small_path, std::ios::app) << "x";  // the model file changed under its manifest
  cached_bpe(some, {.vocab_size = 420}, small_path, &note);
  CHECK(note.reason == small_path + " is not the model " + small_path + ".json recorded");
  std::ofstream(small_path + ".json") << "{\"format\": 1";
  cached_bpe(some, {.vocab_size = 420}, small_path, &note);
  CHECK(note.reason == small_path + ".json is not a strata-bpe-1 manifest");
  cached_bpe(some, {.vocab_size = 420}, small_path, &note);
  CHECK(note.reused);

  // the held-out entries as a token file: its ids decode to the held-out text
  const std::string val = d.file("validation.tokens");
  const token_file f = cached_token_file(m, c.validation_entries, val, &note);
  CHECK(!note.reused);
  CHECK(f.vocab() == 512);
  CHECK(f.dtype() == token_dtype::u16);
  CHECK(m.decode(f.read(0, f.size())) == c.validation);
  // windows of it are the text's tokens, labels one ahead
  const auto w = evaluation_windows<float>(f, 64, 1, 0, 1, 1);
  CHECK(w.batch.labels[0] == std::int32_t(f[1]));

  const std::uint64_t tag = f.tag();
  CHECK(cached_token_file(m, c.validation_entries, val, &note).tag() == tag);
  CHECK(note.reused);
  // another model: re-encoded
  const sentencepiece_model other = sentencepiece_model::load(small_path);  // 420 pieces
  CHECK(cached_token_file(other, c.validation_entries, val, &note).vocab() == 420);
  CHECK(!note.reused);
  CHECK(note.reason.starts_with(val + " holds other documents or another model's ids"));
  // a corrupt cached file: re-encoded, the reason saying what was wrong
  {
    std::fstream g(val, std::ios::in | std::ios::out | std::ios::binary);
    g.seekp(0);
    g.write("XXXX", 4);
  }
  CHECK(cached_token_file(m, c.validation_entries, val, &note).tag() == tag);
  CHECK(note.reason.starts_with(val + ": not a token file"));
  // a text that cannot come back (invalid UTF-8) is refused, not silently changed
  const std::vector<std::string> bad = {"fine\n", "caf\xe9\n"};
  CHECK(message_of([&] { cached_token_file(m, bad, d.file("bad.tokens")); }) ==
        d.file("bad.tokens") + ": document 1 (5 bytes) does not decode back to itself with " + model_path +
            " (invalid UTF-8, or the character U+2581)");
  CHECK(!std::filesystem::exists(d.file("bad.tokens")));
}

TEST_CASE("SentencePiece's errors are data_errors naming the file") {
  temp_dir d;
  const std::string junk = d.file("junk.model");
  std::ofstream(junk) << "not a model";
  const std::string m = message_of([&] { sentencepiece_model::load(junk); });
  CHECK(m.starts_with(junk + ": loading the SentencePiece model failed: "));
  CHECK(message_of([&] { sentencepiece_model::load(d.file("none.model")); }) ==
        d.file("none.model") + ": cannot read the SentencePiece model");
  const std::vector<std::string> tiny = {"abc abc abd\n", "abd abc\n"};
  const std::string big = message_of([&] { train_bpe(tiny, {.vocab_size = 5000}); });
  CHECK(big.starts_with("SentencePiece BPE training: training with vocab_size 5000 failed: "));
  CHECK(big.find("Vocabulary size too high (5000)") != std::string::npos);
  const sentencepiece_model small = sentencepiece_model::from_bytes(train_bpe(tiny, {.vocab_size = 270}), "tiny");
  CHECK(message_of([&] { small.decode(std::vector<std::uint32_t>{1, 270}); }) ==
        "tiny: cannot decode id 270 at position 1: the vocabulary has 270 pieces");
}

namespace {
// a world of one process, as examples::agreed_load sees one
struct one_process {
  strata::comm::self_communicator c;
  int rank() const { return 0; }
  strata::comm::self_communicator& comm() { return c; }
};
}  // namespace

TEST_CASE("the example's agreed_prepare: the cached files, or one agreed error") {
  temp_dir d;
  gpt_text::corpus c;
  for (int i = 0; i < 40; ++i)
    (i % 20 == 19 ? c.validation_entries : c.train_entries)
        .push_back("entry " + std::to_string(i) + ": the quick brown fox\n\tjumps over the lazy dog\n");
  one_process w;
  const gpt_tokens::tokens t = gpt_tokens::agreed_prepare(w, c, 300, d.file("cache"));
  CHECK(t.model.vocab_size() == 300);
  CHECK(t.model.name() == d.file("cache") + "/fortunes-bpe300.model");
  CHECK(t.train.path() == d.file("cache") + "/fortunes-bpe300-train.tokens");
  std::string train, validation;
  for (const auto& e : c.train_entries) train += e;
  for (const auto& e : c.validation_entries) validation += e;
  CHECK(t.model.decode(t.train.read(0, t.train.size())) == train);
  CHECK(t.model.decode(t.validation.read(0, t.validation.size())) == validation);
  CHECK(!t.model_note.reused);
  const gpt_tokens::tokens again = gpt_tokens::agreed_prepare(w, c, 300, d.file("cache"));
  CHECK((again.model_note.reused && again.train_note.reused && again.validation_note.reused));

  std::ofstream(d.file("blocked")) << "a file where the folder should be";
  const std::string dir = d.file("blocked") + "/cache";
  CHECK_THROWS_AS(gpt_tokens::agreed_prepare(w, c, 300, dir), strata::agreed_error);
  const std::string m = message_of([&] { gpt_tokens::agreed_prepare(w, c, 300, dir); });
  CHECK(m.starts_with(dir + ": cannot create the token cache folder: "));
  CHECK(m.find("[found by rank 0 of 1 in communicator 'world']") != std::string::npos);
}
