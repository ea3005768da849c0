# The host's Python modules hostpkgs offers as python3Packages, by nixpkgs
# attribute name. Takes nothing; returns, for each, what tools.nix gives a
# tool (its Debian packages, the first giving the version; the hostpkgs
# packages its postInstall reads; postInstall) and `propagated`, the
# python3Packages it imports, which withPackages adds as nixpkgs' propagated
# inputs are. Each is a store closure of its own (hostTool.nix): its files
# in lib/python3/dist-packages, compiled, and the native libraries of its
# extension modules (numpy's BLAS and LAPACK as /etc/alternatives chooses
# them on the host) patched to load from the store.
let
  # Debian's pytz and dateutil read the host's /usr/share/zoneinfo:
  # hostpkgs' tzdata instead.
  tzdata = files: {
    inputs = [ "tzdata" ];
    postInstall = ''
      for file in ${files}; do
        file=$out/lib/python3/dist-packages/$file
        sed -i -e "s|/usr/share/zoneinfo|$tzdata/share/zoneinfo|g" \
          -e "s|os.path.join('/usr', *'share',|os.path.join('$tzdata/share',|" "$file"
        if grep -nE "/usr/share/zoneinfo|'/usr', *'share'" "$file"; then
          echo "hostpkgs: $file still reads the host's time zones" >&2
          exit 1
        fi
      done
    '';
  };
in
{
  numpy.debs = [ "python3-numpy" ];
  # Debian's pip, its libraries vendored (pip._vendor): `python3 -m pip`.
  pip.debs = [ "python3-pip" ];
  pandas = {
    debs = [
      "python3-pandas"
      "python3-pandas-lib"
    ];
    propagated = [
      "numpy"
      "python-dateutil"
      "pytz"
    ];
  };
  matplotlib = {
    debs = [
      "python3-matplotlib"
      "python-matplotlib-data"
    ];
    propagated = [
      "numpy"
      "python-dateutil"
      "pyparsing"
      "cycler"
      "kiwisolver"
      "pillow"
      "fonttools"
      "packaging"
      "contourpy"
    ];
    # Debian's matplotlib finds mpl-data in /usr/share/matplotlib and its
    # defaults in /etc/matplotlibrc; upstream's (and nixpkgs') have both in
    # the package.
    postInstall = ''
      mpl=$out/lib/python3/dist-packages/matplotlib
      ln -s ../../../../share/matplotlib/mpl-data "$mpl/mpl-data"
      sed -i "s|yield '/etc/matplotlibrc'|yield os.path.join(get_data_path(), 'matplotlibrc')|" "$mpl/__init__.py"
      grep -q "get_data_path(), 'matplotlibrc'" "$mpl/__init__.py"
    '';
  };
  contourpy = {
    debs = [ "python3-contourpy" ];
    propagated = [ "numpy" ];
  };
  cycler.debs = [ "python3-cycler" ];
  fonttools.debs = [ "python3-fonttools" ];
  kiwisolver.debs = [ "python3-kiwisolver" ];
  packaging.debs = [ "python3-packaging" ];
  pillow.debs = [ "python3-pil" ];
  pyparsing.debs = [ "python3-pyparsing" ];
  python-dateutil = {
    debs = [ "python3-dateutil" ];
    propagated = [ "six" ];
  }
  // tzdata "dateutil/tz/tz.py";
  pytz = {
    debs = [ "python3-tz" ];
  }
  // tzdata "pytz/__init__.py";
  six.debs = [ "python3-six" ];
}
