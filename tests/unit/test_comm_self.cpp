// The communicator suite (tests/comm) on self_communicator, the world of one process,
// and what only it has: a mailbox that buffers sends to self until a recv (or a later
// op in the same group) takes them, refusing mismatched types and sizes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/comm/self.hpp"

#include "../comm/host_memory.hpp"

namespace comm_suite {
struct policy : host_memory {
  using comm = strata::comm::self_communicator;
  static comm& world() {
    static comm c;
    return c;
  }
};
}  // namespace comm_suite

#include "../comm/comm_suite.hpp"

using namespace strata::comm;

TEST_CASE("self_communicator: sends to self wait in a mailbox, matched by tag in posting order") {
  self_communicator s("mail");
  const std::vector<float> a = {1.f, 2.f, 3.f}, b = {4.f, 5.f, 6.f};
  std::vector<float> x(3), y(3);
  s.send(a.data(), 3, 0, 1);
  s.send(b.data(), 3, 0, 2);
  s.send(b.data(), 3, 0, 1);
  CHECK(s.pending_messages() == 3);
  s.recv(x.data(), 3, 0, 2);
  CHECK(x == b);
  s.recv(x.data(), 3, 0, 1);  // the oldest with tag 1
  s.recv(y.data(), 3, 0, 1);
  CHECK(x == a);
  CHECK(y == b);
  CHECK(s.pending_messages() == 0);
}

TEST_CASE("self_communicator: a recv with nothing to take, or of another type or size, throws") {
  self_communicator s("mail");
  std::vector<float> f(2);
  const std::string none = [&] {
    try {
      s.recv(f.data(), 2, 0, 9);
    } catch (const comm_error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(none.find("would deadlock") != std::string::npos);
  CHECK(none.find("'mail'") != std::string::npos);
  // The mailbox tells bf16 from a float of the same byte count.
  std::vector<strata::bf16> h(4, strata::bf16(1.0f));
  s.send(h.data(), 4, 0, 9);
  CHECK_THROWS_WITH_AS(s.recv(f.data(), 2, 0, 9), doctest::Contains("another type/size"), comm_error);
  CHECK(s.pending_messages() == 1);
  std::vector<strata::bf16> back(3);
  CHECK_THROWS_AS(s.recv(back.data(), 3, 0, 9), comm_error);  // fewer elements
  s.recv(h.data(), 4, 0, 9);
  CHECK(s.pending_messages() == 0);
}
