// Downstream smoke test of the optional component strata::dnnl: oneDNN's headers and
// library come through the target, float convolutions take its path, and a 3×3 stride-2
// convolution with padding equals the im2col path (double) on the same numbers.
#include <strata/backend/host/backend.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  namespace bk = strata::backend;
  static_assert(bk::detail::native_conv2d_v<bk::host::queue, float>, "strata::dnnl must select oneDNN for float");
  bk::host::queue q(1);
  const strata::conv_geometry g = strata::conv_geometry::of(7, 7, 3, 3, 3, 2, 1);
  const std::size_t n = 2, O = 4, nx = n * g.in_pixels() * 3, ny = n * g.out_pixels() * O, nw = O * g.patch();
  std::vector<float> x(nx), w(nw), y(ny), workf(bk::conv2d_work_values(n, g));
  std::vector<double> xd(nx), wd(nw), yd(ny), work(bk::conv2d_work_values(n, g));
  for (std::size_t i = 0; i < nx; ++i) xd[i] = x[i] = float(std::sin(0.37 * double(i)));
  for (std::size_t i = 0; i < nw; ++i) wd[i] = w[i] = float(std::cos(0.21 * double(i)));
  bk::conv2d_forward(q, n, g, O, x.data(), w.data(), static_cast<const float*>(nullptr), y.data(),
                     workf.data());
  bk::conv2d_forward(q, n, g, O, xd.data(), wd.data(), static_cast<const double*>(nullptr), yd.data(), work.data());
  double err = 0;
  for (std::size_t i = 0; i < ny; ++i) err = std::fmax(err, std::fabs(double(y[i]) - yd[i]));
  std::printf("strata::dnnl: oneDNN float convolution against im2col in double: max |difference| %.2e\n", err);
  return err < 1e-5 ? 0 : 1;
}
