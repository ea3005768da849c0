# Takes the environment's limits; returns the wrapper's run-time shell code
# (for add-runtime) that lowers the jail's resource limits before bubblewrap
# starts: CPU time (cpu_s), file size (file_mb), open files (nofile) and
# address space (memory_mb). A hard limit that is already lower stays.
limits: ''
  sandbox_rlimit() {
    local hard
    hard=$(ulimit -H "$1")
    if [ "$hard" = unlimited ] || [ "$hard" -gt "$2" ]; then
      ulimit -S -H "$1" "$2"
    else
      ulimit -S "$1" "$hard"
    fi
  }
  sandbox_rlimit -t ${toString limits.cpu_s}
  sandbox_rlimit -f ${toString (limits.file_mb * 1024)}
  sandbox_rlimit -n ${toString limits.nofile}
  sandbox_rlimit -v ${toString (limits.memory_mb * 1024)}
''
