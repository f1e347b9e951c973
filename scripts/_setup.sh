# Sourced by scripts/test and scripts/demo: make .venv (if missing) and install the project into it.
# Idempotent and quiet when nothing changed; prints what it does when it installs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2]==(3,11) else 1)'; then PY="$cand"; break; fi
  done
fi
[ -n "$PY" ] || { echo "adaptive-fabric needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "==> installing adaptive-fabric and its test tools into .venv (first run takes a few minutes)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c 'import fabric, probes, actors, ray, pydantic, pynvml, grpc, pytest, hypothesis, importlinter' \
    || { echo "install failed: a dependency does not import" >&2; exit 1; }
  rm -f .venv/.installed-*; touch "$stamp"
fi
# The namespace fleet's one-way cuts (fabric.testing.netns) use nft, or iptables when asked: install
# Debian's nftables and iptables when root.
if [ "$(id -u)" = 0 ] && { ! command -v nft >/dev/null 2>&1 || ! command -v iptables >/dev/null 2>&1; } \
   && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing nftables and iptables (apt-get) for the namespace fleet's one-way cuts"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables iptables >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables iptables >/dev/null 2>&1; }; } \
    || echo "nftables/iptables could not be installed: the one-way cut tests skip (fail with CI=true)" >&2
fi
# The GCS fault-tolerance tests' external store (fabric.testing.redis) needs redis-server: install Debian's when root.
if [ "$(id -u)" = 0 ] && ! command -v redis-server >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing redis-server (apt-get) for the GCS fault-tolerance tests' external store"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null 2>&1; }; } \
    || echo "redis-server could not be installed: the Redis-backed head restart test skips (fails with CI=true)" >&2
fi
export PATH="$ROOT/.venv/bin:$PATH"
# Ray 2.60 turns token auth on for new local clusters; choose explicitly (tests/demo override per run).
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
# Local clusters (tests, demo) stay on loopback: Ray then resolves the node IP to 127.0.0.1.
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="${RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER:-0}"
