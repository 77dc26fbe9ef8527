// The plan report and the Chrome trace: every stage, layer and collective appears, and
// the trace is well-formed JSON with one compute event per (micro-batch, chunk, pass).
#include <doctest/doctest.h>

#include <string>

#include <strata/strata.hpp>

using namespace strata;

namespace {
using Net = Pipeline<Split<2, Linear<128, 256>, ReLU, Linear<256, 128>>, Split<2, Linear<128, 256>, ReLU, Linear<256, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>>;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

// Minimal JSON well-formedness check: balanced brackets outside strings, no trailing commas.
bool balanced_json(const std::string& s) {
  int depth = 0;
  bool in_string = false;
  char prev_significant = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (prev_significant == ',') return false;
      if (--depth < 0) return false;
    }
    if (c != ' ' && c != '\n') prev_significant = c;
  }
  return depth == 0 && !in_string;
}
}  // namespace

TEST_CASE("report names every layer, signature and collective") {
  const std::string r = report<P>(8);
  CHECK(r.find("data parallel 2") != std::string::npos);
  CHECK(r.find("deadlock-free: proven") != std::string::npos);
  CHECK(count(r, "column-parallel") == 2);
  CHECK(count(r, "row-parallel") == 2);
  CHECK(r.find("all-reduce") != std::string::npos);
  CHECK(r.find("send/recv") != std::string::npos);
  CHECK(r.find("bubble 1/5") != std::string::npos);  // in lowest terms (3/15 before)
  for (int rank = 0; rank < 8; ++rank) CHECK(r.find("\n  " + std::string(rank < 10 ? "   " : "  ") + std::to_string(rank)) != std::string::npos);
}

TEST_CASE("chrome trace is well-formed and holds every forward and backward") {
  const std::string t = chrome_trace<P>();
  CHECK(balanced_json(t));
  // 2 stages × 4 micro-batches × (forward + backward)
  CHECK(count(t, "\"cat\":\"forward\"") == 8);
  CHECK(count(t, "\"cat\":\"backward\"") == 8);
  CHECK(count(t, "\"thread_name\"") == 2);
  // last backward of stage 0 ends at the makespan: 15 units of 1000 µs with F = 1, B = 2
  CHECK(t.find("\"ts\":13000,\"dur\":2000") != std::string::npos);
}
