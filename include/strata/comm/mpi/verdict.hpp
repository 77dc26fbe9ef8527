// strata-header: mpi
#pragma once
// The watchdog's verdict: when a rank's wait times out, it asks every rank where it stands,
// through a side channel that does not depend on the stuck operation, and the job ends with
// one verdict: the ranks that stopped answering, and what each other rank waits for at which
// action of its program.
//
// The side channel is a duplicate of MPI_COMM_WORLD, made with the world (mpi_environment),
// that carries only small point-to-point messages nobody waits for unbounded:
//   ask      from the asking rank to every other rank
//   answer   "waits 2.95 s in all_reduce #11 (...) on communicator ...; in step 4 at stage 0, ..."
//   verdict  the verdict's first line, to every rank that answered, which prints it
//   ack      that rank printed it
// A rank answers from its wait loops (mpi_wait_bounded; the NCCL communicator's synchronize),
// within a millisecond; a rank outside them (stopped, dead, computing, in a blocking call)
// cannot. The asking rank collects answers for min(timeout, 5 s), less once every rank has
// answered, sends the first line to the ranks that answered, and once each printed it (or 2 s
// passed) hands the whole verdict to its caller, which prints it and ends the job (fail_all;
// the NCCL watchdog throws it). Ranks whose watchdogs expire together all ask: the lowest one
// gives the verdict, the others answer it. A rank that answered and then times out itself
// waits for that verdict instead of asking (and asks when none comes).
//
// The ranks of a node also keep their position records (core/position.hpp) in memory the node
// shares (MPI_Win_allocate_shared), so that the verdict says where a silent rank on the asking
// rank's node stood when it went silent.
#include "strata/comm/mpi/end_job.hpp"
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/comm/mpi/watchdog.hpp"
#include "strata/comm/timeout.hpp"
#include "strata/comm/watchdog_verdict.hpp"
#include "strata/core/position.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace strata::comm::detail {

struct mpi_side_channel {
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD (same ranks)
  int rank = 0, size = 1;
  int leader = -1;  // the lowest asking rank this rank answered: it gives the verdict
  std::chrono::steady_clock::time_point answered{};  // when this rank answered it
  MPI_Comm node = MPI_COMM_NULL;  // this node's ranks, and their position records
  MPI_Win win = MPI_WIN_NULL;
  std::vector<const rank_position*> records;             // by world rank; null off this node
  std::deque<std::pair<MPI_Request, std::string>> sent;  // messages in flight, with their buffers
};
inline mpi_side_channel g_side{};

enum : int { tag_ask = 1, tag_answer = 2, tag_verdict = 3, tag_ack = 4 };  // side channel tags
constexpr std::size_t side_text_max = 1000;  // an answer's words (short messages go out eagerly)
using side_clock = std::chrono::steady_clock;

inline void side_send(int to, int tag, std::string text) noexcept {
  try {
    if (text.size() > side_text_max) text.resize(side_text_max);
    auto& m = g_side.sent.emplace_back(MPI_REQUEST_NULL, std::move(text));  // a deque keeps the buffer in place
    (void)MPI_Isend(m.second.data(), static_cast<int>(m.second.size()), MPI_CHAR, to, tag, g_side.comm, &m.first);
  } catch (...) {  // out of memory: that rank's line is missing
  }
}

// Moves the messages in flight along (MPI progresses them inside MPI calls only).
inline void side_progress() noexcept {
  for (auto& m : g_side.sent)
    if (m.first != MPI_REQUEST_NULL) {
      int done = 0;
      (void)MPI_Test(&m.first, &done, MPI_STATUS_IGNORE);
    }
}

// The next message, if one came: its tag (0: none), sender and text.
inline int side_receive(int& from, std::string& text) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_side.comm, &flag, &st) != MPI_SUCCESS || !flag) return 0;
  int n = 0;
  MPI_Get_count(&st, MPI_CHAR, &n);
  text.assign(static_cast<std::size_t>(std::max(n, 0)), '\0');
  // a probed, eagerly sent message: the receive completes at once
  if (MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, g_side.comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return 0;
  from = st.MPI_SOURCE;
  return st.MPI_TAG;
}

