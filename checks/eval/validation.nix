# Takes nixpkgs' lib, a package set, mkSandbox and mkServer; returns the
# argument checks of the offline harness: name -> { sandbox; error; }, where
# evaluating sandbox.drvPath must fail with a message containing `error`
# (or succeed, when `error` is null).
{
  lib,
  pkgs,
  mkSandbox,
  mkServer,
}:
let
  good = {
    name = "good";
    interpreter = "python";
    packages = [ pkgs.python3 ];
  };
  sandbox = arguments: error: {
    sandbox = mkSandbox pkgs arguments;
    inherit error;
  };
  # A server of `good` with packagesOnDemand `settings`.
  server = settings: error: {
    sandbox = mkServer pkgs {
      environments = [ good ];
      launcher = pkgs.bash // {
        version = "0";
      };
      packagesOnDemand = settings;
    };
    inherit error;
  };
  # A server of `good` with projectEnvironment `settings`.
  project = settings: error: {
    sandbox = mkServer pkgs {
      environments = [ good ];
      launcher = pkgs.bash // {
        version = "0";
      };
      projectEnvironment = settings;
    };
    inherit error;
  };
  # A server of `good` with `profiles`.
  profiled = profiles: error: {
    sandbox = mkServer pkgs {
      environments = [ good ];
      launcher = pkgs.bash // {
        version = "0";
      };
      inherit profiles;
    };
    inherit error;
  };
  # A server of `good` with one profile `bad`: a description and `fields`.
  profile =
    fields: error:
    profiled {
      bad = {
        description = "one line";
      }
      // fields;
    } error;
  label = "mkSandbox: environment 'good': argument";
