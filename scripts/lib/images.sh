# Container images built offline, for scripts/images and scripts/test (sourced after setup.sh).
#
# No base image can be pulled (the machines that build these have no registry), so every image is
# FROM scratch plus files assembled here: kiln's binaries and the libraries they link (as ldd
# finds them), Debian 12 packages fetched with `apt-get download` and unpacked with `dpkg-deb -x`
# (glibc, Python, Redis, CA certificates), and the pinned wheels of setup.sh's PY_PACKAGES from
# PyPI. The container files are deploy/images/*.scratch.Dockerfile; each gets a build context of
# its own under $IMAGES_WORK, rebuilt from its inputs every run but only rewritten when they
# changed, so Docker's build cache answers an unchanged image in seconds.

# The images' names are the ones deploy/kubernetes names; the kiln images carry the workspace's
# version, Redis its major.minor (Debian 12 ships 7.0, patched in place, so the tag holds).
KILN_VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$KILN_ROOT/Cargo.toml")"
REDIS_SERIES=7.0
# Sets the names; $1 is a tag suffix: scripts/test builds its images from the debug binaries as
# `-debug` tags, so they never stand in for the release images scripts/images makes. The
# variables are also what kiln-reliability's container scenarios read (KILN_IMAGE_*).
image_names() {
  IMAGE_KILN_CACHE="kiln/kiln-cache:$KILN_VERSION${1:-}"
  IMAGE_KILND="kiln/kilnd:$KILN_VERSION${1:-}"
  IMAGE_REDIS="kiln/redis:$REDIS_SERIES${1:-}"
  IMAGE_TRAIN_EXAMPLE="kiln/train-example:$KILN_VERSION${1:-}"
  export KILN_IMAGE_KILN_CACHE="$IMAGE_KILN_CACHE" KILN_IMAGE_KILND="$IMAGE_KILND" KILN_IMAGE_REDIS="$IMAGE_REDIS"
}
image_names ""
IMAGES_WORK="$KILN_BUILD_DIR/images"
IMAGES_DEBS="$IMAGES_WORK/debs"

# The interpreter of the kilnd image, and the Debian 12 packages that make it: Python 3.11 and
# every library its standard modules link (checked: images_check_libs fails on any missing one),
# libstdc++ for Triton's libtriton.so, libc-bin for ldconfig (the NVIDIA container runtime and
# Triton's driver lookup call it).
IMAGE_PYTHON=python3.11
KILND_DEBS=(
  libc6 libc-bin libgcc-s1 libstdc++6 zlib1g
  python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3.11
  libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6 libtinfo6 libreadline8
  libuuid1 libcrypt1 libdb5.3 libgdbm6 libgdbm-compat4 libnsl2 libtirpc3 libtirpc-common
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 media-types
)
# pip itself comes from Debian's wheel of it, run from the wheel file (pip supports that), so the
# image's venv holds the pinned packages and no pip.
KILND_PIP_DEB=python3-pip-whl

# Debian's redis-server (whose /usr/bin/redis-server is a link to redis-tools' binary) and what
# that binary links.
REDIS_DEBS=(
  redis-server redis-tools libc6 libgcc-s1 libstdc++6 libatomic1 libjemalloc2 liblzf1 libssl3 libsystemd0 libcap2
  libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1
)

ensure_docker() {
  command -v docker >/dev/null || die "docker is not installed: scripts/images needs a Docker Engine"
  docker info >/dev/null 2>&1 || die "docker cannot reach its engine (is dockerd running, and may this user use it?)"
  # The engine's own builder: nothing here needs BuildKit, which the CLI may lack (buildx).
  export DOCKER_BUILDKIT=0
}

# The version apt would download of Debian package $1, or nothing.
deb_candidate() {
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { if ($2 != "(none)") print $2 }'
}

# The .deb of package $1 at version $2 in $IMAGES_DEBS (apt-get download writes an epoch's colon
# as %3a).
deb_file() {
  local f
  for f in "$IMAGES_DEBS/${1}_${2//:/%3a}_"*.deb; do
    [ -f "$f" ] && { printf '%s\n' "$f"; return; }
  done
}

