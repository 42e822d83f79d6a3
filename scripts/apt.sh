# Sourced by the setup scripts: Debian packages they may install when the
# machine lacks a tool, where this runs as root with apt.

# Whether packages can be installed here.
can_apt() {
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1
}

# Installs the packages quietly; a fresh machine has no package lists yet,
# so a failed first try updates them and tries again.
apt_install() {
  apt-get install -y -qq "$@" >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null 2>&1)
}
