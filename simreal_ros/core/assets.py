"""Third-party assets: fetched from upstream at a pinned commit, checked, kept in the user data
folder, and named by robot files as `asset://<asset>/<path>`.

    simreal assets list                          # each asset: upstream, license, here or missing
    simreal assets fetch [NAME ...]              # download from upstream, check each sha256
    simreal assets fetch [NAME ...] --from DIR   # offline: copy from DIR (checked the same way)
    simreal assets where NAME                    # the folder (exit 1 and the command if missing)

The folder: `$SIMREAL_ASSETS_DIR` if set, else `$XDG_DATA_HOME/simreal_ros/assets` (default
~/.local/share/simreal_ros/assets), one folder per asset. The files, their upstream repository,
commit, path and sha256 are `core/asset_manifest.py`. Each file is written to a temporary name
and renamed only once its sha256 is right, so a failed or interrupted fetch leaves no half file;
files already there with the right sha256 are kept (a second fetch downloads nothing).

As robot_descriptions pins each description's repository to a commit and clones it into a cache
folder on first use, this pins each file to a commit and a sha256, downloads only the files the
robot files use (not the repositories: unitree_rl_gym's tree is over 100 MB), with no git and no
new dependency (urllib), and never on its own: a robot file naming a missing asset is refused
with the command to run (docs/assets.md).
"""
import hashlib
import os
from pathlib import Path
import urllib.error
import urllib.parse
import urllib.request

from simreal_ros.core.asset_manifest import ASSETS, LICENSES
from simreal_ros.core.config import ASSET_URL, ConfigError
from simreal_ros.core.files import atomic_path, user_data_dir

DIR_ENV = 'SIMREAL_ASSETS_DIR'
# The server that serves `<repo>/<commit>/<path>`; tests point it at a local server.
URL_ENV = 'SIMREAL_ASSETS_URL'
UPSTREAM_URL = 'https://raw.githubusercontent.com'
TIMEOUT_S = 60.0
MAX_BYTES = 64 << 20        # no asset file is near this; a wrong server is stopped by it
CHUNK = 1 << 16
BY_NAME = {a.name: a for a in ASSETS}


class AssetError(ConfigError):
    """An asset missing, incomplete, or a file whose sha256 is not the pinned one."""


def assets_dir():
    """Return the folder holding one folder per asset (see the module doc)."""
    given = os.environ.get(DIR_ENV)
    if given:
        return Path(os.path.expanduser(given))
    return Path(user_data_dir()) / 'assets'


def spec(name):
    """Return the manifest entry of asset `name`; an AssetError names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise AssetError(f'unknown asset {name!r}; known assets: {", ".join(BY_NAME)} '
                         '(simreal assets list)') from None


def folder(name):
    """Return where asset `name` is (or would be) on this machine."""
    return assets_dir() / spec(name).name


def fetch_command(name):
    return f'simreal assets fetch {name}'


def missing_files(name):
    """Return the manifest files of asset `name` that are not in its folder."""
    root = folder(name)
    return [f for f in spec(name).files if not (root / f.dest).is_file()]


def state(name):
    """Return (word, detail): 'complete', 'incomplete' (detail: what is missing) or 'missing'."""
    root = folder(name)
    if not root.is_dir():
        return 'missing', ''
    absent = missing_files(name)
    if not absent:
        return 'complete', ''
    if len(absent) == len(spec(name).files):
        return 'missing', ''
    shown = ', '.join(f.dest + (' (derived)' if f.derived else '') for f in absent[:4])
    more = f' and {len(absent) - 4} more' if len(absent) > 4 else ''
    return 'incomplete', f'{len(absent)} of {len(spec(name).files)} files missing: {shown}{more}'


def unavailable(name):
    """Return why asset `name` cannot be used here, with what to do, or '' when it is complete
    (benches and tests skip with this)."""
    word, detail = state(name)
    if word == 'complete':
        return ''
    root = folder(name)
    if word == 'missing':
        return (f'asset {name} is not on this machine (looked in {root}): get it with '
                f'`{fetch_command(name)}` (offline: --from DIR; docs/assets.md)')
    absent = missing_files(name)
    if all(f.derived for f in absent):
        return (f'asset {name} in {root}: {detail}; make them: '
                + '; '.join(f'{f.dest}: {f.make}' for f in absent))
    return f'asset {name} in {root}: {detail}; get it with `{fetch_command(name)}`'


def split_url(url):
    """Split `asset://<asset>/<path>` into (asset, path); an AssetError for a malformed one."""
    rest = str(url)[len(ASSET_URL):]
    name, _, path = rest.partition('/')
    if not name or not path or '..' in Path(path).parts or path.startswith('/'):
        raise AssetError(f'{url!r} is not an asset path: write asset://<asset>/<path in it> '
                         f'(assets: {", ".join(BY_NAME)})')
    return name, path


def resolve(url, what='path'):
    """Return the file `asset://<asset>/<path>` names on this machine.

    Refused (AssetError, naming the parameter, the asset, where it looked and the command that
    gets it) when the asset is not here, when a file of it that is not derived is missing
    (an interrupted fetch), or when the file is not in it.
    """
    try:
        name, path = split_url(url)
        asset = spec(name)
    except AssetError as exc:
        raise AssetError(f'{what}: {exc}') from None
    root = folder(name)
    get = (f'get it with `{fetch_command(name)}` (or, offline, `{fetch_command(name)} --from '
           'DIR` with DIR a copy of it; docs/assets.md)')
    if not root.is_dir():
        raise AssetError(f'{what} {url!r}: asset {name} is not on this machine (looked in '
                         f'{root}); {get}')
    absent = [f for f in missing_files(name) if not f.derived]
    if absent:
        raise AssetError(f'{what} {url!r}: asset {name} in {root} is incomplete ('
                         f'{len(absent)} files missing, first {absent[0].dest}); {get}')
    target = root / path
    if not target.is_file():
        entry = next((f for f in asset.files if f.dest == path), None)
        if entry is not None and entry.derived:
            raise AssetError(f'{what} {url!r}: {path} of asset {name} is not in {root}: it is '
                             f'derived, not downloadable; make it: {entry.make}')
        raise AssetError(f'{what} {url!r}: asset {name} (in {root}) has no file {path}')
    return target.resolve()


def url_for(path):
    """Return `asset://<asset>/<path>` for a file inside an asset's folder, else None."""
    try:
        rel = Path(path).resolve().relative_to(assets_dir().resolve())
    except ValueError:
        return None
    if len(rel.parts) < 2 or rel.parts[0] not in BY_NAME:
        return None
    return ASSET_URL + '/'.join(rel.parts)


