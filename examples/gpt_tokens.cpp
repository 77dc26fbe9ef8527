// BPE tokens for the GPT example: trains (or reuses) a SentencePiece BPE model on the
// training split of the fortune collections, encodes both splits into token files
// (examples/gpt/token_data.hpp), and prints the sizes, the time each step took, tokens
// per byte and a decoded sample.
//   ./gpt_tokens [vocab]        (default 2048; cache: $STRATA_TOKEN_CACHE, else ./token-cache)
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "arguments.hpp"
#include "gpt/text_data.hpp"
#include "gpt/token_data.hpp"

int main(int argc, char** argv) {
  try {
    const int vocab = argc > 1 ? examples::positive_int("vocab", argv[1]) : 2048;
    const gpt_text::corpus c = gpt_text::load();
    std::printf("text: %zu collections of %s, %zu bytes in %zu training entries, %zu bytes in %zu held out\n",
                c.files.size(), gpt_text::text_dir().c_str(), c.train.size(), c.train_entries.size(),
                c.validation.size(), c.validation_entries.size());
    const gpt_tokens::tokens t = gpt_tokens::prepare(c, vocab);
    auto said = [](const strata::data::cache_note& n) { return n.reused ? "reused" : ("built: " + n.reason); };
    std::printf("model %s: %llu pieces (%s) in %.2f s\n", t.model.name().c_str(),
                (unsigned long long)t.model.vocab_size(), said(t.model_note).c_str(), t.model_seconds);
    std::printf("%s: %llu tokens, %.4f tokens per byte (%s)\n", t.train.path().c_str(),
                (unsigned long long)t.train.size(), double(t.train.size()) / double(c.train.size()),
                said(t.train_note).c_str());
    std::printf("%s: %llu tokens, %.4f tokens per byte (%s)\n", t.validation.path().c_str(),
                (unsigned long long)t.validation.size(), double(t.validation.size()) / double(c.validation.size()),
                said(t.validation_note).c_str());
    std::printf("token files in %.2f s\n", t.encode_seconds);
    const auto first = t.validation.read(0, std::min<std::uint64_t>(48, t.validation.size()));
    std::printf("the first %zu held-out tokens:", first.size());
    for (const std::uint32_t id : first) {
      std::string p = t.model.piece(id);  // "\n" and "\t" shown escaped
      for (std::size_t at; (at = p.find_first_of("\n\t")) != std::string::npos;)
        p.replace(at, 1, p[at] == '\n' ? "\\n" : "\\t");
      std::printf(" %s", p.c_str());
    }
    std::printf("\ndecoded:\n%s\n", t.model.decode(first).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_tokens: %s\n", e.what());
    return 1;
  }
}
