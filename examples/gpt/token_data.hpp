// BPE tokens of the GPT example's text (examples/gpt/text_data.hpp): a SentencePiece model
// trained on the training entries of the fortune collections, both splits encoded into
// token files (strata/data/token_file.hpp), all cached in one folder: $STRATA_TOKEN_CACHE,
// else token-cache/ in the working directory. A second run reuses the three files; other
// text or another vocabulary size rebuilds them. Needs SentencePiece (strata::sentencepiece).
//
// A job reads them with strata::data::window_reader (training) and evaluation_windows
// (validation), the same fields as text_data.hpp's windows.
#pragma once
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include <strata/data/sentencepiece.hpp>
#include <strata/data/token_file.hpp>

#include "../agreed_load.hpp"
#include "text_data.hpp"

namespace gpt_tokens {

inline std::string cache_dir() {
  const char* e = std::getenv("STRATA_TOKEN_CACHE");
  return e && *e ? e : "token-cache";
}

struct tokens {
  strata::data::sentencepiece_model model;
  strata::data::token_file train, validation;
  strata::data::cache_note model_note, train_note, validation_note;  // reused, or built and why
  double model_seconds = 0, encode_seconds = 0;  // training (or reusing) the model; both token files
};

// The model and both token files for `vocab` pieces, built where missing or stale.
inline tokens prepare(const gpt_text::corpus& c, int vocab, const std::string& dir = cache_dir()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw strata::data::data_error(dir, "cannot create the token cache folder: " + ec.message());
  const std::string stem = dir + "/fortunes-bpe" + std::to_string(vocab);
  using clock = std::chrono::steady_clock;
  strata::data::cache_note m, t, v;
  const auto t0 = clock::now();
  strata::data::sentencepiece_model model =
      strata::data::cached_bpe(c.train_entries, {.vocab_size = vocab}, stem + ".model", &m);
  const auto t1 = clock::now();
  strata::data::token_file train = strata::data::cached_token_file(model, c.train_entries, stem + "-train.tokens", &t);
  strata::data::token_file validation =
      strata::data::cached_token_file(model, c.validation_entries, stem + "-validation.tokens", &v);
  const auto t2 = clock::now();
  return {std::move(model), std::move(train), std::move(validation), m, t, v,
          std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count()};
}

// prepare() in a multi-process job: rank 0 builds what is missing, then every other rank
// opens the files (or, when the folder is another node's own disk, builds the same bytes:
// training and encoding are deterministic). A failure on any rank is the same agreed_error
// on every rank, naming that rank's problem.
template <class World>
tokens agreed_prepare(World& world, const gpt_text::corpus& c, int vocab, const std::string& dir = cache_dir()) {
  std::optional<tokens> t;
  for (const bool first : {true, false})
    examples::agreed_load(world, [&] {
      if ((world.rank() == 0) == first) t.emplace(prepare(c, vocab, dir));
      return 0;
    });
  return std::move(*t);
}

}  // namespace gpt_tokens
