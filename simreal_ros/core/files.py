"""Files written so that a reader never sees half of one, paths kept inside a folder, and the
user data folder (stand-in policies, third-party assets).

`atomic_path` yields a temporary name beside the final one (hidden, `.tmp` suffix, so folder
scans for `*.mcap` or `*.yaml` never pick it up); when the block ends without an exception the
file is fsync'ed and renamed into place, and the folder fsync'ed. A failed write leaves the
previous file (if any) untouched and no temporary behind.
"""
from contextlib import contextmanager
import os
from pathlib import Path


def user_data_dir():
    """Return $XDG_DATA_HOME/simreal_ros (default ~/.local/share/simreal_ros)."""
    base = os.environ.get('XDG_DATA_HOME') or os.path.join(os.path.expanduser('~'), '.local',
                                                           'share')
    return os.path.join(base, 'simreal_ros')


def temporary_name(path):
    """Return the temporary name `atomic_path` writes `path` under."""
    path = Path(path)
    return path.with_name(f'.{path.name}.{os.getpid()}.tmp')


def is_temporary(name):
    """Say whether a file name is a temporary of `atomic_path` (an incomplete file)."""
    name = os.path.basename(str(name))
    return name.startswith('.') and name.endswith('.tmp')


def _fsync_dir(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path):
    """Yield a temporary path to write; move it to `path` durably when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        with open(tmp, 'rb+') as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path, text):
    """Write text atomically and durably."""
    with atomic_path(path) as tmp:
        with open(tmp, 'w') as f:
            f.write(text)


def inside(folder, path):
    """Return `path` resolved (relative paths against `folder`) if it lies inside `folder`.

    Raise ValueError naming both otherwise (a file parameter must not reach elsewhere).
    """
    root = Path(os.path.expanduser(str(folder))).resolve()
    p = Path(os.path.expanduser(str(path)))
    p = (p if p.is_absolute() else root / p).resolve()
    if p != root and root not in p.parents:
        raise ValueError(f'{path} is outside {root}; give a file inside it (or a name '
                         'relative to it)')
    return p
