# Sourced by the bench/host/run*.sh scripts.
# build_bench TARGET...: the Debian packages, then the targets in build-bench/ (Release, benches on).
build_bench() {
  bash scripts/deps.sh >/dev/null
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_BENCH=ON -DSTRATA_BUILD_TESTS=OFF \
    -DSTRATA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build build-bench --target "$@" >/dev/null
}

# bench_venv: PyTorch in a private venv (STRATA_BENCH_VENV, default .venv-bench, git-ignored),
# installed with pip on first use; never a dependency of strata. Sets $venv.
bench_venv() {
  venv=${STRATA_BENCH_VENV:-.venv-bench}
  if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "installing PyTorch into $venv (pip; a few GB, once)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch numpy
  fi
}

# write_report NAME TITLE COMMAND OUTPUT writes OUTPUT under TITLE, with the machine, date,
# command and commit, to stdout and to bench/results/NAME_<date>_<cpu>.md.
write_report() {
  local name=$1 title=$2 command=$3 run=$4
  local cpu tag out
  cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
  tag=$(echo "$cpu" | sed 's/([A-Za-z]*)//g' | awk '{print $1"_"$2}')  # "Intel(R) Xeon(R) ..." -> Intel_Xeon
  out=bench/results/${name}_$(date +%F)_${tag}.md
  {
    echo "# $title"
    echo
    echo "- machine: $cpu, $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) CPUs; $(date -u '+%F %H:%M UTC')"
    echo "- command: \`$command\` (commit $(git rev-parse --short HEAD))"
    echo
    echo '```'
    echo "$run"
    echo '```'
  } > "$out"
  cat "$out"
}
