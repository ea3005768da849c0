# Java, as an environment's `program` (environment.nix): a table, not a
# function. The code is one compilation unit; the class started is its
# public top-level class (the file is named after it, as javac requires),
# else its first, in its package if it declares one. The JVM's options of
# the jail (JAVA_TOOL_OPTIONS, jail/runtimeLimits.nix: its memory and
# threads) are passed on the command line instead, so that every run does
# not print "Picked up JAVA_TOOL_OPTIONS"; javac also compiles with the
# client compiler only, which starts faster.
{
  language = "Java";
  file = "Main.java";
  build = ''
    read -ra opts <<<"''${JAVA_TOOL_OPTIONS-}"
    unset JAVA_TOOL_OPTIONS
    decl='[[:space:]]+(([a-z]+)[[:space:]]+)*(class|record|enum|interface)[[:space:]]+([A-Za-z_$][A-Za-z0-9_$]*).*'
    class=$(sed -nE "s/^[[:space:]]*public$decl/\4/p" "$src" | head -n 1)
    if [ -z "$class" ]; then
      class=$(sed -nE "s/^[[:space:]]*(([a-z]+)[[:space:]]+)*(class|record|enum|interface)[[:space:]]+([A-Za-z_$][A-Za-z0-9_$]*).*/\4/p" "$src" | head -n 1)
    fi
    package=$(sed -nE 's/^[[:space:]]*package[[:space:]]+([A-Za-z0-9_.]+)[[:space:]]*;.*/\1/p' "$src" | head -n 1)
    if [ -n "$class" ] && [ "$class.java" != "$src" ]; then
      mv "$src" "$class.java"
      src=$class.java
    fi
    javac "''${opts[@]/#/-J}" -J-XX:TieredStopAtLevel=1 -d "$out" "$src"
    echo "''${package:+$package.}''${class:-Main}" >"$out/.main-class"
  '';
  run = ''
    read -ra opts <<<"''${JAVA_TOOL_OPTIONS-}"
    unset JAVA_TOOL_OPTIONS
    exec java "''${opts[@]}" -cp "$out" "$(cat "$out/.main-class")"
  '';
}
