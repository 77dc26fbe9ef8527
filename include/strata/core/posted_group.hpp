#pragma once
// A message group posted so that work after it runs while it is in flight — a pipeline's
// group before the zero-bubble W's (the lowered program marks it `overlap`), a ring
// attention's neighbour exchange before the step's tiles: where the communicator can post
// a group and wait for it later (MPI's post_group / progress / complete), else the group
// completes when posted.
#include <optional>
#include <span>
#include <utility>

#include "strata/core/communicator.hpp"

namespace strata::comm {

namespace detail {
struct no_pending {};
template <class C>
auto pending_of(C& c) {
  if constexpr (requires { c.post_group(std::span<const p2p_op>{}); })
    return c.post_group(std::span<const p2p_op>{});
  else return no_pending{};
}
}  // namespace detail

template <class Comm>
class posted_group {
 public:
  // Posts `ops` as one group; waits for it now unless `overlap` and the communicator can wait later.
  void post(Comm& c, std::span<const p2p_op> ops, bool overlap) {
    finish(c);
    if constexpr (deferrable) {
      if (overlap) {
        pending_.emplace(c.post_group(ops));
        return;
      }
    }
    c.group(ops);
  }
  // Moves the group's messages along (between the W's layers, between a ring's tiles).
  void drive(Comm& c) {
    if constexpr (requires { c.progress(*pending_); })
      if (pending_) c.progress(*pending_);
  }
  // Waits for the group, if one is in flight.
  void finish(Comm& c) {
    if constexpr (deferrable)
      if (pending_) {
        auto g = std::move(*pending_);
        pending_.reset();
        c.complete(g);
      }
  }

 private:
  using pending_t = decltype(detail::pending_of(std::declval<Comm&>()));
  static constexpr bool deferrable = requires(Comm& c, pending_t& g, std::span<const p2p_op> ops) {
    c.post_group(ops);
    c.complete(g);
  };
  std::optional<pending_t> pending_;
};

}  // namespace strata::comm
