#!/usr/bin/env bash
# Runs a training job and, when it fails (a rank killed, a node lost, a watchdog timeout),
# starts it again from its last complete checkpoint, up to N times:
#
#   bash scripts/strata-run.sh [--retries N] [--checkpoint DIR] [--resume-flag FLAG]
#                              [--worlds W1,W2,...] -- COMMAND...
#
#   bash scripts/strata-run.sh --retries 3 --checkpoint checkpoints/gpt -- \
#       mpiexec -n 4 ./build/examples/gpt_train 5000 --checkpoint checkpoints/gpt
#
# A save is atomic (the directory is replaced only once every file and the index are on
# disk), so DIR/index.json existing means a complete checkpoint; the restart appends
# "FLAG DIR" (default --resume, as gpt_train and fashion_mnist_train take it) to COMMAND.
# Without a checkpoint yet, COMMAND starts from the beginning. A run that resumes gives the
# same numbers and the same checkpoint bytes as one that never stopped. Exits with COMMAND's
# last status. --worlds: the run starts with W1 processes and every restart takes the next
# world of the list (the last one stays): "{world}" in COMMAND is replaced by it, e.g.
# `--worlds 4,1 -- mpiexec -n {world} ./gpt_train ...` carries on as one process after a
# failure — a lost node does not come back — resharding the checkpoint into that world's plan
# (the job must run on each world listed; list a world twice to retry it first). Under Slurm, `sbatch --requeue` with this script inside the job restarts on
# another allocation the same way (docs/execution.md).
set -uo pipefail

retries=3
checkpoint=""
resume_flag="--resume"
worlds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --worlds) IFS=',' read -r -a worlds <<< "${2:?--worlds needs a list such as 4,1}"; shift 2 ;;
    --retries) retries="${2:?--retries needs a number}"; shift 2 ;;
    --checkpoint) checkpoint="${2:?--checkpoint needs a directory}"; shift 2 ;;
    --resume-flag) resume_flag="${2:?--resume-flag needs a flag}"; shift 2 ;;
    --) shift; break ;;
    *) echo "strata-run: unknown option '$1' (usage: strata-run [--retries N] [--checkpoint DIR] [--resume-flag FLAG] [--worlds W1,W2,...] -- COMMAND...)" >&2
       exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "strata-run: no command after --" >&2
  exit 2
fi
if ! [[ "$retries" =~ ^[0-9]+$ ]]; then
  echo "strata-run: --retries must be a whole number, not '$retries'" >&2
  exit 2
fi
for w in "${worlds[@]}"; do
  if ! [[ "$w" =~ ^[1-9][0-9]*$ ]]; then
    echo "strata-run: --worlds takes positive process counts separated by commas, not '$w'" >&2
    exit 2
  fi
done
if [ ${#worlds[@]} -gt 0 ] && [[ " $* " != *"{world}"* ]]; then
  echo "strata-run: --worlds given, but the command has no {world} to replace" >&2
  exit 2
fi

# The step a checkpoint was written after, read from its index ("step": "N").
checkpoint_step() {
  sed -n 's/.*"step": *"\([0-9]*\)".*/\1/p' "$1/index.json" | head -1
}

# A run killed inside a save's commit leaves DIR.tmp (complete once its index is written)
# or DIR.old (the previous checkpoint, moved aside) without DIR: take back the newest
# complete one.
recover() {
  local dir=$1
  [ -z "$dir" ] || [ -f "$dir/index.json" ] && return
  for side in "$dir.tmp" "$dir.old"; do
    if [ -f "$side/index.json" ]; then
      rm -rf "$dir" && mv "$side" "$dir" && echo "[strata-run] took $side back as $dir (a save was interrupted)" >&2
      return
    fi
  done
}

# The world attempt k runs on: the k-th of --worlds, or the last.
world_of() {
  local k=$1 n=${#worlds[@]}
  echo "${worlds[$(( k < n ? k : n - 1 ))]}"
}

attempt=0
while :; do
  recover "$checkpoint"
  cmd=("$@")
  if [ ${#worlds[@]} -gt 0 ]; then
    world=$(world_of "$attempt")
    cmd=("${cmd[@]//\{world\}/$world}")
  fi
  if [ -n "$checkpoint" ] && [ -f "$checkpoint/index.json" ] && [ "$attempt" -gt 0 ]; then
    cmd+=("$resume_flag" "$checkpoint")
  fi
  "${cmd[@]}"
  status=$?
  if [ "$status" -eq 0 ]; then
    [ "$attempt" -gt 0 ] && echo "[strata-run] finished after $attempt restart(s)" >&2
    exit 0
  fi
  if [ "$attempt" -ge "$retries" ]; then
    echo "[strata-run] the job failed with status $status; no restarts left (--retries $retries)" >&2
    exit "$status"
  fi
  attempt=$((attempt + 1))
  on=""
  [ ${#worlds[@]} -gt 0 ] && on=" on $(world_of "$attempt") process(es)"
  if [ -n "$checkpoint" ] && [ -f "$checkpoint/index.json" ]; then
    echo "[strata-run] the job failed with status $status; restart $attempt of $retries$on from $checkpoint (after step $(checkpoint_step "$checkpoint"))" >&2
  else
    echo "[strata-run] the job failed with status $status; restart $attempt of $retries$on from the beginning (no checkpoint yet)" >&2
  fi
done
