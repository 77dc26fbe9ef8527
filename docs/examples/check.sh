#!/usr/bin/env bash
# Builds and runs every docs example with g++ and clang++ (those found), and checks
# that each example is copied verbatim into the markdown page that shows it.
# An example with a line "// mpi-ranks: 1 2 4" is built with mpicxx and run under mpiexec
# with each count above 1 when MPI is found; plain builds run it only if the list has 1
# (a world of one). Others run plainly.
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

ranks_of() { sed -n 's|^// mpi-ranks: *||p' "$1" | head -1; }
for f in docs/examples/*.cpp; do
  [ $copies_only = 1 ] && break
  n=$(basename "$f" .cpp)
  ranks=$(ranks_of "$f")
  run=1
  [ -n "$ranks" ] && [[ " $ranks " != *" 1 "* ]] && run=0
  for c in "${compilers[@]}"; do
    if "$c" -std=c++20 -Iinclude -Iexamples -Wall -Wextra -Werror -pthread "$f" -o "$out/$n.$c" -lopenblas &&
       { [ $run = 0 ] || "$out/$n.$c" >/dev/null; }; then
      echo "ok      $c $n"
    else
      echo "FAILED  $c $n"; status=1
    fi
  done
done

# The examples marked mpi-ranks under MPI: one process per device. --oversubscribe (Open
# MPI) allows more ranks than cores; the OMPI_ALLOW_RUN_AS_ROOT* variables let Open MPI run as root.
if [ $copies_only = 1 ]; then
  :
elif command -v mpicxx >/dev/null && command -v mpiexec >/dev/null; then
  launch=(mpiexec)
  mpiexec --version 2>&1 | grep -Eqi 'open ?(mpi|rte)' && launch+=(--oversubscribe)
  for f in docs/examples/*.cpp; do
    ranks=$(ranks_of "$f")
    [ -n "$ranks" ] || continue
    n=$(basename "$f" .cpp)
    if ! mpicxx -std=c++20 -Iinclude -Iexamples -DSTRATA_WITH_MPI -Wall -Wextra -Werror -pthread "$f" -o "$out/$n.mpi" -lopenblas; then
      echo "FAILED  mpicxx $n"; status=1; continue
    fi
    for r in $ranks; do
      [ "$r" = 1 ] && continue
      if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
         timeout 300 "${launch[@]}" -n "$r" "$out/$n.mpi" >/dev/null; then
        echo "ok      mpicxx $n (mpiexec -n $r)"
      else
        echo "FAILED  mpicxx $n (mpiexec -n $r)"; status=1
      fi
    done
  done
else
  echo "skip    the mpi-ranks examples under MPI (no mpicxx/mpiexec)"
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
