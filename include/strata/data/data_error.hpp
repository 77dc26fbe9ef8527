#pragma once
// strata/data/data_error.hpp - the error of every data reader of strata::data: a file that is
// missing, short, corrupt or inconsistent with what reads it. The message starts with the
// file's path: "<path>: <problem>", the problem stating the numbers involved.
#include <stdexcept>
#include <string>

namespace strata::data {

class data_error : public std::runtime_error {
 public:
  data_error(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(path), problem_(problem) {}
  const std::string& path() const noexcept { return path_; }
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string path_, problem_;
};

}  // namespace strata::data
