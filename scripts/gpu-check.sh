#!/bin/sh
# SPDX-License-Identifier: MIT
# gpu-check.sh - the checks and measurements that need an NVIDIA GPU, in one
# run, from a built tree (make; make build/tests/kvmem-check)
#
#   scripts/gpu-check.sh [-q] OUTDIR
#
# Writes to OUTDIR:
#   cuda.log           the cuda test suite on the GPU (KVMEM_CHECK_CUDA=gpu:
#                      the kernel tests on GPU 0 only, not again on the
#                      fake driver, which CI runs)
#   python-cuda.log    python/tests/test_cuda.py on the GPU (with CUDA
#                      tensors where PyTorch has CUDA), where python3 has
#                      NumPy
#   memcheck.log       compute-sanitizer memcheck over the cuda suite (on
#                      GPU 0 only too)
#   racecheck-*.log    compute-sanitizer racecheck over kvmem-bench attend
#                      --gpu, with 4 query rows a KV head (kvmem_k_attend_q4)
#                      and with 8 (kvmem_k_attend_q4w), in h84 words, and
#                      over the rows the fast kernel decodes first: golay24
#                      (q4, head_dim 64) and INT8 in secded72 words (q4w)
#   bench-*.json       kvmem-bench attend --gpu for the cases of the README's
#                      and kernels/README.md's tables, and fp8 in h84
#                      words at 32K (issue #51's format), each with the FP16
#                      kernel and a device copy measured in the same run;
#                      in decoding's shape (an FP16 sink page and tail),
#                      and h84 at 32K with sealed pages only (-sealed);
#                      bench-tier.json: kvmem-bench tier, kvmemd's GPU
#                      tier moving 1 GiB of pages each way next to the
#                      driver's copies of the same bytes
#   torch-*.json       scripts/torch-sdpa.py, PyTorch's FP16
#                      scaled_dot_product_attention on the same shapes as
#                      the FP16 cases of the bench, where python3 has
#                      torch with CUDA (skipped, and said so, without)
#   ptx-cost.json      scripts/ptx-cost.py of the build's cost probes (the
#                      kernels' PTX instructions a value), so that the run
#                      keeps the counts of the code it measured
#   commit.txt, gpu.csv the commit measured (and "dirty" if the tree had
#                      changes); the GPU, driver and clocks by nvidia-smi
#   summary            one line a step: its exit status and seconds
#   gpu-run.json       all of the above that is JSON, in one file
#                      (scripts/gpu-report.py): commit it under
#                      docs/gpu-runs/, and quote numbers from it
#
# -q: the suite and one bench case only. The run ends within
# GPU_CHECK_SECONDS seconds (450 by default, 300 with -q, 20 at least: a GPU
# is lent for minutes): each step's timeout is cut to what is left, and a
# step that would have under 20 seconds is not started, which the summary
# says ("skipped: out of time"); the suite not started fails the run.
# What an earlier run left in OUTDIR is removed first. The steps run in the order of what a run most
# needs: the suite, the README's cases, the rest of the matrix, the
# sanitizers. Each step has a timeout and the script goes on after a
# failure; its exit status is 1 when any step failed, or when the suite
# found no GPU (it then runs on the fake driver only). compute-sanitizer is looked for on PATH and in
# /usr/local/cuda/bin; without it the sanitizer steps are skipped (and say
# so in the summary). A bench's stderr goes to bench-NAME.err.
set -u

quick=0
if [ "${1:-}" = -q ]; then
	quick=1
	shift
fi
if [ $quick -eq 1 ]; then
	budget=${GPU_CHECK_SECONDS:-300}
else
	budget=${GPU_CHECK_SECONDS:-450}
fi
# Whole seconds, no leading zero (sh reads 010 as octal), 20 at least:
# a budget in which even the suite cannot start would check nothing.
case $budget in
'' | *[!0-9]* | 0*)
	echo "$0: GPU_CHECK_SECONDS: want whole seconds, not '$budget'" >&2
	exit 2
	;;
esac
if [ "$budget" -lt 20 ]; then
	echo "$0: GPU_CHECK_SECONDS: $budget is under the 20 a step needs" >&2
	exit 2
