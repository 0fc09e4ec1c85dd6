#!/usr/bin/env bash
# Create (or refresh) the project-local venv with everything the demo and tests need.
# - SIMREAL_DISTRO (the Makefile's DISTRO): kilted (the default, venv .venv) or jazzy (venv
#   .venv-jazzy); SIMREAL_VENV names the venv.
# - With a sourced ROS 2 environment (ROS_DISTRO set and rclpy importable), the venv sees the
#   system packages and uses that rclpy (a DISTRO named explicitly must match ROS_DISTRO);
#   otherwise it installs that distro's ROS 2 wheels from PyPI.
# - Versions are pinned in requirements/constraints.txt (Kilted and everything not ROS) and
#   requirements/constraints-<distro>.txt (the ROS wheels of another distro, which replace the
#   Kilted ones), and nowhere else.
# - Without a sourced ROS 2, when ../shared/wheels/ros2-launch/ exists beside the repository
#   (development and CI), its launch/launch_ros/ros2cli wheels go into the venv too, so
#   `ros2 launch` and the `ros2` command line run the ROS-native tests. Users get those from a
#   sourced ROS 2 instead (README).
# - Re-runs are cheap: nothing is installed when the inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
DISTRO=${SIMREAL_DISTRO:-}
PY=${PYTHON:-python3}
case "${DISTRO:-kilted}" in
  kilted) VENV=${SIMREAL_VENV:-.venv} ;;
  jazzy) VENV=${SIMREAL_VENV:-.venv-jazzy} ;;
  *) echo "bootstrap: DISTRO=$DISTRO: the ROS 2 wheels are set up for kilted (the default) and jazzy;" \
          "for another distro source its setup.bash and run make without DISTRO" >&2
     exit 1 ;;
esac

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "bootstrap: $PY not found; install Python 3.10-3.13 (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
  exit 1
fi
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$ver" in
  3.10|3.11|3.12|3.13) ;;
  *) echo "bootstrap: $PY is Python $ver; the ROS 2 Kilted wheels need 3.10-3.13 (set PYTHON=python3.12, say)" >&2
     exit 1 ;;
esac

use_system_ros=0
if [ -n "${ROS_DISTRO:-}" ] && "$PY" -c 'import rclpy' >/dev/null 2>&1; then
  use_system_ros=1
  if [ -n "$DISTRO" ] && [ "$DISTRO" != "$ROS_DISTRO" ]; then
    echo "bootstrap: DISTRO=$DISTRO, but the sourced ROS 2 is $ROS_DISTRO: open a shell without" \
         "it for the $DISTRO wheels, or run with DISTRO=$ROS_DISTRO" >&2
    exit 1
  fi
fi
# The constraints pip gets: constraints.txt, its ROS pins replaced by the distro's own file.
constraints=requirements/constraints.txt
distro=${DISTRO:-kilted}
[ $use_system_ros = 0 ] || distro=$ROS_DISTRO
if [ $use_system_ros = 0 ] && [ "$distro" != kilted ]; then
  constraints=$(mktemp --suffix=-constraints.txt)
  trap 'rm -f "$constraints"' EXIT
  { grep -v '^ros-' requirements/constraints.txt; cat "requirements/constraints-$distro.txt"; } \
    > "$constraints"
fi

launch_wheels=()
if [ $use_system_ros = 0 ] && [ -d ../shared/wheels/ros2-launch ]; then
  shopt -s nullglob
  launch_wheels=(../shared/wheels/ros2-launch/*.whl)
  shopt -u nullglob
fi

stamp_src=$(cat requirements/*.txt setup.py package.xml; echo "py=$ver system_ros=$use_system_ros distro=$distro"
            [ ${#launch_wheels[@]} = 0 ] || sha256sum "${launch_wheels[@]}")
stamp=$(printf '%s' "$stamp_src" | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.bootstrap-stamp" ] && [ "$(cat "$VENV/.bootstrap-stamp")" = "$stamp" ]; then
  exit 0
fi

echo "bootstrap: setting up $VENV (Python $ver, $([ $use_system_ros = 1 ] && echo "ROS 2 $ROS_DISTRO from the system" || echo "ROS 2 $distro wheels from PyPI"))" >&2
# Reuse a venv made by the same interpreter in the same ROS mode (only new pins get installed);
# anything else is rebuilt from scratch.
venv_kind="py=$ver system_ros=$use_system_ros distro=$distro"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.bootstrap-kind" 2>/dev/null)" != "$venv_kind" ]; then
  rm -rf "$VENV"
  venv_args=()
  [ $use_system_ros = 1 ] && venv_args+=(--system-site-packages)
  if ! "$PY" -m venv "${venv_args[@]}" "$VENV" >/dev/null 2>&1; then
    echo "bootstrap: '$PY -m venv' failed; on Debian/Ubuntu install the venv module: apt-get install python3-venv" >&2
    exit 1
  fi
  echo "$venv_kind" > "$VENV/.bootstrap-kind"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
log="$VENV/bootstrap.log"
install_launch_wheels() {
  [ ${#launch_wheels[@]} = 0 ] && return 0
  # --no-deps: the wheels name their ROS dependencies by package name, which the PyPI ROS
  # wheels provide under other distribution names (../shared/wheels/ros2-launch/README.md).
  "${pip[@]}" install --no-index --no-deps "${launch_wheels[@]}" &&
    "${pip[@]}" install -c "$constraints" osrf-pycommon
}
reqs=(-r requirements/dev.txt)
[ $use_system_ros = 1 ] || reqs+=(-r requirements/ros.txt)
if ! { "${pip[@]}" install --upgrade pip && \
       "${pip[@]}" install -c "$constraints" "${reqs[@]}" -e . && \
       "${pip[@]}" install --no-deps -c "$constraints" -r requirements/no-deps.txt && \
       install_launch_wheels ; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "bootstrap: pip install failed (full log: $log)" >&2
  exit 1
fi
echo "$stamp" > "$VENV/.bootstrap-stamp"
echo "bootstrap: ready" >&2
