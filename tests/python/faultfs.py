#!/usr/bin/env python3
"""A fault-injecting, read-only FUSE passthrough for the tests (issue 32).

    python3 faultfs.py SOURCE MOUNTPOINT CONTROL_JSON [--direct-io] [--tag TAG]

Mounts SOURCE at MOUNTPOINT (foreground, multithreaded: a hung read blocks
only its own request) so that every read a test makes is a real kernel read
through the FUSE client, failing the way a network filesystem's client fails.

Mount identity: fsname "gpufeed-faultfs:TAG" (TAG defaults to the daemon's
pid), type "fuse.faultfs" -- leftover mounts are found in /proc/mounts by the
fsname prefix "gpufeed-faultfs" (tests/faultfs.sh).

Faults: CONTROL_JSON holds a list of rules (or {"rules": [...]}), re-read
whenever its inode, size or mtime changes (checked on every read). A rule:
  path      relative path under SOURCE, or an fnmatch glob ("*" for all)
  start/end optional byte range [start, end); a read overlapping it matches
  error     errno name ("EIO", "ESTALE", "ENOTCONN", "ETIMEDOUT", ...): the
            read fails with that errno
  hang      true: the read does not return until no hang rule matching it is
            left in CONTROL_JSON (or the daemon dies)
  delay_ms  the read is delayed, then served
  until     a time.time() deadline after which the rule no longer applies
  count     the rule applies to its first N matching reads only (counted
            from the last change of CONTROL_JSON)
The first matching error rule wins; delays add up; a hang comes first.

Reads: one JSON line per FUSE read request is appended to READ_LOG
(CONTROL_JSON + ".reads"): {"path", "offset", "size", "result"} with result
"ok", "short" (fewer bytes than asked: the end of the file) or the errno
name, so a test can assert what reached the filesystem.

Caching: open never sets keep_cache, so the kernel drops the file's cached
pages on every open; with --direct-io every open is direct_io (the page cache
is bypassed). The controller (faultfs_fixture.py) also drops the cached pages
of every file when the faults change, for files already held open.
"""

import argparse
import errno
import fnmatch
import json
import os
import stat
import sys
import threading
import time

try:  # Debian's python3-fusepy installs the module as "fusepy"; PyPI's as "fuse".
    import fusepy as fuse
except ImportError:  # pragma: no cover - depends on the machine
    import fuse

FSNAME_PREFIX = "gpufeed-faultfs"
HANG_POLL_SECONDS = 0.02


class Rules:
    """The rules of CONTROL_JSON, reloaded when the file changes."""

    def __init__(self, control_path):
        self.control_path = control_path
        self.lock = threading.Lock()
        self.signature = None
        self.rules = []
        self.used = []  # per rule: matching reads so far (for "count")

    def _reload_locked(self):
        try:
            st = os.stat(self.control_path)
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            signature = None
        if signature == self.signature:
            return
        rules = []
        if signature is not None:
            with open(self.control_path, encoding="utf-8") as handle:
                text = handle.read()
            loaded = json.loads(text) if text.strip() else []
            rules = loaded["rules"] if isinstance(loaded, dict) else loaded
            for rule in rules:
                if "error" in rule and not isinstance(getattr(errno, rule["error"], None), int):
                    raise ValueError(f"{self.control_path}: unknown errno name {rule['error']!r}")
        self.signature = signature
        self.rules = rules
        self.used = [0] * len(rules)

    @staticmethod
    def _matches(rule, path, offset, size, now):
        if "until" in rule and now >= rule["until"]:
            return False
        pattern = rule.get("path", "*").lstrip("/")
        if not fnmatch.fnmatchcase(path, pattern):
            return False
        start = rule.get("start", 0)
        end = rule.get("end")
        return offset + size > start and (end is None or offset < end)

    def decide(self, path, offset, size):
        """(hang, delay_seconds, errno or None) for this read; counts it
        against the "count" of every rule that applies."""
        with self.lock:
            self._reload_locked()
            now = time.time()
            hang, delay, error = False, 0.0, None
            for index, rule in enumerate(self.rules):
                if not self._matches(rule, path, offset, size, now):
                    continue
                if "count" in rule:
                    if self.used[index] >= rule["count"]:
                        continue
                    self.used[index] += 1
                if rule.get("hang"):
                    hang = True
                delay += rule.get("delay_ms", 0) / 1000.0
                if error is None and "error" in rule:
                    error = getattr(errno, rule["error"])
            return hang, delay, error

    def still_hung(self, path, offset, size):
        """Whether a hang rule matching this read is still in force (its
        "count" is not consulted again: the read already counted)."""
        with self.lock:
            self._reload_locked()
            now = time.time()
            return any(rule.get("hang") and self._matches(rule, path, offset, size, now)
                       for rule in self.rules)


