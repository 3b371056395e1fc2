"""Counts the `cpuid` instructions a program executes in its dynamic loader and libraries
before it exits (for docs/performance.md: on a virtual machine each one traps to the hypervisor).

Run it inside gdb, as root:
    echo '{"cniVersion":"1.0.0"}' > /tmp/v.json
    CNI_COMMAND=VERSION gdb -q -batch -x scripts/count-cpuid.py --args target/release/plumb < /tmp/v.json

Every `cpuid` of ld.so, libc and libgcc_s (found with objdump) gets a breakpoint that counts and
goes on. Prints the counts per library. A static binary has no loader: count its own instead.
"""
import subprocess

import gdb

LIBRARIES = {
    "ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
    "libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
    "libgcc_s.so.1": "/lib/x86_64-linux-gnu/libgcc_s.so.1",
}
counts = {}


class Counter(gdb.Breakpoint):
    def __init__(self, address, library):
        super().__init__("*0x%x" % address, internal=True)
        self.library = library

    def stop(self):
        counts[self.library] = counts.get(self.library, 0) + 1
        return False


def cpuid_offsets(path):
    out = subprocess.run(["objdump", "-d", path], capture_output=True, text=True).stdout
    return [int(line.split(":")[0], 16) for line in out.splitlines() if "\tcpuid" in line]


def mapped_at(name):
    """Where `name` is mapped in the inferior (its first mapping), if it is."""
    with open("/proc/%d/maps" % gdb.selected_inferior().pid) as maps:
        for line in maps:
            fields = line.split()
            if len(fields) > 5 and fields[5].endswith("/" + name) and fields[2] == "00000000":
                return int(fields[0].split("-")[0], 16)
    return None


armed = set()


def arm():
    for name, path in LIBRARIES.items():
        base = mapped_at(name)
        if name not in armed and base is not None:
            armed.add(name)
            for offset in cpuid_offsets(path):
                Counter(base + offset, name)


gdb.execute("set pagination off")
gdb.execute("starti")
arm()  # the loader: it runs first
# The libraries are mapped before their constructors run: arm them at the first load event.
gdb.execute("catch load")
gdb.execute("continue")
arm()
gdb.execute("delete")
try:
    gdb.execute("continue")
except gdb.error:
    pass
print("cpuid executed:", counts, "total", sum(counts.values()))