inline std::chrono::milliseconds side_grace(std::chrono::milliseconds timeout) {
  return std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(5));
}
// How long after answering a rank waits for that asker's verdict: its collection (the
// grace, if its timeout is this rank's), then its acknowledgements (2 s), and a margin.
inline std::chrono::milliseconds side_follow_window(std::chrono::milliseconds timeout) {
  return side_grace(timeout) + std::chrono::seconds(3);
}

inline void side_answer(int to, const wait_site& w) {
  side_send(to, tag_answer, wait_status(w));
  if (g_side.leader < 0 || to < g_side.leader) g_side.leader = to;
  g_side.answered = side_clock::now();
}

inline void side_pause() { std::this_thread::sleep_for(std::chrono::microseconds(100)); }

// A verdict came: print its first line and tell its rank (which ends the job once every
// rank that answered printed it, or, on the NCCL communicator, throws its error).
inline void side_print_verdict(int from, const std::string& headline) noexcept {
  std::fprintf(stderr, "[strata] rank %d: watchdog verdict: %s (rank %d prints the details)\n", g_side.rank,
               headline.c_str(), from);
  std::fflush(stderr);
  side_send(from, tag_ack, {});
  g_side.leader = -1;  // that round is over
}

// From a wait loop: answers questions and prints a verdict that came.
inline void mpi_verdict_poll(const wait_site& w) {
  if (g_side.comm == MPI_COMM_NULL) return;
  try {
    std::string text;
    for (;;) {
      int from = -1;
      const int tag = side_receive(from, text);
      if (tag == 0) return;
      if (tag == tag_ask) side_answer(from, w);
      if (tag == tag_verdict) side_print_verdict(from, text);
      // late answers and acknowledgements need nothing
    }
  } catch (...) {  // out of memory: no answer from this rank
  }
}

