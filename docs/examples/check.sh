#!/usr/bin/env bash
# Builds and runs every docs example with g++ and clang++ (those found), and checks
# that each example is copied verbatim into the markdown page that shows it.
# Built by a plain compiler, train_mpi.cpp runs as a world of one; when mpicxx and
# mpiexec are found it is also built with MPI and run on 2 and 4 processes.
#   docs/examples/check.sh                 # from anywhere
#   docs/examples/check.sh --copies-only   # only the copies (ctest docs.copies)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
copies_only=0
[ "${1:-}" = "--copies-only" ] && copies_only=1

compilers=()
for c in g++ clang++; do command -v "$c" >/dev/null && compilers+=("$c"); done
[ ${#compilers[@]} -gt 0 ] || { echo "no C++ compiler found"; exit 1; }

for f in docs/examples/*.cpp; do
  [ $copies_only = 1 ] && break
  n=$(basename "$f" .cpp)
  for c in "${compilers[@]}"; do
    if "$c" -std=c++20 -Iinclude -Wall -Wextra -Werror -pthread "$f" -o "$out/$n.$c" -lopenblas && "$out/$n.$c" >/dev/null; then
      echo "ok      $c $n"
    else
      echo "FAILED  $c $n"; status=1
    fi
  done
done

# train_mpi.cpp under MPI: one process per device. --oversubscribe (Open MPI) allows more
# ranks than cores; the OMPI_ALLOW_RUN_AS_ROOT* variables let Open MPI run as root.
if [ $copies_only = 1 ]; then
  :
elif command -v mpicxx >/dev/null && command -v mpiexec >/dev/null; then
  launch=(mpiexec)
  mpiexec --version 2>&1 | grep -Eqi 'open ?(mpi|rte)' && launch+=(--oversubscribe)
  if mpicxx -std=c++20 -Iinclude -DSTRATA_WITH_MPI -Wall -Wextra -Werror -pthread docs/examples/train_mpi.cpp \
       -o "$out/train_mpi.mpi" -lopenblas; then
    for ranks in 2 4; do
      if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
         timeout 300 "${launch[@]}" -n "$ranks" "$out/train_mpi.mpi" >/dev/null; then
        echo "ok      mpicxx train_mpi (mpiexec -n $ranks)"
      else
        echo "FAILED  mpicxx train_mpi (mpiexec -n $ranks)"; status=1
      fi
    done
  else
    echo "FAILED  mpicxx train_mpi"; status=1
  fi
else
  echo "skip    train_mpi under MPI (no mpicxx/mpiexec)"
fi

# Every "<!-- example: X.cpp -->" marker is followed by a ```cpp block equal to docs/examples/X.cpp.
mkdir -p "$out/md"
for md in docs/*.md; do
  awk -v dir="$out/md" '
    /^<!-- example: [A-Za-z0-9_.]+ -->$/ { name = $3; want = 1; next }
    want && $0 == "```cpp" { want = 0; copy = dir "/" name; printf "" > copy; next }
    copy != "" && $0 == "```" { close(copy); copy = ""; next }
    copy != "" { print >> copy }
  ' "$md"
done
for f in docs/examples/*.cpp; do
  n=$(basename "$f")
  if [ ! -f "$out/md/$n" ]; then
    echo "MISSING $n is not shown in any docs/*.md"; status=1
  elif ! cmp -s "$f" "$out/md/$n"; then
    echo "STALE   the copy of $n in docs/*.md differs from the file"; status=1
  fi
done
exit $status
