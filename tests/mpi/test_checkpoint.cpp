// Checkpoints under MPI (exec/checkpoint.hpp), float64, on 4 ranks:
// mpi-ranks: 4
//  * resume: stopping after step 3 and resuming from the checkpoint in a new trainer gives
//    the bit-identical trajectory of the uninterrupted run (DP2 x PP2, ZeRO-1 on
//    TP2 + SP x DP2 and DP4, offloaded weights and state), and the saver's entries (a data
//    position) come back;
//  * resharding: a checkpoint written by one plan loads into another, and the run that
//    continues there equals the original continuing (relative 1e-9): DP4 -> PP2 x TP2,
//    TP2 x DP2 -> TP4, ZeRO-1 -> plain, offloaded -> TP, CP2 x TP2 <-> TP2 x DP2, with the
//    reading map from the writer's plan type (load_checkpoint_from<From>) and from the index;
//    with Dropout too (its masks follow the step and do not depend on the plan);
//  * failures: a truncated file, a flipped byte, a missing index, another model, another
//    optimizer, a checkpoint of another plan than From, numbers out of range, pieces whose
//    boxes overlap, leave a gap or disagree with the files, the old format, files of two
//    saves mixed in one directory: the same agreed_error on every rank, naming the problem,
//    and the trainer's parameters untouched;
//  * batch norm's running statistics (BatchNorm2d on one pipeline stage only, or in a
//    Replicate<2>): a resume evaluates bit for bit as the uninterrupted run, and they load
//    into another plan;
//  * asynchronous saves (save_checkpoint_async): a save after step 3 written while steps
//    4-6 run resumes bit-identically; <dir> is replaced only at the join; a second save
//    first commits the first; a write that fails on one rank (a file-size limit) is the
//    same agreed_error on every rank at the join, and the previous checkpoint still loads.
#include "doctest_world.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/resource.h>

#include <strata/io/json.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "small_gpt.hpp"

using namespace strata;

