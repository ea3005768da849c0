# shellcheck shell=bash
# The program driver of nix-sandbox-mcp's session agent (agent/src/driver.rs
# describes the channel), for environments whose code is one source file of
# a compiled language. Run as `bash program.sh` with the agent's channel on
# fds 3 (code in, NUL-terminated) and 4 (messages out, one a line).
# lib/sessionWrapper.nix writes the environment's program runner
# (lib/programRunner.nix) in place of @runner@ when it copies this file.
#
# Each call's code is the whole source file: the runner builds it (with the
# build cache the session's /tmp keeps: an unchanged source is not built
# again, a changed one reuses the language's own cache) and runs it, its
# stdin at end of file; the call's status is the runner's (the compiler's
# when the build fails, else the program's). Nothing of a program outlives
# its call but the files it wrote.
#
# SIGINT (the agent's interrupt) reaches the runner, the compiler and the
# program too (the agent signals the whole process group); the status is
# then 130 and the driver waits for the next call.
#
# The channel moves to fds 62 and 63, which the runner and the program
# never see.
#
# An empty message before a call's code (the agent's `once`) makes that call
# the driver's only one, as the run wrapper runs a source: the runner takes
# the driver's place (its exit, a signal's death included, is the call's),
# the source on its stdin byte for byte. The channel closes with the exec,
# after `start`, which the agent allows a `once` call.

exec 62<&3 63>&4 3<&- 4>&-

__nsm_runner=@runner@
__nsm_intr=
trap '__nsm_intr=1' INT

# The next message into __nsm_code; a signal (an interrupt that came too
# late) only restarts the read, end of file ends the driver.
__nsm_next() {
  until IFS= read -r -d '' -u 62 __nsm_code; do
    (($? > 128)) || exit 0
  done
}

while :; do
  # The next call's code, or an empty message and then a `once` call's.
  __nsm_next
  if [[ -z $__nsm_code ]]; then
    __nsm_next
    trap - INT
    printf 'start\n' >&63
    exec "$__nsm_runner" 62<&- 63>&- < <(printf '%s' "$__nsm_code")
  fi
  __nsm_intr=
  printf 'start\n' >&63
  "$__nsm_runner" 62<&- 63>&- <<<"$__nsm_code"
  __nsm_status=$?
  [[ -z $__nsm_intr ]] || __nsm_status=130
  printf 'done %d\n' "$__nsm_status" >&63
done
