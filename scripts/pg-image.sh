#!/usr/bin/env bash
# Builds a PostgreSQL image OFFLINE, from scratch, out of this machine's own PostgreSQL server
# binaries: no base image, nothing pulled from a registry. `docker import` of one tarball holding
#   - PG_DIR (default /usr/lib/postgresql/15) and its share folder (/usr/share/postgresql/15),
#   - every shared library ldd names for the binaries and modules there, and the loader,
#   - /bin/sh (Debian's dash: initdb and pg_ctl run postgres through popen/system), tzdata
#     (/usr/share/zoneinfo), /tmp, /var/run/postgresql, a passwd/group with postgres,
#   - a static entry point (internal/testkit/cmd/pgentrypoint) that does what the official
#     postgres image's does for POSTGRES_USER/POSTGRES_PASSWORD/POSTGRES_DB.
# make test-containers uses it; the image answers testcontainers-go's postgres module like
# postgres:15 does.
#
# Usage: scripts/pg-image.sh TAG     (e.g. ql-test-postgres:15-local)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: scripts/pg-image.sh TAG   (builds the PostgreSQL test image TAG from PG_DIR=${PG_DIR:-/usr/lib/postgresql/15})" >&2
  exit 2
fi
tag=$1
pg_dir=${PG_DIR:-/usr/lib/postgresql/15}
major=$(basename "$pg_dir")
share=/usr/share/postgresql/$major
for f in "$pg_dir/bin/initdb" "$pg_dir/bin/postgres" "$pg_dir/bin/pg_ctl" "$pg_dir/bin/psql" "$share/postgres.bki"; do
  [[ -e "$f" ]] || { echo "pg-image: $f missing (PG_DIR=$pg_dir; apt-get install postgresql-$major)" >&2; exit 1; }
done
[[ -d /usr/share/zoneinfo ]] || { echo "pg-image: /usr/share/zoneinfo missing (apt-get install tzdata)" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

# The tree the binaries expect, with Debian's merged /usr: /lib and /lib64 are links into /usr.
mkdir -p "$root"/{usr/bin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/bin,etc,tmp,var/run/postgresql,var/lib/postgresql,usr/share}
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
ln -s usr/bin "$root/bin"
cp -L /bin/dash "$root/usr/bin/sh"
chmod 1777 "$root/tmp"
# Left out: the JIT (llvmjit.so and its bitcode, which would pull in libLLVM's 100 MB); jit is
# simply unavailable in the image.
tar -C / --exclude='llvmjit*' --exclude=bitcode -cf - "${pg_dir#/}" "${share#/}" usr/share/zoneinfo | tar -C "$root" -xf -

# Every library the loader resolves for the ELF files, copied (links followed) to the same path.
mapfile -t elfs < <(find "$root$pg_dir" -type f \( -perm -u+x -o -name '*.so' \) -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
ldd "${elfs[@]}" /bin/dash 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}' | sort -u | while read -r lib; do
  dest="$root$lib"
  [[ -e "$dest" ]] && continue
  mkdir -p "$(dirname "$dest")"
  cp -L "$lib" "$dest"
done

printf 'root:x:0:0:root:/root:/sbin/nologin\npostgres:x:999:999:PostgreSQL:/var/lib/postgresql:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\npostgres:x:999:\n' >"$root/etc/group"
chown 999:999 "$root/var/run/postgresql" "$root/var/lib/postgresql"

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root/usr/local/bin/docker-entrypoint" ./internal/testkit/cmd/pgentrypoint

tar -C "$root" --numeric-owner -cf - . | docker import \
  --change "ENV PATH=$pg_dir/bin:/usr/local/bin:/usr/bin:/bin" \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C' \
  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint"]' \
  --change 'CMD ["postgres"]' \
  --change 'EXPOSE 5432' \
  --message "PostgreSQL $major from $pg_dir, built offline by scripts/pg-image.sh" \
  - "$tag" >/dev/null
echo "pg-image: built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
