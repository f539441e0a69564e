#!/usr/bin/env bash
# Runs every Go fuzz target in the root module for a fixed time each.
# Usage: scripts/fuzz.sh [fuzztime]   (default 10s)
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true)
	for t in $targets; do
		echo "== $pkg $t ($fuzztime)"
		go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg"
	done
done
