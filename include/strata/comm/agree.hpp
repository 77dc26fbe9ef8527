#pragma once
// What the MPI and NCCL communicators' agree() and group_of() decide, worded once for
// both: the error every rank throws when a rank failed a check, and group_of's checks
// of its rank list (before the split, and of the group the split formed). Each
// communicator moves the verdicts with its own collectives.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "strata/comm/naming.hpp"
#include "strata/core/communicator.hpp"

namespace strata::comm::detail {

// Longest agree() message shipped from the failing rank to the others.
inline constexpr std::size_t max_agree_message = 4096;

// What every rank throws once agree() found that rank `failing` (the lowest that
// failed) passed ok == false with `text`: the text first (it says what is wrong), then
// which rank found it.
inline agreement_error agreed_failure(int failing, std::string_view name, int size, std::string_view text) {
  return agreement_error(std::string(text) + " [found by rank " + std::to_string(failing) + " of " + std::to_string(size) +
                    " in communicator '" + std::string(name) + "']");
}

// The caller's part in group_of(ranks): the split's color (the lowest member: unique per
// group because groups are disjoint) and key (its position in the list), or why the
// list is wrong (for agree, so that every rank throws it).
struct group_choice {
  std::string error;  // empty: the list is valid on this rank
  int color = 0;
  int key = 0;
};

inline group_choice choose_group(std::span<const int> ranks, int me, int size) {
  group_choice g;
  const auto pos = std::find(ranks.begin(), ranks.end(), me);
  if (pos == ranks.end()) {
    g.error = "the caller (rank " + std::to_string(me) + ") is not in " + rank_list(ranks);
    return g;
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto before = ranks.begin() + static_cast<std::ptrdiff_t>(i);
    if (ranks[i] < 0 || ranks[i] >= size) {
      g.error = rank_list(ranks) + " has rank " + std::to_string(ranks[i]) + " outside [0, " +
                std::to_string(size) + ")";
      return g;
    }
    if (std::find(ranks.begin(), before, ranks[i]) != before) {
      g.error = rank_list(ranks) + " repeats rank " + std::to_string(ranks[i]);
      return g;
    }
  }
  g.color = *std::min_element(ranks.begin(), ranks.end());
  g.key = static_cast<int>(pos - ranks.begin());
  return g;
}

// Members that passed different lists would silently get a group other than the one
// they asked for: `formed` is the members of the new group (their ranks in the parent,
// in order). Empty when it is the group `me` asked for, else the message to agree on.
inline std::string group_mismatch(int me, std::span<const int> asked, std::span<const std::int32_t> formed) {
  if (std::equal(formed.begin(), formed.end(), asked.begin(), asked.end())) return {};
  return "group_of: rank " + std::to_string(me) + " asked for " + rank_list(asked) +
         " but the ranks that chose the same group formed " + rank_list(formed) +
         " (every member must pass the same list)";
}

}  // namespace strata::comm::detail
