#!/usr/bin/env bash
# Fails when `go mod tidy` would change go.mod or go.sum of any given module.
# Usage: scripts/check-tidy.sh DIR...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for m in "$@"; do
	dir="$root/$m"
	tmp=$(mktemp -d)
	cp "$dir/go.mod" "$tmp/go.mod"
	[ -f "$dir/go.sum" ] && cp "$dir/go.sum" "$tmp/go.sum"
	(cd "$dir" && go mod tidy)
	if ! diff -q "$tmp/go.mod" "$dir/go.mod" >/dev/null ||
		{ [ -f "$dir/go.sum" ] && ! diff -q "$tmp/go.sum" "$dir/go.sum" >/dev/null; }; then
		echo "go mod tidy changes module $m"
		(cd "$dir" && git diff -- go.mod go.sum) || true
		status=1
	fi
	cp "$tmp/go.mod" "$dir/go.mod"
	if [ -f "$tmp/go.sum" ]; then cp "$tmp/go.sum" "$dir/go.sum"; else rm -f "$dir/go.sum"; fi
	rm -rf "$tmp"
done
exit $status
