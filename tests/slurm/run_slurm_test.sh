#!/usr/bin/env bash
# slurm.srun: a one-node Slurm cluster in a temporary folder, a 4-rank training under
# `srun -n 4`, the same under `mpiexec -n 4`, and the two compared.
#   run_slurm_test.sh <slurm_train> <mpiexec> [mpiexec flags...]
# Installs Debian's Slurm packages when they are missing (root or sudo needed);
# exits 77 (ctest: skipped) with the exact reason when this machine cannot do it.
set -uo pipefail
prog=$1; shift
mpiexec=$1; shift

skip() { echo "slurm test SKIPPED: $*"; exit 77; }
fail() { echo "slurm test FAILED: $*"; exit 1; }

# --- Slurm's packages ---------------------------------------------------------------
need=()
for p in slurmctld slurmd slurm-client; do
  dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null || skip "Slurm (${need[*]}) is not installed and installing it needs root or password-less sudo"
    sudo=(sudo -n)
  fi
  echo "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/tmp/strata-slurm-apt.log 2>&1; then
    "${sudo[@]}" apt-get update >>/tmp/strata-slurm-apt.log 2>&1
    "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >>/tmp/strata-slurm-apt.log 2>&1 ||
      skip "apt-get could not install ${need[*]} (see /tmp/strata-slurm-apt.log)"
  fi
fi
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to launch tasks; this test runs as $(id -un)"

# --- a private one-node cluster -------------------------------------------------------
dir=$(mktemp -d /tmp/strata-slurm.XXXXXX)
node=$(hostname -s)
free_port() {  # a TCP port nothing listens on
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
  done
  echo 0
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
[ "$ctld_port" != 0 ] && [ "$slurmd_port" != 0 ] && [ "$ctld_port" != "$slurmd_port" ] || skip "no free TCP ports on 127.0.0.1"
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<CONF
ClusterName=strata-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=strata Nodes=$node Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
cleanup() {
  for d in slurmd slurmctld; do
    [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  sleep 1
  rm -rf "$dir"
}
trap cleanup EXIT

slurmctld -f "$SLURM_CONF" -i >"$dir/slurmctld.out" 2>&1 || { cat "$dir/slurmctld.out" "$dir/slurmctld.log" 2>/dev/null; skip "slurmctld does not start here (log above)"; }
slurmd -f "$SLURM_CONF" -N "$node" >"$dir/slurmd.out" 2>&1 || { cat "$dir/slurmd.out" "$dir/slurmd.log" 2>/dev/null; skip "slurmd does not start here (log above)"; }
for _ in $(seq 60); do
  state=$(sinfo -h -n "$node" -o %t 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || { tail -20 "$dir/slurmctld.log" "$dir/slurmd.log"; skip "the Slurm node did not become idle (state '$state'; logs above)"; }
echo "one-node Slurm up: node $node, ports $ctld_port/$slurmd_port, $(sinfo -V)"
srun --mpi=list 2>&1 | grep -q pmix || skip "Slurm's PMIx plugin (mpi/pmix, package slurm-wlm-basic-plugins) is missing: Open MPI cannot wire up under srun"

# Containers usually lack the ptrace rights Open MPI's shared-memory single copy needs.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
timeout 120 srun -n 4 --mpi=pmix "$prog" >"$dir/srun.out" 2>&1
rc=$?
cat "$dir/srun.out"
[ $rc -eq 0 ] || fail "srun -n 4 exited with $rc"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset SLURM_CONF
timeout 120 "$mpiexec" -n 4 "$@" "$prog" >"$dir/mpiexec.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$dir/mpiexec.out"; fail "mpiexec -n 4 exited with $rc"; }

# Every rank's layout came from Slurm: 4 distinct task ids 0..3, each equal to the MPI rank.
layouts=$(grep '^layout' "$dir/srun.out" | sort)
[ "$(echo "$layouts" | wc -l)" -eq 4 ] || fail "expected 4 layout lines from srun"
for r in 0 1 2 3; do
  echo "$layouts" | grep -q "^layout rank $r size 4 slurm_procid $r slurm_ntasks 4 slurm_localid $r " ||
    fail "rank $r's layout does not come from Slurm: $(echo "$layouts" | grep "rank $r ")"
done
a=$(grep '^loss' "$dir/srun.out")
b=$(grep '^loss' "$dir/mpiexec.out")
[ "$(echo "$a" | wc -l)" -eq 6 ] || fail "expected 6 losses from the srun run"
if [ "$a" != "$b" ]; then
  paste <(echo "$a") <(echo "$b")
  fail "the losses under srun differ from those under mpiexec"
fi
echo "srun -n 4 and mpiexec -n 4: the same 6 losses, to the last bit; rank layout from Slurm"
