#!/usr/bin/env bash
# The writer tests (tests/reliability: export, load, serve, index, train, modes, locks) as an
# unprivileged user, as people run kbert; `make test` runs this after the root passes.
#
# The project's .venv is made by a Python that may live under root's home (mode 0700), which
# `nobody` cannot run; /usr/bin/python3.11 (the same minor version) can. .venv-user is a venv
# of that Python whose site-packages point at .venv's (the same packages, nothing installed
# twice). `nobody` gets its own HOME, caches and pytest folder.
set -euo pipefail
cd "$(dirname "$0")/.."

user=${KBERT_TEST_USER:-nobody}
group=$(id -gn "$user" 2>/dev/null || echo nogroup)
python=${KBERT_USER_PYTHON:-/usr/bin/python3.11}
if [ "$(id -u)" != 0 ]; then
  echo "as-user: not root: the root passes already ran these tests as an ordinary user"; exit 0
fi
for tool in setpriv "$python"; do
  command -v "$tool" >/dev/null || { echo "as-user: FAILED: $tool is missing"; exit 1; }
done

if [ ! -x .venv-user/bin/python ]; then "$python" -m venv --without-pip .venv-user; fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
user_site=$(.venv-user/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$site')" > "$user_site/kbert-dev-venv.pth"

home=$(mktemp -d /tmp/kbert-user-XXXXXX)
chown "$user:$group" "$home"
trap 'rm -rf "$home"' EXIT
as_user() {
  setpriv --reuid="$user" --regid="$group" --clear-groups \
    env -i PATH=/usr/bin:/bin HOME="$home" LANG=C.UTF-8 KERAS_BACKEND=tensorflow \
    TF_CPP_MIN_LOG_LEVEL=3 GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 \
    PYTHONDONTWRITEBYTECODE=1 KBERT_CACHE="$home/cache" MPLCONFIGDIR="$home/mpl" "$@"
}
if ! as_user test -r "$PWD/kbert/__init__.py" -a -x "$site"; then
  # Not kbert's doing: a folder above the checkout is private to root.
  echo "as-user: SKIPPED: $user cannot read $PWD (a folder above it is private)"; exit 0
fi
echo "as-user: tests/reliability as $user (umask 022, HOME $home)"
as_user sh -c "umask 022 && exec .venv-user/bin/python -m pytest -q -p no:cacheprovider \
  --basetemp='$home/pytest' tests/reliability"
