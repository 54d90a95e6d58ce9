#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ptx-cost.py - what the fast attention kernel's inner loops cost, from PTX

Usage: scripts/ptx-cost.py [--json] [build/kernels/cost.ptx]

Reads the PTX of kernels/cost.cu (make builds it where nvcc is) and, for
each probe kvmem_cost_<name>_v<N>, counts the instructions of its loop
body (from the label a backward branch goes to, through that branch) and
divides them by the N values a step takes (a lane's: a warp-wide mma is
one instruction of each lane). Then it adds the probes up into
what one value of a page costs in each fast path (a page is half K, half
V values) and sets that against the roofline of an H100 SXM: at 3.35 TB/s
of HBM a path reading B bytes a value gets 3.35e12 / B values a second,
and 132 multiprocessors x 4 schedulers x 32 lanes at 1.98 GHz issue
3.35e13 lane-instructions a second, so a path is bound by memory, not
by issue, below 3.35e13 * B / 3.35e12 = 10 B instructions a value.

PTX is not SASS: ptxas may merge or split instructions, and not every
instruction issues in one cycle. The report is a guide between GPU runs,
not a measurement.
"""
import json
import re
import sys

HBM_BYTES_PER_S = 3.35e12
LANE_INSTR_PER_S = 132 * 4 * 32 * 1.98e9

# Each path: its bytes a value in a page, and the probes a value runs
# through, with the share of a page's values that run each.
PATHS = {
    "int4+h84": (1.0, [("kcheck_h84", 0.5), ("kmma", 0.5),
                       ("vcheck_h84", 0.5), ("vmma", 0.5)]),
    "int4+golay24": (1.0, [("dec_golay24", 1.0), ("kmma", 0.5),
                           ("vmma", 0.5)]),
    "int8+secded72": (9.0 / 8.0, [("dec_secded72", 1.0), ("kmma_i8", 0.5),
                                  ("vmma_i8", 0.5)]),
    # The FP16 baseline (kvmem_k_attend_f16 on the tensor cores): the
    # same steps with nothing to test or decode.
    "fp16": (2.0, [("kmma_f16", 0.5), ("vmma_f16", 0.5)]),
}

ENTRY = re.compile(r"^\.visible \.entry kvmem_cost_(\w+)_v(\d+)\(")
LABEL = re.compile(r"^(\$L__\w+):")
BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")


def instructions(lines):
    """The PTX instructions among @lines: statements, not directives."""
    n = 0
    for line in lines:
        s = line.strip()
        if not s or s.startswith("//") or s.startswith(".") or \
                s in ("{", "}") or LABEL.match(s):
            continue
        n += 1
    return n


def probes(text):
    """{name: (values a step, instructions of the loop body)}."""
    out = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = ENTRY.match(lines[i])
        if not m:
            i += 1
            continue
        name, vals = m.group(1), int(m.group(2))
        j = i + 1
        while j < len(lines) and lines[j] != "}":
            j += 1
        body = lines[i:j]
        labels = {}
        loops = []
        for k, line in enumerate(body):
            lm = LABEL.match(line.strip())
            if lm:
                labels[lm.group(1)] = k
            bm = BRANCH.search(line)
            if bm and bm.group(1) in labels:
                loops.append((labels[bm.group(1)], k))
        if not loops:
            raise SystemExit("ptx-cost: kvmem_cost_%s_v%d has no loop" %
                             (name, vals))
        # The outermost: the probe's own loop around one step.
        start, end = min(loops, key=lambda x: (x[0], -x[1]))
        out[name] = (vals, instructions(body[start:end + 1]))
        i = j
    return out


def report(ptx):
    found = probes(ptx)
    rows = []
    for name in sorted(found):
        vals, n = found[name]
        rows.append({"probe": name, "values": vals, "instructions": n,
                     "per_value": n / vals})
    paths = []
    for name, (bpv, parts) in PATHS.items():
        missing = [p for p, _ in parts if p not in found]
        if missing:
            raise SystemExit("ptx-cost: no probe %s" % ", ".join(missing))
        per_value = sum(share * found[p][1] / found[p][0]
                        for p, share in parts)
        budget = LANE_INSTR_PER_S * bpv / HBM_BYTES_PER_S
        paths.append({"path": name, "bytes_per_value": bpv,
                      "per_value": per_value, "budget": budget,
                      "over_budget": per_value / budget})
    return {"probes": rows, "paths": paths,
            "hbm_bytes_per_s": HBM_BYTES_PER_S,
            "lane_instr_per_s": LANE_INSTR_PER_S}


def main(argv):
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    path = args[0] if args else "build/kernels/cost.ptx"
    try:
        with open(path) as f:
            ptx = f.read()
    except OSError as e:
        sys.stderr.write("ptx-cost: %s: %s\n" % (path, e.strerror))
        return 1
    r = report(ptx)
    if as_json:
        print(json.dumps(r, indent=1))
        return 0
    print("%-16s %7s %13s %10s" % ("probe", "values", "instructions",
                                   "per value"))
    for p in r["probes"]:
        print("%-16s %7d %13d %10.2f" % (p["probe"], p["values"],
                                         p["instructions"], p["per_value"]))
    print()
    print("%-16s %11s %10s %10s %8s" % ("path", "bytes/value", "per value",
                                        "roofline", "over"))
    for p in r["paths"]:
        print("%-16s %11.3f %10.2f %10.2f %7.2fx" % (
            p["path"], p["bytes_per_value"], p["per_value"], p["budget"],
            p["over_budget"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
