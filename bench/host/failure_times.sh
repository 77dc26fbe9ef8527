#!/usr/bin/env bash
# What a user sees when a job fails, and how long it takes (docs/execution.md, "What a failure
# looks like, and how long it takes"): each failure case of that section run as a user runs it
# (mpiexec, --oversubscribe), REPS times. For each: the first error line the launcher's stderr
# shows, the exit status, and the wall time from the fault (a signal sent to a rank, the
# failing rank's own line, or the launch for an input refused at start or on resume) to the
# first error line, to the moment the last rank has exited and to mpiexec's return; and a run
# of the GPT job killed and restarted by scripts/strata-run.sh against an uninterrupted one.
# Every run is bounded by `timeout`, and any process of a job still there afterwards is
# killed by its id. Needs the build's examples/gpt_train and tests/mpi_fail programs.
#   bash bench/host/failure_times.sh BUILD_DIR [REPS]     (default 3)
# The report (markdown) goes to stdout, progress to stderr; the first run's first stderr lines
# of each case follow the table. Results: bench/results/failure_times_<date>.md.
set -uo pipefail
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: bash bench/host/failure_times.sh BUILD_DIR [REPS]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
reps=${2:-3}
gpt=$build/examples/gpt_train
bad=$build/tests/mpi_fail/mpi_fail_bad_input
alone=$build/tests/mpi_fail/mpi_fail_one_rank_fails
stops=$build/tests/mpi_fail/mpi_fail_rank_stops
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run_sh=$repo/scripts/strata-run.sh
for f in "$gpt" "$bad" "$alone" "$stops"; do
  [ -x "$f" ] || { echo "failure_times: $f is missing (build the examples and the tests)" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpiexec --oversubscribe)
