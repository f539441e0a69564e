#!/usr/bin/env bash
# Runs BenchmarkTimerLateness ROUNDS times, each case's two
# implementations back to back, and prints per case the median p50 and
# p99 lateness of the scheduler's timers and of time.Sleep, and the
# ratios scheduler / time.Sleep.
# Usage: scripts/lateness.sh [rounds] [case regexp]   (default 5, every case)
# BIN=path runs an already built test binary of the root package instead
# of building one (to compare two versions); BENCHTIME passes through;
# SUMMARY=file prints the summary of benchmark output saved before,
# running nothing.
set -euo pipefail
rounds=${1:-5}
filter=${2:-.}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${SUMMARY:-}" ]; then
	grep '^BenchmarkTimerLateness' "$SUMMARY" >"$tmp/out.txt"
else
	bin=${BIN:-}
	if [ -z "$bin" ]; then
		bin=$tmp/scheduler.test
		go test -c -o "$bin" .
	fi
	for _ in $(seq "$rounds"); do
		"$bin" -test.run '^$' -test.bench "TimerLateness/$filter" -test.benchtime "${BENCHTIME:-1s}" |
			grep '^BenchmarkTimerLateness' | tee -a "$tmp/out.txt"
	done
	echo
fi
awk '
function median(key,    n, i, j, v, a) {
	n = cnt[key]
	for (i = 1; i <= n; i++) a[i] = val[key, i]
	for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	name = $1; sub(/-[0-9]+$/, "", name)
	impl = name; sub(/.*\/impl=/, "", impl)
	c = name; sub(/^BenchmarkTimerLateness\//, "", c); sub(/\/impl=.*/, "", c)
	if (!(c in seen)) { seen[c] = 1; order[++ncases] = c }
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "p50-late-us" || $(i + 1) == "p99-late-us") {
			k = c SUBSEP impl SUBSEP $(i + 1)
			val[k, ++cnt[k]] = $i
		}
	}
}
END {
	printf "%-44s %12s %12s %7s %12s %12s %7s\n", "case (median of rounds, µs)", "p50 sched", "p50 sleep", "ratio", "p99 sched", "p99 sleep", "ratio"
	for (i = 1; i <= ncases; i++) {
		c = order[i]
		s50 = median(c SUBSEP "sched" SUBSEP "p50-late-us"); t50 = median(c SUBSEP "sleep" SUBSEP "p50-late-us")
		s99 = median(c SUBSEP "sched" SUBSEP "p99-late-us"); t99 = median(c SUBSEP "sleep" SUBSEP "p99-late-us")
		printf "%-44s %12.0f %12.0f %7.2f %12.0f %12.0f %7.2f\n", c, s50, t50, s50 / t50, s99, t99, s99 / t99
	}
}' "$tmp/out.txt"
