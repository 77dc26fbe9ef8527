// fashion_mnist/fashion_mnist.hpp - Fashion-MNIST loading (example code, not part of the
// library: it needs zlib), normalisation and a
// data-parallel sharded loader (sharding contract: see sharding.hpp).
//
// Needs zlib (link with -lz).
#ifndef STRATA_EXAMPLES_FASHION_MNIST_HPP
#define STRATA_EXAMPLES_FASHION_MNIST_HPP

#include "idx.hpp"
#include "strata/data/sharding.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace fashion_mnist {

using strata::data::shard_plan;
using strata::data::remainder;
using strata::data::ordering;

// Per-pixel statistics of the 60000 Fashion-MNIST training images after
// scaling to [0, 1] (population mean / standard deviation over all 47,040,000
// pixels; the test suite recomputes them from the files). Train statistics are
// used for both splits so test inputs are transformed exactly like training ones.
inline constexpr double fashion_mnist_mean = 0.28604059698879553;
inline constexpr double fashion_mnist_std = 0.35302424451492237;

// (x/255 - mean) / std, evaluated in double and then rounded once to T.
template <class T>
constexpr T normalise_pixel(std::uint8_t x) {
  return static_cast<T>((x / 255.0 - fashion_mnist_mean) / fashion_mnist_std);
}

template <class T>
struct basic_dataset {
  static_assert(std::is_floating_point_v<T>, "pixel type must be floating point");
  using value_type = T;
  static constexpr int rows = 28, cols = 28, pixels = rows * cols, classes = 10;

  std::vector<T> images;             // count x 784, row-major, normalised
  std::vector<std::int32_t> labels;  // count, each in [0, classes)
  int count = 0;

  std::span<const T> image(int i) const {
    return std::span<const T>(images).subspan(static_cast<std::size_t>(i) * pixels, pixels);
  }
};
using dataset = basic_dataset<float>;

enum class split { train, test };

// $STRATA_FASHION_MNIST_DIR if set and non-empty, else Debian's
// dataset-fashion-mnist location.
inline std::string default_dir() {
  const char* env = std::getenv("STRATA_FASHION_MNIST_DIR");
  return env && *env ? std::string(env) : std::string("/usr/share/datasets/fashion-mnist");
}

inline std::string images_file(split s) {
  return s == split::train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz";
}
inline std::string labels_file(split s) {
  return s == split::train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz";
}

// Loads one split from `dir`, validating both files and their agreement.
// Any item count is accepted (so small synthetic copies work); image size must
// be 28x28 and labels must be 0..9. Use T = double for double-precision inputs.
template <class T = float>
basic_dataset<T> load_fashion_mnist(split s, const std::string& dir = default_dir()) {
  using ds_t = basic_dataset<T>;
  const std::string ipath = (std::filesystem::path(dir) / images_file(s)).string();
  const std::string lpath = (std::filesystem::path(dir) / labels_file(s)).string();
  const idx_u8 img = read_idx_images(ipath);
  const idx_u8 lab = read_idx_labels(lpath, ds_t::classes);
  if (img.dims[1] != ds_t::rows || img.dims[2] != ds_t::cols) {
    detail::data_fail(ipath, "images are " + std::to_string(img.dims[1]) + "x" + std::to_string(img.dims[2]) +
                                 " but Fashion-MNIST images are 28x28");
  }
  check_same_count(img, lab);
  if (img.count() > static_cast<std::size_t>(INT_MAX)) {
    detail::data_fail(ipath, "holds " + std::to_string(img.count()) + " images, more than this loader indexes");
  }

  ds_t d;
  d.count = static_cast<int>(img.count());
  // 256-entry table: one rounding per value and no per-pixel arithmetic.
  std::array<T, 256> lut{};
  for (int v = 0; v < 256; ++v) lut[static_cast<std::size_t>(v)] = normalise_pixel<T>(static_cast<std::uint8_t>(v));
  const auto px = img.values();
  d.images.resize(px.size());
  // Plain pointer loop: stays fast in unoptimised (-O0) test builds too.
  const std::uint8_t* src = px.data();
  T* dst = d.images.data();
  const T* table = lut.data();
  for (std::size_t i = 0, n = px.size(); i < n; ++i) dst[i] = table[src[i]];
  const auto lv = lab.values();
  d.labels.assign(lv.begin(), lv.end());
  return d;
}

// One rank's share of one step. Entries [0, valid) are real samples; the rest
// (pad mode only, last step) are wrap-around padding to be masked out of
// losses and metrics.
template <class T>
struct basic_batch {
  std::vector<T> images;              // size x 784
  std::vector<std::int32_t> labels;   // size
  std::vector<std::int64_t> indices;  // dataset index of each entry
  int size = 0;                       // == batch_per_rank, the same on every rank and step
  int valid = 0;

  bool is_padding(int i) const noexcept { return i >= valid; }
};
using batch = basic_batch<float>;

// Gathers the batches a shard_plan assigns to one rank. Holds a reference to
// the dataset (which must outlive it) and caches the current epoch's
// permutation, so calls are not thread-safe; use one loader per thread.
template <class T>
class basic_sharded_loader {
 public:
  using dataset_type = basic_dataset<T>;
  using batch_type = basic_batch<T>;