# -- checksums, downloads, copies ------------------------------------------------------------
def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(CHUNK), b''):
            digest.update(block)
    return digest.hexdigest()


def _values_only(data):
    """deploy_mujoco's config without its comment lines and its two path lines (which name
    files of legged_gym's checkout), ending in a newline."""
    keep = [line for line in data.decode().splitlines()
            if not line.startswith('#') and not line.startswith(('policy_path:', 'xml_path:'))]
    return ('\n'.join(keep) + '\n').encode()


TRANSFORMS = {'values_only': _values_only}


def _mismatch(what, entry, got, expected=None):
    return AssetError(f'{what}: sha256 {got} is not the pinned {expected or entry.sha256} '
                      f'({entry.repo}@{entry.commit[:12]}:{entry.path}); nothing written')


def _stream(read, tmp, limit=MAX_BYTES):
    """Copy chunks from `read` into file `tmp`; return their sha256."""
    digest, total = hashlib.sha256(), 0
    with open(tmp, 'wb') as out:
        for block in iter(lambda: read(CHUNK), b''):
            total += len(block)
            if total > limit:
                raise AssetError(f'more than {limit} bytes: not an asset file')
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def base_url():
    return os.environ.get(URL_ENV, '').rstrip('/') or UPSTREAM_URL


def download_url(entry, base=None):
    path = urllib.parse.quote(entry.path)
    return f'{base or base_url()}/{entry.repo}/{entry.commit}/{path}'


def _open(url):
    try:
        return urllib.request.urlopen(url, timeout=TIMEOUT_S)   # noqa: S310 - https or a test's
    except urllib.error.HTTPError as exc:
        raise AssetError(f'{url}: HTTP {exc.code} {exc.reason}') from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, 'reason', exc)
        raise AssetError(f'{url}: cannot download ({reason}); offline, copy the asset from a '
                         'machine that has it: simreal assets fetch NAME --from DIR') from None


def _download(entry, dest, label):
    """Download one file into `dest` (atomically, only when its sha256 is right); return what
    was done."""
    url = download_url(entry)
    if entry.transform:
        with _open(url) as response:
            data = response.read(MAX_BYTES + 1)
        got = hashlib.sha256(data).hexdigest()
        if got != entry.source_sha256:
            raise _mismatch(f'{label}: source {url}', entry, got, entry.source_sha256)
        data = TRANSFORMS[entry.transform](data)
        got = hashlib.sha256(data).hexdigest()
        if got != entry.sha256:
            raise _mismatch(f'{label}: made from {url}', entry, got)
        with atomic_path(dest) as tmp:
            Path(tmp).write_bytes(data)
        return f'made from {entry.path} (source and result sha256 ok)'
    with _open(url) as response, atomic_path(dest) as tmp:
        try:
            got = _stream(response.read, tmp)
        except AssetError as exc:
            raise AssetError(f'{label}: {url}: {exc}') from None
        if got != entry.sha256:
            raise _mismatch(f'{label}: {url}', entry, got)
    return 'downloaded (sha256 ok)'


