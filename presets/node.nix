# Takes pkgs; returns the mkSandbox arguments of the bundled `node`
# environment: Node.js.
pkgs: {
  name = "node";
  interpreter = "node";
  description = "Node.js";
  packages = [ pkgs.nodejs ];
}
