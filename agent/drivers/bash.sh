# shellcheck shell=bash
# The bash driver of nix-sandbox-mcp's session agent (agent/src/driver.rs
# describes the channel). Run as `bash bash.sh` with the agent's channel on
# fds 3 (code in, NUL-terminated) and 4 (messages out, one a line).
#
# Each call's code is `eval`ed in this shell, as if it were the next part of
# one long script: variables, functions, the working directory, exported
# variables and `set` options persist. `exit`, and a failing
# command under `set -e` (or an unset variable under `set -u`), end the shell
# as they would end a script: the agent reports the exit status and starts a
# fresh shell for the next call. The call's status is the code's `$?`.
#
# SIGINT (the agent's interrupt) ends the running snippet: the foreground
# command gets it too, and the trap below returns from the function that runs
# the snippet (and, through a one-shot DEBUG trap, from any shell function it
# was in); the shell stays, with state, and the status is 130. The driver
# owns the INT and DEBUG traps: a snippet's own last until the call ends.
#
# The channel moves to fds 62 and 63, which are closed around the `eval` (a
# redirection bash undoes after the command; its saved copies are
# close-on-exec), so the code and the commands it runs never see them.
# Names starting with __nsm_ belong to this driver.
#
# An empty message before a call's code (the agent's `once`) makes that call
# the shell's only one, run as `bash -c 'source /dev/stdin'` runs a script
# given on stdin: sourced with stdin at its end, the driver's traps gone;
# then the shell exits with the script's status. The channel stays open
# (closed around the script) until the shell exits.

exec 62<&3 63>&4 3<&- 4>&-

__nsm_busy=
__nsm_intr=
__nsm_status=0
# `set -x` and `-v` are off while the driver runs and come back for the code.
__nsm_trace=
# On SIGINT during a call: leave the snippet's function, then (DEBUG trap)
# every shell function up to the driver's own.
# shellcheck disable=SC2016 # expanded when the trap runs
__nsm_on_int='[[ -z ${__nsm_busy-} ]] || { __nsm_intr=1; trap "[[ -z \${__nsm_intr-} || -z \${FUNCNAME-} ]] || return 0" DEBUG; return 0; }'
# shellcheck disable=SC2064 # the trap's text is in the variable
trap "$__nsm_on_int" INT

__nsm_run() {
  __nsm_busy=1
  printf 'start\n' >&63
  # The status is taken inside the eval so that a last command exempt from
  # `set -e` (`[[ ... ]] && ...`) does not make the eval itself fail.
  eval "$__nsm_trace$__nsm_code"$'\n''{ __nsm_status=$?; } 2>/dev/null' 62<&- 63>&-
}

# The next message into __nsm_code; a signal (an interrupt that came too
# late) only restarts the read, end of file ends the driver.
__nsm_next() {
  until IFS= read -r -d '' -u 62 __nsm_code; do
    (($? > 128)) || exit 0
  done
}

while :; do
  __nsm_next
  if [[ -z $__nsm_code ]]; then
    __nsm_next
    trap - INT DEBUG
    printf 'start\n' >&63
    # shellcheck source=/dev/null # the script, given on stdin
    source /dev/stdin <<<"$__nsm_code" 62<&- 63>&-
    exit
  fi
  __nsm_intr=
  __nsm_status=0
  __nsm_run
  {
    trap - DEBUG
    # Setting the trap again also clears bash's note that its handler is
    # running, which a `return` out of the handler leaves behind.
    # shellcheck disable=SC2064
    trap "$__nsm_on_int" INT
    __nsm_busy=
    __nsm_trace=${-//[!xv]/}
    __nsm_trace=${__nsm_trace:+set -$__nsm_trace$'\n'}
    set +xv
  } 2>/dev/null
  [[ -z $__nsm_intr ]] || __nsm_status=130
  printf 'done %d\n' "$__nsm_status" >&63
done