namespace {

template <template <int, class...> class Strategy, int N, class... Extra>
using whole = small_gpt::on<Strategy, N, 2, Extra...>;
template <template <int, class...> class Strategy, int N, class... Extra>
using pipe = small_gpt::staged<Strategy, N, Extra...>;

// every plan below trains on a global batch of 8 sequences on 4 ranks
using DP4 = whole<Replicate, 1, MicroBatch<2>>;
using DP4_Z = whole<Replicate, 1, MicroBatch<2>, Zero<1>, Buckets<3>>;
using DP2_PP2 = pipe<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>>;
using PP2_TP2 = pipe<Split, 2, MicroBatch<2>, NumMicroBatch<4>, SequenceParallel>;
using TP2 = whole<Split, 2, MicroBatch<4>>;
using TP2_Z = whole<Split, 2, MicroBatch<4>, SequenceParallel, Zero<1>>;
using TP4 = whole<Split, 4, MicroBatch<8>>;
using DP4_OFF = whole<Replicate, 1, MicroBatch<2>, Zero<1>, Offload<offload_level::weights_and_state>, ApplyGroups<3>>;
// ZeRO-2/3 over four TaskGraphs (the same layers): gradients, then masters partitioned
using DP4_Z2 = small_gpt::graphs<Replicate, 1, MicroBatch<2>, Zero<2>, Buckets<3>>;
using DP4_Z3 = small_gpt::graphs<Replicate, 1, MicroBatch<2>, Zero<3>, Buckets<3>>;
using TP2_Z3 = small_gpt::graphs<Split, 2, MicroBatch<4>, SequenceParallel, Zero<3>>;
using Other = small_gpt::on<Replicate, 1, 1, MicroBatch<2>>;  // one block fewer
// context parallelism over tensor parallelism: shards on the tensor index, copies on the context index
using CP2_TP2 = Plan<Context<2, Split<2, Embedding<small_gpt::V, small_gpt::D>, PositionEmbedding<small_gpt::S, small_gpt::D>,
                                      Repeat<2, small_gpt::Attn, small_gpt::MLP>, LayerNorm<small_gpt::D>,
                                      Linear<small_gpt::D, small_gpt::V>>>,
                     Input<small_gpt::S>, small_gpt::CE, MicroBatch<4>, NumMicroBatch<2>>;
// 2D tensor parallelism (q = 2) of GPT blocks on token features (embeddings are not mode
// layers), and the same layers as TP4 and DP4: checkpoint pieces cut on two axes
template <template <int, class...> class Strategy, int N, class... Extra>
using blocks =
    Plan<Strategy<N, small_gpt::Attn, small_gpt::MLP, LayerNorm<small_gpt::D>, Linear<small_gpt::D, small_gpt::V>>,
         Input<small_gpt::S, small_gpt::D>, small_gpt::CE, Extra...>;
using T2D = blocks<Split, 4, MicroBatch<8>, Tensor2D>;
using T1D = blocks<Split, 4, MicroBatch<8>>;
using BDP4 = blocks<Replicate, 1, MicroBatch<2>>;

// tied embeddings (TiedHead): a copy of the table per pipeline stage, stored once
template <template <int, class...> class Strategy, int N, class... Extra>
using tied_pipe = Plan<Pipeline<Strategy<N, Embedding<small_gpt::V, small_gpt::D>, PositionEmbedding<small_gpt::S, small_gpt::D>,
                                         small_gpt::Attn, small_gpt::MLP>,
                                Strategy<N, small_gpt::Attn, small_gpt::MLP, LayerNorm<small_gpt::D>,
                                         TiedHead<small_gpt::V, small_gpt::D>>>,
                       Input<small_gpt::S>, small_gpt::CE, Extra...>;
using TIED_PP2_TP2 = tied_pipe<Split, 2, MicroBatch<2>, NumMicroBatch<4>, SequenceParallel>;
using TIED_DP2_PP2_Z1 = tied_pipe<Replicate, 1, MicroBatch<2>, NumMicroBatch<2>, Zero<1>>;
using TIED_DP4 = Plan<Replicate<1, Embedding<small_gpt::V, small_gpt::D>, PositionEmbedding<small_gpt::S, small_gpt::D>,
                                Repeat<2, small_gpt::Attn, small_gpt::MLP>, LayerNorm<small_gpt::D>,
                                TiedHead<small_gpt::V, small_gpt::D>>,
                      Input<small_gpt::S>, small_gpt::CE, MicroBatch<2>>;
// Dropout<10> on the residual branches and the MLP's hidden activations (layers/dropout.hpp):
// its masks follow the step a checkpoint keeps, and are the same under every plan
namespace sg = small_gpt;
using DAttn = Residual<LayerNorm<sg::D>, CausalSelfAttention<sg::D, sg::H, sg::S>, Dropout<10>>;
using DMLP = Residual<LayerNorm<sg::D>, Linear<sg::D, 4 * sg::D>, GeLU, Dropout<10>, Linear<4 * sg::D, sg::D>, Dropout<10>>;
template <template <int, class...> class Strategy, int N, class... Extra>
using dropped = Plan<Strategy<N, Embedding<sg::V, sg::D>, PositionEmbedding<sg::S, sg::D>, Repeat<2, DAttn, DMLP>,
                              LayerNorm<sg::D>, Linear<sg::D, sg::V>>,
                     Input<sg::S>, sg::CE, Extra...>;
using DROP_TP2 = dropped<Split, 2, MicroBatch<4>, SequenceParallel>;
using DROP_DP4 = dropped<Replicate, 1, MicroBatch<2>>;
// batch norm (running statistics kept across steps) on the first of two stages only, and the
// same layers in one Replicate<2>
using CNN_PP2 = Plan<Pipeline<Replicate<1, Conv2d<2, 4, 3, 1, 1, false>, BatchNorm2d<4>, ReLU, MaxPool2d<2>>,
                              Replicate<1, Flatten, Linear<2 * 2 * 4, 6>>>,
                     Input<4, 4, 2>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>>;
using CNN_R2 = Plan<Replicate<2, Conv2d<2, 4, 3, 1, 1, false>, BatchNorm2d<4>, ReLU, MaxPool2d<2>, Flatten,
                              Linear<2 * 2 * 4, 6>>,
                    Input<4, 4, 2>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>>;

const AdamW opt{.lr = 1e-2, .weight_decay = 0.1};
const training_options recipe{.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 2, .total = 6},
                              .decay = decay_on::matrices,
                              .clip_norm = 1.0};

