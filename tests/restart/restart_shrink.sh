#!/usr/bin/env bash
# restart_shrink.sh STRATA_RUN GPT_TRAIN MPIEXEC [MPIEXEC_FLAGS...]
# 1. gpt_train runs 60 steps on 4 ranks, checkpointing every 10: the reference.
# 2. The same job runs under strata-run --worlds 4,1; once its first checkpoint is committed a
#    killer sends SIGKILL to one rank, and strata-run restarts it as one process, which loads
#    the 4-device checkpoint into the single-device plan (a reshard) and finishes the run.
# The job must finish by itself, restart on 1 process, and end with the reference's
# validation loss within 2e-3 nats/token (float32 sums in another order after the reshard).
set -uo pipefail
run=$1 exe=$2 mpiexec=$3
shift 3
flags=("$@")
work=$(mktemp -d)
trap 'pkill -9 -x "$(basename "$exe")" 2>/dev/null; rm -rf "$work"' EXIT
steps=60
"$mpiexec" -n 4 "${flags[@]}" "$exe" "$steps" --save-every 10 --checkpoint "$work/reference" > "$work/reference.log" 2>&1 ||
  { cat "$work/reference.log"; echo "FAIL: the reference run failed"; exit 1; }

(
  for _ in $(seq 1 3000); do [ -f "$work/shrunk/index.json" ] && break; sleep 0.01; done
  pids=($(pgrep -x "$(basename "$exe")"))
  if [ ${#pids[@]} -gt 0 ]; then
    victim=${pids[$((RANDOM % ${#pids[@]}))]}
    kill -9 "$victim" && echo "killer: killed rank process $victim" >> "$work/kills.log"
  fi
) &
killer=$!
bash "$run" --retries 2 --worlds 4,1 --checkpoint "$work/shrunk" -- \
  "$mpiexec" -n "{world}" "${flags[@]}" "$exe" "$steps" --save-every 10 --checkpoint "$work/shrunk" > "$work/shrunk.log" 2>&1
status=$?
wait "$killer"
cat "$work/kills.log" 2>/dev/null
grep "strata-run" "$work/shrunk.log"
[ "$status" -eq 0 ] || { cat "$work/shrunk.log"; echo "FAIL: the job under strata-run ended with status $status"; exit 1; }
grep -q "restart 1 of 2 on 1 process(es) from $work/shrunk" "$work/shrunk.log" ||
  { cat "$work/shrunk.log"; echo "FAIL: no restart on 1 process from the checkpoint"; exit 1; }
grep -q "resumed from $work/shrunk" "$work/shrunk.log" || { echo "FAIL: the one-process run did not resume"; exit 1; }
loss() { sed -n 's/^validation loss: \([0-9.]*\) nats.*/\1/p' "$1" | tail -1; }
a=$(loss "$work/reference.log") b=$(loss "$work/shrunk.log")
[ -n "$a" ] && [ -n "$b" ] || { echo "FAIL: a run printed no validation loss"; exit 1; }
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-3) }' ||
  { echo "FAIL: validation loss $b after the reshard, $a without the failure"; exit 1; }
echo "OK: a rank was killed, the run carried on as 1 process from the 4-device checkpoint; validation loss $b (uninterrupted: $a)"
