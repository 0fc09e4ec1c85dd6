"""Find and read configuration: robot parameter files, model paths, the package share folder.

Parameter files are standard ROS 2 YAML (`/**/node_name: ros__parameters: {...}`, so a section
applies in any namespace, with `/**` for parameters every node shares); the same file is given to `ros2 launch`, `ros2 run --ros-args
--params-file` and to the pip-installed tools. Errors are `ConfigError`s that name the file and
the parameter, for the operator to read.
"""
import os
from pathlib import Path

import yaml

PACKAGE = 'simreal_ros'
PACKAGE_URL = 'package://' + PACKAGE + '/'
ASSET_URL = 'asset://'          # a third-party asset's file (core/assets.py)


class ConfigError(ValueError):
    """A configuration mistake, worded for the operator (file, parameter, what to do)."""


def source_root():
    """Return the source checkout's root (holding package.xml), or None when installed."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / 'package.xml').is_file() and (root / 'config').is_dir() else None


def share_dir():
    """Return the folder holding config/, launch/ and models/ for this installation."""
    root = source_root()
    if root is not None:
        return root
    try:
        from ament_index_python.packages import get_package_share_directory
        return Path(get_package_share_directory(PACKAGE))
    except Exception:  # noqa: BLE001 - fall through to the pip prefix layout
        pass
    import sys
    candidate = Path(sys.prefix) / 'share' / PACKAGE
    if candidate.is_dir():
        return candidate
    raise ConfigError(f'cannot find the {PACKAGE} share folder (config/, launch/, models/); '
                      'is the package installed (colcon build or pip install)?')


def resolve_path(path, what='path', relative_to=None):
    """Resolve a file path from a config.

    Accepts an absolute path, `package://simreal_ros/<path>` (the package share folder), or a
    relative path, tried against `relative_to` (the config file's folder), the current directory
    and the source checkout's root, in that order. Every `*_path` of a robot file (model_path,
    policy_path) is resolved this way, with the robot file's folder first.
    """
    if not path:
        raise ConfigError(f'{what} is empty')
    path = os.path.expandvars(os.path.expanduser(str(path)))
    if path.startswith(ASSET_URL):
        # asset://<asset>/<path>: a third-party asset in the user data folder (`simreal
        # assets`); a missing one is refused with the command that gets it.
        from simreal_ros.core.assets import resolve
        return resolve(path, what)
    if path.startswith(PACKAGE_URL):
        candidates = [share_dir() / path[len(PACKAGE_URL):]]
    elif os.path.isabs(path):
        candidates = [Path(path)]
    else:
        candidates = []
        if relative_to is not None:
            candidates.append(Path(relative_to) / path)
        candidates.append(Path.cwd() / path)
        if source_root() is not None:
            candidates.append(source_root() / path)
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    tried = ', '.join(dict.fromkeys(str(c) for c in candidates))   # cwd may be the checkout
    raise ConfigError(f'{what} {path!r} not found (tried: {tried})')


def params_files(argv):
    """Return the `--params-file` paths of a ROS command line, in order (later ones win)."""
    files, ros = [], False
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == '--ros-args':
            ros = True
        elif arg == '--':
            ros = False
        elif ros and arg == '--params-file' and i + 1 < len(argv):
            files.append(argv[i + 1])
    return files


def setting_file(files, node_name, key):
    """Return the last of `files` that gives node `node_name` parameter `key`, or None."""
    for path in reversed(list(files)):
        try:
            if key in load_node_params(path, node_name):
                return Path(path).resolve()
        except ConfigError:
            continue
    return None


def setting_dir(argv, node_name, key):
    """Return the folder of the `--params-file` in `argv` that gives `node_name` its `key`
    (relative paths in a robot file are relative to it first), or None."""
    found = setting_file(params_files(argv), node_name, key)
    return None if found is None else found.parent


def robot_config_path(robot):
    """Return the parameter file for a robot given by name (config/robots/<name>.yaml) or path."""
    robot = str(robot)
    if robot.endswith(('.yaml', '.yml')) or os.sep in robot:
        return resolve_path(robot, what='robot config')
    path = share_dir() / 'config' / 'robots' / (robot + '.yaml')
    if not path.is_file():
        known = sorted(p.stem for p in (share_dir() / 'config' / 'robots').glob('*.yaml'))
        raise ConfigError(f'unknown robot {robot!r}: no {path}; known robots: {", ".join(known)} '
                          '(or give the path of a parameter file)')
    return path


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f'{prefix}.{key}' if prefix else str(key), sub, out)
    else:
        out[prefix] = value


def read_yaml(path):
    """Read a YAML file, turning syntax errors into a ConfigError that names the file."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f'cannot read {path}: {exc.strerror}') from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f'{path} is not valid YAML: {exc}') from exc
    return {} if data is None else data


def load_node_params(path, node_name):
    """Return the flattened parameters that `path` gives node `node_name` ('/**' merged first)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f'{path}: expected a mapping of node names to ros__parameters')
    params = {}
    for key in ('/**', '**', node_name, '/' + node_name, '/**/' + node_name):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict) or 'ros__parameters' not in section:
            raise ConfigError(f'{path}: section {key!r} has no ros__parameters mapping')
        _flatten('', section['ros__parameters'] or {}, params)
    return params


def node_names_in(path):
    """Return the node sections a parameter file configures (without '/**')."""
    data = read_yaml(path)
    return [k.split('/')[-1] for k in data if k not in ('/**', '**')]