auto& W() { return mpi_test::world(); }

// One directory name for the whole job, chosen by rank 0.
std::string shared_dir(const std::string& tag) {
  std::int64_t id = W().rank() == 0 ? static_cast<std::int64_t>(std::random_device{}() & 0x7fffffff) : 0;
  W().comm().broadcast(&id, 1, 0);
  return (std::filesystem::temp_directory_path() / ("strata_ckpt_" + tag + "_" + std::to_string(id))).string();
}
struct cleanup {
  std::string dir;
  ~cleanup() {
    W().comm().agree(true, "");
    if (W().rank() == 0) std::filesystem::remove_all(dir);
  }
};

template <class P>
struct run {
  trainer<P, double, Host, comm::mpi_communicator> t;
  run() : t(W(), opt, 0x5eed) {
    t.set_training_options(recipe);
    t.check_replicas_every(1);  // ZeRO's gathers and every load keep the replicas identical
  }
  // global step s's batch, this replica's shard
  void step(int s) {
    const std::size_t G = 8, in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);
    std::vector<double> x(G * in);
    std::vector<std::int32_t> y(G * lab);
    verify::random_data<P>(77)(s, std::span<double>(x), std::span<std::int32_t>(y));
    const std::size_t R = std::size_t(P::replica_batch), first = std::size_t(t.coord().data) * R;
    REQUIRE(R * std::size_t(t.data_parallel()) == G);
    t.step(batch_view<double>{.inputs = std::span<const double>(x).subspan(first * in, R * in),
                              .labels = std::span<const std::int32_t>(y).subspan(first * lab, R * lab),
                              .samples = R});
  }
  // the evaluated loss of global batch s (running statistics, where a layer keeps them)
  double evaluate(int s) {
    const std::size_t G = 8, in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);
    std::vector<double> x(G * in);
    std::vector<std::int32_t> y(G * lab);
    verify::random_data<P>(77)(s, std::span<double>(x), std::span<std::int32_t>(y));
    const auto mine = t.share(batch_view<double>{.inputs = x, .labels = y, .samples = G}, G);
    return t.evaluate(mine.batch, mine.valid).loss;
  }
};

using params_t = std::vector<std::vector<std::vector<double>>>;
double worst_relative(const params_t& a, const params_t& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      double num = 0, den = 0;
      for (std::size_t j = 0; j < a[i][k].size(); ++j) {
        num += (a[i][k][j] - b[i][k][j]) * (a[i][k][j] - b[i][k][j]);
        den += b[i][k][j] * b[i][k][j];
      }
      worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
    }
  return worst;
}

// Stop after step 3, resume in a new trainer: the same bits as 6 uninterrupted steps.
template <class P>
void resume(const char* name) {
  const std::string dir = shared_dir("resume");
  cleanup c{dir};
  run<P> straight;
  for (int s = 0; s < 6; ++s) straight.step(s);
  {
    run<P> first;
    for (int s = 0; s < 3; ++s) first.step(s);
    first.t.save_checkpoint(dir, {{"data.position", "3"}});
  }
  run<P> second;
  const checkpoint_info info = second.t.load_checkpoint(dir);
  CHECK(info.step == 3);
  CHECK(second.t.steps() == 3);
  CHECK(info.user.at("data.position") == "3");
  for (int s = std::stoi(info.user.at("data.position")); s < 6; ++s) second.step(s);
  // the parameters, and an evaluation (running statistics, where a layer keeps them)
  const bool same = straight.t.gather_parameters() == second.t.gather_parameters() &&
                    straight.evaluate(9) == second.evaluate(9);
  if (W().rank() == 0) std::printf("[resume] %-40s bit-identical after 3 + 3 steps: %s\n", name, same ? "yes" : "NO");
  CHECK(same);
}

