# Sourced by the bench/host/run_*.sh scripts: write_report NAME TITLE COMMAND OUTPUT writes
# OUTPUT under TITLE, with the machine, date, command and commit, to stdout and to
# bench/results/NAME_<date>_<cpu>.md.
write_report() {
  local name=$1 title=$2 command=$3 run=$4
  local cpu tag out
  cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
  tag=$(echo "$cpu" | awk '{print $1"_"$2}')
  out=bench/results/${name}_$(date +%F)_${tag}.md
  {
    echo "# $title"
    echo
    echo "- machine: $cpu, $(nproc) CPUs; $(date -u '+%F %H:%M UTC')"
    echo "- command: \`$command\` (commit $(git rev-parse --short HEAD))"
    echo
    echo '```'
    echo "$run"
    echo '```'
  } > "$out"
  cat "$out"
}
