"""The controller of faultfs.py for the tests, and its pytest fixture.

    from faultfs_fixture import faultfs   # the fixture, in a test module

    def test_x(faultfs, tmp_path):
        mount = faultfs(source_dir)                  # or faultfs(source_dir, direct_io=True)
        mount.set_faults([{"path": "a.bin", "start": 0, "end": 4096, "error": "EIO"}])
        ...  read files under mount.path ...
        mount.reads("a.bin")                         # what reached the filesystem
        mount.kill()                                 # the client dies: ENOTCONN

Availability: without /dev/fuse (readable and writable by this user) or
fusepy the fixture skips with the reason -- unless GPUFEED_REQUIRE_FUSE=1
(tests/run.sh sets it where /dev/fuse exists and it runs as root), where a
missing FUSE fails the test. Teardown always unmounts (lazily) and kills the
daemon, whether or not the test passed. Where GPUFEED_FAULTFS_STATE_DIR is
set (tests/run.sh), each daemon's pid is written there and its fsname carries
GPUFEED_FAULTFS_TAG, so that tests/faultfs.sh can clean up after a run that
was interrupted.
"""

import errno
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

DAEMON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faultfs.py")
MOUNT_TIMEOUT_SECONDS = 15


def fuse_unavailable_reason():
    """None where a FUSE mount can be made here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return f"/dev/fuse is not readable and writable by uid {os.getuid()}"
    if importlib.util.find_spec("fusepy") is None and importlib.util.find_spec("fuse") is None:
        return "fusepy is not installed (Debian: python3-fusepy)"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None and os.getuid() != 0:
        return "no fusermount and not root"
    return None


def drop_cached_pages(root):
    """posix_fadvise(DONTNEED) on every file under root (through the mount):
    pages cached before a change of the faults cannot hide it."""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def abort_connection(path):
    """Aborts the FUSE connection of the mount at path (fusectl's abort, as
    root): every request waiting on it fails at once, so no thread stays in
    an uninterruptible wait (a daemon stuck on its own mount, a read never
    answered). Found through /proc/self/mountinfo: nothing stats the mount."""
    target = os.path.abspath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            lines = handle.readlines()
    except OSError:
        return
    for line in lines:
        fields = line.split(" - ")[0].split()
        if len(fields) > 4 and fields[4].encode().decode("unicode_escape") == target:
            minor = fields[2].split(":")[1]
            connections = "/sys/fs/fuse/connections"
            if os.path.isdir(connections) and not os.listdir(connections):
                subprocess.run(["mount", "-t", "fusectl", "none", connections],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                with open(os.path.join(connections, minor, "abort"), "w") as abort:
                    abort.write("1")
            except OSError:
                pass


def lazy_unmount(path):
    """Detaches the mount at path (fusermount -u -z, else umount -l); no error
    where nothing is mounted there."""
    for command in (["fusermount", "-u", "-z", path], ["fusermount3", "-u", "-z", path], ["umount", "-l", path]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if done.returncode == 0:
            return


def is_mounted(path):
    """Whether /proc/mounts lists a mount at path (os.path.ismount answers
    False for a mount whose daemon died: its stat fails with ENOTCONN)."""
    real = os.path.realpath(path)
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            target = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if target == real:
                return True
    return False


class FaultMount:
    """One faultfs.py daemon serving source at path."""

    def __init__(self, source, workdir, direct_io=False):
        self.source = os.fspath(source)
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, "mnt")
        os.makedirs(self.path, exist_ok=True)
        real_source = os.path.realpath(self.source)
        if os.path.realpath(self.path).startswith(real_source.rstrip(os.sep) + os.sep):
            # The mount would contain itself: every walk of it recurses forever.
            raise ValueError(f"faultfs: the mount point {self.path} lies inside its source {self.source}")
        self.control = os.path.join(workdir, "faults.json")
        self.read_log = self.control + ".reads"
        self.stderr_path = os.path.join(workdir, "daemon.stderr")
        self._write_control([])
        command = [sys.executable, DAEMON, self.source, self.path, self.control]
        if direct_io:
            command.append("--direct-io")
        tag = os.environ.get("GPUFEED_FAULTFS_TAG")
        if tag:
            command += ["--tag", tag]
        self.state_dir = os.environ.get("GPUFEED_FAULTFS_STATE_DIR")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
        if self.state_dir:
            os.makedirs(self.state_dir, exist_ok=True)
            with open(os.path.join(self.state_dir, f"{self.process.pid}.pid"), "w") as pid_file:
                pid_file.write(f"{self.process.pid}\n")
        self._wait_mounted()

    def _stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip() or "(empty)"

    def _wait_mounted(self):
        deadline = time.monotonic() + MOUNT_TIMEOUT_SECONDS
        while not os.path.ismount(self.path):
            if self.process.poll() is not None:
                raise RuntimeError(f"faultfs daemon exited with {self.process.returncode} before mounting "
                                   f"{self.source} at {self.path}; its stderr: {self._stderr()}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"faultfs did not mount {self.source} at {self.path} within "
                                   f"{MOUNT_TIMEOUT_SECONDS} s; the daemon's stderr: {self._stderr()}")
            time.sleep(0.02)

    def _write_control(self, rules):
        temporary = self.control + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(rules, handle)
        os.replace(temporary, self.control)  # a new inode: the daemon sees the change

    def set_faults(self, rules, drop_pages=True):
        """Replaces the fault rules (see faultfs.py). A rule may give "for_ms"
        instead of "until": it applies for that long from now. Cached pages
        of every file are dropped so that no earlier read hides the faults --
        unless drop_pages=False, which a test must give when it sets a hang
        while reads are in flight: dropping opens every file, and an open
        waits for the pages a hung read holds locked (forever)."""
        resolved = []
        for rule in rules:
            rule = dict(rule)
            if "for_ms" in rule:
                rule["until"] = time.time() + rule.pop("for_ms") / 1000.0
            if "error" in rule and not isinstance(getattr(errno, rule["error"], None), int):
                raise ValueError(f"unknown errno name {rule['error']!r}")
            resolved.append(rule)
        self._write_control(resolved)
        if drop_pages and self.process.poll() is None:
            drop_cached_pages(self.path)

    def clear_faults(self):
        self.set_faults([])

    def reads(self, path=None):
        """The FUSE read requests served so far (dicts with path, offset,
        size, result), of one relative path or all."""
        if not os.path.exists(self.read_log):
            return []
        with open(self.read_log, encoding="utf-8") as handle:
            entries = [json.loads(line) for line in handle if line.endswith("\n")]
        return [entry for entry in entries if path is None or entry["path"] == path]

    def clear_reads(self):
        open(self.read_log, "w").close()

    def kill(self):
        """SIGKILLs the daemon, as a client that dies: the mount stays, and
        every operation on it fails with ENOTCONN."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def unmount(self):
        """Unmounts (lazily: a read still hung does not hold it) and ends the
        daemon."""
        if is_mounted(self.path):
            lazy_unmount(self.path)
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self):
        abort_connection(self.path)  # nothing stays waiting on it, whatever the test left
        self.unmount()
        self.kill()
        if is_mounted(self.path):
            lazy_unmount(self.path)
        if self.state_dir:
            try:
                os.unlink(os.path.join(self.state_dir, f"{self.process.pid}.pid"))
            except FileNotFoundError:
                pass


def require_fuse_or_skip(reason=None):
    """Skips the test (with the reason) where FUSE is unavailable, or fails
    it where GPUFEED_REQUIRE_FUSE=1 (tests/run.sh on a machine that has
    FUSE, as in CI: a skip there would hide the fault tests)."""
    reason = reason or fuse_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("GPUFEED_REQUIRE_FUSE") == "1":
        pytest.fail(f"FUSE is required here (GPUFEED_REQUIRE_FUSE=1) but unavailable: {reason}")
    pytest.skip(f"FUSE unavailable: {reason}")


@pytest.fixture
def faultfs(tmp_path):
    """A factory: faultfs(source, direct_io=False) -> FaultMount. Every mount
    it made is unmounted and its daemon killed at teardown."""
    require_fuse_or_skip()
    mounts = []

    def mount(source, direct_io=False):
        made = FaultMount(source, tmp_path / f"faultfs{len(mounts)}", direct_io=direct_io)
        mounts.append(made)
        return made

    yield mount
    for made in mounts:
        made.close()
