#!/bin/sh
# SPDX-License-Identifier: MIT
# fuzz.sh - run kvmem's libFuzzer targets, each for a while
#
#   scripts/fuzz.sh BUILD_DIR SECONDS TARGET...
#   scripts/fuzz.sh --probe CC     exit 0 when CC builds libFuzzer targets
#
# Each target BUILD_DIR/fuzz-TARGET starts from the seeds in
# tests/fuzz/corpus/TARGET and keeps the inputs it finds in
# BUILD_DIR/corpus/TARGET, so a later run goes on from there. A crash, a
# leak, a sanitizer report or a broken invariant fails the run with
# libFuzzer's report; the input is saved as BUILD_DIR/crash-TARGET-*, and
# BUILD_DIR/fuzz-TARGET FILE replays it.
set -eu

if [ "${1:-}" = --probe ]; then
	src=$(mktemp /tmp/kvmem-fuzz-probe.XXXXXX)
	trap 'rm -f "$src" "$src.c" "$src.bin"' EXIT
	printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)' \
		'{ return (int)(d && n) * 0; }' >"$src.c"
	command -v "$2" >/dev/null 2>&1 &&
		"$2" -fsanitize=fuzzer,address -o "$src.bin" "$src.c" \
			>/dev/null 2>&1
	exit
fi

[ $# -ge 3 ] || {
	echo "usage: $0 BUILD_DIR SECONDS TARGET..." >&2
	exit 2
}
dir=$1
secs=$2
shift 2
for t in "$@"; do
	mkdir -p "$dir/corpus/$t"
	log="$dir/fuzz-$t.log"
	if ! "$dir/fuzz-$t" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=4096 -max_len=8192 -print_final_stats=1 \
		-artifact_prefix="$dir/crash-$t-" \
		"$dir/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
		cat "$log" >&2
		echo "fuzz: $t FAILED; the input is $dir/crash-$t-*" >&2
		exit 1
	fi
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' "$log" | tail -n 1)
	echo "fuzz: $t: $runs inputs in ${secs} s, $cov edges covered, no failure"
done
