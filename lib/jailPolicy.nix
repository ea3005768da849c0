# Takes pkgs, an evaluated environment (evalEnvironment.nix), its profile
# (one tree of its packages) and its workspace permission (workspace.nix);
# returns the jail's permissions, a function of jail.nix's combinators
# (DESIGN.md section 4). The run and session wrappers share it.
#
# jail.nix adds the rest itself, once: its base permissions (--proc, --dev,
# a tmpfs /tmp and home, /bin/sh, --clearenv), the store's runtime closure
# only, a fake /etc/passwd, every namespace unshared unless a permission
# shares it, --new-session and --die-with-parent.
{
  pkgs,
  environment,
  profile,
  workspace,
}:
c:
let
  inherit (pkgs) lib;
  inherit (environment) limits name;
  bytes = mib: toString (mib * 1024 * 1024);
  seccompFilter = import ./seccompFilter.nix {
    inherit pkgs;
    inherit (environment) seccomp;
  };
in
lib.optional environment.network c.network
++ [
  # bwrap stays in the jail as its pid 1, and a process there can read pid
  # 1's environment (/proc/1/environ): start bwrap with an empty one, so no
  # variable of the wrapper's (HOME, PROJECT_DIR, the cgroup path) is seen.
  (s: s // { cmd = "${pkgs.coreutils}/bin/env -i ${s.cmd}"; })
  # jail.nix always passes --unshare-user, which --disable-userns needs.
  (c.unsafe-add-raw-args "--disable-userns")
  # bwrap keeps every capability (inside the jail's user namespace) when its
  # caller is root; code must hold none whoever starts it: a capability like
  # CAP_SYS_PTRACE there would open the session agent's fds through /proc.
  (c.unsafe-add-raw-args "--cap-drop ALL")
  # The caller's key descriptions (keyctl itself is denied by seccomp).
  (c.unsafe-add-raw-args "--ro-bind /dev/null /proc/keys --ro-bind /dev/null /proc/key-users")
  (c.set-env "LANG" "C.UTF-8")
  (c.set-env "LC_ALL" "C.UTF-8")
  (c.set-env "TERM" (c.noescape "\"\${TERM:-dumb}\""))
  (c.tmpfs "/home/sandbox")
  (c.set-env "HOME" "/home/sandbox")
  # Mounted over the base's unlimited /tmp.
  (c.unsafe-add-raw-args "--size ${bytes limits.tmp_mb} --tmpfs /tmp")
  (c.set-env "TMPDIR" "/tmp")
  (c.ro-bind "${pkgs.coreutils}/bin/env" "/usr/bin/env")
  (c.add-pkg-deps [ profile ])
  (workspace c)
  (c.add-runtime (import ./projectMount.nix name))
  # Limits: memory and processes through the run's cgroup when the launcher
  # gives one, then rlimits; RLIMIT_NPROC inside the jail.
  (c.add-runtime (import ./cgroupLimits.nix name limits))
  (c.add-runtime (import ./rlimits.nix limits))
  (import ./processLimit.nix limits c)
]
++ lib.optional (seccompFilter != null) (c.add-seccomp seccompFilter)
++ lib.mapAttrsToList (var: value: c.set-env var (toString value)) environment.env
++ environment.extraCombinators c
