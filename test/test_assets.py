"""Third-party assets (`simreal assets`, core/assets.py, docs/assets.md): fetched from upstream
at pinned commits with checksums, copied offline with --from, named by robot files as asset://.

The download path runs against a real HTTP server on 127.0.0.1 serving a folder laid out as
raw.githubusercontent.com is (`<repo>/<commit>/<path>`), filled from the copies beside the
repository: the far side is the only stand-in. The rest is the real CLI in a subprocess.
"""
from functools import partial
import hashlib
import http.server
import os
from pathlib import Path
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from conftest import REPO, SHARED
from simreal_ros.core import asset_manifest, assets
from simreal_ros.core.config import ConfigError, resolve_path
from simreal_ros.core.files import is_temporary

VENDOR = 'unitree_mujoco_simulate_python'


def shared_copy(name):
    """The copy of asset `name` beside the repository; the test is skipped without it."""
    try:
        return assets.source_folder(name, SHARED)
    except assets.AssetError:
        pytest.skip(f'{SHARED} is not beside the repository: no copy of {name} to serve')


def run(*args, env, cwd=REPO):
    """`simreal ARGS` as a user runs it; return (exit code, stdout, stderr)."""
    out = subprocess.run([sys.executable, '-m', 'simreal_ros.client.cli', *args], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


class Upstream:
    """A folder served over HTTP on 127.0.0.1 as `<repo>/<commit>/<path>`, GETs counted."""

    def __init__(self, root):
        self.root = Path(root)
        self.gets = []
        upstream = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                upstream.gets.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(
            ('127.0.0.1', 0), partial(Handler, directory=str(self.root)))
        self.url = f'http://127.0.0.1:{self.server.server_address[1]}'
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def put(self, entry, data):
        path = self.root / entry.repo / entry.commit / entry.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def serve_asset(self, name):
        """Serve every upstream-verbatim file of asset `name` from its copy beside the repo."""
        src = shared_copy(name)
        for entry in assets.spec(name).files:
            if not entry.derived:
                self.put(entry, (src / entry.dest).read_bytes())

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream(tmp_path):
    server = Upstream(tmp_path / 'raw')
    yield server
    server.close()


@pytest.fixture
def env(tmp_path, upstream, monkeypatch):
    """An empty assets folder and the test server as upstream, for this process and the CLI."""
    monkeypatch.setenv(assets.DIR_ENV, str(tmp_path / 'assets'))
    monkeypatch.setenv(assets.URL_ENV, upstream.url)
    return dict(os.environ)


def leftovers(folder):
    return [p for p in Path(folder).rglob('*') if is_temporary(p.name)]


# -- the manifest ---------------------------------------------------------------------------
def test_the_manifest_pins_every_file_to_a_commit_and_a_sha256():
    hexdigits = set('0123456789abcdef')
    for spec in asset_manifest.ASSETS:
        dests = [f.dest for f in spec.files]
        assert len(dests) == len(set(dests)), spec.name
        for f in spec.files:
            assert len(f.commit) == 40 and set(f.commit) <= hexdigits, (spec.name, f)
            assert len(f.sha256) == 64 and set(f.sha256) <= hexdigits, (spec.name, f)
            assert f.repo in asset_manifest.LICENSES, (spec.name, f)
            assert not f.dest.startswith('/') and '..' not in f.dest.split('/')
            if f.derived:
                assert len(f.source_sha256) == 64 and f.make, (spec.name, f)
            if f.transform:
                assert f.transform in assets.TRANSFORMS
    assert [s.name for s in asset_manifest.ASSETS] == [
        'unitree_g1_12dof', 'unitree_g1_29dof', VENDOR]
    derived = {(s.name, f.dest) for s in asset_manifest.ASSETS for f in s.files if f.derived}
    assert derived == {('unitree_g1_12dof', 'policy.onnx'),
                       ('unitree_g1_12dof', 'reference_trace.npz'),
                       ('unitree_g1_12dof', 'unitree_deploy_config.yaml')}


def test_the_session_copy_of_every_asset_is_complete():
    """conftest copied ../shared with --from, checking each file against the manifest."""
    shared_copy(VENDOR)
    for name in assets.BY_NAME:
        assert assets.state(name) == ('complete', ''), name
        assert assets.unavailable(name) == ''


# -- fetch from upstream ----------------------------------------------------------------------
def test_fetch_downloads_checks_and_keeps_each_file(env, upstream, tmp_path):
    upstream.serve_asset(VENDOR)
    upstream.serve_asset('unitree_g1_29dof')
    code, out, err = run('assets', 'fetch', VENDOR, 'unitree_g1_29dof', env=env)
    assert code == 0, out + err
    spec = assets.spec(VENDOR)
    for entry in spec.files:
        assert f'  {entry.dest}: downloaded (sha256 ok)' in out, out
        got = (tmp_path / 'assets' / VENDOR / entry.dest).read_bytes()
        assert got == (shared_copy(VENDOR) / entry.dest).read_bytes()
    n = len(spec.files) + len(assets.spec('unitree_g1_29dof').files)
    assert len(upstream.gets) == n
    assert upstream.gets[0] == ('/unitreerobotics/unitree_mujoco/'
                                'c598f103acb87a5fd3de7c9037f4dab6aa7f232b/LICENSE')
    code, out, err = run('assets', 'where', VENDOR, env=env)
    assert (code, out.strip()) == (0, str(tmp_path / 'assets' / VENDOR)), err
    # A second fetch checks what is there and downloads nothing.
    code, out, err = run('assets', 'fetch', VENDOR, env=env)
    assert code == 0 and out.count('kept (sha256 ok)') == len(spec.files), out + err
    assert len(upstream.gets) == n
    assert leftovers(tmp_path / 'assets') == []


def test_a_checksum_mismatch_is_named_and_leaves_no_file(env, upstream, tmp_path):
    upstream.serve_asset(VENDOR)
    entry = next(f for f in assets.spec(VENDOR).files if f.dest == 'config.py')
    bad = (shared_copy(VENDOR) / 'config.py').read_bytes() + b'\n# changed upstream\n'
    upstream.put(entry, bad)
    code, out, err = run('assets', 'fetch', VENDOR, env=env)
    assert code == 1, out + err
    assert f'{VENDOR}/config.py' in err, err
    assert hashlib.sha256(bad).hexdigest() in err and entry.sha256 in err, err
    assert 'nothing written' in err
    folder = tmp_path / 'assets' / VENDOR
    assert not (folder / 'config.py').exists()
    assert leftovers(folder) == [], leftovers(folder)
    assert (folder / 'LICENSE').is_file()           # the file before it: complete and checked
    # where says it is incomplete and how to get it
    code, out, err = run('assets', 'where', VENDOR, env=env)
    assert code == 1 and 'incomplete' in err.lower() and f'simreal assets fetch {VENDOR}' in err


def test_an_unreachable_upstream_names_the_url_and_the_offline_way(env, tmp_path):
    with socket.socket() as s:                   # a port with no server behind it
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    env[assets.URL_ENV] = f'http://127.0.0.1:{port}'
    code, out, err = run('assets', 'fetch', VENDOR, env=env)
    assert code == 1, out + err
    assert f'http://127.0.0.1:{port}/unitreerobotics/unitree_mujoco/' in err, err
    assert '--from DIR' in err
    assert not (tmp_path / 'assets' / VENDOR / 'LICENSE').exists()


def test_derived_files_are_made_by_their_transform_or_said_how_to_make(env, upstream, tmp_path,
                                                                       monkeypatch):
    """A derived file with a transform is made from its checked upstream source and checked
    again; one without is not downloadable: fetch names it and says how to make it."""
    source = b'# comment\npolicy_path: "x.pt"\nxml_path: "y.xml"\nkp: [1, 2]\nkd: [3, 4]'
    made = b'kp: [1, 2]\nkd: [3, 4]\n'
    sha = lambda data: hashlib.sha256(data).hexdigest()   # noqa: E731
    repo = ('unitreerobotics/unitree_rl_gym', 'ab' * 20)
    spec = asset_manifest.AssetSpec('test_asset', 'a test asset', ((*repo, 'all'),), (
        asset_manifest._file(repo, 'robot/model.xml', sha(b'<mujoco/>')),
        asset_manifest._derived('config.yaml', repo, 'deploy/g1.yaml', sha(source), sha(made),
                                'strip it', transform='values_only'),
        asset_manifest._derived('policy.onnx', repo, 'deploy/motion.pt', sha(b'pt'),
                                sha(b'onnx'), 'export it with torch (docs/assets.md)'),
    ))
    monkeypatch.setitem(assets.BY_NAME, 'test_asset', spec)
    upstream.put(spec.files[0], b'<mujoco/>')
    upstream.put(spec.files[1], source)
    lines = []
    todo = assets.fetch(['test_asset'], log=lines.append)
    folder = tmp_path / 'assets' / 'test_asset'
    assert (folder / 'config.yaml').read_bytes() == made
    assert '  config.yaml: made from deploy/g1.yaml (source and result sha256 ok)' in lines
    assert [e.dest for _, e in todo] == ['policy.onnx']
    assert any(line.startswith('  policy.onnx: NOT MADE: derived') and 'torch' in line
               for line in lines), lines
    assert not (folder / 'policy.onnx').exists()
    assert len(upstream.gets) == 2                # nothing asked for the derived file
    # The robot file's view: the model resolves, the derived file says how to make it.
    assert resolve_path('asset://test_asset/robot/model.xml') == folder / 'robot' / 'model.xml'
    with pytest.raises(ConfigError, match='policy.onnx of asset test_asset .* derived, not '
                       'downloadable; make it: export it with torch'):
        resolve_path('asset://test_asset/policy.onnx', what='policy_runner.policy_path')
    # A changed source is refused before anything is made.
    (folder / 'config.yaml').unlink()
    upstream.put(spec.files[1], source + b'\n')
    with pytest.raises(assets.AssetError, match=f'source .*{sha(source + chr(10).encode())}'):
        assets.fetch(['test_asset'], log=lambda line: None)
    assert not (folder / 'config.yaml').exists() and leftovers(folder) == []


# -- fetch --from a local copy ----------------------------------------------------------------
def test_from_copies_a_local_folder_checked_the_same_way(env, tmp_path):
    src = shared_copy('unitree_g1_12dof')
    code, out, err = run('assets', 'fetch', 'unitree_g1_12dof', '--from', str(SHARED), env=env)
    assert code == 0, out + err
    assert f'unitree_g1_12dof: from {src}' in out
    assert '  scene.xml: copied (sha256 ok)' in out
    assert '  unitree_deploy_config.yaml: copied (derived; sha256 ok)' in out
    assert '  policy.onnx: copied (derived: present is enough; sha256 ' in out
    for name in ('policy.onnx', 'reference_trace.npz', 'meshes/pelvis.STL'):
        assert (tmp_path / 'assets' / 'unitree_g1_12dof' / name).read_bytes() == \
            (src / name).read_bytes()
    code, out, err = run('assets', 'list', env=env)
    assert code == 0 and f'here:     {tmp_path / "assets" / "unitree_g1_12dof"} (34 files)' \
        in out, out
    assert f'here:     missing (would be {tmp_path / "assets" / VENDOR})' in out
    # A copy without a derived file (fetched online, policy not exported yet): the rest is
    # copied and the file is named, with how to make it.
    mine = tmp_path / 'mine' / 'unitree_g1_12dof'
    shutil.copytree(src, mine)
    (mine / 'policy.onnx').unlink()
    env[assets.DIR_ENV] = str(tmp_path / 'other')
    code, out, err = run('assets', 'fetch', 'unitree_g1_12dof', '--from', str(mine.parent),
                         env=env)
    assert code == 0, out + err
    assert f'  policy.onnx: NOT MADE: derived from unitreerobotics/unitree_rl_gym:deploy/' \
        f'pre_train/g1/motion.pt, not in {mine}; make it: re-export' in out, out
    assert 'simreal assets fetch: unitree_g1_12dof/policy.onnx still to make' in out
    assert (tmp_path / 'other' / 'unitree_g1_12dof' / 'scene.xml').is_file()
    code, out, err = run('assets', 'where', 'unitree_g1_12dof', env=env)
    assert code == 0 and 'policy.onnx (derived)' in err, out + err


def test_from_refuses_a_changed_copy_and_a_folder_without_the_asset(env, tmp_path):
    mine = tmp_path / 'mine' / 'vendor' / VENDOR
    shutil.copytree(shared_copy(VENDOR), mine)
    bridge = mine / 'unitree_sdk2py_bridge.py'
    bridge.write_text(bridge.read_text().replace('kp', 'Kp', 1))
    code, out, err = run('assets', 'fetch', VENDOR, '--from', str(tmp_path / 'mine'), env=env)
    assert code == 1, out + err
    pinned = next(f.sha256 for f in assets.spec(VENDOR).files
                  if f.dest == 'unitree_sdk2py_bridge.py')
    assert f'{VENDOR}/unitree_sdk2py_bridge.py: {bridge} has sha256 ' \
           f'{assets.sha256_file(bridge)}, not the pinned {pinned}' in err, err
    folder = tmp_path / 'assets' / VENDOR
    assert not (folder / 'unitree_sdk2py_bridge.py').exists() and leftovers(folder) == []
    code, out, err = run('assets', 'fetch', 'unitree_g1_29dof', '--from', str(tmp_path / 'mine'),
                         env=env)
    assert code == 1 and 'no folder for asset unitree_g1_29dof' in err, err
    assert str(tmp_path / 'mine' / 'robots' / 'unitree_g1_29dof') in err


# -- where, list, and a robot file naming a missing asset ------------------------------------
def test_where_and_list_say_what_is_missing_and_how_to_get_it(env, tmp_path):
    code, out, err = run('assets', 'where', 'unitree_g1_29dof', env=env)
    assert code == 1 and out == '', out
    assert 'unitree_g1_29dof is not on this machine' in err
    assert str(tmp_path / 'assets' / 'unitree_g1_29dof') in err
    assert 'simreal assets fetch unitree_g1_29dof' in err
    code, out, err = run('assets', 'list', env=env)
    assert code == 0, err
    assert 'unitreerobotics/unitree_rl_lab@e72a072c4db68b79a816b3b89bf3b6a0525d113e ' \
        '(Apache-2.0)' in out
    assert 'unitreerobotics/unitree_rl_gym@276801e46c5d433564f24658bac64f254b7d2d4b ' \
        '(BSD-3-Clause)' in out
    assert out.count('here:     missing') == 3 and out.count('get it:   simreal assets fetch') == 3
    code, out, err = run('--help', env=env)
    assert 'assets' in out


def test_a_robot_file_naming_a_missing_asset_is_refused_with_the_command(env, tmp_path):
    with pytest.raises(ConfigError) as exc:
        resolve_path('asset://unitree_g1_12dof/scene.xml', what='sim_robot parameter model_path')
    text = str(exc.value)
    for part in ('sim_robot parameter model_path', 'asset unitree_g1_12dof',
                 str(tmp_path / 'assets' / 'unitree_g1_12dof'),
                 '`simreal assets fetch unitree_g1_12dof`', '--from DIR'):
        assert part in text, text
    code, out, err = run('check', str(REPO / 'config' / 'robots' / 'g1_12dof.yaml'),
                         '--no-nodes', env=env)
    assert code != 0 and 'simreal assets fetch unitree_g1_12dof' in out + err, out + err
    for bad, why in (('asset://unitree_g1_12dof', 'not an asset path'),
                     ('asset://unitree_g1_12dof/../../etc/passwd', 'not an asset path'),
                     ('asset://unitree_g2/scene.xml', 'unknown asset .unitree_g2.; known '
                                                      'assets: unitree_g1_12dof')):
        with pytest.raises(ConfigError, match=f'^sim_robot.model_path: .*{why}'):
            resolve_path(bad, what='sim_robot.model_path')


def test_an_incomplete_asset_is_refused_naming_the_first_missing_file(env, tmp_path):
    folder = tmp_path / 'assets' / VENDOR
    shutil.copytree(shared_copy(VENDOR), folder)
    (folder / 'config.py').unlink()
    with pytest.raises(ConfigError, match=r'asset unitree_mujoco_simulate_python in .* is '
                       r'incomplete \(1 files missing, first config.py\).*simreal assets fetch'):
        resolve_path(f'asset://{VENDOR}/unitree_sdk2py_bridge.py', what='--vendor')
    assert assets.unavailable(VENDOR).startswith(f'asset {VENDOR} in {folder}: 1 of 4 files '
                                                 'missing: config.py')


def test_a_robot_file_with_assets_resolves_from_anywhere(tmp_path):
    """The G1 robot file copied elsewhere and checked from a third folder: its asset:// paths
    do not depend on the checkout or the working directory."""
    shared_copy('unitree_g1_12dof')
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    robot = tmp_path / 'a' / 'my_g1.yaml'
    shutil.copy(REPO / 'config' / 'robots' / 'g1_12dof.yaml', robot)
    assert 'model_path: asset://unitree_g1_12dof/scene.xml' in robot.read_text()
    code, out, err = run('check', str(robot), '--no-nodes', env=dict(os.environ),
                         cwd=tmp_path / 'b')
    assert code == 0, out + err
    from simreal_ros.deploy.graph import missing_files
    assert missing_files(robot) == []
    assert resolve_path('asset://unitree_g1_12dof/policy.onnx') == \
        assets.folder('unitree_g1_12dof') / 'policy.onnx'


def test_the_import_names_an_asset_file_as_asset(tmp_path):
    """An export or model given by its place in the assets folder is written as asset://, so
    the robot file works on any machine that has the asset."""
    folder = assets.folder('unitree_g1_29dof')
    shared_copy('unitree_g1_29dof')
    from simreal_ros.tools.importer import import_export
    imp = import_export(folder / 'policy' / 'deploy.yaml', str(folder / 'scene_29dof.xml'),
                        out=tmp_path / 'g1.yaml')
    assert imp.sections['sim_robot']['model_path'] == 'asset://unitree_g1_29dof/scene_29dof.xml'
    assert imp.sections['policy_runner']['policy_path'] == \
        'asset://unitree_g1_29dof/policy/policy.onnx'
    assert assets.url_for(tmp_path / 'g1.yaml') is None
