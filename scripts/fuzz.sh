#!/usr/bin/env bash
# Runs every Go fuzz target of the root module and of every nested module
# (a directory with its own go.mod) for a fixed time each.
# Usage: scripts/fuzz.sh [fuzztime]   (default 10s)
set -euo pipefail
fuzztime=${1:-10s}
root=$(cd "$(dirname "$0")/.." && pwd)
for mod in "$root" $(cd "$root" && ls -d */go.mod 2>/dev/null | xargs -r -n1 dirname | sed "s|^|$root/|"); do
	cd "$mod"
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true)
		for t in $targets; do
			echo "== $pkg $t ($fuzztime)"
			go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg"
		done
	done
done
