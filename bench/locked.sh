#!/usr/bin/env bash
# locked.sh counts the locked instructions that one workload of this
# scheduler executes per operation, on one processor, and the functions
# they are in: every xchg with a memory operand and every lock-prefixed
# instruction (Go's atomic stores compile to xchg on amd64, its
# compare-and-swaps and adds to lock cmpxchg and lock xadd, and a mutex
# costs one to take and one to give back).
#
# A locked instruction waits for the core's earlier stores to drain, so
# each costs tens of cycles however few instructions surround it; on a
# path a process takes once per message or per start, each is worth a
# percent or two of the run. The instruction count of instructions.sh
# weighs them like any other. Like that count, this one does not move
# with whatever else the machine runs. With PEER set to another of the
# harness's implementations (PEER=pond, built from impl/pond) it counts
# that one's instead, for a comparison on the same workload.
#
# The count is of one run at SCALE (0.1), set-up included, divided by
# its operations: for the workloads that start many processes the set-up
# is a small part; for the message workloads, run it at two scales and
# subtract if the difference matters. TOP (15) functions are listed.
#
# Usage: bench/locked.sh WORKLOAD [VARIANT] [SCALE]   (amd64 only)
# Needs valgrind (Debian: apt-get install valgrind), objdump (binutils)
# and go.
set -euo pipefail

workload=${1:?usage: locked.sh WORKLOAD [VARIANT] [SCALE]}
variant=${2:-}
scale=${3:-0.1}
impl=${PEER:-sched}

for tool in valgrind objdump; do
	if ! command -v "$tool" >/dev/null; then
		echo "locked.sh: needs $tool (Debian: apt-get install valgrind binutils)" >&2
		exit 2
	fi
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$(dirname "$0")"
go build -o "$dir/bin" "./impl/$impl"

args=(-workload "$workload" -scale "$scale")
if [ -n "$variant" ]; then
	args+=(-variant "$variant")
fi
# The runtime's asynchronous preemption signals do not survive
# valgrind's serialised threads well; the count does not need them.
if ! GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
	--dump-instr=yes --callgrind-out-file="$dir/cg" "$dir/bin" "${args[@]}" \
	>"$dir/out" 2>"$dir/err"; then
	cat "$dir/err" >&2
	exit 1
fi
ops=$(sed -n 's/.*"ops":\([0-9]*\).*/\1/p' "$dir/out")
if [ -z "$ops" ]; then
	echo "locked.sh: no operation count in the output of $workload" >&2
	cat "$dir/out" "$dir/err" >&2
	exit 1
fi
objdump -d --no-show-raw-insn "$dir/bin" >"$dir/dis"
echo "${impl}: ${workload}${variant:+/$variant} at scale $scale"

# The first file lists the locked instructions' addresses with their
# functions; the second is callgrind's, whose cost lines give an
# instruction's address (absolute in hex, or relative to the previous
# line's: +N, -N, * for the same) and its execution count. The line
# after a calls= line is the cost of a call, not of an instruction: its
# address counts, its cost does not.
awk -v ops="$ops" -v top="${TOP:-15}" '
function hex(s,    i, n, c) {
	n = 0
	s = tolower(s)
	sub(/^0x/, "", s)
	for (i = 1; i <= length(s); i++) {
		c = index("0123456789abcdef", substr(s, i, 1)) - 1
		n = n * 16 + c
	}
	return n
}
FNR == 1 { file++ }
file == 1 && /^[0-9a-f]+ <.*>:$/ {
	fn = $0
	sub(/^[0-9a-f]+ </, "", fn)
	sub(/>:$/, "", fn)
	next
}
file == 1 && /^ +[0-9a-f]+:/ {
	split($0, col, "\t")
	ins = col[2]
	locked = ins ~ /^lock / || (ins ~ /^xchg / && ins ~ /\(/)
	if (locked) {
		a = $1
		sub(/:$/, "", a)
		lockfn[hex(a)] = fn
	}
	next
}
file == 2 && /^calls=/ { skip = 1; next }
file == 2 && /^(0x[0-9a-f]+|[-+][0-9]+|\*) / {
	p = $1
	if (p ~ /^0x/) addr = hex(p)
	else if (p ~ /^\+/) addr += substr(p, 2)
	else if (p ~ /^-/) addr -= substr(p, 2)
	if (skip) { skip = 0; next }
	if (addr in lockfn) {
		n[lockfn[addr]] += $3
		total += $3
	}
	next
}
file == 2 { skip = 0 }
END {
	printf "%.2f locked instructions per operation (%d operations)\n", total / ops, ops
	for (g in n) printf "%8.3f  %s\n", n[g] / ops, g | "sort -rn | head -n " top
}' "$dir/dis" "$dir/cg"
