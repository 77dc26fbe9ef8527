// Byte-level text for the GPT example: the fortune collections Debian's `fortunes`
// package installs (/usr/share/games/fortunes), split into entries at their "%" lines.
// Every 20th entry is held out for validation (a fixed split that does not depend on
// the number of processes); training windows are drawn at random positions, the same
// global batch on every rank, each data-parallel replica taking its own slice.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpt_text {

inline const char* default_dir = "/usr/share/games/fortunes";
// STRATA_TEXT_DIR, when set, names another folder holding the same collections.
inline std::string text_dir() {
  const char* e = std::getenv("STRATA_TEXT_DIR");
  return e && *e ? e : default_dir;
}
// Prose collections (the ASCII-art ones are left out).
inline const std::vector<std::string> collections = {
    "computers", "cookie", "definitions", "education", "food",     "fortunes", "humorists", "kids",
    "law",       "linux",  "literature",  "love",      "magic",    "medicine", "miscellaneous",
    "people",    "pets",   "platitudes",  "politics",  "science",  "songs-poems", "sports",  "wisdom", "work"};

struct corpus {
  std::string train, validation;
  std::vector<std::string> files;
  // the same text entry by entry (train is the concatenation of train_entries)
  std::vector<std::string> train_entries, validation_entries;
};

// Reads every collection; throws naming the file that is missing, unreadable or empty.
inline corpus load(const std::string& dir = text_dir()) {
  corpus c;
  long long entry = 0;
  for (const std::string& name : collections) {
    const std::string path = dir + "/" + name;
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path + " (install Debian's `fortunes` package)");
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) throw std::runtime_error("cannot read " + path);
    const std::string text = ss.str();
    if (text.empty()) throw std::runtime_error(path + " is empty");
    c.files.push_back(path);
    std::istringstream lines(text);
    std::string line, current;
    auto flush = [&] {
      if (current.empty()) return;
      const bool held_out = entry++ % 20 == 19;
      (held_out ? c.validation : c.train) += current;
      (held_out ? c.validation_entries : c.train_entries).push_back(std::move(current));
      current.clear();
    };
    while (std::getline(lines, line)) {
      if (line == "%") flush();
      else current += line + "\n";
    }
    flush();
  }
  return c;
}

// A window of context `seq` reads seq + 1 bytes (its inputs and their next bytes), and
// training draws its start from [0, size - seq - 2]: a text shorter than that is refused
// with the sizes named, before any size is computed from it.
inline void require_windows(const std::string& text, std::size_t seq, std::size_t need, const std::string& what) {
  if (text.size() < seq + need)
    throw std::runtime_error(what + " holds " + std::to_string(text.size()) + " bytes; a window of context " +
                             std::to_string(seq) + " needs at least " + std::to_string(seq + need));
}
inline void require_windows(const corpus& c, std::size_t seq) {
  require_windows(c.train, seq, 2, "the training text (" + text_dir() + ")");
  require_windows(c.validation, seq, 1, "the held-out text (" + text_dir() + ")");
}

// Entropy, in nats per byte, of the byte frequencies of `text`: the loss of the best
// model that ignores context (the unigram baseline).
// Every collection, checked to hold enough windows of `seq` bytes for training and validation.
inline corpus load_for(std::size_t seq) {
  corpus c = load();
  require_windows(c, seq);
  return c;
}

inline double unigram_entropy(const std::string& text) {
  std::vector<double> count(256, 0.0);
  for (unsigned char b : text) count[b] += 1;
  double h = 0;
  for (double n : count)
    if (n > 0) h -= n / double(text.size()) * std::log(n / double(text.size()));
  return h;
}

// A batch of windows: inputs are `seq` bytes (as token ids), labels the next byte of each.
template <class M>
struct windows {
  std::vector<M> inputs;
  std::vector<std::int32_t> labels;
  std::size_t samples = 0;
  void add(const std::string& text, std::size_t start, std::size_t seq) {
    for (std::size_t t = 0; t < seq; ++t) {
      inputs.push_back(static_cast<M>(static_cast<unsigned char>(text[start + t])));
      labels.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(text[start + t + 1])));
    }
    ++samples;
  }
};

// Step `step`'s training windows for data-parallel replica `replica` of `replicas`: the
// global batch (replicas × per_replica windows) is drawn from (seed, step) alone.
template <class M>
windows<M> training_batch(const std::string& text, std::size_t seq, std::uint64_t seed, std::uint64_t step,
                          int replica, int replicas, std::size_t per_replica) {
  require_windows(text, seq, 2, "the training text");
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ULL + step);
  std::uniform_int_distribution<std::size_t> start(0, text.size() - seq - 2);
  windows<M> w;
  for (int r = 0; r < replicas; ++r)
    for (std::size_t i = 0; i < per_replica; ++i) {
      const std::size_t s = start(g);
      if (r == replica) w.add(text, s, seq);
    }
  return w;
}

// Replica `replica` of `replicas`' share of the validation windows — consecutive,
// non-overlapping, at most `count` from the start of the held-out text, every replicas-th
// one — padded with copies of the first to a multiple of `multiple` samples; `valid` is
// how many are real.
template <class M>
struct validation_share {
  windows<M> w;
  std::size_t valid = 0;
};
template <class M>
validation_share<M> validation_windows(const std::string& text, std::size_t seq, std::size_t count, int replica,
                                       int replicas, std::size_t multiple) {
  require_windows(text, seq, 1, "the held-out text");
  validation_share<M> v;
  for (std::size_t i = std::size_t(replica); i < count && (i + 1) * seq + 1 <= text.size(); i += std::size_t(replicas))
    v.w.add(text, i * seq, seq);
  v.valid = v.w.samples;
  while (v.w.samples % multiple != 0 || v.w.samples == 0) v.w.add(text, 0, seq);
  return v;
}

}  // namespace gpt_text
