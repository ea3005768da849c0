# Takes { environment, ... } and jail.nix's combinators; returns jail.nix's
# network permission (the host's network namespace, DNS and TLS files) when
# the environment sets `network = true`, else nothing: the jail keeps a
# network namespace of its own with only loopback in it.
{ environment, ... }:
c: if environment.network then c.network else c.compose [ ]