class FaultFS(fuse.Operations):
    """Read-only passthrough of SOURCE with the faults of Rules."""

    def __init__(self, source, rules, read_log):
        self.source = os.path.realpath(source)
        self.rules = rules
        self.log_lock = threading.Lock()
        self.read_log = open(read_log, "a", buffering=1, encoding="utf-8")

    def _real(self, path):
        return os.path.join(self.source, path.lstrip("/"))

    def _log(self, path, offset, size, result):
        line = json.dumps({"path": path, "offset": offset, "size": size, "result": result})
        with self.log_lock:
            self.read_log.write(line + "\n")

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        attrs = {key: getattr(st, key) for key in
                 ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")}
        # Read-only: no write bits.
        attrs["st_mode"] = st.st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        return attrs

    def readdir(self, path, fh):
        return [".", ".."] + sorted(os.listdir(self._real(path)))

    def readlink(self, path):
        return os.readlink(self._real(path))

    def statfs(self, path):
        sv = os.statvfs(self._real(path))
        return {key: getattr(sv, key) for key in
                ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                 "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise fuse.FuseOSError(errno.EROFS)
        # O_DIRECT stays on the FUSE side: the backing fd reads into
        # unaligned Python buffers.
        return os.open(self._real(path), os.O_RDONLY)

    def read(self, path, size, offset, fh):
        relative = path.lstrip("/")
        hang, delay, error = self.rules.decide(relative, offset, size)
        if hang:
            self._log(relative, offset, size, "hang")
            while self.rules.still_hung(relative, offset, size):
                time.sleep(HANG_POLL_SECONDS)
        if delay:
            time.sleep(delay)
        if error is not None:
            self._log(relative, offset, size, errno.errorcode[error])
            raise fuse.FuseOSError(error)
        data = os.pread(fh, size, offset)
        self._log(relative, offset, size, "ok" if len(data) == size else "short")
        return data

    def release(self, path, fh):
        os.close(fh)
        return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("mountpoint")
    parser.add_argument("control_json")
    parser.add_argument("--direct-io", action="store_true",
                        help="every open is direct_io (no page cache on the FUSE side)")
    parser.add_argument("--tag", default=str(os.getpid()),
                        help="the fsname is gpufeed-faultfs:TAG (default: the daemon's pid)")
    parser.add_argument("--read-log", help="default: CONTROL_JSON.reads")
    args = parser.parse_args(argv)
    rules = Rules(args.control_json)
    rules.decide("", 0, 0)  # a malformed CONTROL_JSON fails here, before mounting
    operations = FaultFS(args.source, rules, args.read_log or args.control_json + ".reads")
    options = {"foreground": True, "nothreads": False, "ro": True,
               "fsname": f"{FSNAME_PREFIX}:{args.tag}", "subtype": "faultfs"}
    if os.getuid() == 0:
        options["allow_other"] = True
    if args.direct_io:
        options["direct_io"] = True
    fuse.FUSE(operations, args.mountpoint, **options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
