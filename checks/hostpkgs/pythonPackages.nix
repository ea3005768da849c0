# The host's Python modules hostpkgs offers as python3Packages, by nixpkgs
# attribute name. Takes nothing; returns, for each, the Debian packages that
# install it (the first one gives the version). The host's python3 finds
# them in /usr/lib/python3/dist-packages, which every jail shows.
{
  numpy.debs = [ "python3-numpy" ];
  pandas.debs = [ "python3-pandas" ];
  matplotlib.debs = [ "python3-matplotlib" ];
}
