#pragma once
// Checkpoints written in the background (trainer::save_checkpoint_async).
//
// A save has three parts (exec/checkpoint.hpp): the snapshot, collective, copies every
// tensor this rank writes into host memory (ZeRO's partitions gathered; on a GPU a
// device-to-host copy), so training may change its buffers as soon as it returns; the
// write of this rank's file, which needs no communication and runs on a thread here; the
// commit, collective: the ranks agree that every file is written, rank 0 writes the index
// and renames. The commit waits for a collective point the caller reaches on every rank
// (the next save, wait_for_checkpoint, a load, the trainer's end), since a thread cannot
// join a collective the other ranks are not in. Until then <dir> holds the previous
// checkpoint, whole.
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "strata/exec/optimizer.hpp"
#include "strata/io/safetensors_writer.hpp"

namespace strata::exec {

// One rank's share of a save, in host memory: what the write and the commit need.
struct checkpoint_snapshot {
  std::string dir, tmp;  // the checkpoint, and the directory its files are written into
  std::string file;      // this rank's file, in tmp
  long long step = 0;
  optimizer opt;
  std::map<std::string, std::string> user, trainer;
  io::writer tensors;  // copies: nothing refers to the trainer's buffers
};

// At most one save in flight: start() requires finish() of the previous one.
class background_save {
 public:
  // Writes the snapshot; returns the problem it ran into, or nothing (never throws).
  using write_fn = std::string (*)(const checkpoint_snapshot&);
  // Collective: agrees on every rank's write problem and commits, or throws agreed_error.
  using commit_fn = std::function<void(const checkpoint_snapshot&, const std::string&)>;

  background_save() = default;
  background_save(background_save&&) noexcept = default;
  background_save& operator=(background_save&&) = delete;  // would drop a save in flight
  // The end of a trainer is a collective point when no exception is leaving it (every rank
  // ends its trainer); with one leaving, the ranks may not all be here: the files are left
  // uncommitted and <dir> keeps the previous checkpoint.
  ~background_save() {
    if (!job_) return;
    if (std::uncaught_exceptions() > 0) {
      job_->thread.join();
      return;
    }
    try {
      finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s (the trainer ended; call wait_for_checkpoint() to see this as an exception)\n", e.what());
    }
  }

  bool in_flight() const { return job_ != nullptr; }

  void start(checkpoint_snapshot s, write_fn write, commit_fn commit) {
    job_ = std::make_unique<job>(std::move(s), std::move(commit));
    job* j = job_.get();  // stable across moves of this object
    j->thread = std::thread([j, write] { j->problem = write(j->snap); });
  }

  // Collective when a save is in flight: waits for this rank's write, then commits.
  void finish() {
    if (!job_) return;
    job_->thread.join();
    const std::unique_ptr<job> j = std::move(job_);  // finished, committed or not
    j->snap.tensors = {};                             // the host copies go before the commit's agreement
    j->commit(j->snap, j->problem);
  }

 private:
  struct job {
    job(checkpoint_snapshot s, commit_fn c) : snap(std::move(s)), commit(std::move(c)) {}
    ~job() {
      if (thread.joinable()) thread.join();
    }
    checkpoint_snapshot snap;
    commit_fn commit;
    std::string problem;
    std::thread thread;
  };
  std::unique_ptr<job> job_;
};

}  // namespace strata::exec
