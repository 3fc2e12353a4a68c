"""A slow disk made physically, for the benchmarks that need one
(verdict_check.py, embedding_compare.py): an ext4 filesystem in an image
file on a loop device (backed with direct I/O, so the host's page cache does
not serve it), and a cgroup whose reads of that device the kernel throttles
(cgroup v1 blkio.throttle.read_{bps,iops}_device, or cgroup v2 io.max
rbps/riops). Needs root.

    with LoopDisk(image, mount, size_mb) as disk:      # mkfs, losetup, mount
        throttle = Throttle(disk.major_minor, "gpufeed-x")  # this process moves in
        try:
            throttle.limit(iops=500)
            ...                                          # reads of disk.mount are throttled
        finally:
            throttle.close()                             # limit lifted, process back, cgroup gone
    # unmounted, loop device detached, image removed (also on an exception)
"""

import os
import subprocess

CGROUP_V1 = "/sys/fs/cgroup/blkio"
CGROUP_V2 = "/sys/fs/cgroup"


def run(*command):
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def drop_caches():
    """The whole page cache dropped (root)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as out:
        out.write("3\n")


def disk_counters(name):
    """(bytes read, reads completed, io ticks in ms) of a block device (/proc/diskstats)."""
    with open("/proc/diskstats") as source:
        for line in source:
            fields = line.split()
            if fields[2] == name:
                return int(fields[5]) * 512, int(fields[3]), int(fields[12])
    return 0, 0, 0


class LoopDisk:
    """A fresh ext4 filesystem of size_mb in `image`, loop-mounted on `mount`
    with direct I/O backing. Leaving the `with` block unmounts it, detaches
    the loop device and removes the image, whatever happened inside."""

    def __init__(self, image, mount, size_mb):
        self.image, self.mount, self.size_mb = image, mount, size_mb
        self.device = None
        self.mounted = False

    def open(self):
        """Makes and mounts the filesystem (undone when that fails); returns self."""
        os.makedirs(self.mount, exist_ok=True)
        try:
            run("truncate", "-s", f"{self.size_mb}M", self.image)
            run("mkfs.ext4", "-q", "-F", self.image)
            self.device = run("losetup", "--find", "--show", "--direct-io=on", self.image)
            run("mount", self.device, self.mount)
            self.mounted = True
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self):
        return self.open()

    @property
    def name(self):
        """The block device's name in /proc/diskstats (loopN)."""
        return os.path.basename(self.device)

    @property
    def major_minor(self):
        return run("lsblk", "-dno", "MAJ:MIN", self.device).replace(" ", "")

    def close(self):
        if self.mounted:
            subprocess.run(["umount", self.mount], check=False)
            self.mounted = False
        if self.device:
            subprocess.run(["losetup", "-d", self.device], check=False)
            self.device = None
        if os.path.exists(self.image):
            os.remove(self.image)
        if os.path.isdir(self.mount) and not os.listdir(self.mount):
            os.rmdir(self.mount)

    def __exit__(self, *exc):
        self.close()
        return False


class Throttle:
    """This process (its threads, and the children it starts later) in a
    cgroup whose reads of one device are limited. close() lifts the limit,
    moves the process back and removes the cgroup."""

    def __init__(self, major_minor, name):
        self.device = major_minor
        self.v1 = os.path.isfile(os.path.join(CGROUP_V1, "blkio.throttle.read_bps_device"))
        base = CGROUP_V1 if self.v1 else CGROUP_V2
        if not self.v1:
            controllers = open(os.path.join(CGROUP_V2, "cgroup.controllers")).read().split()
            if "io" not in controllers:
                raise RuntimeError("neither cgroup v1 blkio nor the cgroup v2 io controller")
        self.path = os.path.join(base, name)
        os.makedirs(self.path, exist_ok=True)
        self.limits = {}
        with open(os.path.join(self.path, "cgroup.procs"), "w") as out:
            out.write(str(os.getpid()))

    def limit(self, bytes_per_second=0, iops=0):
        """Reads of the device at most bytes_per_second and iops (0: no limit)."""
        self.limits = {"bytes_per_second": int(bytes_per_second), "iops": int(iops)}
        if self.v1:
            for name, value in (("read_bps_device", bytes_per_second), ("read_iops_device", iops)):
                with open(os.path.join(self.path, f"blkio.throttle.{name}"), "w") as out:
                    out.write(f"{self.device} {int(value)}\n")
        else:
            rbps = int(bytes_per_second) if bytes_per_second else "max"
            riops = int(iops) if iops else "max"
            with open(os.path.join(self.path, "io.max"), "w") as out:
                out.write(f"{self.device} rbps={rbps} riops={riops}\n")

    def close(self):
        try:
            self.limit(0, 0)
        except OSError:
            pass  # the device may be gone already: the cgroup goes anyway
        parent = os.path.dirname(self.path)
        with open(os.path.join(parent, "cgroup.procs"), "w") as out:
            out.write(str(os.getpid()))
        try:
            os.rmdir(self.path)
        except OSError:
            pass
