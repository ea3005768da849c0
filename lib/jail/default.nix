# The jail's policy: what a jail may see and do, and
# its limits. Every file of this folder is one function of the same
# signature, like jail.nix's combinators:
#   { pkgs, environment, profile }: c: PERMISSION
# It takes pkgs, the evaluated environment (evalEnvironment.nix) and its
# profile (one tree of its packages), then jail.nix's combinators, and
# returns one jail.nix permission, each file using what it needs. This one
# composes the others, in this order; the run and session wrappers share it.
#
# base.nix first drops jail.nix's base permissions (they would bring the
# caller's login and home into the jail) for the jail's own; jail.nix adds
# the rest itself, once: every namespace unshared unless a permission
# shares it, --new-session and --die-with-parent.
arguments: c:
c.compose (
  map (file: import file arguments c) [
    ./base.nix
    ./storeView.nix
    # Before network.nix, whose --hostname it sets.
    ./identity.nix
    ./network.nix
    ./hardening.nix
    ./procfs.nix
    ./filesystem.nix
    ./workspace.nix
    ./projectMount.nix
    # Limits: the values a profiled session's launcher lowers, then
    # memory and processes through the run's cgroup when the launcher
    # gives one, then rlimits; RLIMIT_NPROC in kernelBudgets.nix's
    # namespace.
    ./sessionLimits.nix
    ./cgroupLimits.nix
    ./rlimits.nix
    ./seccomp.nix
    ./kernelBudgets.nix
    ./runtimeLimits.nix
    ./variables.nix
    ./extraCombinators.nix
    # Deferred: after every mount, the run-time ones too.
    ./readOnlyRoot.nix
  ]
)