# Downloads the candidate version of each Debian package named into $IMAGES_DEBS, unless it is
# there already, and prints each one's .deb path.
fetch_debs() {
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "scripts/images assembles its images from Debian packages and needs apt-get and dpkg-deb"
  mkdir -p "$IMAGES_DEBS"
  local pkg ver missing=() versions=()
  for pkg in "$@"; do
    ver="$(deb_candidate "$pkg")"
    if [ -z "$ver" ]; then
      apt_update
      ver="$(deb_candidate "$pkg")"
    fi
    [ -n "$ver" ] || die "Debian package $pkg is not in this machine's apt sources (the images are assembled from Debian 12 packages)"
    versions+=("$pkg=$ver")
    [ -n "$(deb_file "$pkg" "$ver")" ] || missing+=("$pkg=$ver")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get download ${missing[*]}"
    (cd "$IMAGES_DEBS" && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}" >/dev/null) ||
      die "apt-get download ${missing[*]} failed"
  fi
  for pkg in "${versions[@]}"; do
    deb_file "${pkg%%=*}" "${pkg#*=}"
  done
}

# Unpacks the .debs named on stdin into $1, without documentation, manuals and translations.
unpack_debs() {
  local root="$1" deb
  mkdir -p "$root"
  while read -r deb; do
    dpkg-deb -x "$deb" "$root" || die "dpkg-deb -x $deb failed"
  done
  rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bug,bash-completion}
}

