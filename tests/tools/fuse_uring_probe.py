#!/usr/bin/env python3
"""What this kernel returns for reads on a FUSE mount that cross the end of
the file or fail part-way (issue 32): builds uring_read_probe.c, mounts a
1,380,000-byte file through tests/python/faultfs.py with and without
direct_io, and runs each case by pread and io_uring (inline and IOSQE_ASYNC),
on buffered and O_DIRECT descriptors. Needs root, /dev/fuse, python3-fusepy,
liburing-dev and cc.

    /usr/bin/python3 tests/tools/fuse_uring_probe.py

Each line: the kernel's result, the bytes from the buffer's start that equal
the file ("valid"), the bytes reported read that are not the file's at that
position ("garbage"), and the FUSE read requests the daemon served. A kernel
with no trap shows garbage=0 everywhere."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from faultfs_fixture import FaultMount  # noqa: E402

SIZE = 1_380_000
ROADS = 6  # {pread, uring, uring_async} x {buffered, O_DIRECT}


def main():
    work = tempfile.mkdtemp(prefix="fuse_uring_probe.")
    probe = os.path.join(work, "uring_read_probe")
    subprocess.run(["cc", "-O2", "-Wall", "-o", probe, os.path.join(HERE, "uring_read_probe.c"), "-luring"],
                   check=True)
    os.makedirs(os.path.join(work, "src"))
    source = os.path.join(work, "src", "a.bin")
    with open(source, "wb") as handle:
        handle.write(os.urandom(SIZE))
    half_eio = [{"path": "a.bin", "start": 512 << 10, "end": 1 << 20, "error": "EIO"}]
    first_eio = [{"path": "a.bin", "start": 0, "end": 512 << 10, "error": "EIO"}]
    cases = [("4 MiB at 0", 0, 4 << 20, []),
             ("1 MiB at size-1000", SIZE - 1000, 1 << 20, []),
             ("1 MiB at 0, EIO on [512 KiB, 1 MiB)", 0, 1 << 20, half_eio),
             ("1 MiB at 0, EIO on [0, 512 KiB)", 0, 1 << 20, first_eio)]
    print(f"kernel {os.uname().release}")
    for direct_io in (True, False):
        mount = FaultMount(os.path.join(work, "src"), os.path.join(work, f"mount{int(direct_io)}"),
                           direct_io=direct_io)
        try:
            f_type = subprocess.run(["stat", "-f", "-c", "%t", mount.path], capture_output=True,
                                    text=True).stdout.strip()
            for name, offset, length, faults in cases:
                mount.set_faults(faults)
                print(f"== {'direct_io' if direct_io else 'normal'} mount (f_type 0x{f_type}): {name}")
                for road in range(ROADS):
                    mount.clear_reads()
                    out = subprocess.run([probe, os.path.join(mount.path, "a.bin"), source, str(offset),
                                          str(length), str(road)], capture_output=True, text=True)
                    requests = mount.reads("a.bin")
                    print(f"  {out.stdout.strip() or out.stderr.strip()} | FUSE requests {len(requests)}")
        finally:
            mount.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
