# The README's Install section as a user follows it, for scripts/test (sourced after setup.sh):
# scripts/install into a temporary prefix, the installed kilnd started with no flags and no KILN_*
# variables, and examples/mixed.graph.json (CUDA, PTX and Triton kernels) compiled by the
# installed kiln; then kiln doctor, and kilnd stopped. To stay quick it takes the binaries
# already built (--binaries) and the toolchain from a wheelhouse kept under the build directory
# (--wheels: downloaded from PyPI once, and again only when the pins change).

# check_install BIN_DIR: BIN_DIR holds the kilnd, kiln and kiln-cache to install.
check_install() (
  local bin_dir="$1" wheels="$KILN_BUILD_DIR/wheelhouse" work prefix started pid="" out
  download_wheels "$wheels"
  work="$(mktemp -d "${TMPDIR:-/tmp}/kiln-install.XXXXXX")"
  # Under a root kilnd, Triton workers run as `nobody`: the prefix must be theirs to read.
  chmod 755 "$work"
  prefix="$work/prefix"
  stop() {
    if [ -n "$pid" ]; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
  }
  trap stop EXIT
  say "scripts/install --prefix $prefix (the debug binaries, the toolchain from $wheels)"
  started=$SECONDS
  "$KILN_ROOT/scripts/install" --prefix "$prefix" --binaries "$bin_dir" --wheels "$wheels" --no-system \
    >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; die "scripts/install failed (its output is above)"; }
  say "installed in $((SECONDS - started)) s"

  # As a user starts it: no flags, no KILN_* variables; the socket and cache dir are the
  # defaults, under XDG directories of the test's own.
  mkdir -m 700 "$work/run" "$work/cache"
  local user_env
  mapfile -t user_env < <(kiln_env_unset)
  user_env+=(XDG_RUNTIME_DIR="$work/run" XDG_CACHE_HOME="$work/cache")
  as_user() { env "${user_env[@]}" "$@"; }
  # env executes kilnd, so $! is kilnd's own pid, which stop() ends.
  env "${user_env[@]}" "$prefix/bin/kilnd" 2>"$work/kilnd.log" &
  pid=$!
  for _ in $(seq 300); do
    as_user "$prefix/bin/kiln" stats >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/kilnd.log" >&2; die "the installed kilnd exited during start-up"; }
    sleep 0.1
  done
  grep -q "configuration file read.*$prefix/etc/kiln/kilnd.toml" "$work/kilnd.log" ||
    { cat "$work/kilnd.log" >&2; die "the installed kilnd did not read $prefix/etc/kiln/kilnd.toml"; }

  out="$(cd "$KILN_ROOT" && as_user "$prefix/bin/kiln" compile --graph examples/mixed.graph.json --json)" ||
    { printf '%s\n' "$out" >&2; cat "$work/kilnd.log" >&2; die "the installed kiln could not compile examples/mixed.graph.json"; }
  for toolchain in nvrtc ptxas triton; do
    grep -q "\"outcome\":\"ok\".*\"toolchain\":\"$toolchain\"\|\"toolchain\":\"$toolchain\".*\"outcome\":\"ok\"" <<<"$out" ||
      { printf '%s\n' "$out" >&2; die "the installed kilnd compiled no $toolchain kernel of examples/mixed.graph.json"; }
  done
  as_user "$prefix/bin/kiln" doctor >"$work/doctor.log" 2>&1 ||
    { cat "$work/doctor.log" >&2; die "kiln doctor failed against the installed kilnd"; }
  say "the installed kilnd compiled examples/mixed.graph.json (CUDA, PTX, Triton) and kiln doctor passed"
)
