// A whole model's gradient as one SGD step with lr 1 applied it (p − p'), against central
// differences of the training loss, on `per_tensor` random elements of every parameter
// tensor: each relative error |fd − g| / max(1e-4, |fd|) is CHECKed below `tolerance`.
// loss(q) evaluates the loss at parameters q; name(i) names layer i in the failure message.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

struct step_gradient_result {
  int checked = 0;
  double worst = 0;
};

template <class Loss, class Name>
step_gradient_result check_step_gradient(const std::vector<std::vector<std::vector<double>>>& p,
                                         const std::vector<std::vector<std::vector<double>>>& after, Loss&& loss,
                                         Name&& name, std::mt19937_64& g, int per_tensor, double h,
                                         double tolerance) {
  step_gradient_result r;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t k = 0; k < p[i].size(); ++k)
      for (int sample = 0; sample < per_tensor; ++sample) {
        const std::size_t e = std::size_t(u(g) * double(p[i][k].size()));
        const double grad = p[i][k][e] - after[i][k][e];
        auto q = p;
        q[i][k][e] += h;
        const double up = loss(q);
        q[i][k][e] -= 2 * h;
        const double down = loss(q);
        const double fd = (up - down) / (2 * h);
        const double err = std::abs(fd - grad) / std::max(1e-4, std::abs(fd));
        INFO("layer " << i << " (" << std::string(name(i)) << ") tensor " << k << " element " << e << ": fd " << fd
                      << " step " << grad);
        CHECK(err < tolerance);
        r.worst = std::max(r.worst, err);
        ++r.checked;
      }
  return r;
}