work=$(mktemp -d /tmp/failure_times.XXXXXX)
all_pids=$work/all_pids
touch "$all_pids"
cleanup() {
  # any process of a job still there (a stopped rank included): killed by its id
  local p
  for p in $(sort -u "$all_pids"); do kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work" || exit 1

# each line read, prefixed with the time it arrived
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
# the process of the job whose MPI rank is $2
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { d = b - a; if (d < 0 && d > -0.005) d = 0; printf "%.2f", d }'; }

# poller DIR PID: every 10 ms (bash builtins only: no process started), the ranks of the job —
# the children of the launcher, the first child of PID (the timeout process) — and the last
# time each was seen alive; ends once the launcher has returned (DIR/rc written) and every rank
# is gone, or 10 s after the launcher, marking DIR/left. Writes DIR/seen: "pid last-seen".
poller() {
  local d=$1 pid=$2 tick now c t st mp="" any deadline=""
  local -a l
  local -A seen
  mkfifo "$d/tick"
  exec {tick}<> "$d/tick"
  while :; do
    now=$EPOCHREALTIME
    [ -z "$mp" ] && read -r mp _ 2>/dev/null < "/proc/$pid/task/$pid/children"
    if [ -n "$mp" ]; then
      for t in /proc/"$mp"/task/*/children; do
        [ -e "$t" ] || continue
        l=()
        read -r -a l 2>/dev/null < "$t"
        for c in "${l[@]}"; do
          [ -z "${seen[$c]:-}" ] && echo "$c" >> "$all_pids"
          seen[$c]=${seen[$c]:-$now}
        done
      done
    fi
    any=0
    for c in "${!seen[@]}"; do
      if read -r st 2>/dev/null < "/proc/$c/stat" && [[ $st != *") Z "* ]]; then seen[$c]=$now; any=1; fi
    done
    if [ -e "$d/rc" ]; then
      [ $any -eq 0 ] && break
      deadline=${deadline:-$(( ${now%.*} + 10 ))}
      if [ "${now%.*}" -ge "$deadline" ]; then echo left > "$d/left"; break; fi
    fi
    read -r -t 0.01 -u "$tick" _
  done
  exec {tick}<&-
  for c in "${!seen[@]}"; do echo "$c ${seen[$c]}"; done > "$d/seen"
}

# job DIR LIMIT_S FAULT -- COMMAND...: runs COMMAND (stdout/stderr stamped into DIR/out,
# DIR/err); FAULT says when the fault happens:
#   launch                       at the launch (an input refused at start)
#   line:REGEX                   when a line of the job's output matches REGEX (its own failure)
#   signal:SIG:RANK:REGEX        this script sends SIG to rank RANK once the output matches REGEX
# Writes DIR/rc, DIR/t_launch, DIR/t_fault, DIR/t_exit (the launcher returned) and
# DIR/t_ranks (the last rank last seen alive, within 10 ms of its exit).
job() {
  local d=$1 limit=$2 fault=$3
  shift 4
  mkdir -p "$d"
  mkfifo "$d/o" "$d/e"
  stamp < "$d/o" > "$d/out" &
  local s1=$!
  stamp < "$d/e" > "$d/err" &
  local s2=$!
  echo "$EPOCHREALTIME" > "$d/t_launch"
  timeout -k 5 "$limit" "$@" > "$d/o" 2> "$d/e" &
  local pid=$!
  poller "$d" "$pid" &
  local poll=$!
  local injector=""
  if [[ $fault == signal:* ]]; then
    IFS=: read -r _ sig rank regex <<< "$fault"
    (
      for _ in $(seq 1 $((limit * 20))); do
        grep -qE "$regex" "$d/out" "$d/err" 2>/dev/null && break
        sleep 0.05
      done
      p=$(rank_pid "$pid" "$rank")
      [ -n "$p" ] || exit 0
      echo "$EPOCHREALTIME" > "$d/t_fault"
      kill -s "$sig" "$p"
    ) &
    injector=$!
  fi
  wait "$pid"
  local rc=$?
  echo "$EPOCHREALTIME" > "$d/t_exit"
  echo "$rc" > "$d/rc"
  [ -n "$injector" ] && { kill "$injector" 2>/dev/null; wait "$injector" 2>/dev/null; }
  wait "$poll"
  # a rank left behind (none should be): killed by its id
  if [ -f "$d/left" ]; then
    local p
    for p in $(cut -d' ' -f1 "$d/seen"); do [ -e "/proc/$p" ] && kill -9 "$p" 2>/dev/null; done
  fi
  sort -k2 -n "$d/seen" | tail -1 | cut -d' ' -f2 > "$d/t_ranks"
  wait "$s1" "$s2"
  case $fault in
    launch) cp "$d/t_launch" "$d/t_fault" ;;
    line:*) re=${fault#line:} awk '$0 ~ ENVIRON["re"] { print $1 }' "$d/out" "$d/err" | sort -n | head -1 > "$d/t_fault" ;;
  esac
  [ -s "$d/t_fault" ] || echo "" > "$d/t_fault"
}

# the first line a user reads on the launcher's stderr (no blank or dashed lines), made the
# same from run to run (the work directory, process ids and the host's name replaced)
normalise() { echo "s#$work/##g; s#$build/##g; s#$repo/##g; s/PID [0-9]+/PID N/g; s/\[$(hostname):[0-9]+\]/[HOST:PID]/g; s/$(hostname)/HOST/g"; }
first_line() {  # DIR [REGEX]
  local re=${2:-.}
  sed -E 's/^[0-9.]+ //' "$1/err" | grep -vE '^[[:space:]-]*$' | grep -E -m1 -- "$re" |
    sed -E "$(normalise); s/\|/\\\\|/g" | cut -c1-220
}
first_time() {  # DIR [REGEX]: when that line arrived
  local re=${2:-.}
  awk '{ t = $1; $1 = ""; sub(/^ /, ""); if ($0 !~ /^[[:space:]-]*$/) print t, $0 }' "$1/err" |
    grep -E -m1 -- "^[0-9.]+ .*($re)" | cut -d' ' -f1
}

# stats of the numbers on stdin: min / median / max
stats() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "%.2f / %.2f / %.2f", v[1], m, v[NR] }'; }

rows=()
details=()
# add_details NAME DIR COMMAND...: the command and its first 8 stderr lines, for the report
add_details() {
  local name=$1 d=$2
  shift 2
  details+=("### $name"$'\n\n'"\`$(printf '%q ' "$@" | sed -E "$(normalise); s# \$##")\`"$'\n\n```\n'"$(sed -E 's/^[0-9.]+ //' "$d/err" | grep -vE '^[[:space:]-]*$' | head -8 | sed -E "$(normalise)" | cut -c1-400)"$'\n```\n')
}
# measure NAME WHAT FAULT LIMIT LINE_REGEX -- COMMAND...: REPS runs of job (with $PREPARE,
# when set, run before each); a row of the table: the first error line (matching LINE_REGEX),
# the exit status, and min / median / max of the times from the fault to that line, to the
# last rank gone and to the launcher's return, and from the launch to the launcher's return
PREPARE=""
measure() {
  local name=$1 what=$2 fault=$3 limit=$4 re=$5
  shift 6
  local to_line="" to_ranks="" to_exit="" from_launch="" codes="" line="" r d tf tl tr tx
  for r in $(seq 1 "$reps"); do
    d=$work/run$((++run_count))
    [ -n "$PREPARE" ] && $PREPARE
    job "$d" "$limit" "$fault" -- "$@"
    tf=$(cat "$d/t_fault") tl=$(first_time "$d" "$re") tr=$(cat "$d/t_ranks") tx=$(cat "$d/t_exit")
    codes+="$(cat "$d/rc")"$'\n'
    from_launch+="$(elapsed "$(cat "$d/t_launch")" "$tx")"$'\n'
    [ -f "$d/left" ] && codes+="(a process left behind)"$'\n'
    if [ -n "$tf" ]; then
      [ -n "$tl" ] && to_line+="$(elapsed "$tf" "$tl")"$'\n'
      [ -n "$tr" ] && to_ranks+="$(elapsed "$tf" "$tr")"$'\n'
      to_exit+="$(elapsed "$tf" "$tx")"$'\n'
    fi
    if [ "$r" -eq 1 ]; then
      line=$(first_line "$d" "$re")
      add_details "$name" "$d" "$@"
    fi
    echo "  $name, run $r: exit $(cat "$d/rc"); from the fault: line ${tl:+$(elapsed "$tf" "$tl")}, ranks gone ${tr:+$(elapsed "$tf" "$tr")}, launcher returned $(elapsed "${tf:-0}" "$tx")" >&2
  done
  local status
  status=$(printf '%s' "$codes" | sort -u | paste -sd, -)
  rows+=("| $name | $what | \`${line:-(nothing on stderr)}\` | $status | $(printf '%s' "$to_line" | stats) | $(printf '%s' "$to_ranks" | stats) | $(printf '%s' "$to_exit" | stats) | $(printf '%s' "$from_launch" | stats) |")
}
run_count=0
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
gpt_ranks=("${mpi[@]}" -n 4 "$gpt")

# --- inputs refused at start (time from the launch) ---
measure "world size 3" "3 processes of the 4-device GPT job" launch 60 '\[strata\]' -- \
  "${mpi[@]}" -n 3 "$gpt" 20 --checkpoint "$work/unused"
measure "bad STRATA_MPI_TIMEOUT_S" "STRATA_MPI_TIMEOUT_S=1abc, GPT job, 4 processes" launch 60 '\[strata\]' -- \
  env STRATA_MPI_TIMEOUT_S=1abc "${gpt_ranks[@]}" 20 --checkpoint "$work/unused"
measure "bad argument" "gpt_train --save-every 0, 4 processes" launch 60 '\[strata\]' -- \
  "${gpt_ranks[@]}" 20 --save-every 0 --checkpoint "$work/unused"
measure "bad label" "mpi_fail_bad_input label: rank 3 of 4 passes label 11 of 4 classes" launch 60 '\[strata\]' -- \
  "${mpi[@]}" -n 4 "$bad" label

# --- one rank failing alone (time from the failing rank's own line) ---
measure "rank throws in a layer" "mpi_fail_one_rank_fails layer: rank 2 of 4" 'line:\[strata\] rank 2:' 60 '\[strata\]' -- \
  "${mpi[@]}" -n 4 "$alone" layer
measure "rank throws, uncaught" "mpi_fail_one_rank_fails escape: rank 2 of 4" 'line:\[strata\] rank 2:' 60 '\[strata\]' -- \
  "${mpi[@]}" -n 4 "$alone" escape
measure "rank throws, world.fail" "mpi_fail_one_rank_fails caught: rank 2 of 4" 'line:\[strata\] rank 2:' 60 '\[strata\]' -- \
  "${mpi[@]}" -n 4 "$alone" caught
measure "rank killed (SIGKILL)" "kill -9 of rank 2 of the GPT job after step 25" 'signal:KILL:2:step +25/' 120 '.' -- \
  "${gpt_ranks[@]}" 1000 --save-every 1000 --checkpoint "$work/unused"

# --- a rank that stops: the watchdog (time from the SIGSTOP) ---
measure "rank stopped (SIGSTOP), GPT job" "kill -STOP of rank 2 after step 25, STRATA_MPI_TIMEOUT_S=3" 'signal:STOP:2:step +25/' 120 'watchdog' -- \
  env STRATA_MPI_TIMEOUT_S=3 "${gpt_ranks[@]}" 1000 --save-every 1000 --checkpoint "$work/unused"
measure "rank stops in forward" "mpi_fail_rank_stops layer: rank 2 of 4, STRATA_MPI_TIMEOUT_S=3" 'line:rank 2: stopping \(SIGSTOP\)' 120 'watchdog' -- \
  env STRATA_MPI_TIMEOUT_S=3 "${mpi[@]}" -n 4 "$stops" layer 2 "$work/stops.ckpt"

# --- checkpoints refused on resume (time from the launch) ---
# a checkpoint after step 10 and one after step 20 of the same job
timeout 120 "${gpt_ranks[@]}" 10 --checkpoint "$work/ck10" > "$work/ck10.log" 2>&1 || { cat "$work/ck10.log" >&2; exit 1; }
timeout 120 "${gpt_ranks[@]}" 20 --save-every 10 --checkpoint "$work/ck20" > "$work/ck20.log" 2>&1 || { cat "$work/ck20.log" >&2; exit 1; }
file=rank-00002-of-00004.safetensors
size=$(stat -c %s "$work/ck20/$file")
prepare_truncated() { rm -rf "$work/bad"; cp -r "$work/ck20" "$work/bad"; truncate -s $((size / 2)) "$work/bad/$file"; }
prepare_flipped() {
  rm -rf "$work/bad"; cp -r "$work/ck20" "$work/bad"
  # one byte of tensor data, 3/4 into the file, inverted
  local at=$((size * 3 / 4)) b
  b=$(od -An -tu1 -j "$at" -N1 "$work/bad/$file" | tr -d ' ')
  printf "$(printf '\\%03o' $((255 - b)))" | dd of="$work/bad/$file" bs=1 seek="$at" conv=notrunc status=none
}
prepare_mixed() { rm -rf "$work/bad"; cp -r "$work/ck20" "$work/bad"; cp "$work/ck10/$file" "$work/bad/$file"; }
PREPARE=prepare_truncated
measure "truncated checkpoint" "--resume of a checkpoint whose rank-2 file is cut to half" launch 60 '\[strata\]' -- \
  "${gpt_ranks[@]}" 30 --resume "$work/bad" --checkpoint "$work/unused"
PREPARE=prepare_flipped
measure "corrupt checkpoint" "--resume of a checkpoint with one byte of rank 2's tensors inverted" launch 60 '\[strata\]' -- \
  "${gpt_ranks[@]}" 30 --resume "$work/bad" --checkpoint "$work/unused"
PREPARE=prepare_mixed
measure "checkpoint mixing two saves" "--resume of the step-20 checkpoint holding the step-10 save's rank-2 file" launch 60 '\[strata\]' -- \
  "${gpt_ranks[@]}" 30 --resume "$work/bad" --checkpoint "$work/unused"
PREPARE=""

# --- a restart by scripts/strata-run.sh: the whole run against an uninterrupted one ---
# The two alternate (uninterrupted, killed, uninterrupted, ...), so that each restarted run is
# compared with an uninterrupted one run just before it, under the same load.
prepare_fresh() { rm -rf "$work/ck" "$work/ck.tmp" "$work/ck.old"; }
restart_steps=100
restart_cmd=(bash "$run_sh" --retries 3 --checkpoint "$work/ck" -- "${gpt_ranks[@]}" $restart_steps --save-every 10 --checkpoint "$work/ck")
whole_u="" whole_k="" lost="" rc_u="" rc_k="" kill_to_line="" kill_line=""
for r in $(seq 1 "$reps"); do
  du=$work/run$((++run_count))
  prepare_fresh
  job "$du" 300 launch -- "${restart_cmd[@]}"
  dk=$work/run$((++run_count))
  prepare_fresh
  job "$dk" 300 'signal:KILL:2:step +75/' -- "${restart_cmd[@]}"
  u=$(elapsed "$(cat "$du/t_launch")" "$(cat "$du/t_exit")")
  k=$(elapsed "$(cat "$dk/t_launch")" "$(cat "$dk/t_exit")")
  whole_u+="$u"$'\n' whole_k+="$k"$'\n' lost+="$(elapsed "$u" "$k")"$'\n'
  rc_u+="$(cat "$du/rc")"$'\n' rc_k+="$(cat "$dk/rc")"$'\n'
  [ -f "$du/left" ] && rc_u+="(a process left behind)"$'\n'
  [ -f "$dk/left" ] && rc_k+="(a process left behind)"$'\n'
  tf=$(cat "$dk/t_fault") tl=$(first_time "$dk" 'strata-run')
  [ -n "$tf" ] && [ -n "$tl" ] && kill_to_line+="$(elapsed "$tf" "$tl")"$'\n'
  if [ "$r" -eq 1 ]; then
    kill_line=$(first_line "$dk" 'strata-run')
    add_details "killed, restarted by strata-run" "$dk" "${restart_cmd[@]}"
  fi
  echo "  restart pair, run $r: uninterrupted $u s (exit $(cat "$du/rc")), killed and restarted $k s (exit $(cat "$dk/rc"), $(grep -c 'the job failed' "$dk/err") restart(s))" >&2
done
rows+=("| uninterrupted run | gpt_train $restart_steps steps, a checkpoint every 10, under strata-run | \`$(l=$(first_line "$du" .); echo "${l:-(nothing on stderr)}")\` | $(printf '%s' "$rc_u" | sort -u | paste -sd, -) | - | - | - | $(printf '%s' "$whole_u" | stats) |")
rows+=("| killed, restarted by strata-run | the same, rank 2 killed (SIGKILL) after step 75: resumes after step 70 | \`${kill_line}\` | $(printf '%s' "$rc_k" | sort -u | paste -sd, -) | $(printf '%s' "$kill_to_line" | stats) | - | - | $(printf '%s' "$whole_k" | stats) |")

src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
echo "# What a failure looks like, and how long it takes"
echo
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load average $load_before before the runs, $(cut -d' ' -f1-3 /proc/loadavg) after; $(date -u '+%Y-%m-%d %H:%M') UTC"
echo "- binaries: $build/examples/gpt_train built $(date -u -r "$gpt" '+%Y-%m-%d %H:%M') UTC, the tests/mpi_fail programs $(date -u -r "$alone" '+%H:%M') UTC ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")); their source $src is at commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null)$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes') now (it may have moved since the build); $(mpiexec --version | head -1)"
echo "- this script: commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)$(git -C "$repo" diff --quiet HEAD -- bench/host/failure_times.sh scripts/strata-run.sh 2>/dev/null && git -C "$repo" ls-files --error-unmatch bench/host/failure_times.sh > /dev/null 2>&1 || echo ' (failure_times.sh not committed yet)')"
echo "- command: \`bash bench/host/failure_times.sh $1 $reps\`"
echo
echo "| case | what | first error line on stderr (first run) | exit status | fault → that line (s) | fault → every rank gone (s) | fault → mpiexec returns (s) | launch → mpiexec returns (s) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "Times in seconds, min / median / max of $reps runs. The fault is the launch for the inputs refused at"
echo "start and the checkpoints refused on resume, the failing rank's own line for the mpi_fail programs,"
echo "and the signal this script sent for SIGKILL and SIGSTOP. 'Every rank gone': the last rank process"
echo "last seen alive (polled every 10 ms); 'mpiexec returns': the command a user typed returns. For the"
echo "uninterrupted and the restarted run, the last column is the whole run (until strata-run returns), and"
echo "the 'line' column is measured from the kill. A line is stamped when"
echo "it reaches this script through mpiexec, so a rank can be seen gone a few ms before its own line (a"
echo "negative time)."
echo
echo "Time lost to the kill and the restart (each restarted run against the uninterrupted run just before it): $(printf '%s' "$lost" | stats) s."
echo
echo "## The first lines on stderr (first run of each case)"
echo
printf '%s\n' "${details[@]}"