  basic_sharded_loader(const dataset_type& ds, int dp_rank, int dp_size, int batch_per_rank, std::uint64_t seed,
                       remainder rule = remainder::drop, ordering ord = ordering::shuffled)
      : ds_(&ds), plan_(ds.count, dp_rank, dp_size, batch_per_rank, seed, rule, ord) {
    if (ds.images.size() != static_cast<std::size_t>(ds.count) * dataset_type::pixels ||
        ds.labels.size() != static_cast<std::size_t>(ds.count)) {
      throw std::invalid_argument("sharded_loader: dataset arrays do not match count " + std::to_string(ds.count));
    }
  }
  // A temporary dataset would dangle.
  basic_sharded_loader(dataset_type&&, int, int, int, std::uint64_t, remainder = remainder::drop,
                       ordering = ordering::shuffled) = delete;

  const shard_plan& plan() const noexcept { return plan_; }
  std::int64_t steps_per_epoch() const noexcept { return plan_.steps_per_epoch(); }

  // The epoch's full sample order (identical on every rank).
  const std::vector<std::int64_t>& permutation(std::uint64_t epoch) {
    if (!cached_ || cached_epoch_ != epoch) {
      perm_ = plan_.permutation(epoch);
      cached_epoch_ = epoch;
      cached_ = true;
    }
    return perm_;
  }

  // Fills `out`, reusing its buffers.
  void batch_into(std::uint64_t epoch, std::int64_t step, batch_type& out) {
    plan_.check_step(step);
    const int b = plan_.batch_per_rank();
    const auto& perm = permutation(epoch);
    out.size = b;
    out.valid = static_cast<int>(plan_.valid_in_step(step));
    out.indices.resize(static_cast<std::size_t>(b));
    plan_.indices(perm, step, out.indices);
    out.images.resize(static_cast<std::size_t>(b) * dataset_type::pixels);
    out.labels.resize(static_cast<std::size_t>(b));
    for (int i = 0; i < b; ++i) {
      const auto idx = static_cast<std::size_t>(out.indices[static_cast<std::size_t>(i)]);
      std::copy_n(ds_->images.data() + idx * dataset_type::pixels, dataset_type::pixels,
                  out.images.data() + static_cast<std::size_t>(i) * dataset_type::pixels);
      out.labels[static_cast<std::size_t>(i)] = ds_->labels[idx];
    }
  }

  batch_type batch(std::uint64_t epoch, std::int64_t step) {
    batch_type out;
    batch_into(epoch, step, out);
    return out;
  }

  // `for (const auto& b : loader.epoch(e))` visits steps 0..steps_per_epoch()-1.
  class epoch_range {
   public:
    class iterator {
     public:
      using value_type = batch_type;
      using difference_type = std::ptrdiff_t;
      iterator() = default;
      iterator(basic_sharded_loader* l, std::uint64_t e) : l_(l), e_(e) { load(); }
      const batch_type& operator*() const noexcept { return cur_; }
      const batch_type* operator->() const noexcept { return &cur_; }
      iterator& operator++() {
        ++step_;
        load();
        return *this;
      }
      void operator++(int) { ++*this; }
      std::int64_t step() const noexcept { return step_; }
      friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept {
        return it.l_ == nullptr || it.step_ >= it.l_->steps_per_epoch();
      }

     private:
      void load() {
        if (l_ && step_ < l_->steps_per_epoch()) l_->batch_into(e_, step_, cur_);
      }
      basic_sharded_loader* l_ = nullptr;
      std::uint64_t e_ = 0;
      std::int64_t step_ = 0;
      batch_type cur_;
    };
    epoch_range(basic_sharded_loader* l, std::uint64_t e) : l_(l), e_(e) {}
    iterator begin() const { return iterator(l_, e_); }
    std::default_sentinel_t end() const noexcept { return {}; }

   private:
    basic_sharded_loader* l_;
    std::uint64_t e_;
  };
  epoch_range epoch(std::uint64_t e) { return epoch_range(this, e); }

 private:
  const dataset_type* ds_;
  shard_plan plan_;
  std::vector<std::int64_t> perm_;
  std::uint64_t cached_epoch_ = 0;
  bool cached_ = false;
};
using sharded_loader = basic_sharded_loader<float>;

// Evaluation view of a split: sequential order, padded final step, so every
// rank runs the same number of steps and the `valid` entries of all ranks
// cover each sample exactly once. plan().valid_per_epoch() is this rank's
// share (sum over ranks == ds.count).
template <class T>
basic_sharded_loader<T> evaluation_loader(const basic_dataset<T>& ds, int dp_rank, int dp_size, int batch_per_rank) {
  return basic_sharded_loader<T>(ds, dp_rank, dp_size, batch_per_rank, 0, remainder::pad, ordering::sequential);
}
template <class T>
basic_sharded_loader<T> evaluation_loader(basic_dataset<T>&&, int, int, int) = delete;

}  // namespace fashion_mnist

#endif  // STRATA_EXAMPLES_FASHION_MNIST_HPP
