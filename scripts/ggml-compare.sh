#!/bin/sh
# SPDX-License-Identifier: MIT
# ggml-compare.sh - kvmem's CPU decode attention beside llama.cpp's, on one
# shape, in one run (the README's comparison)
#
#   scripts/ggml-compare.sh GGML_SRC [OUTDIR]
#
# GGML_SRC is a checkout of https://github.com/ggml-org/ggml (the library
# under llama.cpp). The script builds it with cmake (CPU backend,
# -march=native) into OUTDIR/ggml-build, builds scripts/ggml-attend.c
# against it, then runs three rounds of, alternating:
#   kvmem-bench attend --json, int4 + h84 and int8 + secded72, one thread
#                      and all (it measures its FP32 loop in the same call)
#   ggml-attend        ggml_flash_attn_ext over q4_0, q8_0 and f16 K/V,
#                      one thread and all
# all on ctx 4096, 32 query heads, 8 KV heads, dim 128, the cache emptied
# before each call, and prints a markdown table of the medians, each also
# as a ratio to kvmem's FP32 loop. The raw JSON lines go to OUTDIR/runs.
# OUTDIR defaults to build/ggml-compare; KVMEM_BUILD (build) has
# tools/kvmem-bench; REPS (20) is the calls per measurement.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -f "$1/include/ggml.h" ]; then
	echo "usage: $0 GGML_SRC [OUTDIR]  (GGML_SRC: a ggml checkout)" >&2
	exit 2
fi
src=$1
out=${2:-build/ggml-compare}
build=${KVMEM_BUILD:-build}
reps=${REPS:-20}
bench=$build/tools/kvmem-bench
threads=$(nproc)
if [ ! -x "$bench" ]; then
	echo "$0: no $bench: run make first" >&2
	exit 2
fi
mkdir -p "$out"
if [ ! -f "$out/ggml-build/src/libggml-cpu.a" ]; then
	cmake -S "$src" -B "$out/ggml-build" -DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
		-DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
		>"$out/cmake.log" 2>&1
	cmake --build "$out/ggml-build" -j "$threads" >"$out/build.log" 2>&1
fi
lib=$out/ggml-build/src
${CC:-cc} -O2 -Wall -Wextra -I"$src/include" -o "$out/ggml-attend" \
	scripts/ggml-attend.c "$lib/libggml.a" "$lib/libggml-cpu.a" \
	"$lib/libggml-base.a" -lstdc++ -lm -lpthread -fopenmp

runs=$out/runs
: >"$runs"
for round in 1 2 3; do
	echo "round $round of 3" >&2
	for fc in "int4 h84" "int8 secded72"; do
		set -- $fc
		"$bench" attend --format "$1" --codec "$2" --reps "$reps" \
			--threads "$threads" --json >>"$runs"
	done
	for type in q4_0 q8_0 f16; do
		for t in 1 "$threads"; do
			"$out/ggml-attend" --type "$type" --threads "$t" \
				--reps "$reps" >>"$runs"
		done
	done
done

python3 - "$runs" "$threads" <<'EOF'
import json, statistics, sys

rows, fp32 = {}, []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "kvmem_us" in r:
        name = "kvmem %s + %s" % (r["format"], r["codec"])
        fp32.append(r["fp32_us"])
        rows.setdefault((name, 1), []).append((r["kvmem_us"], r["kvmem_bytes"]))
        rows.setdefault((name, r["threads"]), []).append(
            (r["kvmem_mt_us"], r["kvmem_bytes"]))
    else:
        name = "ggml_flash_attn_ext, %s" % r["type"]
        assert r["head0_max_error"] < 1e-2, r
        rows.setdefault((name, r["threads"]), []).append(
            (r["us_per_call"], r["kv_bytes"]))
base = statistics.median(fp32)
print("FP32 loop (kvmem-bench's baseline, one thread): %.0f us" % base)
print()
print("| attention | threads | us/call | vs FP32 loop | K+V bytes |")
print("|---|---:|---:|---:|---:|")
for (name, t), v in rows.items():
    us = statistics.median(x for x, _ in v)
    print("| %s | %d | %.0f | %.2fx | %.1f MB |" % (name, t, us, base / us,
                                                 v[0][1] / 1e6))
EOF
