"""Step 1 of ``gpufeed diagnose``: the storage under a path.

The filesystem type (statfs magic), the mount and its options from
mountinfo, the block device(s) under it with read_ahead_kb, scheduler and
rotational flag, and Lustre striping (``lfs getstripe``) when ``lfs`` is
installed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["FILESYSTEM_MAGIC", "NETWORK_FILESYSTEMS", "filesystem_type", "mount_of",
           "block_devices", "lustre_striping", "storage_info"]

# statfs(2) f_type values (linux/magic.h, plus the parallel filesystems'
# own headers for Lustre, GPFS, BeeGFS, WekaFS).
FILESYSTEM_MAGIC = {
    0xEF53: "ext4",  # ext2/ext3/ext4 share it; mountinfo tells them apart
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlayfs",
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "cephfs",
    0x65735546: "fuse",
    0x2FC12FC1: "zfs",
    0x5346544E: "ntfs",
    0x4D44: "vfat",
    0xF2F52010: "f2fs",
    0x3153464A: "jfs",
    0x52654973: "reiserfs",
    0x73717368: "squashfs",
    0x858458F6: "ramfs",
    0x6A656A63: "fakeowner",
    0x01161970: "gfs2",
    0x7461636F: "ocfs2",
    0x53464846: "wslfs",
    0xA501FCF5: "vxfs",
    0x013111A8: "ibrix",
    0x5A3C69F0: "aufs",
    0x15013346: "beegfs",  # older BeeGFS (fhgfs)
    0x1161970: "gfs2",
}

# Filesystems whose reads cross a network: per-file metadata costs a round
# trip, and a node-local copy helps.
NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smb2", "smb3", "lustre", "gpfs", "beegfs",
                       "cephfs", "ceph", "fuse", "fuse.sshfs", "glusterfs", "fuse.glusterfs",
                       "wekafs", "gfs2", "ocfs2", "9p", "virtiofs"}


def filesystem_type(path: str) -> Tuple[int, str]:
    """(statfs f_type, name) of the filesystem holding `path`."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    # struct statfs is 120 bytes on 64-bit Linux and f_type (a long) comes
    # first on every architecture; a larger buffer leaves room.
    buffer = ctypes.create_string_buffer(256)
    if libc.statfs(os.fsencode(path), buffer) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"statfs: {os.strerror(error)}", path)
    magic = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
    return magic, FILESYSTEM_MAGIC.get(magic, f"unknown (0x{magic:08X})")


def _unescape_mount(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1:i + 4].isdigit() and len(text[i + 1:i + 4]) == 3:
            out.append(chr(int(text[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Optional[Dict[str, Any]]:
    """The mountinfo entry whose mount point is the longest prefix of
    `path` (the last one mounted there wins, as the kernel resolves it)."""
    real = os.path.realpath(path)
    best = None
    try:
        with open(mountinfo) as source:
            lines = source.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        mount_point = _unescape_mount(fields[4])
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if not inside:
            continue
        if best is None or len(mount_point) >= len(best["mount_point"]):
            best = {
                "mount_point": mount_point,
                "device_number": fields[2],
                "root": _unescape_mount(fields[3]),
                "mount_options": fields[5].split(","),
                "fstype": fields[dash + 1],
                "source": _unescape_mount(fields[dash + 2]) if len(fields) > dash + 2 else "",
                "super_options": fields[dash + 3].split(",") if len(fields) > dash + 3 else [],
            }
    return best


def _read_sys(path: str) -> Optional[str]:
    try:
        with open(path) as source:
            return source.read().strip()
    except OSError:
        return None


def _int_or_none(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def block_devices(device_number: str, sys_root: str = "/sys") -> List[Dict[str, Any]]:
    """The disks under a MAJ:MIN: a partition resolves to its disk, a
    device-mapper or md device to the disks it is built on (recursively).
    Each with read_ahead_kb, the active scheduler and the rotational flag."""
    start = os.path.join(sys_root, "dev", "block", device_number)
    if not os.path.exists(start):
        return []
    disks: List[Dict[str, Any]] = []
    seen = set()

    def visit(node: str, via: List[str]) -> None:
        node = os.path.realpath(node)
        if node in seen:
            return
        seen.add(node)
        name = os.path.basename(node)
        if os.path.exists(os.path.join(node, "partition")):
            visit(os.path.dirname(node), via + [name])
            return
        slaves_dir = os.path.join(node, "slaves")
        slaves = sorted(os.listdir(slaves_dir)) if os.path.isdir(slaves_dir) else []
        if slaves:
            for slave in slaves:
                visit(os.path.join(slaves_dir, slave), via + [name])
            return
        queue = os.path.join(node, "queue")
        scheduler_line = _read_sys(os.path.join(queue, "scheduler")) or ""
        active = scheduler_line
        if "[" in scheduler_line:
            active = scheduler_line[scheduler_line.index("[") + 1:scheduler_line.index("]")]
        disks.append({
            "name": name,
            "via": via,
            "dev": _read_sys(os.path.join(node, "dev")),
            "read_ahead_kb": _int_or_none(_read_sys(os.path.join(queue, "read_ahead_kb"))),
            "scheduler": active or None,
            "rotational": _read_sys(os.path.join(queue, "rotational")) == "1",
            "max_sectors_kb": _int_or_none(_read_sys(os.path.join(queue, "max_sectors_kb"))),
            "model": _read_sys(os.path.join(node, "device", "model")),
        })

    visit(start, [])
    return disks


def lustre_striping(path: str, timeout: float = 10.0) -> Optional[Dict[str, Any]]:
    """`lfs getstripe` of `path` (a file or directory), or None when lfs is
    not installed."""
    lfs = shutil.which("lfs")
    if lfs is None:
        return None
    result: Dict[str, Any] = {"command": f"lfs getstripe -c -S {path}"}
    try:
        count = subprocess.run([lfs, "getstripe", "-c", path], capture_output=True, text=True,
                               timeout=timeout)
        size = subprocess.run([lfs, "getstripe", "-S", path], capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        result["error"] = str(error)
        return result
    result["stripe_count"] = _int_or_none(count.stdout.split()[0]) if count.stdout.split() else None
    result["stripe_size"] = _int_or_none(size.stdout.split()[0]) if size.stdout.split() else None
    if count.returncode != 0 or size.returncode != 0:
        result["error"] = (count.stderr or size.stderr).strip()
    return result


def storage_info(path: str, largest_file: Optional[str] = None) -> Dict[str, Any]:
    magic, name = filesystem_type(path)
    mount = mount_of(path)
    if mount and name == "ext4" and mount["fstype"] in ("ext2", "ext3"):
        name = mount["fstype"]
    info: Dict[str, Any] = {"statfs_magic": f"0x{magic:08X}", "filesystem": name, "mount": mount,
                            "network": name in NETWORK_FILESYSTEMS or bool(
                                mount and mount["fstype"].split(".")[0] in NETWORK_FILESYSTEMS)}
    number = mount["device_number"] if mount else None
    info["block_devices"] = block_devices(number) if number else []
    # The read-ahead that applies to file reads is the filesystem's backing
    # device's (bdi): for NFS/Lustre it exists without a block device.
    info["bdi_read_ahead_kb"] = (_int_or_none(_read_sys(f"/sys/class/bdi/{number}/read_ahead_kb"))
                                 if number else None)
    info["lustre"] = None
    if name == "lustre":
        target = largest_file or path
        info["lustre"] = lustre_striping(target) or {"error": "lfs not found in PATH"}
    return info
