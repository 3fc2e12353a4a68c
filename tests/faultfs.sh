# shellcheck shell=bash
# Sourced by tests/run.sh: the FUSE fault layer of the Python tests
# (tests/python/faultfs.py) needs no mount left behind, whatever happens.
#
#   gpufeed_faultfs_setup        exports GPUFEED_FAULTFS_TAG (this run's
#                                fsname tag), GPUFEED_FAULTFS_STATE_DIR (the
#                                daemons' pid files) and, where /dev/fuse
#                                exists and this runs as root,
#                                GPUFEED_REQUIRE_FUSE=1 (a skipped FUSE test
#                                is then a failure)
#   gpufeed_faultfs_cleanup      aborts the FUSE connection of and unmounts
#                                (lazily) every mount of this run (fsname
#                                gpufeed-faultfs:TAG in /proc/mounts) and
#                                SIGKILLs the daemons whose pid files are
#                                left; never fails
#
# Only this run's mounts and daemons are touched: other runs on the same
# machine have other tags. /proc/mounts is read whole (no early-exiting
# reader behind a writer, tests/script_errors.sh).

gpufeed_faultfs_setup() {
  GPUFEED_FAULTFS_TAG="run$$-$(date +%s)"
  export GPUFEED_FAULTFS_TAG
  GPUFEED_FAULTFS_STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpufeed-faultfs.XXXXXX")
  export GPUFEED_FAULTFS_STATE_DIR
  if [ -e /dev/fuse ] && [ "$(id -u)" -eq 0 ]; then
    export GPUFEED_REQUIRE_FUSE=1
  fi
}

gpufeed_faultfs_cleanup() {
  [ -n "${GPUFEED_FAULTFS_TAG:-}" ] || return 0
  local pid_file pid cmdline
  if [ -d "${GPUFEED_FAULTFS_STATE_DIR:-}" ]; then
    for pid_file in "$GPUFEED_FAULTFS_STATE_DIR"/*.pid; do
      [ -f "$pid_file" ] || continue
      pid=$(cat "$pid_file")
      # Only a live faultfs.py daemon under that pid (not a reused pid).
      cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
      if [[ "$cmdline" == *faultfs.py* ]]; then
        echo "gpufeed: killing leftover faultfs daemon $pid" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
      rm -f "$pid_file"
    done
    rmdir "$GPUFEED_FAULTFS_STATE_DIR" 2>/dev/null || true
  fi
  local source target rest
  local targets=()
  while read -r source target rest; do
    if [ "$source" = "gpufeed-faultfs:$GPUFEED_FAULTFS_TAG" ]; then
      # /proc/mounts writes space, tab, newline and backslash as octal escapes.
      targets+=("$(printf '%b' "${target//\\/\\0}")")
    fi
  done </proc/mounts
  # Abort their FUSE connections first (fusectl, by the device minor from
  # mountinfo, which touches no mount): no thread stays waiting on them.
  local id parent devices fields
  if [ -d /sys/fs/fuse/connections ] && [ "$(id -u)" -eq 0 ]; then
    [ -n "$(ls -A /sys/fs/fuse/connections 2>/dev/null)" ] ||
      mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
    while read -r id parent devices fields; do
      if [[ " $fields " == *" gpufeed-faultfs:$GPUFEED_FAULTFS_TAG "* ]]; then
        echo 1 >"/sys/fs/fuse/connections/${devices#*:}/abort" 2>/dev/null || true
      fi
    done </proc/self/mountinfo
  fi
  for target in "${targets[@]}"; do
    echo "gpufeed: unmounting leftover faultfs mount $target" >&2
    fusermount -u -z "$target" 2>/dev/null || umount -l "$target" 2>/dev/null ||
      echo "gpufeed: could not unmount $target" >&2
  done
  return 0
}
