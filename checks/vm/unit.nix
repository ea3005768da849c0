# Takes nixpkgs' lib and one evaluated entry of NixOS's systemd.services (the
# options checks/eval/nixosStubs.nix declares: description, wantedBy, after,
# environment, serviceConfig, and path when it declares it); returns the
# text of its systemd unit file, rendered as NixOS renders units
# (nixos/lib/systemd-lib.nix and systemd-unit-options.nix): a list is one
# `Key=value` line per element, a boolean is true or false, each variable an
# `Environment="NAME=value"` line, `path` the bin and sbin directories of
# its packages in PATH (without NixOS's default packages: the guest's
# systemd gives its own PATH when there is none). wantedBy becomes [Install]
# WantedBy, which `systemctl enable` reads where NixOS links the unit
# itself. An option it does not render fails the evaluation, naming it.
lib: service:
let
  rendered = [
    "description"
    "wantedBy"
    "after"
    "environment"
    "path"
    "serviceConfig"
  ];
  unknown = lib.subtractLists rendered (lib.attrNames service);
  value =
    v:
    if v == true then
      "true"
    else if v == false then
      "false"
    else
      toString v;
  section =
    attrs:
    lib.concatStrings (
      lib.concatLists (
        lib.mapAttrsToList (name: v: map (x: "${name}=${value x}\n") (lib.toList v)) attrs
      )
    );
  path = service.path or [ ];
  variables =
    service.environment
    // lib.optionalAttrs (path != [ ]) {
      PATH = "${lib.makeBinPath path}:${lib.makeSearchPathOutput "bin" "sbin" path}";
    };
  environment = lib.concatStrings (
    lib.mapAttrsToList (name: v: "Environment=${builtins.toJSON "${name}=${v}"}\n") variables
  );
in
if unknown != [ ] then
  throw "checks/vm/unit.nix does not render ${lib.concatStringsSep ", " unknown} of a systemd service: add it to the renderer"
else
  ''
    [Unit]
    ${section {
      Description = service.description;
      After = service.after;
    }}
    [Service]
    ${environment}${section service.serviceConfig}
    [Install]
    ${section { WantedBy = service.wantedBy; }}''
