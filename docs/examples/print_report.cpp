// Printing a plan and writing its schedule as a Chrome trace.
//   ./print_report [world] [trace.json]
#include <cstdio>
#include <fstream>
#include <string>

#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 512>, ReLU>,
                     Replicate<1, Linear<512, 512>, ReLU, Linear<512, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, Input<1, 28, 28>, MicroBatch<64>, NumMicroBatch<4>>;

static_assert(P::valid && P::deadlock_free);

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::stoi(argv[1]) : 4;
  const std::string table = report<P>(world);  // world 0: World<N> if given, else one replica
  std::fputs(table.c_str(), stdout);

  const std::string trace = chrome_trace<P>();  // open in ui.perfetto.dev or chrome://tracing
  if (argc > 2) std::ofstream(argv[2]) << trace;
  return table.empty() || trace.empty() ? 1 : 0;
}
