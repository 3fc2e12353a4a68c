# Sourced by every script of the project that stops on an error (set -e):
# no step may end a script without a line saying which one failed.
#
#   source "$ROOT/tests/script_errors.sh"
#   gpufeed_trap_errors NAME      # after set -euo pipefail
#
# From then on a failing command that ends the script (errexit) prints, on
# stderr,
#   NAME: FAILED (exit 1) at device_kit.sh:97 in copy_library: found=$(...)
# and exit 141 adds that the writer of a pipe died of SIGPIPE, the class of
# bug where a reader that stops early (head, awk '... exit', grep -q/-m) sits
# behind a writer under pipefail. set -E makes functions, command
# substitutions and subshells inherit the trap; a failure inside a subshell
# is reported there and again where the subshell's status ends the script
# (the chain names both lines).
#
# Pipelines in these scripts never put a reader that stops early behind a
# writer: capture the writer's output first (out=$(cmd)) and read the
# variable (<<<"$out"), or use a reader that reads to the end (sed -n 1p,
# awk without exit, grep without -q/-m).

# gpufeed_trap_errors NAME
gpufeed_trap_errors() {
  GPUFEED_SCRIPT_NAME=$1
  set -E
  trap 'gpufeed_report_error "$?" "$BASH_COMMAND" "${BASH_SOURCE[0]:-$0}" "$LINENO" "${FUNCNAME[0]:-}"' ERR
}

# gpufeed_report_error STATUS COMMAND FILE LINE FUNCTION: the line itself.
gpufeed_report_error() {
  local status=$1 command=$2 file=$3 line=$4 function=$5
  # Conditions (if, ||, &&) never reach an ERR trap. Inside a command
  # substitution bash turns errexit off: a failure there does not stop
  # anything, and the assignment that receives its status is reported.
  [[ $- == *e* ]] || return 0
  local where="${file##*/}:$line${function:+ in $function}"
  echo "${GPUFEED_SCRIPT_NAME:-${0##*/}}: FAILED (exit $status) at $where: $command" >&2
  if [ "$status" -eq 141 ]; then
    echo "${GPUFEED_SCRIPT_NAME:-${0##*/}}: exit 141 is SIGPIPE: a pipe's reader stopped before its writer" \
      "finished, and pipefail made that the pipeline's status" >&2
  fi
}
