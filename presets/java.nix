# Takes pkgs; returns the mkSandbox arguments of the `java` environment,
# which a server serves when asked for by name (mkServer's `presets`, the
# modules' `presets`): Java programs of one file, compiled by javac and
# run (lib/languages/java.nix), the JVM told the memory limit
# (lib/jail/runtimeLimits.nix). More processes than the default: a JVM
# starts about 20 threads.
pkgs: {
  name = "java";
  interpreter = "program";
  program = import ../lib/languages/java.nix;
  description = "Java ${pkgs.lib.versions.major pkgs.jdk_headless.version}, one file, a public class with main. Compiled and run.";
  packages = [ pkgs.jdk_headless ];
  limits.pids = 128;
}
