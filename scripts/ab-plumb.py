#!/usr/bin/env python3
"""Paired comparison of plumb builds on the end-to-end bench's pod (for docs/performance.md).

Start the bench in HOLD mode first, in another shell, so that the API stand-in serves the pod:
    HOLD=3600 cargo bench -p plumb --bench e2e_add_del
then, as root:
    N=40 scripts/ab-plumb.py BINARY_A BINARY_B

Each iteration runs ADD then DEL of the pod through each binary, in alternating order, twice:
once under `perf stat -i` for the binary's own CPU time and page faults (the delegates'
noise does not reach them), once bare for wall time. Prints the medians per binary and the
median of the paired differences (B - A). Give two copies of a binary distinct paths.
"""
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

HOLD = os.path.join(os.path.dirname(__file__), "..", "target", "bench-e2e-hold.sh")


def hold_call():
    """The environment and the configuration of the hold script's ADD."""
    for line in open(HOLD):
        if "CNI_COMMAND=ADD" in line:
            words = shlex.split(line.split('"$plumb"')[0].strip())
            env = dict(w.split("=", 1) for w in words if "=" in w)
            env.pop("CNI_COMMAND")
            conf = re.search(r"<(\S+)", line).group(1)
            return env, open(conf, "rb").read()
    sys.exit(f"no ADD line in {HOLD}: start the bench with HOLD=SECONDS first")


def call(binary, command, env, conf, perf):
    argv = [binary]
    if perf:
        argv = ["perf", "stat", "-x,", "-i", "-e", "task-clock,page-faults", "--"] + argv
    start = time.perf_counter()
    p = subprocess.run(argv, input=conf, env=dict(env, CNI_COMMAND=command), capture_output=True)
    wall = (time.perf_counter() - start) * 1e3
    if p.returncode != 0:
        sys.exit(f"{binary} {command} failed: {p.stdout!r} {p.stderr!r}")
    counters = {}
    for line in p.stderr.decode().splitlines():
        f = line.split(",")
        if perf and len(f) > 2 and f[2] in ("task-clock", "page-faults"):
            counters[f[2]] = float(f[0])
    return wall, counters.get("task-clock"), counters.get("page-faults")


def main():
    binaries = sys.argv[1:]
    if len(binaries) != 2 or binaries[0] == binaries[1]:
        sys.exit(__doc__)
    n = int(os.environ.get("N", "40"))
    env, conf = hold_call()
    env = dict(os.environ, **env)
    keys = ("add_wall", "del_wall", "add_cpu", "del_cpu", "add_faults", "del_faults")
    res = {b: {k: [] for k in keys} for b in binaries}
    for i in range(n):
        for perf in (True, False):
            for b in binaries if i % 2 == 0 else binaries[::-1]:
                add = call(b, "ADD", env, conf, perf)
                dele = call(b, "DEL", env, conf, perf)
                r = res[b]
                if perf:
                    r["add_cpu"].append(add[1])
                    r["del_cpu"].append(dele[1])
                    r["add_faults"].append(add[2])
                    r["del_faults"].append(dele[2])
                else:
                    r["add_wall"].append(add[0])
                    r["del_wall"].append(dele[0])
    med = statistics.median
    for b in binaries:
        r = res[b]
        print(
            f"{b}: ADD wall {med(r['add_wall']):.2f} ms, CPU {med(r['add_cpu']):.2f} ms, "
            f"{med(r['add_faults']):.0f} faults; DEL wall {med(r['del_wall']):.2f} ms, "
            f"CPU {med(r['del_cpu']):.2f} ms, {med(r['del_faults']):.0f} faults"
        )
    a, b = res[binaries[0]], res[binaries[1]]
    for k in ("add_cpu", "del_cpu", "add_wall", "del_wall"):
        d = [y - x for x, y in zip(a[k], b[k])]
        print(f"  {k}: median of the paired differences (B - A) {med(d):+.3f} ms")


if __name__ == "__main__":
    main()
