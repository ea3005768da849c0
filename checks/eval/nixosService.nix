# Takes pkgs (real nixpkgs) and this flake's NixOS module; returns a NixOS
# VM test of services.nix-sandbox-mcp as the docs' snippet configures it
# (snippets/nixos.nix): the hardened unit starts, answers 401 without the
# bearer token, and runs code in its data-science environment over HTTP,
# jailed under the service's own dynamic user, in a session too. It needs KVM and the binary
# cache (`nix flake check` in real CI); the offline harness only parses it.
{ pkgs, module }:
pkgs.testers.runNixOSTest {
  name = "nix-sandbox-mcp-service";

  nodes.machine = {
    imports = [
      module
      ./snippets/nixos.nix
    ];
    virtualisation.memorySize = 2048;
    # The token file of the snippet, made at boot, never in the store.
    systemd.services.nix-sandbox-mcp-token = {
      wantedBy = [ "multi-user.target" ];
      before = [ "nix-sandbox-mcp.service" ];
      requiredBy = [ "nix-sandbox-mcp.service" ];
      serviceConfig.Type = "oneshot";
      script = ''
        mkdir -p /run/secrets
        (umask 077 && echo vm-test-token-0123456789abcdef >/run/secrets/nix-sandbox-mcp-token)
      '';
    };
    environment.systemPackages = [ pkgs.curl ];
  };

  testScript = ''
    import json

    URL = "http://127.0.0.1:8765/mcp"
    HEADERS = "-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'"
    AUTH = "-H 'Authorization: Bearer vm-test-token-0123456789abcdef'"


    def post(message, auth=AUTH, session=None):
        extra = f"-H 'Mcp-Session-Id: {session}' -H 'MCP-Protocol-Version: 2025-06-18'" if session else ""
        return machine.succeed(
            f"curl -sS -D /tmp/headers {HEADERS} {auth} {extra} -d '{json.dumps(message)}' {URL}"
        )


    def answer(body, id):
        for line in body.splitlines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                if data.get("id") == id:
                    return data
        raise AssertionError(f"no answer to request {id} in {body!r}")


    machine.wait_for_unit("nix-sandbox-mcp.service")
    machine.wait_for_open_port(8765)

    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "vm-test", "version": "1"},
        },
    }
    status = machine.succeed(
        f"curl -s -o /dev/null -w '%{{http_code}}' {HEADERS} -d '{json.dumps(initialize)}' {URL}"
    )
    assert status == "401", f"without the token: HTTP {status}"

    answer(post(initialize), 1)
    session = next(
        line.split(":", 1)[1].strip()
        for line in machine.succeed("cat /tmp/headers").splitlines()
        if line.lower().startswith("mcp-session-id:")
    )
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session)

    def run(id, arguments):
        call = {
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "run", "arguments": arguments},
        }
        result = answer(post(call, session=session), id)["result"]
        assert not result.get("isError"), result
        return "".join(c.get("text", "") for c in result["content"] if c["type"] == "text").strip()


    code = "import numpy, os\nprint(int(numpy.arange(7).sum() * 2), os.getuid() != 0)"
    assert run(2, {"env": "data-science", "code": code}) == "42 True"
    # A session keeps its state between calls.
    run(3, {"env": "data-science", "session": "s", "code": "x = 41"})
    assert run(4, {"env": "data-science", "session": "s", "code": "print(x + 1)"}) == "42"
  '';
}
