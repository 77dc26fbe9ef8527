// A scratch directory unique per process and call (parallel ctest runs never share
// files), removed with everything in it when the object goes away.
#pragma once
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "strata_test_") {
    std::random_device rd;
    for (int attempt = 0;; ++attempt) {
      path = std::filesystem::temp_directory_path() /
             (prefix + std::to_string(rd()) + "_" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
      if (std::filesystem::create_directory(path)) break;
      REQUIRE(attempt < 100);
    }
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};
