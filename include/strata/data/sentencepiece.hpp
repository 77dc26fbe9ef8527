#pragma once
// strata-header: host-only sentencepiece
// strata/data/sentencepiece.hpp - BPE tokens through SentencePiece (Debian:
// libsentencepiece-dev; link sentencepiece and sentencepiece_train, or the CMake target
// strata::sentencepiece): train a model deterministically, cache it beside the data, encode
// documents once into a cached token file (token_file.hpp), decode ids to text.
//
// Training (train_bpe) passes SentencePiece these options, whatever the machine:
//   model_type=bpe  vocab_size=<bpe_options>  character_coverage=<bpe_options>
//   num_threads=1  byte_fallback=true  normalization_rule_name=identity
//   add_dummy_prefix=false  remove_extra_whitespaces=false  max_sentence_length=1048576
// and the sentences in the caller's order, so two trainings on the same sentences give
// byte-identical models (tests/unit/test_data_sentencepiece.cpp compares them). Identity
// normalisation, no dummy prefix and kept whitespace make encoding lossless:
// decode(encode(s)) == s for valid UTF-8 without the character U+2581 (SentencePiece's
// space mark, which decodes to a space); byte fallback encodes characters the model never
// saw as their bytes (ids 3-258 are <0x00>..<0xFF>; 0, 1, 2 are <unk>, <s>, </s>).
//
// Caching: cached_bpe() keeps the model at `model_path` and beside it `model_path`.json,
// which records the options, a hash of the sentences (FNV-1a 64 over each sentence's
// length and bytes) and of the model file; the model is reused only when all three match,
// retrained otherwise. cached_token_file() records its own hash (of the model and the
// documents) in the token file's tag and re-encodes when it differs or the file does not
// open. Files are written beside their path and renamed into place, so a crash leaves the
// old file or the new one. Every failure of the library (its util::Status) is a
// data_error naming the file, or "SentencePiece BPE training", with SentencePiece's
// message.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "strata/data/data_error.hpp"
#include "strata/data/token_file.hpp"