fi
if [ $# -ne 1 ]; then
	echo "usage: $0 [-q] OUTDIR" >&2
	exit 2
fi
out=$1
here=$(dirname "$0")
build=${KVMEM_BUILD:-build}
bench=$build/tools/kvmem-bench
check=$build/tests/kvmem-check
for f in "$bench" "$check"; do
	if [ ! -x "$f" ]; then
		echo "$0: no $f: run make and make $check first" >&2
		exit 2
	fi
	# make alone relinks the bench but not the test runner: a runner
	# older than the library would test the kernels it was linked with.
	if [ "$f" -ot "$build/libkvmem.a" ]; then
		echo "$0: $f is older than $build/libkvmem.a: make $f" >&2
		exit 2
	fi
done
mkdir -p "$out" || exit 2
# What an earlier run left there would pass for this one's where a step
# of this one does not run.
rm -f "$out"/bench-* "$out"/torch-* "$out"/*.log "$out"/ptx-cost.* \
	"$out"/commit.txt "$out"/gpu.csv "$out"/gpu-run.json
: >"$out/summary"
export KVMEM_BUILD="$build"
PATH=$PATH:/usr/local/cuda/bin
failed=0
deadline=$(($(date +%s) + budget))

# room NAME SECONDS: whether a step may start now, with 20 seconds left at
# least (the summary says so of one that may not); then t0 is now, and secs
# its timeout: SECONDS, or what is left of the run.
room() {
	t0=$(date +%s)
	if [ $((deadline - t0)) -lt 20 ]; then
		echo "$1 skipped: out of time (GPU_CHECK_SECONDS=$budget)" \
			>>"$out/summary"
		return 1
	fi
	secs=$2
	[ "$secs" -le $((deadline - t0)) ] || secs=$((deadline - t0))
}

# step NAME SECONDS LOG ERR COMMAND...: run it with a timeout (stdout to
# LOG, stderr to ERR; SECONDS, or what is left of the run, and a kill 5 s
# after the TERM for one that ignores it), note the outcome.
step() {
	name=$1 log=$3 err=$4
	room "$name" "$2" || return 0
	shift 4
	if [ "$err" = "$log" ]; then
		timeout -k 5 "$secs" "$@" >"$out/$log" 2>&1
	else
		timeout -k 5 "$secs" "$@" >"$out/$log" 2>"$out/$err"
	fi
	rc=$?
	echo "$name rc=$rc $(($(date +%s) - t0))s" >>"$out/summary"
	[ $rc -eq 0 ] || failed=1
}

# bench NAME ARGS...: one kvmem-bench attend --gpu case, as JSON.
bench() {
	name=$1
	shift
	step "bench $name" 120 "bench-$name.json" "bench-$name.err" \
		"$bench" attend --gpu --reps 10 --json "$@"
}

# torch NAME ARGS...: PyTorch's FP16 attention on a bench case's shape;
# exit status 3 (no torch, or no GPU for it) is a skip, not a failure.
torch() {
	name=$1
	shift
	room "torch $name" 120 || return 0
	timeout -k 5 "$secs" python3 "$here/torch-sdpa.py" --reps 10 "$@" \
		>"$out/torch-$name.json" 2>"$out/torch-$name.err"
	rc=$?
	if [ $rc -eq 3 ]; then
		echo "torch $name skipped: $(cat "$out/torch-$name.err")" \
			>>"$out/summary"
		rm -f "$out/torch-$name.json"
		return
	fi
	echo "torch $name rc=$rc $(($(date +%s) - t0))s" >>"$out/summary"
	[ $rc -eq 0 ] || failed=1
}

# The commit measured and the GPU it ran on, for gpu-run.json.
if git rev-parse HEAD >/dev/null 2>&1; then
	echo "$(git rev-parse HEAD)$(git status --porcelain -uno |
		grep -q . && echo ' dirty')" >"$out/commit.txt"
fi
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,\
clocks.max.sm,clocks.max.mem,power.limit,memory.total \
		--format=csv,noheader >"$out/gpu.csv" 2>/dev/null
fi

step "cuda suite" 300 cuda.log cuda.log \
	env CK_RUN_SUITE=cuda KVMEM_CHECK_CUDA=gpu "$check"
if [ ! -f "$out/cuda.log" ]; then
	failed=1
elif grep -q 'SKIP: cuda' "$out/cuda.log"; then
	echo "cuda suite: no GPU, the fake driver only" >>"$out/summary"
	failed=1
fi
if python3 -c 'import numpy' 2>/dev/null; then
	step "python cuda" 300 python-cuda.log python-cuda.log \
		env PYTHONPATH=python KVMEM_LIB="$build/libkvmem.so" \
		PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover \
		-s python/tests -p test_cuda.py -v
else
	echo "python cuda skipped: no python3 with NumPy" >>"$out/summary"
fi
bench h84-32k --ctx 32768 --format int4 --codec h84
bench h84-32k-sealed --ctx 32768 --format int4 --codec h84 --sealed
step "bench tier" 300 bench-tier.json bench-tier.err \
	"$bench" tier --bytes 1G --json
torch 32k --ctx 32768
# The kernels are built once, whatever SAN is: build/kernels.
ptx=$build/kernels/cost.ptx
[ -r "$ptx" ] || ptx=$build/../kernels/cost.ptx
if [ -r "$ptx" ]; then
	step "ptx cost" 60 ptx-cost.json ptx-cost.err \
		python3 scripts/ptx-cost.py --json "$ptx"
else
	echo "ptx cost skipped: no kernels/cost.ptx in $build" >>"$out/summary"
fi
# report: gpu-run.json from what the steps left.
report() {
	python3 "$here/gpu-report.py" "$out" >"$out/gpu-run.json" ||
		failed=1
	cat "$out/summary"
}

if [ $quick -eq 1 ]; then
	report
	exit $failed
fi

bench h84-4k --ctx 4096 --format int4 --codec h84
bench h84-128k --ctx 131072 --format int4 --codec h84
bench h84-32k-b16 --ctx 32768 --batch 16 --format int4 --codec h84
bench h84-32k-gqa8 --ctx 32768 --heads 64 --format int4 --codec h84
bench h74-32k --ctx 32768 --format int4 --codec h74
bench golay24-32k --ctx 32768 --format int4 --codec golay24
bench golay24-32k-gqa8 --ctx 32768 --heads 64 --format int4 --codec golay24
bench golay24-32k-d64 --ctx 32768 --dim 64 --format int4 --codec golay24
bench secded72-32k --ctx 32768 --format int8 --codec secded72
bench secded72-128k --ctx 131072 --format int8 --codec secded72
bench fp8-32k --ctx 32768 --format fp8 --codec h84
bench h84-32k-host --ctx 32768 --format int4 --codec h84 --host
torch 4k --ctx 4096
torch 128k --ctx 131072
torch 32k-b16 --ctx 32768 --batch 16
torch 32k-gqa8 --ctx 32768 --heads 64
torch 32k-d64 --ctx 32768 --dim 64

if command -v compute-sanitizer >/dev/null; then
	step memcheck 600 memcheck.log memcheck.log \
		env CK_RUN_SUITE=cuda CK_FORK=no KVMEM_CHECK_CUDA=gpu \
		compute-sanitizer --tool memcheck --error-exitcode 1 "$check"
	step "racecheck q4" 120 racecheck-q4.log racecheck-q4.log \
		compute-sanitizer --tool racecheck --error-exitcode 1 \
		"$bench" attend --gpu --ctx 2048 --reps 1
	step "racecheck q4w" 300 racecheck-q4w.log racecheck-q4w.log \
		compute-sanitizer --tool racecheck --error-exitcode 1 \
		"$bench" attend --gpu --ctx 2048 --heads 64 --reps 1
	step "racecheck golay24" 120 racecheck-golay24.log \
		racecheck-golay24.log \
		compute-sanitizer --tool racecheck --error-exitcode 1 \
		"$bench" attend --gpu --ctx 2048 --dim 64 --codec golay24 \
		--reps 1
	step "racecheck secded72" 300 racecheck-secded72.log \
		racecheck-secded72.log \
		compute-sanitizer --tool racecheck --error-exitcode 1 \
		"$bench" attend --gpu --ctx 1024 --heads 64 --format int8 \
		--codec secded72 --reps 1
else
	echo "sanitizers skipped: no compute-sanitizer" >>"$out/summary"
fi
report
exit $failed