# Copies executable $2 to $1$3 and each library it links, as ldd resolves them on this machine,
# to the same path under $1 unless $4 (another part of the same image) has that library already:
# a Debian package's copy is of the same Debian release and at least as new.
add_elf() {
  local root="$1" src="$2" dest="$3" have="${4:-}" lib libs
  [ -x "$src" ] || die "$src is missing: build it first"
  libs="$(ldd "$src")" || die "ldd $src failed"
  ! grep -q 'not found' <<<"$libs" || die "$src links libraries this machine lacks: $(grep 'not found' <<<"$libs" | tr -s ' \t' ' ')"
  install -D -m 0755 "$src" "$root$dest"
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs"); do
    [ -n "$have" ] && [ -e "$have$lib" ] && continue
    install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

# The files every image has: users (root; nobody, whom kilnd runs Triton workers as; nonroot
# 65532 for kiln-cache; redis 999, the uid of the manifests' securityContext and of Docker Hub's
# redis image), group 2000 (kilnd's socket group in deploy/kubernetes), name lookup through
# /etc/hosts then DNS, a /tmp, and the CA certificates of Debian's ca-certificates, bundled as
# update-ca-certificates would.
add_base_files() {
  local root="$1" certs
  mkdir -p "$root/etc/ssl/certs" "$root/tmp"
  chmod 1777 "$root/tmp"
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
redis:x:999:999:redis:/data:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
redis:x:999:
kiln:x:2000:
nonroot:x:65532:
nogroup:x:65534:
EOF
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
  certs="$(mktemp -d)"
  fetch_debs ca-certificates | unpack_debs "$certs"
  cat "$certs"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$certs"
}

# Fails, naming the file and the library, when an ELF file under rootfs $1 needs a library that
# is not in $1: each is listed by the rootfs's own loader inside a chroot, so nothing of this
# machine's can stand in. Needs root (chroot); says so and skips otherwise.
check_libs() {
  local root="$1" f out missing=""
  if [ "$(id -u)" != 0 ]; then
    say "not root: skipping the check that $root holds every library it links (chroot needs root)"
    return
  fi
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | tr -d '\0')" = $'\x7fELF' ] || continue
    if ! out="$(chroot "$root" /lib64/ld-linux-x86-64.so.2 --list "/${f#"$root"/}" 2>&1)" ||
      grep -q 'not found' <<<"$out"; then
      missing+="  /${f#"$root"/}: $(grep -E 'not found|error' <<<"$out" | tr -s ' \t\n' ' ')"$'\n'
    fi
  done < <(find "$root" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
  [ -z "$missing" ] || die "libraries missing from $root (add their Debian packages in scripts/lib/images.sh):"$'\n'"$missing"
}

# Replaces directory $2 with staged directory $1 only when their contents differ (paths, modes,
# links and bytes), so an unchanged input keeps its files and Docker's build cache its layer.
replace_if_changed() {
  local new="$1" old="$2"
  if [ -d "$old" ] && diff -r --no-dereference "$new" "$old" >/dev/null 2>&1 &&
    [ "$(cd "$new" && find . -printf '%p %m %l\n' | LC_ALL=C sort)" = "$(cd "$old" && find . -printf '%p %m %l\n' | LC_ALL=C sort)" ]; then
    rm -rf "$new"
  else
    rm -rf "$old"
    mv "$new" "$old"
  fi
}

# Builds image $1 from container file $2 and context $3 (more `docker build` arguments after),
# quietly unless it fails.
docker_build() {
  local tag="$1" file="$2" ctx="$3" log
  shift 3
  log="$(mktemp)"
  say "docker build $tag ($(realpath --relative-to="$KILN_ROOT" "$file"))"
  if ! docker build --force-rm -t "$tag" -f "$file" "$@" "$ctx" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "docker build of $tag failed (its output is above)"
  fi
  rm -f "$log"
}

# kiln/kiln-cache: the binary, the libraries it links, the base files; runs as 65532.
build_kiln_cache_image() {
  local bin_dir="$1" ctx="$IMAGES_WORK/kiln-cache" staged
  staged="$(mktemp -d "$IMAGES_WORK/.stage.XXXXXX")"
  add_base_files "$staged/rootfs"
  add_elf "$staged/rootfs" "$bin_dir/kiln-cache" /usr/local/bin/kiln-cache
  check_libs "$staged/rootfs"
  replace_if_changed "$staged" "$ctx"
  docker_build "$IMAGE_KILN_CACHE" "$KILN_ROOT/deploy/images/kiln-cache.scratch.Dockerfile" "$ctx"
}

# kiln/redis: Debian's redis-server and redis-cli and their libraries; runs as redis (999).
build_redis_image() {
  local ctx="$IMAGES_WORK/redis" staged ver
  ver="$(deb_candidate redis-server)"
  [ -n "$ver" ] || { apt_update; ver="$(deb_candidate redis-server)"; }
  [[ "$ver" =~ ^([0-9]+:)?${REDIS_SERIES//./\\.}\. ]] ||
    die "Debian's redis-server here is $ver, not $REDIS_SERIES.x: change REDIS_SERIES (and the manifests' kiln/redis tag) together"
  staged="$(mktemp -d "$IMAGES_WORK/.stage.XXXXXX")"
  add_base_files "$staged/rootfs"
  fetch_debs "${REDIS_DEBS[@]}" | unpack_debs "$staged/rootfs"
  rm -rf "$staged/rootfs"/etc/{init.d,logrotate.d,default} "$staged/rootfs"/lib/systemd "$staged/rootfs"/usr/lib/systemd
  mkdir -p "$staged/data"
  check_libs "$staged/rootfs"
  replace_if_changed "$staged" "$ctx"
  docker_build "$IMAGE_REDIS" "$KILN_ROOT/deploy/images/redis.scratch.Dockerfile" "$ctx"
}

# kiln/kilnd, from three parts of its context, each a layer of its own so that a new kilnd binary
# rebuilds only the last: debian/ (Python and the libraries), wheels/ (PY_PACKAGES from PyPI, for
# Debian 12's CPython 3.11 on x86_64, and Debian's pip wheel), kiln/ (kilnd and kiln, and any
# library they link that debian/ lacks).
build_kilnd_image() {
  local bin_dir="$1" ctx="$IMAGES_WORK/kilnd" staged
  staged="$(mktemp -d "$IMAGES_WORK/.stage.XXXXXX")"
  add_base_files "$staged/debian"
  fetch_debs "${KILND_DEBS[@]}" | unpack_debs "$staged/debian"
  check_libs "$staged/debian"
  mkdir -p "$staged/debian/run/kiln" "$staged/debian/var/cache/kiln" "$staged/debian/opt/kiln"
  # kilnd.toml's cuda_root in deploy/kubernetes: the wheels' CUDA tree.
  ln -s "venv/lib/$IMAGE_PYTHON/site-packages/nvidia/cu13" "$staged/debian/opt/kiln/cuda"

  mkdir -p "$staged/wheels"
  stage_wheels "$staged/wheels" "$IMAGES_WORK/wheels" "${PY_PACKAGES[@]}"
  stage_pip_wheel "$staged/wheels/pip.whl"

  add_elf "$staged/kiln" "$bin_dir/kilnd" /usr/local/bin/kilnd "$staged/debian"
  add_elf "$staged/kiln" "$bin_dir/kiln" /usr/local/bin/kiln "$staged/debian"

  replace_if_changed "$staged" "$ctx"
  docker_build "$IMAGE_KILND" "$KILN_ROOT/deploy/images/kilnd.scratch.Dockerfile" "$ctx"
}

# kiln/train-example, the example Job of deploy/kubernetes/job: its train.py, and the kiln Python
# package with what it requires (grpcio, protobuf, blake3 at setup.sh's pins), installed by the
# kilnd image's Python on top of the kilnd image, whose layers (Python, Triton, the CUDA wheels)
# it shares. Context: wheels/ (those wheels, kiln's built here, Debian's pip) and train.py.
build_train_example_image() {
  local ctx="$IMAGES_WORK/train-example" staged src pkg deps=()
  for pkg in "${PY_CLIENT_PACKAGES[@]}"; do
    case "${pkg%%==*}" in grpcio | protobuf | blake3) deps+=("$pkg") ;; esac
  done
  staged="$(mktemp -d "$IMAGES_WORK/.stage.XXXXXX")"
  mkdir -p "$staged/wheels"
  stage_wheels "$staged/wheels" "$IMAGES_WORK/client-wheels" "${deps[@]}"
  stage_pip_wheel "$staged/wheels/pip.whl"
  # Built from a copy, so the source tree gets no build/ or egg-info; dated, so an unchanged
  # package makes the same wheel and Docker's cache holds.
  src="$(mktemp -d)"
  cp -r "$KILN_ROOT/client/python/." "$src/"
  rm -rf "$src/tests" "$src/bench"
  SOURCE_DATE_EPOCH=315532800 "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
    --wheel-dir "$staged/wheels" "$src" >/dev/null || die "building the kiln wheel failed"
  rm -rf "$src"
  cp "$KILN_ROOT/deploy/kubernetes/job/train.py" "$staged/train.py"
  replace_if_changed "$staged" "$ctx"
  docker_build "$IMAGE_TRAIN_EXAMPLE" "$KILN_ROOT/deploy/images/train-example.Dockerfile" "$ctx" \
    --build-arg "KILND_IMAGE=$IMAGE_KILND"
}

# Debian's pip wheel, to $1: the images run pip from the wheel file and keep no pip.
stage_pip_wheel() {
  local pip_whl
  pip_whl="$(fetch_debs "$KILND_PIP_DEB")"
  dpkg-deb --fsys-tarfile "$pip_whl" | tar -x -O --wildcards './usr/share/python-wheels/pip-*.whl' >"$1" ||
    die "no pip wheel in $pip_whl"
}

# The wheels of the pinned packages $3... (and what they require) and their requirements file,
# into $1. They are downloaded once into cache directory $2 and copied (hard-linked) from there.
stage_wheels() {
  local dest="$1" cache="$2"
  shift 2
  download_wheels "$cache" "$@" -- --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  cp -al "$cache"/. "$dest"/
}

# Runs each image's own checks: kiln-cache and Redis start and answer their version; kilnd's
# Python imports its standard modules that link libraries, and Triton; `kilnd check` compiles a
# tiny kernel with NVRTC, ptxas and Triton. Prints what `kilnd check` said.
smoke_test_images() {
  local out
  docker run --rm "$IMAGE_KILN_CACHE" --version >/dev/null || die "$IMAGE_KILN_CACHE: kiln-cache --version failed"
  case "$(docker image inspect -f '{{.Config.User}}' "$IMAGE_KILN_CACHE")" in
    "" | 0 | 0:* | root*) die "$IMAGE_KILN_CACHE runs as root" ;;
  esac
  docker run --rm "$IMAGE_REDIS" redis-server --version >/dev/null || die "$IMAGE_REDIS: redis-server --version failed"
  docker run --rm "$IMAGE_REDIS" redis-cli --version >/dev/null || die "$IMAGE_REDIS: redis-cli --version failed"
  docker run --rm --entrypoint /opt/kiln/venv/bin/python "$IMAGE_KILND" -c \
    'import ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, readline, curses, dbm.ndbm, triton' ||
    die "$IMAGE_KILND: its Python cannot import its standard modules and triton"
  docker run --rm "$IMAGE_KILND" --version >/dev/null || die "$IMAGE_KILND: kilnd --version failed"
  docker run --rm --entrypoint kiln "$IMAGE_KILND" --version >/dev/null || die "$IMAGE_KILND: kiln --version failed"
  out="$(docker run --rm "$IMAGE_KILND" check 2>&1)" || die "$IMAGE_KILND: kilnd check failed:"$'\n'"$out"
  printf '%s\n' "$out" | sed 's/^/    kilnd check: /' >&2
  local t
  for t in nvrtc ptxas triton; do
    grep -qE "^$t +ok: " <<<"$out" || die "$IMAGE_KILND: kilnd check did not compile with $t"
  done
  run_train_example
}

# Runs the example Job's script in its image against a kilnd container, as on a node: kilnd's
# socket directory shared through a bind mount (the node's /run/kiln), kilnd as root in group
# 2000, the job as uid 1000 in group 2000 (the Job's securityContext). There is no GPU here: the
# script must compile both kernels through kilnd and say that launching them needs a GPU.
run_train_example() {
  local run kilnd out
  run="$(mktemp -d)"
  chmod 0755 "$run"
  kilnd="kiln-train-example-kilnd-$$"
  docker run -d --rm --name "$kilnd" --network none --user 0:2000 -v "$run:/run/kiln" "$IMAGE_KILND" \
    --socket /run/kiln/kilnd.sock --cache-dir /var/cache/kiln --target sm_90 >/dev/null ||
    die "$IMAGE_KILND: kilnd did not start for the example job"
  for _ in $(seq 100); do
    [ -S "$run/kilnd.sock" ] && break
    sleep 0.1
  done
  out="$(docker run --rm --network none --user 1000:1000 --group-add 2000 -v "$run:/run/kiln:ro" \
    "$IMAGE_TRAIN_EXAMPLE" 2>&1)" || {
    docker logs "$kilnd" 2>&1 | tail -20 >&2
    docker rm -f "$kilnd" >/dev/null 2>&1
    rm -rf "$run"
    die "$IMAGE_TRAIN_EXAMPLE: the example job failed against a kilnd container:"$'\n'"$out"
  }
  docker rm -f "$kilnd" >/dev/null 2>&1
  rm -rf "$run"
  printf '%s\n' "$out" | sed 's/^/    example job: /' >&2
  grep -q '^kilnd: 2 kernels in' <<<"$out" && grep -q '^gpu: not run' <<<"$out" ||
    die "$IMAGE_TRAIN_EXAMPLE: the example job did not compile its two kernels and say the GPU part needs a GPU"
}

# One line per image: name, size in MB.
image_sizes() {
  local image
  for image in "$IMAGE_KILN_CACHE" "$IMAGE_KILND" "$IMAGE_REDIS" "$IMAGE_TRAIN_EXAMPLE"; do
    printf '%-24s %6.1f MB\n' "$image" "$(docker image inspect -f '{{.Size}}' "$image" | awk '{ print $1 / 1000000 }')"
  done
}

# Builds the four images from the binaries in $1 (a cargo profile's directory), checks them,
# and removes the untagged kiln images that earlier builds left (by their label, nothing else).
build_images() {
  local bin_dir="$1"
  ensure_docker
  mkdir -p "$IMAGES_WORK"
  rm -rf "$IMAGES_WORK"/.stage.*
  build_redis_image
  build_kiln_cache_image "$bin_dir"
  build_kilnd_image "$bin_dir"
  build_train_example_image
  smoke_test_images
  docker image prune -f --filter dangling=true --filter label=org.kiln.image >/dev/null 2>&1 || true
}
