#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpu-report.py - one JSON file of a scripts/gpu-check.sh run

Usage: scripts/gpu-report.py OUTDIR

Reads what gpu-check.sh left in OUTDIR and prints one JSON object: the
commit measured (commit.txt: the hash, and "dirty" when the tree had
changes), the GPU, its driver and clocks as nvidia-smi gave them
(gpu.csv), each step's exit status and seconds (summary), every
kvmem-bench case (bench-NAME.json), every PyTorch case (torch-NAME.json)
and the PTX cost report (ptx-cost.json). A file that is absent or not
JSON is left out and named under "missing". gpu-check.sh writes its
output to OUTDIR/gpu-run.json; such files are committed under
docs/gpu-runs/, and the numbers README.md and kernels/README.md quote
come from them.
"""
import glob
import json
import os
import re
import sys

GPU_FIELDS = ["name", "driver_version", "clocks.sm", "clocks.mem",
              "clocks.max.sm", "clocks.max.mem", "power.limit",
              "memory.total"]


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    out = argv[0]
    r = {"missing": []}
    commit = read(os.path.join(out, "commit.txt"))
    if commit:
        w = commit.split()
        r["commit"] = w[0] if w else None
        r["dirty"] = "dirty" in w[1:]
    else:
        r["missing"].append("commit.txt")
    gpu = read(os.path.join(out, "gpu.csv"))
    if gpu and gpu.strip():
        vals = [v.strip() for v in gpu.strip().splitlines()[0].split(",")]
        r["gpu"] = dict(zip(GPU_FIELDS, vals))
    else:
        r["missing"].append("gpu.csv")
    steps = []
    for line in (read(os.path.join(out, "summary")) or "").splitlines():
        m = re.match(r"^(.*) rc=(\d+) (\d+)s$", line)
        if m:
            steps.append({"step": m.group(1), "rc": int(m.group(2)),
                          "seconds": int(m.group(3))})
        elif line.strip():
            steps.append({"note": line.strip()})
    r["steps"] = steps
    for kind in ("bench", "torch"):
        r[kind] = {}
        for path in sorted(glob.glob(os.path.join(out, kind + "-*.json"))):
            name = os.path.basename(path)[len(kind) + 1:-len(".json")]
            try:
                r[kind][name] = json.loads(read(path) or "")
            except ValueError:
                r["missing"].append(os.path.basename(path))
    try:
        r["ptx_cost"] = json.loads(read(os.path.join(out, "ptx-cost.json"))
                                   or "")
    except ValueError:
        r["missing"].append("ptx-cost.json")
    print(json.dumps(r, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
