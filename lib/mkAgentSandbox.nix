# Takes jail.nix; returns mkAgentSandbox, which takes pkgs and
#   { name, package, command ? package.meta.mainProgram or name,
#     hosts, apiKey = { variable, fromEnv ? variable, fromFile ? null,
#     headers ? [ "Authorization" ] }, extraHosts ? [ ], flags ? [ ],
#     packages ? the shell preset's tools, limits ? { }, env ? { },
#     launcher ? the workspace's launcher built with pkgs }
# and returns the agent package: bin/agent-NAME, which runs PACKAGE's
# COMMAND (FLAGS first, then the person's arguments) in a jail
# (docs/agents.md) through `nix-sandbox-mcp agent`: its only network is
# HOSTS (the API key put in by the egress proxy, the jail's
# apiKey.variable a placeholder) and EXTRAHOSTS (no key), its project the
# copy-on-write layer kept on disk per project, its home kept per project.
# The jail is mkSandbox's with `interpreter = "bash"` and the agent's
# limits (below); the agent's jail is that policy plus jail/agent.nix; its environment's manifest is
# share/nix-sandbox-mcp/manifest.json, passthru.agent the parts.
{ jail-nix }:
pkgs:
{
  name,
  package,
  command ? package.meta.mainProgram or name,
  hosts,
  apiKey,
  extraHosts ? [ ],
  flags ? [ ],
  packages ? (import ../presets/shell.nix pkgs).packages,
  limits ? { },
  env ? { },
  launcher ? pkgs.callPackage ../package.nix { },
}:
let
  inherit (pkgs) lib;
  mkSandbox = import ./mkSandbox.nix { inherit jail-nix; };
  key = {
    fromEnv = apiKey.variable;
    fromFile = null;
    headers = [ "Authorization" ];
  }
  // removeAttrs apiKey [ "variable" ];
  credential = {
    headers = key.headers;
  }
  // (if key.fromFile != null then { inherit (key) fromFile; } else { inherit (key) fromEnv; });
  # What a Node or Rust agent needs: a V8 heap and a build's processes,
  # files and time, for as long as the person works (docs/agents.md).
  agentLimits = {
    memory_mb = 4096;
    pids = 512;
    nofile = 8192;
    cpu_s = 86400;
    file_mb = 1024;
    tmp_mb = 1024;
    workspace_mb = 1024;
  }
  // limits;
  sandbox = mkSandbox pkgs {
    name = "agent-${name}";
    interpreter = "bash";
    description = "${name} in a jail whose only network is its model API";
    packages = [ package ] ++ packages;
    limits = agentLimits;
    network = {
      allow =
        map (host: {
          inherit host;
          credentials = [ apiKey.variable ];
        }) hosts
        ++ map (host: { inherit host; }) extraHosts;
      credentials.${apiKey.variable} = credential;
    };
    inherit env;
  };
  tty = "${pkgs.callPackage ../package.nix { }}/bin/jail-tty";
  # The jail's entry (one program, as jail.nix takes it): in the project
  # (jail/agent.nix's NIX_SANDBOX_AGENT_CWD), the agent on its terminal.
  entry = pkgs.writeTextFile {
    name = "agent-${name}-entry";
    executable = true;
    destination = "/bin/agent-${name}-entry";
    text = ''
      #!${pkgs.runtimeShell}
      if [ -n "''${NIX_SANDBOX_AGENT_CWD:-}" ]; then
        cd "$NIX_SANDBOX_AGENT_CWD" || exit 2
      fi
      unset NIX_SANDBOX_AGENT_CWD
      exec ${tty} -- ${package}/bin/${command} ${lib.escapeShellArgs flags} "$@"
    '';
  };
  jail = jail-nix.lib.init pkgs "agent-${name}-jail" "${entry}/bin/agent-${name}-entry" (c: [
    (sandbox.sandbox.policy c)
    (import ./jail/agent.nix { inherit (sandbox.sandbox) environment; } c)
  ]);
  script = pkgs.writeTextFile {
    name = "agent-${name}";
    executable = true;
    text = ''
      #!${pkgs.runtimeShell}
      exec ${launcher}/bin/nix-sandbox-mcp agent --name ${lib.escapeShellArg name} \
        --manifest ${sandbox}/share/nix-sandbox-mcp/manifest.json --env agent-${name} \
        --jail ${jail}/bin/agent-${name}-jail -- "$@"
    '';
  };
in
pkgs.runCommand "agent-${name}"
  {
    passthru.agent = {
      inherit
        name
        sandbox
        jail
        package
        ;
    };
    meta = {
      description = "${name} in a jail whose only network is its model API, its key kept outside";
      mainProgram = "agent-${name}";
      platforms = lib.platforms.linux;
    };
  }
  ''
    if [ ! -x ${package}/bin/${command} ]; then
      echo "mkAgentSandbox: agent '${name}': ${package} has no bin/${command} (set command)" >&2
      exit 1
    fi
    mkdir -p "$out/bin" "$out/share/nix-sandbox-mcp"
    ln -s ${sandbox}/share/nix-sandbox-mcp/manifest.json "$out/share/nix-sandbox-mcp/manifest.json"
    ln -s ${script} "$out/bin/agent-${name}"
  ''