def _copy(entry, src, dest, label):
    """Copy one file from `src` into `dest` (atomically; checked as the manifest says)."""
    if not src.is_file():
        raise AssetError(f'{label}: not in {src.parent} (looked for {src})')
    loose = entry.derived and not entry.transform      # present is enough
    got = sha256_file(src)
    if got != entry.sha256 and not loose:
        raise AssetError(f'{label}: {src} has sha256 {got}, not the pinned {entry.sha256} '
                         f'({entry.repo}@{entry.commit[:12]}:{entry.path}); nothing written')
    if loose:
        same = 'the tested copy' if got == entry.sha256 else \
            f'not the tested copy {entry.sha256[:12]}..., accepted'
        how = f'derived: present is enough; sha256 {got[:12]}..., {same}'
    else:
        how = 'derived; sha256 ok' if entry.derived else 'sha256 ok'
    if dest.is_file() and sha256_file(dest) == got:
        return f'kept ({how})'
    with atomic_path(dest) as tmp:
        with open(src, 'rb') as f:
            if _stream(f.read, tmp, limit=float('inf')) != got:
                raise AssetError(f'{label}: {src} changed while it was copied; nothing written')
    return f'copied ({how})'


def source_folder(name, from_dir):
    """Return the folder of asset `name` in `from_dir` (DIR/robots/<name>, DIR/vendor/<name>
    or DIR/<name>, the layout beside this repository), or raise naming the folders tried."""
    base = Path(os.path.expanduser(str(from_dir)))
    tried = [base / 'robots' / name, base / 'vendor' / name, base / name]
    for candidate in tried:
        if candidate.is_dir():
            return candidate
    raise AssetError(f'--from {from_dir}: no folder for asset {name} (tried '
                     + ', '.join(str(t) for t in tried) + ')')


def fetch(names=None, from_dir=None, log=print):
    """Fetch assets `names` (default: all) from upstream, or copy them from `from_dir`.

    Each file is reported through `log`, one line each. A file already here with the pinned
    sha256 is kept. A derived file without a transform is not downloadable (nor required in
    `from_dir`): when absent it is reported with how to make it, and returned in the list of
    files still to make. An AssetError stops at the
    first failing file (named, with both checksums on a mismatch); the files before it stay,
    each complete and checked.
    """
    todo = []
    for name in names or list(BY_NAME):
        asset = spec(name)
        root = folder(name)
        src_root = source_folder(name, from_dir) if from_dir else None
        log(f'{name}: ' + (f'from {src_root}' if src_root else
                           ', '.join(f'{r}@{c[:12]}' for r, c, _ in asset.sources))
            + f' -> {root}')
        for entry in asset.files:
            label = f'{name}/{entry.dest}'
            dest = root / entry.dest
            loose = entry.derived and not entry.transform
            if src_root is not None and not (loose and not (src_root / entry.dest).is_file()):
                log(f'  {entry.dest}: {_copy(entry, src_root / entry.dest, dest, label)}')
                continue
            if dest.is_file():
                got = sha256_file(dest)
                if got == entry.sha256:
                    log(f'  {entry.dest}: kept (sha256 ok)')
                    continue
                if loose:
                    log(f'  {entry.dest}: kept (derived: present is enough)')
                    continue
                log(f'  {entry.dest}: has sha256 {got}, not the pinned one: fetched again')
            if loose:
                where = f'not in {src_root}' if src_root else 'not downloadable'
                log(f'  {entry.dest}: NOT MADE: derived from {entry.repo}:{entry.path}, {where}; '
                    f'make it: {entry.make}')
                todo.append((name, entry))
                continue
            log(f'  {entry.dest}: {_download(entry, dest, label)}')
    return todo


def describe(name):
    """Return the lines `simreal assets list` prints for asset `name`."""
    asset = spec(name)
    word, detail = state(name)
    lines = [f'{name}: {asset.title}']
    for repo, commit, what in asset.sources:
        lines.append(f'  upstream: {repo}@{commit} ({LICENSES[repo]}): {what}')
    derived = [f.dest for f in asset.files if f.derived]
    if derived:
        lines.append(f'  derived:  {", ".join(derived)} (not upstream verbatim; docs/assets.md)')
    root = folder(name)
    if word == 'complete':
        lines.append(f'  here:     {root} ({len(asset.files)} files)')
    elif word == 'incomplete':
        lines.append(f'  here:     {root}: INCOMPLETE, {detail}')
    else:
        lines.append(f'  here:     missing (would be {root})')
    lines.append(f'  get it:   {fetch_command(name)}   (offline: {fetch_command(name)} '
                 '--from DIR)')
    return lines