// Write with From after 3 steps, continue 3 steps in From and, from the checkpoint, in To.
template <class From, class To, bool Typed>
void reshard(const char* name) {
  const std::string dir = shared_dir("reshard");
  cleanup c{dir};
  run<From> a;
  for (int s = 0; s < 3; ++s) a.step(s);
  a.t.save_checkpoint(dir);
  for (int s = 3; s < 6; ++s) a.step(s);
  run<To> b;
  if constexpr (Typed) b.t.template load_checkpoint_from<From>(dir);
  else b.t.load_checkpoint(dir);
  for (int s = 3; s < 6; ++s) b.step(s);
  const double e = worst_relative(b.t.gather_parameters(), a.t.gather_parameters());
  if (W().rank() == 0)
    std::printf("[reshard] %-40s worst parameter rel %.3e after 3 more steps%s\n", name, e,
                Typed ? " (map from the plan type)" : "");
  CHECK(e <= 1e-9);
}

// A load that must fail: the same message on every rank, nothing changed.
template <class P, class F>
void refused(const std::string& dir, const char* expect, F&& load) {
  run<P> r;
  const auto before = r.t.gather_parameters();
  std::string what;
  try {
    load(r.t);
  } catch (const agreed_error& e) {
    what = e.what();
  }
  if (W().rank() == 0) std::printf("[refused] %s\n", what.c_str());
  CHECK(what.find(expect) != std::string::npos);
  if (what.find(expect) == std::string::npos) std::printf("rank %d got: '%s'\n", W().rank(), what.c_str());
  CHECK(r.t.gather_parameters() == before);
  CHECK(r.t.steps() == 0);
  (void)dir;
}

}  // namespace

TEST_CASE("resume gives the bit-identical trajectory") {
  resume<DP2_PP2>("DP2 x PP2 (1F1B, 2 micro-batches)");
  resume<TP2_Z>("TP2 + SP x DP2, ZeRO-1");
  resume<DP4_Z>("DP4 ZeRO-1 (bucket tails)");
  resume<DP4_OFF>("DP4 ZeRO-1, weights + state offloaded");
  resume<DP4_Z2>("DP4 ZeRO-2 (four TaskGraphs)");
  resume<DP4_Z3>("DP4 ZeRO-3 (four TaskGraphs)");
  resume<T2D>("2D tensor parallel q=2 (GPT blocks)");
  resume<DROP_TP2>("dropout: TP2 + SP x DP2 (the step's masks)");
}

TEST_CASE("a checkpoint of one plan continues in another") {
  reshard<DP4, PP2_TP2, true>("DP4 -> PP2 x TP2 + SP");
  reshard<DP4, PP2_TP2, false>("DP4 -> PP2 x TP2 + SP");
  reshard<TP2, TP4, true>("TP2 x DP2 -> TP4");
  reshard<DP4_Z, DP4, false>("DP4 ZeRO-1 -> DP4");
  reshard<TP2_Z, PP2_TP2, true>("TP2 + SP x DP2 ZeRO-1 -> PP2 x TP2 + SP");
  reshard<PP2_TP2, DP2_PP2, false>("PP2 x TP2 + SP -> DP2 x PP2");
  reshard<DP4_OFF, TP2, true>("DP4 ZeRO-1 offloaded -> TP2 x DP2");
  reshard<DROP_TP2, DROP_DP4, false>("dropout: TP2 + SP x DP2 -> DP4 (same masks)");
  reshard<DP4_Z3, DP4, false>("DP4 ZeRO-3 -> DP4");
  reshard<CP2_TP2, TP2, true>("CP2 x TP2 -> TP2 x DP2");
  reshard<TP2, CP2_TP2, false>("TP2 x DP2 -> CP2 x TP2");
  reshard<DP4, DP4_Z3, true>("DP4 -> DP4 ZeRO-3");
  reshard<TP2_Z3, PP2_TP2, true>("TP2 + SP x DP2 ZeRO-3 -> PP2 x TP2 + SP");
  reshard<T2D, T1D, true>("2D q=2 -> TP4 (GPT blocks)");
  reshard<BDP4, T2D, false>("DP4 -> 2D q=2 (GPT blocks)");
}