namespace strata::data {

struct bpe_options {
  int vocab_size = 2048;
  double character_coverage = 1.0;  // characters the model covers (1.0: every one seen in training)
};

// What train_bpe passes SentencePiece (flag names and values).
inline std::map<std::string, std::string> bpe_trainer_options(const bpe_options& o) {
  char coverage[32];
  std::snprintf(coverage, sizeof coverage, "%.17g", o.character_coverage);
  return {{"model_type", "bpe"},
          {"vocab_size", std::to_string(o.vocab_size)},
          {"character_coverage", coverage},
          {"num_threads", "1"},
          {"byte_fallback", "true"},
          {"normalization_rule_name", "identity"},
          {"add_dummy_prefix", "false"},
          {"remove_extra_whitespaces", "false"},
          {"max_sentence_length", "1048576"},
          {"minloglevel", "2"}};  // warnings and errors come back as a util::Status
}
inline constexpr std::size_t bpe_max_sentence_bytes = 1048576;

// How a cached_* call got its file: reused, or (re)built and why.
struct cache_note {
  bool reused = false;
  std::string reason;  // why it was built ("" when reused)
};

namespace detail {

// FNV-1a, 64 bits.
class fnv1a64 {
 public:
  void bytes(std::string_view s) noexcept {
    for (const char c : s) h_ = (h_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  void number(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) h_ = (h_ ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
  }
  void text(std::string_view s) noexcept {  // length first: ["ab","c"] and ["a","bc"] differ
    number(s.size());
    bytes(s);
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

inline std::uint64_t hash_texts(std::span<const std::string> texts) {
  fnv1a64 h;
  h.number(texts.size());
  for (const std::string& t : texts) h.text(t);
  return h.value();
}
inline std::string hex64(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// A SentencePiece status as an exception (a no-op when ok).
inline void check(const sentencepiece::util::Status& s, const std::string& where, const std::string& doing) {
  if (!s.ok()) throw data_error(where, doing + " failed: " + s.ToString());
}

// The whole file, or nothing when it cannot be opened.
inline std::optional<std::string> read_whole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return std::move(ss).str();
}

// The sentences, one at a time, as the trainer asks for them.
class sentence_feed : public sentencepiece::SentenceIterator {
 public:
  explicit sentence_feed(std::span<const std::string> s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::span<const std::string> s_;
  std::size_t i_ = 0;
};

}  // namespace detail

// A loaded SentencePiece model: encode text to ids, decode ids to text.
class sentencepiece_model {
 public:
  // The model file at `path` (a data_error naming it when missing or not a model).
  static sentencepiece_model load(const std::string& path) {
    std::optional<std::string> bytes = detail::read_whole(path);
    if (!bytes) throw data_error(path, "cannot read the SentencePiece model");
    return from_bytes(std::move(*bytes), path);
  }
  // A serialized model; `name` stands for it in messages.
  static sentencepiece_model from_bytes(std::string bytes, const std::string& name) {
    sentencepiece_model m;
    m.name_ = name;
    m.bytes_ = std::move(bytes);
    m.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    detail::check(m.sp_->LoadFromSerializedProto(m.bytes_), name, "loading the SentencePiece model");
    if (m.sp_->GetPieceSize() < 1) throw data_error(name, "the SentencePiece model has no pieces");
    return m;
  }

  const std::string& name() const noexcept { return name_; }
  const std::string& bytes() const noexcept { return bytes_; }  // the serialized model
  std::uint64_t vocab_size() const { return static_cast<std::uint64_t>(sp_->GetPieceSize()); }
  std::uint64_t hash() const { return detail::hash_texts(std::span<const std::string>(&bytes_, 1)); }

  std::vector<std::uint32_t> encode(std::string_view text) const {
    std::vector<int> ids;
    detail::check(sp_->Encode(text, &ids), name_, "encoding " + std::to_string(text.size()) + " bytes");
    return {ids.begin(), ids.end()};  // ids are in [0, vocab_size()): the library's own
  }
  std::string decode(std::span<const std::uint32_t> ids) const {
    std::vector<int> v;
    v.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= vocab_size())
        throw data_error(name_, "cannot decode id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                    ": the vocabulary has " + std::to_string(vocab_size()) + " pieces");
      v.push_back(static_cast<int>(ids[i]));
    }
    std::string text;
    detail::check(sp_->Decode(v, &text), name_, "decoding " + std::to_string(ids.size()) + " ids");
    return text;
  }
  std::string decode(const std::vector<std::uint32_t>& ids) const { return decode(std::span<const std::uint32_t>(ids)); }
  // The piece of one id ("▁the", "<0x0A>").
  std::string piece(std::uint32_t id) const {
    if (id >= vocab_size())
      throw std::out_of_range(name_ + ": id " + std::to_string(id) + " of " + std::to_string(vocab_size()));
    return sp_->IdToPiece(static_cast<int>(id));
  }

 private:
  sentencepiece_model() = default;
  std::string name_, bytes_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Trains a BPE model on `sentences` (see the top); returns the serialized model.
inline std::string train_bpe(std::span<const std::string> sentences, const bpe_options& o) {
  const std::string where = "SentencePiece BPE training";
  if (o.vocab_size < 1) throw std::invalid_argument(where + ": vocab_size must be positive");
  if (sentences.empty()) throw std::invalid_argument(where + ": no sentences");
  for (std::size_t i = 0; i < sentences.size(); ++i)
    if (sentences[i].size() > bpe_max_sentence_bytes)  // the trainer would skip it silently
      throw std::invalid_argument(where + ": sentence " + std::to_string(i) + " is " +
                                  std::to_string(sentences[i].size()) + " bytes, more than the " +
                                  std::to_string(bpe_max_sentence_bytes) + " a sentence may hold");
  const std::map<std::string, std::string> options = bpe_trainer_options(o);
  const std::unordered_map<std::string, std::string> args(options.begin(), options.end());
  detail::sentence_feed feed(sentences);
  std::string model;
  detail::check(sentencepiece::SentencePieceTrainer::Train(args, &feed, &model), where,
                "training with vocab_size " + std::to_string(o.vocab_size));
  return model;
}

// The model trained on `sentences` with `o`, kept at model_path (see the top): reused when
// model_path.json says it was trained on the same sentences with the same options and the
// model file is the one it recorded; trained and written otherwise.
inline sentencepiece_model cached_bpe(std::span<const std::string> sentences, const bpe_options& o,
                                      const std::string& model_path, cache_note* note = nullptr) {
  std::string options;
  for (const auto& [k, v] : bpe_trainer_options(o)) options += k + "=" + v + "\n";
  const std::string inputs = detail::hex64(detail::hash_texts(sentences));
  const std::string manifest_path = model_path + ".json";
  std::string reason;
  if (const std::optional<std::string> text = detail::read_whole(manifest_path); !text) {
    reason = "no " + manifest_path;
  } else {
    const nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    auto field = [&](const char* key) {
      return m.is_object() && m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : std::string();
    };
    std::optional<std::string> bytes;
    if (m.is_discarded() || field("format") != "strata-bpe-1") reason = manifest_path + " is not a strata-bpe-1 manifest";
    else if (field("options") != options) reason = "other options";
    else if (field("sentences") != inputs) reason = "other sentences";
    else if (!(bytes = detail::read_whole(model_path))) reason = "cannot read " + model_path;
    else if (detail::hex64(detail::hash_texts(std::span<const std::string>(&*bytes, 1))) != field("model"))
      reason = model_path + " is not the model " + manifest_path + " recorded";
    else {
      if (note) *note = {true, ""};
      return sentencepiece_model::load(model_path);
    }
  }
  std::string model = train_bpe(sentences, o);
  sentencepiece_model loaded = sentencepiece_model::from_bytes(model, model_path);
  detail::replace_file(model_path, model.data(), model.size());
  const nlohmann::json manifest = {{"format", "strata-bpe-1"},
                                   {"options", options},
                                   {"sentences", inputs},
                                   {"sentence_count", sentences.size()},
                                   {"model", detail::hex64(loaded.hash())}};
  const std::string m = manifest.dump(1) + "\n";
  detail::replace_file(manifest_path, m.data(), m.size());
  if (note) *note = {false, reason};
  return loaded;
}

// `documents` encoded with `model`, one after another, in a token file at `path`, reused
// when its tag says it holds these documents encoded with this model. Each document must
// decode back to itself (a data_error naming it otherwise), so the file is the text.
inline token_file cached_token_file(const sentencepiece_model& model, std::span<const std::string> documents,
                                    const std::string& path, cache_note* note = nullptr) {
  detail::fnv1a64 h;
  h.number(model.hash());
  h.number(detail::hash_texts(documents));
  const std::uint64_t tag = h.value();
  std::string reason = "no " + path;
  if (std::ifstream(path).good()) {
    try {
      token_file f(path);
      if (f.tag() == tag && f.vocab() == model.vocab_size()) {
        if (note) *note = {true, ""};
        return f;
      }
      reason = path + " holds other documents or another model's ids (tag " + detail::hex64(f.tag()) + ", wanted " +
               detail::hex64(tag) + ")";
    } catch (const data_error& e) {
      reason = e.what();
    }
  }
  {
    token_file_writer w(path, model.vocab_size(), tag);
    for (std::size_t d = 0; d < documents.size(); ++d) {
      const std::vector<std::uint32_t> ids = model.encode(documents[d]);
      if (model.decode(ids) != documents[d])
        throw data_error(path, "document " + std::to_string(d) + " (" + std::to_string(documents[d].size()) +
                                   " bytes) does not decode back to itself with " + model.name() +
                                   " (invalid UTF-8, or the character U+2581)");
      w.append(ids);
    }
    w.finish();
  }
  if (note) *note = {false, reason};
  return token_file(path);
}

}  // namespace strata::data
