// Prints the plan of DESIGN.md's Fashion-MNIST pipeline (OneFlow's seed-004 MLP as two
// stages) and writes its schedule timeline as a Chrome trace:
//   fashion_mnist_plan [world (4)] [trace path (fashion_mnist_schedule.json beside the program)]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <strata/strata.hpp>

using namespace strata;

using Net = Pipeline<Replicate<1, Flatten, Linear<784, 512>, ReLU>,
                     Replicate<1, Linear<512, 512>, ReLU, Linear<512, 10>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<64>, NumMicroBatch<4>, Schedule<PreferBackward>>;

static_assert(P::devices_per_replica == 2);
static_assert(P::deadlock_free);
static_assert(P::peak_activation_bytes(0) <= (64 << 20));

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::stoi(argv[1]) : 4;
  std::fputs(report<P>(world).c_str(), stdout);
  // By default next to the program (the build folder), never into the source tree it may be run from.
  const std::string trace =
      argc > 2 ? argv[2] : (std::filesystem::path(argv[0]).parent_path() / "fashion_mnist_schedule.json").string();
  std::ofstream out(trace);
  out << chrome_trace<P>();
  if (!out.flush()) {
    std::fprintf(stderr, "cannot write %s\n", trace.c_str());
    return 1;
  }
  std::printf("\nschedule timeline written to %s (open in ui.perfetto.dev or chrome://tracing)\n", trace.c_str());
}