TEST_CASE("batch norm's running statistics: a resume evaluates bit for bit, and they load into another plan") {
  resume<CNN_PP2>("batch norm on stage 0 of PP2 x DP2");
  resume<CNN_R2>("batch norm in Replicate<2> x DP2");
  for (const bool to_r2 : {true, false}) {
    const std::string dir = shared_dir("bn");
    cleanup c{dir};
    double written = 0;
    {
      run<CNN_PP2> a;
      run<CNN_R2> b;
      for (int s = 0; s < 3; ++s) a.step(s), b.step(s);
      to_r2 ? a.t.save_checkpoint(dir) : b.t.save_checkpoint(dir);
      written = to_r2 ? a.evaluate(9) : b.evaluate(9);
    }
    double loaded = 0;
    if (to_r2) {
      run<CNN_R2> r;
      r.t.load_checkpoint(dir);
      loaded = r.evaluate(9);
    } else {
      run<CNN_PP2> r;
      r.t.load_checkpoint(dir);
      loaded = r.evaluate(9);
    }
    const double e = std::abs(loaded - written) / std::abs(written);
    if (W().rank() == 0)
      std::printf("[bn] %-40s evaluation after the load, rel %.3e\n", to_r2 ? "PP2 x DP2 -> Replicate<2> x DP2"
                                                                          : "Replicate<2> x DP2 -> PP2 x DP2", e);
    CHECK(e <= 1e-12);
  }
}