// This rank answered an asking rank, and then its own watchdog expired: it waits for that
// rank's verdict (answering any other), prints it, and gives the job 3 s to end; true then,
// with the verdict's first line added to `message` for the caller to end the job (or throw)
// after all. False when no verdict came within the window: this rank then asks itself.
inline bool side_follow(const wait_site& w, std::string& message, std::chrono::milliseconds timeout) {
  std::string text;
  while (g_side.leader >= 0 && side_clock::now() < g_side.answered + side_follow_window(timeout)) {
    int from = -1;
    const int tag = side_receive(from, text);
    if (tag == tag_ask) side_answer(from, w);
    side_progress();
    if (tag == tag_verdict) {
      side_print_verdict(from, text);
      for (const auto end = side_clock::now() + std::chrono::seconds(3); side_clock::now() < end;) {
        side_progress();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      message += "\n[strata] rank " + std::to_string(g_side.rank) + ": watchdog verdict of rank " +
                 std::to_string(from) + ": " + text;
      return true;
    }
    if (tag == 0) side_pause();
  }
  g_side.leader = -1;
  return false;
}

// "2", "2 and 5", "2, 5 and 6".
inline std::string side_rank_list(const std::vector<int>& r) {
  std::string s;
  for (std::size_t i = 0; i < r.size(); ++i)
    s += (i == 0 ? "" : i + 1 == r.size() ? " and " : ", ") + std::to_string(r[i]);
  return s;
}

// Where a silent rank of this node last stood, read from the memory the node shares.
inline std::string side_last_position(int r) {
  if (static_cast<std::size_t>(r) >= g_side.records.size() || g_side.records[static_cast<std::size_t>(r)] == nullptr)
    return {};
  rank_position p;
  std::memcpy(static_cast<void*>(&p), g_side.records[static_cast<std::size_t>(r)], sizeof p);
  return position_text(p);
}

// Asks every rank; false when a lower rank asks too (this rank answered it: it follows).
inline bool side_collect(const wait_site& w, std::chrono::milliseconds grace, std::vector<std::string>& said,
                         std::vector<bool>& answered) {
  mpi_side_channel& c = g_side;
  const std::size_t n = static_cast<std::size_t>(c.size), me = static_cast<std::size_t>(c.rank);
  for (int r = 0; r < c.size; ++r)
    if (r != c.rank) side_send(r, tag_ask, {});
  said.assign(n, {});
  answered.assign(n, false);
  said[me] = wait_status(w);
  answered[me] = true;
  std::size_t missing = n - 1;
  const auto until = side_clock::now() + grace;
  std::string text;
  while (missing > 0 && side_clock::now() < until) {
    int from = -1;
    const int tag = side_receive(from, text);
    const std::size_t f = static_cast<std::size_t>(from);
    if (tag == tag_ask && from < c.rank) {  // the lower asking rank gives the verdict
      side_answer(from, w);
      return false;
    }
    if (tag == tag_answer && !answered[f]) answered[f] = true, said[f] = text, --missing;
    if (tag == tag_verdict) side_print_verdict(from, text);  // a round this rank took no part in
    side_progress();
    if (tag == 0) side_pause();
  }
  return true;
}

// The watchdog of this rank expired on the wait `w` (on a communicator of several ranks),
// which `message` names: asks every rank, and returns `message` followed by the verdict,
// once the ranks that answered printed its first line (or 2 s passed), for the caller to
// print as it ends the job (fail_all), or throws (NCCL). A rank that answered another asking
// rank returns that rank's verdict instead, if the job goes on (side_follow).
inline std::string mpi_watchdog_verdict(const wait_site& w, std::string_view message,
                                        std::chrono::milliseconds timeout) {
  mpi_side_channel& c = g_side;
  std::string out(message);
  if (c.comm == MPI_COMM_NULL || c.size < 2) return out;
  const auto grace = side_grace(timeout);
  std::vector<std::string> said;
  std::vector<bool> answered;
  for (int round = 0;; ++round) {  // a lower asking rank that gives no verdict: ask again
    if (side_follow(w, out, timeout)) return out;
    if (round == 3) return out;
    if (side_collect(w, grace, said, answered)) break;
  }
  const std::size_t n = said.size(), me = static_cast<std::size_t>(c.rank);
  std::vector<int> silent;
  for (std::size_t r = 0; r < n; ++r)
    if (!answered[r]) silent.push_back(static_cast<int>(r));
  std::string headline;
  if (silent.empty()) {
    headline = "every rank answered, so none stopped: the operations they wait in do not match, or a rank worked "
               "longer than the timeout before it reached its wait";
  } else {
    headline = (silent.size() == 1 ? "rank " : "ranks ") + side_rank_list(silent) + " stopped answering";
    if (silent.size() == 1)
      if (const std::string at = side_last_position(silent[0]); !at.empty()) headline += ", " + at;
  }
  out += "\n[strata] rank " + std::to_string(c.rank) + ": watchdog verdict: " + headline;
  for (std::size_t r = 0; r < n; ++r) {
    out += "\n[strata]   rank " + std::to_string(r) + ": ";
    if (answered[r]) {
      out += said[r];
      continue;
    }
    out += "no answer within " + seconds_text(grace) + " (stopped, dead, or outside strata's waits that long)";
    if (const std::string at = side_last_position(static_cast<int>(r)); !at.empty())
      out += "; its own record (in memory its node shares): " + at;
  }
  // the ranks that answered print the first line before this rank ends the job
  std::size_t acks = 0;
  for (std::size_t r = 0; r < n; ++r)
    if (r != me && answered[r]) side_send(static_cast<int>(r), tag_verdict, headline), ++acks;
  std::string text;
  for (const auto until = side_clock::now() + std::chrono::seconds(2); acks > 0 && side_clock::now() < until;) {
    int from = -1;
    const int tag = side_receive(from, text);
    if (tag == tag_ack) --acks;
    side_progress();
    if (tag == 0) side_pause();
  }
  return out;
}

// Opens the side channel (collective over MPI_COMM_WORLD; mpi_environment, after the world):
// a duplicate of the world for the questions, and the node-shared position records. Skipped
// with the watchdog off (timeout 0). Any step that fails leaves the watchdog without it
// (its message, no verdict) or without the records (a verdict without silent ranks' positions).
inline void mpi_open_side_channel(std::chrono::milliseconds timeout) {
  mpi_side_channel& c = g_side;
  if (c.comm != MPI_COMM_NULL || timeout.count() <= 0) return;
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
  bool expired = false;
  if (rc == MPI_SUCCESS) rc = mpi_wait_bounded(1, &req, nullptr, timeout, expired);
  if (expired)
    fail_all("MPI watchdog: MPI_Comm_idup of MPI_COMM_WORLD (the watchdog's side channel) has not completed after " +
             seconds_text(timeout) + "; a peer rank is stuck or dead: ending every rank");
  if (rc != MPI_SUCCESS || dup == MPI_COMM_NULL) return;
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  MPI_Comm_set_name(dup, "strata.watchdog");
  c.comm = dup;
  MPI_Comm_rank(dup, &c.rank);
  MPI_Comm_size(dup, &c.size);
  g_verdict_poll = &mpi_verdict_poll;
  g_verdict = &mpi_watchdog_verdict;
  // The node's records. (After the completed idup every rank is here: the blocking calls
  // below wait for none that stopped before.)
  c.records.assign(static_cast<std::size_t>(c.size), nullptr);
  if (MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &c.node) != MPI_SUCCESS) return;
  MPI_Comm_set_errhandler(c.node, MPI_ERRORS_RETURN);
  void* base = nullptr;
  if (MPI_Win_allocate_shared(sizeof(rank_position), 1, MPI_INFO_NULL, c.node, &base, &c.win) != MPI_SUCCESS) return;
  int node_size = 0;
  MPI_Comm_size(c.node, &node_size);
  MPI_Group g_node = MPI_GROUP_NULL, g_world = MPI_GROUP_NULL;
  MPI_Comm_group(c.node, &g_node);
  MPI_Comm_group(dup, &g_world);
  for (int nr = 0; nr < node_size; ++nr) {
    int wr = MPI_UNDEFINED, unit = 0;
    MPI_Aint bytes = 0;
    void* p = nullptr;
    if (MPI_Group_translate_ranks(g_node, 1, &nr, g_world, &wr) == MPI_SUCCESS && wr >= 0 && wr < c.size &&
        MPI_Win_shared_query(c.win, nr, &bytes, &unit, &p) == MPI_SUCCESS && bytes >= MPI_Aint(sizeof(rank_position)))
      c.records[static_cast<std::size_t>(wr)] = static_cast<const rank_position*>(p);
  }
  MPI_Group_free(&g_node);
  MPI_Group_free(&g_world);
  place_position(base);  // this rank's record moves into the shared memory
}

// Closes the side channel (mpi_environment, before MPI_Finalize; collective over the node).
inline void mpi_close_side_channel() noexcept {
  mpi_side_channel& c = g_side;
  if (c.comm == MPI_COMM_NULL) return;
  g_verdict_poll = nullptr;
  g_verdict = nullptr;
  place_position(nullptr);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    for (auto& m : c.sent)
      if (m.first != MPI_REQUEST_NULL) MPI_Request_free(&m.first);
    if (c.win != MPI_WIN_NULL) MPI_Win_free(&c.win);
    if (c.node != MPI_COMM_NULL) MPI_Comm_free(&c.node);
    MPI_Comm_free(&c.comm);
  }
  c = mpi_side_channel{};
}

}  // namespace strata::comm::detail
