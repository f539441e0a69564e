#!/usr/bin/env bash
# instructions.sh counts the instructions that one workload of this
# scheduler takes per operation (message, process, round trip), with
# valgrind's cachegrind, on one processor. With PEER set to another of
# the harness's implementations (PEER=pond, built from impl/pond, with
# its VARIANT, cpu) it counts that one's instead, for a comparison on the
# same workload.
#
# A count, unlike a time, does not move with whatever else the machine is
# running, so two revisions can be compared on a busy shared machine, a
# change of a few percent included. It says nothing about cache misses
# between cores, lock contention or the collector's pauses, which only a
# timed run shows: use it beside the benchmarks, not instead of them.
#
# The workload runs at SCALE and at twice SCALE, and the difference is
# divided by the difference in operations, so the set-up (starting the
# receivers, say) cancels out. A workload whose size does not follow the
# scale is reported as the whole run's count per operation. The counts
# are not exact to the instruction: the order in which the runtime's
# threads run and when the collector starts differ from run to run, and
# the per-operation figure moves by up to about 3 %. So each pair runs
# REPEAT times (3) and the median is printed. The collector runs as it
# would (GOGC from the environment); GOGC=off leaves its work out of the
# count.
#
# Usage: [PEER=pond] bench/instructions.sh WORKLOAD [VARIANT] [SCALE]   (SCALE 0.2)
# Needs valgrind (Debian: apt-get install valgrind) and go.
set -euo pipefail

workload=${1:?usage: instructions.sh WORKLOAD [VARIANT] [SCALE]}
variant=${2:-}
scale=${3:-0.2}
impl=${PEER:-sched}

if ! command -v valgrind >/dev/null; then
	echo "instructions.sh: needs valgrind (Debian: apt-get install valgrind)" >&2
	exit 2
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$(dirname "$0")"
go build -o "$dir/bin" "./impl/$impl"

# count SCALE sets ir and ops: the run's instructions and operations.
count() {
	local args=(-workload "$workload" -scale "$1")
	if [ -n "$variant" ]; then
		args+=(-variant "$variant")
	fi
	if ! GOMAXPROCS=1 valgrind --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file=/dev/null "$dir/bin" "${args[@]}" \
		>"$dir/out" 2>"$dir/err"; then
		cat "$dir/err" >&2
		exit 1
	fi
	ir=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$dir/err" | tr -d ,)
	ops=$(sed -n 's/.*"ops":\([0-9]*\).*/\1/p' "$dir/out")
	if [ -z "$ir" ] || [ -z "$ops" ]; then
		echo "instructions.sh: no count in the output of $workload" >&2
		cat "$dir/out" "$dir/err" >&2
		exit 1
	fi
}

twice=$(awk -v s="$scale" 'BEGIN { print 2 * s }')
per=()
for _ in $(seq "${REPEAT:-3}"); do
	count "$scale"
	ir1=$ir ops1=$ops
	count "$twice"
	ir2=$ir ops2=$ops
	if [ "$ops2" -gt "$ops1" ]; then
		per+=("$(awk -v a="$ir1" -v b="$ir2" -v x="$ops1" -v y="$ops2" 'BEGIN { printf "%.1f", (b - a) / (y - x) }')")
		how="the difference between $ops1 and $ops2 operations"
	else
		per+=("$(awk -v b="$ir2" -v y="$ops2" 'BEGIN { printf "%.1f", b / y }')")
		how="the whole run of $ops2 operations, set-up included: its size does not follow the scale"
	fi
done
sorted=$(printf '%s\n' "${per[@]}" | sort -g | tr '\n' ' ')
median=$(printf '%s\n' "${per[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "$impl ${workload}${variant:+/$variant}: $median instructions per operation (median of: ${sorted% }; from $how)"