in
{
  good = sandbox good null;
  every-argument = sandbox (
    good
    // {
      description = "all of them";
      limits.memory_mb = 2048;
      network = true;
      extraCombinators = c: [ (c.set-hostname "good") ];
      env.FOO = "bar";
    }
  ) null;
  missing-name = sandbox (removeAttrs good [ "name" ]) "mkSandbox: an environment: argument `name` must be a string";
  bad-name = sandbox (good // { name = "no spaces"; }) "argument `name` must be a string matching";
  unknown-argument = sandbox (good // { networks = true; }) "mkSandbox: environment 'good': has unknown arguments networks";
  unknown-interpreter = sandbox (
    good // { interpreter = "ruby"; }
  ) "${label} `interpreter` must be one of bash, node, program, python (got \"ruby\")";
  program-missing = sandbox (
    good // { interpreter = "program"; }
  ) "${label} `program` must be set when `interpreter` is \"program\"";
  program-for-python = sandbox (
    good // { program = import ../../lib/languages/c.nix; }
  ) "${label} `program` is only for `interpreter = \"program\"` (got interpreter \"python\")";
  program-file-path = sandbox (
    good
    // {
      interpreter = "program";
      program = import ../../lib/languages/c.nix // {
        file = "../main.c";
      };
    }
  ) "${label} `program.file` must be a string matching";
  no-packages = sandbox (good // { packages = [ ]; }) "${label} `packages` must be a non-empty list";
  not-a-package = sandbox (good // { packages = [ "python3" ]; }) "${label} `packages` must hold only packages";
  limit-of-wrong-type = sandbox (
    good // { limits.memory_mb = "1G"; }
  ) "${label} `limits.memory_mb` must be a positive integer (got \"1G\")";
  limit-zero = sandbox (good // { limits.cpu_s = 0; }) "${label} `limits.cpu_s` must be a positive integer (got 0)";
  unknown-limit = sandbox (good // { limits.memroy_mb = 1; }) "${label} `limits` has unknown limits memroy_mb";
  publish-with-open-network = sandbox (
    good
    // {
      network = true;
      publish = [ 8000 ];
    }
  ) "${label} `publish` is not for `network = true`";
  publish-egress-port = sandbox (
    good
    // {
      network.allow = [ ];
      publish = [ 3128 ];
    }
  ) "${label} `publish` names 3128, the jail's egress proxy";
  publish-not-a-port = sandbox (good // { publish = [ 0 ]; }) "${label} `publish` must hold only";
  network-not-bool = sandbox (
    good // { network = "yes"; }
  ) "${label} `network` must be true, false or { allow = [ RULE ]; credentials = { ... }; }";
  network-policy = sandbox (
    good
    // {
      network = {
        allow = [
          { host = "pypi.org"; }
          {
            host = "*.example.com";
            port = 8443;
            paths = [ "/v1/" ];
            methods = [ "GET" ];
            credentials = [ "TOKEN" ];
          }
        ];
        credentials.TOKEN.fromFile = "/run/secrets/token";
      };
    }
  ) null;
  network-rule-unknown-field = sandbox (
    good // { network.allow = [ { host = "pypi.org"; hosts = [ ]; } ]; }
  ) "${label} `network.allow` has unknown allow hosts";
  network-rule-bad-host = sandbox (
    good // { network.allow = [ { host = "pypi.org/simple"; } ]; }
  ) "${label} `network.allow.host` must be a string matching the pattern";
  network-credential-no-source = sandbox (
    good
    // {
      network = {
        allow = [ ];
        credentials.TOKEN = { };
      };
    }
  ) "${label} `network.credentials.TOKEN` needs exactly one of fromFile and fromEnv";
  network-credential-two-sources = sandbox (
    good
    // {
      network = {
        allow = [ ];
        credentials.TOKEN = {
          fromFile = "/run/secrets/token";
          fromEnv = "TOKEN";
        };
      };
    }
  ) "${label} `network.credentials.TOKEN` needs exactly one of fromFile and fromEnv";
  network-credential-in-store = sandbox (
    good
    // {
      network = {
        allow = [ ];
        credentials.TOKEN.fromFile = "/nix/store/00000000000000000000000000000000-token";
      };
    }
  ) "${label} `network.credentials.TOKEN.fromFile` is in the Nix store";
  network-unknown-credential = sandbox (
    good
    // {
      network.allow = [
        {
          host = "pypi.org";
          credentials = [ "NOPE" ];
        }
      ];
    }
  ) "${label} `network.allow` names credential \"NOPE\", which `network.credentials` does not define";
  combinators-not-function = sandbox (
    good // { extraCombinators = [ ]; }
  ) "${label} `extraCombinators` must be a function";
  env-path = sandbox (good // { env.PATH = "/bin"; }) "${label} `env.PATH` cannot be set";
  env-bad-name = sandbox (good // { env."A-B" = "x"; }) "${label} `env` has a variable name that is not a valid shell name";
  seccomp-off = sandbox (good // { seccomp = false; }) null;
  seccomp-allow = sandbox (good // { seccomp.allow = [ "ptrace" "unshare" ]; }) null;
  seccomp-allow-family = sandbox (
    good
    // {
      seccomp.allow = [
        "AF_VSOCK"
        "NETLINK_GENERIC"
        "IPPROTO_SCTP"
      ];
    }
  ) null;
  seccomp-not-bool = sandbox (good // { seccomp = "yes"; }) "${label} `seccomp` must be true, false or { allow";
  seccomp-unknown-key = sandbox (
    good // { seccomp.deny = [ ]; }
  ) "${label} `seccomp` has unknown seccomp deny (known: allow)";
  seccomp-unknown-call = sandbox (
    good // { seccomp.allow = [ "read" ]; }
  ) "${label} `seccomp.allow` names calls, socket families or protocols the filter does not refuse: read";
  seccomp-open-family = sandbox (
    good // { seccomp.allow = [ "AF_INET" ]; }
  ) "${label} `seccomp.allow` names calls, socket families or protocols the filter does not refuse: AF_INET";
  server-duplicate-names = {
    sandbox = mkServer pkgs {
      environments = [
        good
        good
      ];
      launcher = pkgs.bash;
    };
    error = "mkServer: more than one environment is named good";
  };
  server-attrset-names = {
    sandbox = mkServer pkgs {
      environments.fromKey = removeAttrs good [ "name" ];
      launcher = pkgs.bash // {
        version = "0";
      };
    };
    error = null;
  };
  server-unknown-preset = {
    sandbox = mkServer pkgs {
      presets = [ "cobol" ];
      launcher = pkgs.bash // {
        version = "0";
      };
    };
    error = "mkServer: `presets` names cobol, which is not a preset (known: c, cpp, go, java, network-tools, rust)";
  };
  server-packages-unknown = server { allowed = "any"; } "mkServer: `packagesOnDemand` has unknown allowed";
  server-packages-allow = server {
    allow = "all";
  } "mkServer: `packagesOnDemand.allow` must be null, \"any\" or a list";
  server-packages-entry = server {
    allow = [ "jq; rm -rf /" ];
  } "mkServer: `packagesOnDemand.allow` has \"jq; rm -rf /\", which is not an attribute name";
  server-packages-timeout = server {
    allow = "any";
    timeoutSeconds = 0;
  } "mkServer: `packagesOnDemand.timeoutSeconds` must be a positive integer";
  server-packages-on = server {
    allow = [
      "jq"
      "python3Packages."
    ];
    build = true;
  } null;
  server-project-unknown = project {
    network = false;
    shellHook = "";
  } "mkServer: `projectEnvironment` has unknown shellHook";
  server-project-timeout = project {
    timeoutSeconds = 0;
  } "mkServer: `projectEnvironment.timeoutSeconds` must be a positive integer";
  server-project-limits = project {
    limits.memory_mb = "a lot";
  } "mkSandbox: environment 'project': argument `limits.memory_mb`";
  server-profiles-none = profiled { } null;
  server-profiles-not-a-set = profiled [ "strict" ] "mkServer: `profiles` must be an attribute set of profiles by name (got a list)";
  server-profile-every-field = profile {
    network = false;
    packages = false;
    project = "read-only";
    limits = {
      timeout_s = 10;
      max_timeout_s = 20;
      output_bytes = 1024;
      memory_mb = 256;
      cpu_s = 5;
      file_mb = 8;
      nofile = 64;
      workspace_mb = 16;
    };
  } null;
  server-profile-bad-name = profiled {
    "no spaces" = {
      description = "one line";
    };
  } "mkServer: profile no spaces: the name must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}";
  server-profile-unknown-field = profile {
    networks = false;
  } "mkServer: profile bad: has unknown networks (known: description, network, packages, project, limits)";
  server-profile-no-description = profiled {
    bad.network = false;
  } "mkServer: profile bad: `description` is required (one line)";
  server-profile-two-lines = profile {
    description = "one\ntwo";
  } "mkServer: profile bad: `description` must be one line of text";
  server-profile-network-true = profile {
    network = true;
  } "mkServer: profile bad: `network` must be null (the environment's own) or false (no network): a profile cannot open the network (got true)";
  server-profile-network-policy = profile {
    network.allow = [ { host = "pypi.org"; } ];
  } "mkServer: profile bad: `network` must be null (the environment's own) or false (no network): a profile cannot open the network (got a set)";
  server-profile-packages = profile {
    packages = [ "jq" ];
  } "mkServer: profile bad: `packages` must be true or false (got a list)";
  server-profile-project-rw = profile {
    project = "rw";
  } "mkServer: profile bad: `project` must be null, \"read-only\" or \"none\" (got \"rw\")";
  server-profile-unknown-limit = profile {
    limits.memroy_mb = 1;
  } "mkServer: profile bad: `limits` has unknown limit memroy_mb (allowed: timeout_s, max_timeout_s, output_bytes, memory_mb, cpu_s, file_mb, nofile, workspace_mb)";
  server-profile-pids = profile {
    limits.pids = 8;
  } "mkServer: profile bad: `limits.pids` is built into the environment's wrapper and cannot be lowered per session: set it on the environment instead";
  server-profile-tmp = profile {
    limits.tmp_mb = 8;
  } "mkServer: profile bad: `limits.tmp_mb` is built into the environment's wrapper and cannot be lowered per session: set it on the environment instead";
  server-profile-limit-zero = profile {
    limits.cpu_s = 0;
  } "mkServer: profile bad: `limits.cpu_s` must be a positive integer (got 0)";
  server-profile-limit-string = profile {
    limits.memory_mb = "512";
  } "mkServer: profile bad: `limits.memory_mb` must be a positive integer (got \"512\")";
  server-profile-limits-not-a-set = profile {
    limits = [ ];
  } "mkServer: profile bad: `limits` must be an attribute set of limits (got a list)";
  server-project-on = project {
    limits.memory_mb = 4096;
    timeoutSeconds = 900;
  } null;
}
