// d objective / d v by a central difference: v moved by ±eps and restored.
#pragma once

template <class F>
double central_difference(double& v, F&& objective, double eps = 1e-6) {
  const double keep = v;
  v = keep + eps;
  const double up = objective();
  v = keep - eps;
  const double down = objective();
  v = keep;
  return (up - down) / (2 * eps);
}
