# Takes pkgs; returns the mkSandbox arguments of the bundled `node`
# environment: Node.js.
pkgs: {
  name = "node";
  interpreter = "node";
  description = "Node.js";
  packages = [ pkgs.nodejs ];
  # Without a cgroup the memory limit is RLIMIT_AS, which counts address
  # space: node reserves about 0.7 GiB at start and 0.45 GiB per worker
  # thread, so 1 GiB would leave no room for a worker.
  limits.memory_mb = 2048;
}
