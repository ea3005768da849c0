# Takes { environment, ... } and jail.nix's combinators; returns the
# permission whose run-time code (add-runtime, before cgroupLimits.nix's)
# sets the limits the wrapper enforces: sandbox_limit_cpu_s,
# sandbox_limit_file_mb, sandbox_limit_nofile and sandbox_limit_memory_mb,
# the environment's values, each lowered by NIX_SANDBOX_LIMITS when the
# launcher sets it for a session made with a profile (space-separated
# KEY=VALUE pairs, docs/contracts.md): a value only ever lowers one. Other
# keys, malformed pairs and values that are not a positive number of at
# most nine digits are ignored. cgroupLimits.nix, rlimits.nix and
# runtimeLimits.nix read them. Unset: no more than assignments run (no
# process is started either way). The variable is the launcher's: the
# jail's environment is cleared, so code in a jail cannot set it for a
# wrapper, and it cannot start one anyway (nested user namespaces are off).
{ environment, ... }:
c:
let
  inherit (environment) limits;
in
c.add-runtime ''
  sandbox_limit_cpu_s=${toString limits.cpu_s}
  sandbox_limit_file_mb=${toString limits.file_mb}
  sandbox_limit_nofile=${toString limits.nofile}
  sandbox_limit_memory_mb=${toString limits.memory_mb}
  if [ -n "''${NIX_SANDBOX_LIMITS:-}" ]; then
    read -r -a sandbox_limit_pairs <<<"$NIX_SANDBOX_LIMITS"
    for sandbox_limit_pair in "''${sandbox_limit_pairs[@]}"; do
      if [[ $sandbox_limit_pair =~ ^(cpu_s|file_mb|nofile|memory_mb)=([1-9][0-9]{0,8})$ ]]; then
        sandbox_limit_name=sandbox_limit_''${BASH_REMATCH[1]}
        if [ "''${BASH_REMATCH[2]}" -lt "''${!sandbox_limit_name}" ]; then
          printf -v "$sandbox_limit_name" %s "''${BASH_REMATCH[2]}"
        fi
      fi
    done
  fi
''
