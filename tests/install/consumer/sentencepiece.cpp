// Downstream smoke test of the optional component strata::sentencepiece: SentencePiece's
// headers and both its libraries come through the target; a model trains, encodes
// losslessly, and its ids round-trip through a token file.
#include <strata/data/sentencepiece.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

int main() {
  using namespace strata::data;
  const std::vector<std::string> text = {"the cat sat on the mat\n", "the dog sat on the log\n"};
  const sentencepiece_model m = sentencepiece_model::from_bytes(train_bpe(text, {.vocab_size = 280}), "consumer");
  const std::vector<std::uint32_t> ids = m.encode(text[0]);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_consumer_" + std::to_string(::getpid()) + ".tokens")).string();
  write_token_file(path, ids, m.vocab_size());
  const token_file f(path);
  const bool ok = m.vocab_size() == 280 && ids.size() < text[0].size() && m.decode(f.read(0, f.size())) == text[0];
  std::filesystem::remove(path);
  std::printf("strata::sentencepiece: %zu ids for %zu bytes, %s\n", ids.size(), text[0].size(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
