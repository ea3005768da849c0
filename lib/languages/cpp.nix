# C++, as an environment's `program` (environment.nix): a table, not a
# function. The code is one C++20 file with `main`, built by `c++` with
# optimisation and warnings.
{
  language = "C++";
  file = "main.cpp";
  build = ''
    c++ -std=c++20 -O2 -Wall -o "$out/main" "$src"
  '';
  run = ''exec "$out/main"'';
}
