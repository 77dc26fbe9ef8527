#!/usr/bin/env bash
# restart_test.sh STRATA_RUN GPT_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
# 1. gpt_train runs 60 steps on 4 ranks, checkpointing every 10: the reference checkpoint.
# 2. The same job runs under strata-run while a killer sends SIGKILL to one rank at a random
#    moment, twice; strata-run restarts it from its last complete checkpoint each time.
# The job must finish by itself, restart at least once, and leave a final checkpoint that
# is byte-identical to the reference.
set -uo pipefail
run=$1 exe=$2 mpiexec=$3
shift 3
flags=("$@")
work=$(mktemp -d)
trap 'pkill -9 -x "$(basename "$exe")" 2>/dev/null; rm -rf "$work"' EXIT
steps=60
launch=("$mpiexec" -n 4 "${flags[@]}" "$exe")
# STRATA_RESTART_JOB_FLAGS: more flags for the job (--async-save: kills land in background writes)
job=("${launch[@]}" "$steps" --save-every 10 ${STRATA_RESTART_JOB_FLAGS:-} --checkpoint)

"${job[@]}" "$work/reference" > "$work/reference.log" 2>&1 || { cat "$work/reference.log"; echo "FAIL: the reference run failed"; exit 1; }

# the killer: twice, after a random 1.0-3.5 s, SIGKILL to one random rank of the job
(
  for k in 1 2; do
    sleep "$(awk -v s=$RANDOM 'BEGIN { srand(s); printf "%.2f", 1.0 + 2.5 * rand() }')"
    # STRATA_RESTART_KILL_IN_SAVE=1: then wait (up to 10 s) for a committed checkpoint and a
    # save in flight (<dir>.tmp, written in the background), so the kill lands in a save
    if [ -n "${STRATA_RESTART_KILL_IN_SAVE:-}" ]; then
      for _ in $(seq 1 1000); do
        [ -f "$work/killed/index.json" ] && [ -d "$work/killed.tmp" ] && break
        sleep 0.01
      done
    fi
    pids=($(pgrep -x "$(basename "$exe")"))
    if [ ${#pids[@]} -gt 0 ]; then
      victim=${pids[$((RANDOM % ${#pids[@]}))]}
      kill -9 "$victim" && echo "killer: killed rank process $victim" >> "$work/kills.log"
    fi
    # wait for the restarted job's ranks before the next kill
    for _ in $(seq 1 100); do pgrep -x "$(basename "$exe")" > /dev/null && break; sleep 0.1; done
    sleep 0.5
  done
) &
killer=$!
bash "$run" --retries 5 --checkpoint "$work/killed" -- "${job[@]}" "$work/killed" > "$work/killed.log" 2>&1
status=$?
wait "$killer"
cat "$work/kills.log" 2>/dev/null
grep "strata-run" "$work/killed.log"
if [ "$status" -ne 0 ]; then
  cat "$work/killed.log"; echo "FAIL: the job under strata-run ended with status $status"; exit 1
fi
restarts=$(grep -c "^\[strata-run\] the job failed" "$work/killed.log")
if [ "$restarts" -lt 1 ]; then
  echo "FAIL: no restart happened (the kills missed the job), so nothing was tested"; exit 1
fi
grep -q "resumed from" "$work/killed.log" || echo "note: every restart began before the first checkpoint"
for f in "$work"/reference/*; do
  name=$(basename "$f")
  if ! cmp -s "$f" "$work/killed/$name"; then
    echo "FAIL: $name differs between the uninterrupted run and the run restarted $restarts time(s)"; exit 1
  fi
done
[ "$(ls "$work/reference" | wc -l)" -eq "$(ls "$work/killed" | wc -l)" ] || { echo "FAIL: the checkpoints hold different files"; exit 1; }
# a checkpoint beyond the run is refused by every rank, naming both numbers, in one line
"${launch[@]}" 30 --resume "$work/killed" --checkpoint "$work/short" > "$work/short.log" 2>&1 && { echo "FAIL: a 30-step run resumed a 60-step checkpoint"; exit 1; }
said=$(grep -c "^\[strata\] all 4 ranks: .*checkpoint $work/killed was written after step 60, beyond this run's 30 steps" "$work/short.log")
[ "$said" -eq 1 ] || { cat "$work/short.log"; echo "FAIL: the refusal of a checkpoint beyond the run was printed $said times, not once"; exit 1; }
echo "OK: restarted $restarts time(s); the final checkpoint ($(ls "$work/reference" | wc -l) files) is byte-identical to the uninterrupted run's"