TEST_CASE("a tied table is stored once and loads into both copies under any plan") {
  resume<TIED_PP2_TP2>("tied, PP2 x TP2 + SP (a copy per stage)");
  resume<TIED_DP2_PP2_Z1>("tied, DP2 x PP2 ZeRO-1");
  reshard<TIED_PP2_TP2, TIED_DP4, true>("tied, PP2 x TP2 + SP -> DP4 (one stage)");
  reshard<TIED_DP4, TIED_DP2_PP2_Z1, false>("tied, DP4 -> DP2 x PP2 ZeRO-1");
  // the index names the Embedding's table and nothing of the head's copy
  const std::string dir = shared_dir("tied");
  cleanup c{dir};
  run<TIED_PP2_TP2> r;
  r.step(0);
  r.t.save_checkpoint(dir);
  if (W().rank() == 0) {
    std::ifstream in(dir + "/index.json");
    const std::string index((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(index.find(".Embedding.table.shard0of2") != std::string::npos);
    CHECK(index.find("TiedHead.table.shard") == std::string::npos);
  }
}

TEST_CASE("a bad checkpoint is refused on every rank, before anything is stored") {
  const std::string dir = shared_dir("bad");
  cleanup c{dir};
  {
    run<TP2> a;
    a.step(0);
    a.t.save_checkpoint(dir);
  }
  const std::string victim = dir + "/" + exec::ckpt::rank_file(1, W().size());
  auto edit = [&](auto&& f) {
    W().comm().agree(true, "");
    if (W().rank() == 0) f();
    W().comm().agree(true, "");
  };
  refused<Other>(dir, "another model", [&](auto& t) { t.load_checkpoint(dir); });
  {
    auto t = make_trainer<TP2, double>(W(), SGD{.lr = 0.1, .momentum = 0.9});
    std::string what;
    try {
      t.load_checkpoint(dir);
    } catch (const agreed_error& e) {
      what = e.what();
    }
    CHECK(what.find("written with AdamW's state; this trainer runs SGD") != std::string::npos);
  }
  refused<TP4>(dir, "was the checkpoint written by another plan?",
               [&](auto& t) { t.template load_checkpoint_from<DP4>(dir); });
  refused<TP4>(dir + "/nowhere", "cannot open", [&](auto& t) { t.load_checkpoint(dir + "/nowhere"); });
  // a flipped byte in the last tensor's data: the size is right, the CRC is not
  std::vector<char> original;
  edit([&] {
    std::ifstream in(victim, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), {});
    std::vector<char> bad = original;
    bad[bad.size() - 3] ^= 0x10;
    std::ofstream(victim, std::ios::binary).write(bad.data(), std::streamsize(bad.size()));
  });
  refused<TP4>(dir, "fails its CRC32 check", [&](auto& t) { t.load_checkpoint(dir); });
  edit([&] {  // truncated
    std::ofstream(victim, std::ios::binary).write(original.data(), std::streamsize(original.size() - 100));
  });
  refused<TP4>(dir, "truncated or replaced", [&](auto& t) { t.load_checkpoint(dir); });
  edit([&] { std::ofstream(victim, std::ios::binary).write(original.data(), std::streamsize(original.size())); });
  // a damaged index: each refusal names index.json and what is wrong with it
  const std::string index = dir + "/index.json";
  std::string good;
  edit([&] {
    std::ifstream in(index, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  });
  auto damaged = [&](const char* expect, auto&& change) {
    edit([&] {
      std::string text = good;
      change(text);
      std::ofstream(index, std::ios::binary | std::ios::trunc) << text;
    });
    refused<TP4>(dir, expect, [&](auto& t) { t.load_checkpoint(dir); });
  };
  auto replace_all = [](std::string& text, const std::string& from, const std::string& to) {
    REQUIRE(text.find(from) != std::string::npos);
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  damaged("index.json: not a valid index: malformed JSON, at byte ", [](std::string& t) { t.resize(t.size() / 2); });
  damaged("index.json: not a valid index: malformed JSON, duplicate key \"format\"",
          [&](std::string& t) { replace_all(t, "\"metadata\": {", "\"metadata\": {\"format\": \"x\", "); });
  damaged("index.json: the index lacks its metadata, files or weight_map object",
          [&](std::string& t) { replace_all(t, "\"files\": {", "\"files\": [0], \"unused\": {"); });
  // every number read is range-checked: the step, the world, the trainer's entries
  damaged("index.json: step \"3x\" is not a step number",
          [&](std::string& t) { replace_all(t, "\"step\": \"1\"", "\"step\": \"3x\""); });
  damaged("index.json: step \"-5\" is not a step number",
          [&](std::string& t) { replace_all(t, "\"step\": \"1\"", "\"step\": \"-5\""); });
  damaged("index.json: step \"99999999999999999999\" is not a step number",
          [&](std::string& t) { replace_all(t, "\"step\": \"1\"", "\"step\": \"99999999999999999999\""); });
  damaged("index.json: world \"0\" is not a number of processes",
          [&](std::string& t) { replace_all(t, "\"world\": \"4\"", "\"world\": \"0\""); });
  damaged("index.json: trainer entry updates \"7\" is not a count from 0 to 1",
          [&](std::string& t) { replace_all(t, "\"updates\": \"1\"", "\"updates\": \"7\""); });
  damaged("index.json: trainer entry loss_scale \"nan\" is not a positive finite number",
          [&](std::string& t) { replace_all(t, "\"loss_scale\": \"1\"", "\"loss_scale\": \"nan\""); });
  damaged("file \"../rank-00001-of-00004.safetensors\" is not a file name in the checkpoint's directory",
          [&](std::string& t) { replace_all(t, "\": \"rank-00001", "\": \"../rank-00001"); });
  damaged("the index says \"12\": truncated or replaced", [&](std::string& t) {
    const auto at = t.find("\"rank-00000-of-00004.safetensors\": ") + 35;
    t.replace(at, t.find_first_not_of("0123456789", at) - at, "\"12\"");
  });
  // the index's plain fields: each piece's box, the maps, the format
  auto edited = [&](const char* expect, auto&& change) {
    damaged(expect, [&](std::string& t) {
      io::json::value j = io::json::parse(t);
      change(j);
      t = j.dump(2);
    });
  };
  const std::string cut = "layers.23.Linear.weight";  // the head, [16, 32] in two column blocks
  const std::string first = cut + ".shard0of2", second = cut + ".shard1of2";
  edited("index.json: format \"strata-checkpoint-1\" is an older strata's layout",
         [](io::json::value& j) { j["metadata"]["format"] = "strata-checkpoint-1"; });
  edited("index.json: the index lacks its model array, optimizer_map or pieces object",
         [](io::json::value& j) { j.erase("pieces"); });
  edited(("index.json: piece " + first + ": start [0,0] and stop [16,99] are not a box of " + cut + " [16,32]").c_str(),
         [&](io::json::value& j) { j["pieces"][first]["stop"][1] = 99; });
  edited(
      ("index.json: pieces " + first + " [0:16, 0:16] and " + second + " [0:16, 0:16] of " + cut + " overlap").c_str(),
      [&](io::json::value& j) { j["pieces"][second] = j["pieces"][first]; });
  edited(("index.json: the pieces of " + cut + " [16,32] cover 256 of its 512 elements").c_str(),
         [&](io::json::value& j) {
           j["pieces"].erase(second);
           j["weight_map"].erase(second);
         });
  edited(("index.json: weight_map entry " + second + " has no box in \"pieces\"").c_str(),
         [&](io::json::value& j) { j["pieces"].erase(second); });
  edited(("index.json: piece optimizer.exp_avg." + first + " is missing").c_str(),
         [&](io::json::value& j) { j["optimizer_map"].erase("optimizer.exp_avg." + first); });
  edited(("tensor " + first + " has shape [16,16], the index gives it the box [0:8, 0:32] of " + cut).c_str(),
         [&](io::json::value& j) {  // another tiling of the same tensor: the files disagree
           j["pieces"][first]["start"] = {0, 0};
           j["pieces"][first]["stop"] = {8, 32};
           j["pieces"][second]["start"] = {8, 0};
           j["pieces"][second]["stop"] = {16, 32};
         });
  edit([&] { std::ofstream(index, std::ios::binary | std::ios::trunc) << good; });
  {
    run<TP4> r;  // the undamaged index still loads
    r.t.load_checkpoint(dir);
  }
  edit([&] { std::filesystem::remove(dir + "/index.json"); });
  refused<TP4>(dir, "index.json: cannot open", [&](auto& t) { t.load_checkpoint(dir); });
}

// Two saves (after steps 1 and 2): a rank file of one placed among the other's, or one's
// index over the other's files, is refused naming both saves, never loaded.
TEST_CASE("a checkpoint assembled from two saves is refused") {
  const std::string one = shared_dir("save1"), two = shared_dir("save2");
  cleanup c1{one}, c2{two};
  {
    run<TP2> a;
    a.step(0);
    a.t.save_checkpoint(one);
    a.step(1);
    a.t.save_checkpoint(two);
  }
  auto on_rank0 = [&](auto&& f) {
    W().comm().agree(true, "");
    if (W().rank() == 0) f();
    W().comm().agree(true, "");
  };
  const std::string file = exec::ckpt::rank_file(1, W().size());
  const std::string mixed = shared_dir("mixed");
  cleanup c3{mixed};
  on_rank0([&] {
    std::filesystem::copy(two, mixed, std::filesystem::copy_options::recursive);
    std::filesystem::copy_file(one + "/" + file, mixed + "/" + file, std::filesystem::copy_options::overwrite_existing);
  });
  // the sizes agree (same plan, same shapes): the step and the save id do not
  refused<TP4>(mixed, "the checkpoint mixes two saves", [&](auto& t) { t.load_checkpoint(mixed); });
  {
    run<TP4> r;
    std::string what;
    try {
      r.t.load_checkpoint(mixed);
    } catch (const agreed_error& e) {
      what = e.what();
    }
    const bool named = what.find("belongs to another save: it was written after step 1") != std::string::npos &&
                       what.find("the index is of step 2") != std::string::npos &&
                       what.find("the checkpoint mixes two saves") != std::string::npos;
    if (W().rank() == 0) std::printf("[mixed] %s\n", what.c_str());
    CHECK(named);
  }
  // the first save's index over the second save's files
  on_rank0([&] {
    std::filesystem::remove_all(mixed);
    std::filesystem::copy(two, mixed, std::filesystem::copy_options::recursive);
    std::filesystem::copy_file(one + "/index.json", mixed + "/index.json",
                               std::filesystem::copy_options::overwrite_existing);
  });
  refused<TP4>(mixed, "the checkpoint mixes two saves", [&](auto& t) { t.load_checkpoint(mixed); });
  {
    run<TP4> r;  // each save alone still loads
    CHECK(r.t.load_checkpoint(one).step == 1);
    CHECK(r.t.load_checkpoint(two).step == 2);
  }
}

// The save after step 3 is written while steps 4-6 run (they change every buffer the
// snapshot copied): the same bits as a synchronous save, committed only at the join.
template <class P>
void resume_async(const char* name) {
  const std::string dir = shared_dir("async");
  cleanup c{dir};
  run<P> straight;
  for (int s = 0; s < 6; ++s) straight.step(s);
  {
    run<P> first;
    for (int s = 0; s < 3; ++s) first.step(s);
    first.t.save_checkpoint_async(dir, {{"data.position", "3"}});
    for (int s = 3; s < 6; ++s) first.step(s);
    CHECK(!std::filesystem::exists(dir));  // not committed before the join
    first.t.wait_for_checkpoint();
    CHECK(std::filesystem::exists(dir + "/index.json"));
    first.t.wait_for_checkpoint();  // nothing in flight: nothing to do
    CHECK(first.t.gather_parameters() == straight.t.gather_parameters());
  }
  run<P> second;
  const checkpoint_info info = second.t.load_checkpoint(dir);
  CHECK(info.step == 3);
  CHECK(info.user.at("data.position") == "3");
  for (int s = 3; s < 6; ++s) second.step(s);
  const bool same = straight.t.gather_parameters() == second.t.gather_parameters();
  if (W().rank() == 0) std::printf("[async] %-40s bit-identical after 3 + 3 steps: %s\n", name, same ? "yes" : "NO");
  CHECK(same);
}

TEST_CASE("an asynchronous save resumes bit-identically while training goes on") {
  resume_async<DP2_PP2>("DP2 x PP2 (1F1B, 2 micro-batches)");
  resume_async<DP4_Z>("DP4 ZeRO-1 (bucket tails)");
  resume_async<DP4_Z3>("DP4 ZeRO-3 (four TaskGraphs)");
  resume_async<TP2_Z>("TP2 + SP x DP2, ZeRO-1");
}

TEST_CASE("a second asynchronous save first commits the first") {
  const std::string dir = shared_dir("async2");
  cleanup c{dir};
  run<TP2_Z> a;
  for (int s = 0; s < 3; ++s) a.step(s);
  a.t.save_checkpoint_async(dir);
  a.step(3);
  a.t.save_checkpoint_async(dir);  // joins and commits the save of step 3
  {
    run<TP2_Z> b;
    CHECK(b.t.load_checkpoint(dir).step == 3);
  }
  a.step(4);
  a.t.save_checkpoint(dir);  // a synchronous save commits the one in flight first too
  run<TP2_Z> b;
  CHECK(b.t.load_checkpoint(dir).step == 5);
  a.step(5);
  b.step(5);
  CHECK(a.t.gather_parameters() == b.t.gather_parameters());
  {
    run<TP2_Z> d;  // the trainer's end commits
    for (int s = 0; s < 2; ++s) d.step(s);
    d.t.save_checkpoint_async(dir);
  }
  run<TP2_Z> e;
  CHECK(e.t.load_checkpoint(dir).step == 2);
}

// Rank 2 may write files of 1 byte at most (EFBIG, as on a full disk): its background
// write fails, the save call itself returned; the join says so on every rank.
TEST_CASE("a background write that fails is reported on every rank at the join, the old checkpoint kept") {
  const std::string dir = shared_dir("asyncfail");
  cleanup c{dir};
  run<DP4_Z> a;
  for (int s = 0; s < 3; ++s) a.step(s);
  a.t.save_checkpoint(dir);
  a.step(3);
  rlimit before{};
  getrlimit(RLIMIT_FSIZE, &before);
  if (W().rank() == 2) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit tiny = before;
    tiny.rlim_cur = 1;
    setrlimit(RLIMIT_FSIZE, &tiny);
  }
  a.t.save_checkpoint_async(dir);  // the snapshot succeeds everywhere
  std::string what;
  try {
    a.t.wait_for_checkpoint();
  } catch (const agreed_error& e) {
    what = e.what();
  }
  if (W().rank() == 2) setrlimit(RLIMIT_FSIZE, &before);
  if (W().rank() == 0) std::printf("[async refused] %s\n", what.c_str());
  CHECK(what.find(exec::ckpt::rank_file(2, 4)) != std::string::npos);
  {
    run<DP4_Z> b;  // the save of step 3 is whole
    CHECK(b.t.load_checkpoint(dir).step == 3);
  }
  a.t.save_checkpoint_async(dir);  // the trainer saves again once the disk takes it
  a.t.wait_for_checkpoint();
  run<DP4_Z> b;
  CHECK(b.t.load_checkpoint(dir).step == 4);
  CHECK(a.t.gather_parameters() == b.t.gather_parameters());
}
