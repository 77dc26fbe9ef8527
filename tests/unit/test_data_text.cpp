// The GPT example's text (examples/gpt/text_data.hpp): a text too short for one window is
// refused with the sizes named before any size is computed from it (a training text
// shorter than the context used to wrap an unsigned subtraction and crash every rank; a
// 2-byte held-out text was read out of bounds).
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include "gpt/text_data.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace {

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a text shorter than one window is refused, naming the sizes") {
  const std::string tiny(40, 'x');
  CHECK(message_of([&] { gpt_text::training_batch<float>(tiny, 128, 1, 0, 0, 1, 4); }) ==
        "the training text holds 40 bytes; a window of context 128 needs at least 130");
  CHECK(message_of([&] { gpt_text::validation_windows<float>("ab", 128, 8, 0, 1, 4); }) ==
        "the held-out text holds 2 bytes; a window of context 128 needs at least 129");
  // the shortest texts that work: one training start, one held-out window
  const auto b = gpt_text::training_batch<float>(std::string(130, 'y'), 128, 1, 0, 0, 1, 2);
  CHECK(b.samples == 2);
  const auto v = gpt_text::validation_windows<float>(std::string(129, 'z'), 128, 8, 0, 1, 4);
  CHECK(v.valid == 1);
  CHECK(v.w.samples == 4);
}

TEST_CASE("a corpus whose collections are too short is refused when loaded") {
  // every 20th entry is held out: n one-entry collections (20 <= n < 40) give n - 1 training
  // entries and one held out
  const std::size_t n = gpt_text::collections.size();
  REQUIRE((n >= 20 && n < 40));
  auto refusal = [](const std::string& entry) {
    temp_dir d;
    for (const std::string& name : gpt_text::collections) std::ofstream(d.file(name)) << entry;
    const gpt_text::corpus c = gpt_text::load(d.path.string());
    setenv("STRATA_TEXT_DIR", d.path.c_str(), 1);
    std::string m = message_of([&] { gpt_text::require_windows(c, 128); });
    unsetenv("STRATA_TEXT_DIR");
    const std::string dir = d.path.string();
    return std::pair{m.empty() ? m : m.replace(m.find(dir), dir.size(), "DIR"), c};
  };
  const auto [train_short, a] = refusal("ab\n");
  CHECK(a.train.size() == 3 * (n - 1));
  CHECK(train_short == "the training text (DIR) holds " + std::to_string(3 * (n - 1)) +
                           " bytes; a window of context 128 needs at least 130");
  const auto [held_out_short, b] = refusal("a line of thirty bytes, or so\n");
  CHECK(b.validation.size() == 30);
  CHECK(held_out_short == "the held-out text (DIR) holds 30 bytes; a window of context 128 needs at least 129");
}
