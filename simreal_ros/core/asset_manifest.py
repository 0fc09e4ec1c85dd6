"""The third-party assets and their files: upstream repository, pinned commit, path, sha256.

Data only, read by `core/assets.py` (`simreal assets`). Each file is one of:

- upstream verbatim (`_file`): downloaded from `<repo>/<commit>/<path>` and checked against its
  sha256, which is the upstream blob's (checked against `git show <commit>:<path>`);
- derived (`_derived`): not in the upstream repository as it is used here. `source_*` names the
  upstream file it comes from; `make` says how it is made (docs/assets.md). With a `transform`,
  `simreal assets fetch` makes it from the downloaded source and checks the result's sha256;
  without one it cannot be downloaded, and any copy given with `--from` is accepted (its sha256
  here is the tested copy's, for the report only).

To move an asset to a newer upstream commit: change the commit, recompute every sha256 from the
upstream blobs, run the tests that use the asset, and say what changed in docs/assets.md.
"""
from dataclasses import dataclass

RL_GYM = ('unitreerobotics/unitree_rl_gym', '276801e46c5d433564f24658bac64f254b7d2d4b')
MUJOCO = ('unitreerobotics/unitree_mujoco', 'c598f103acb87a5fd3de7c9037f4dab6aa7f232b')
RL_LAB = ('unitreerobotics/unitree_rl_lab', 'e72a072c4db68b79a816b3b89bf3b6a0525d113e')
LICENSES = {RL_GYM[0]: 'BSD-3-Clause', MUJOCO[0]: 'BSD-3-Clause', RL_LAB[0]: 'Apache-2.0'}

G1_DESCRIPTION = 'resources/robots/g1_description/'
G1_MUJOCO = 'unitree_robots/g1/'
RL_LAB_VELOCITY = 'deploy/robots/g1/config/policy/velocity/v0/'
SIMULATE_PYTHON = 'simulate_python/'

# The upstream sources of the derived files (sha256 of the blob at the pinned commit).
MOTION_PT_SHA256 = 'cf668f75b90d1abf73d2b87612a6e76bccc61ff7e083b63582d3f6aaa3c1759d'
DEPLOY_MUJOCO_SHA256 = '48e9f7a6b8ba701e68dfa48f2e89944c9f2aac1ec39c0a9915d6fe14ec71a4da'
G1_YAML_SHA256 = '73044e7d355c61915695c16d6e09eb3efef46eec1e3d708fd3eb9157dfe3bbbb'

POLICY_RECIPE = ('re-export deploy/pre_train/g1/motion.pt (TorchScript LSTM) to ONNX opset 17 '
                 'with its recurrent state as inputs and outputs, with torch '
                 '(docs/assets.md, "policy.onnx")')
TRACE_RECIPE = ('run unitree\'s deploy_mujoco loop headless with policy.onnx for 20 s at '
                'cmd [0.5, 0, 0], or scripts/reference_rollout.py --robot g1_12dof --steps 1000 '
                '--cmd-vel 0.5 0 0 (docs/assets.md, "reference_trace.npz")')
DEPLOY_CONFIG_RECIPE = ('deploy/deploy_mujoco/configs/g1.yaml without its comment lines and its '
                        'two path lines (made by simreal assets fetch)')


@dataclass(frozen=True)
class AssetFile:
    """One file of an asset: where it goes, where it comes from, its checksum."""

    dest: str              # path inside the asset's folder
    repo: str              # upstream repository (owner/name)
    commit: str            # pinned commit
    path: str              # path in the repository (the source, for a derived file)
    sha256: str            # of the file as it is in the asset's folder (the tested copy)
    make: str = ''         # derived: how it is made; '' for an upstream file verbatim
    source_sha256: str = ''    # derived: the upstream source's sha256
    transform: str = ''    # derived: what fetch applies to the source to make it ('' = none)

    @property
    def derived(self):
        return bool(self.make)


def _file(source, path, sha256, dest=None):
    repo, commit = source
    if dest is None:
        prefix = next((p for p in (G1_DESCRIPTION, G1_MUJOCO, RL_LAB_VELOCITY, SIMULATE_PYTHON)
                       if path.startswith(p)), '')
        dest = path[len(prefix):]
    return AssetFile(dest, repo, commit, path, sha256)


def _derived(dest, source, path, source_sha256, sha256, make, transform=''):
    repo, commit = source
    return AssetFile(dest, repo, commit, path, sha256, make, source_sha256, transform)


@dataclass(frozen=True)
class AssetSpec:
    """An asset: a folder of third-party files, what it is, and where each file comes from."""

    name: str
    title: str
    sources: tuple         # ((repo, commit, what comes from it), ...)
    files: tuple


ASSETS = (
    AssetSpec(
        'unitree_g1_12dof',
        'Unitree G1, 12 leg joints: MuJoCo model and URDF, unitree\'s pre-trained walking policy '
        '(ONNX, recurrent), its deployment parameters and a 20 s reference trace',
        ((*RL_GYM, 'model, URDF, meshes, policy (motion.pt), deploy config'),),
        (
            _file(RL_GYM, 'LICENSE',
                  sha256='aef6394ba1597725a68308167324e675f562e6606027404deb1b9da254c2b9c1'),
            _file(RL_GYM, G1_DESCRIPTION + 'g1_12dof.urdf',
                  sha256='52a0f729252cba764f610136f0772573e55694024b888da93abd5ad23aba0152'),
            _file(RL_GYM, G1_DESCRIPTION + 'g1_12dof.xml',
                  sha256='747ede40aa726b7352bae8353e95d0d0f908cec2257a27cbd78bc6e5a2d5a314'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/head_link.STL',
                  sha256='005fb67fbd3eff94aa8bf4a6e83238174e9f91b6721f7111594322f223724411'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_ankle_pitch_link.STL',
                  sha256='d49e3abc6f5b12e532062cd575b87b5ef40cd2a3fc18f54a1ca5bba4f773d51d'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_ankle_roll_link.STL',
                  sha256='c4092af943141d4d9f74232f3cfa345afc6565f46a077793b8ae0e68b39dc33f'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_elbow_link.STL',
                  sha256='fa752198accd104d5c4c3a01382e45165b944fbbc5acce085059223324e5bed3'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_hip_pitch_link.STL',
                  sha256='4725168105ee768ee31638ef22b53f6be2d7641bfd7cfefe803488d884776fa4'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_hip_roll_link.STL',
                  sha256='91f25922ee8a7c3152790051bebad17b4d9cd243569c38fe340285ff93a97acf'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_hip_yaw_link.STL',
                  sha256='a16d88aa6ddac8083aa7ad55ed317bea44b1fa003d314fba88965b7ed0f3b55b'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_knee_link.STL',
                  sha256='8d92b9e3d3a636761150bb8025e32514c4602b91c7028d523ee42b3e632de477'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_shoulder_pitch_link.STL',
                  sha256='f0d1cfd02fcf0d42f95e678eeca33da3afbcc366ffba5c052847773ec4f31d52'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_shoulder_roll_link.STL',
                  sha256='fb9df21687773522598dc384f1a2945c7519f11cbc8bd372a49170316d6eee88'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_shoulder_yaw_link.STL',
                  sha256='1aa97e9748e924336567992181f78c7cd0652fd52a4afcca3df6b2ef6f9e712e'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/left_wrist_roll_rubber_hand.STL',
                  sha256='e81030abd023bd9e4a308ef376d814a2c12d684d8a7670c335bbd5cd7809c909'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/logo_link.STL',
                  sha256='8571a0a19bc4916fa55f91449f51d5fdefd751000054865a842449429d5f155b'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/pelvis.STL',
                  sha256='5ba6bbc888e630550140d3c26763f10206da8c8bd30ed886b8ede41c61f57a31'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/pelvis_contour_link.STL',
                  sha256='5cc5c2c7a312329e3feeb2b03d3fc09fc29705bd01864f6767e51be959662420'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_ankle_pitch_link.STL',
                  sha256='15be426539ec1be70246d4d82a168806db64a41301af8b35c197a33348c787a9'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_ankle_roll_link.STL',
                  sha256='4b66222ea56653e627711b56d0a8949b4920da5df091da0ceb343f54e884e3a5'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_elbow_link.STL',
                  sha256='1be925d7aa268bb8fddf5362b9173066890c7d32092c05638608126e59d1e2ab'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_hip_pitch_link.STL',
                  sha256='e4f3c99d7f4a7d34eadbef9461fc66e3486cb5442db1ec50c86317d459f1a9c6'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_hip_roll_link.STL',
                  sha256='4c254ef66a356f492947f360dd931965477b631e3fcc841f91ccc46d945d54f6'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_hip_yaw_link.STL',
                  sha256='e479c2936ca2057e9eb2f7dff6c189b7419d7b8484dea0b298cbb36a2a6aa668'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_knee_link.STL',
                  sha256='63c4008449c9bbe701a6e2b557b7a252e90cf3a5abcf54cee46862b9a69f8ec8'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_shoulder_pitch_link.STL',
                  sha256='24cdb387e0128dfe602770a81c56cdce3a0181d34d039a11d1aaf8819b7b8c02'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_shoulder_roll_link.STL',
                  sha256='962b97c48f9ce9e8399f45dd9522e0865d19aa9fd299406b2d475a8fc4a53e81'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_shoulder_yaw_link.STL',
                  sha256='a0b76489271da0c72461a344c9ffb0f0c6e64f019ea5014c1624886c442a2fe5'),
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/right_wrist_roll_rubber_hand.STL',
                  sha256='0729aff1ac4356f9314de13a46906267642e58bc47f0d8a7f17f6590a6242ccf'),
            # unitree_rl_gym's own torso_link_23dof_rev_1_0.STL could not be had when this copy was
            # made: the tested copy is torso_link_rev_1_0.STL under that name (visual and collision
            # shape only; the body's inertia is given in the MJCF).
            _file(RL_GYM, G1_DESCRIPTION + 'meshes/torso_link_rev_1_0.STL',
                  dest='meshes/torso_link_23dof_rev_1_0.STL',
                  sha256='11ddb46f2098efbbd8816b1d65893632d8e78be936376c7cdcd6771899ccc723'),
            _derived('policy.onnx', RL_GYM, 'deploy/pre_train/g1/motion.pt',
                     source_sha256=MOTION_PT_SHA256,
                     sha256='e09b605d3f2e87089a7fe80eeff0dd770967f40d1acf2756ff3e80865e83d91e',
                     make=POLICY_RECIPE),
            _derived('reference_trace.npz', RL_GYM, 'deploy/deploy_mujoco/deploy_mujoco.py',
                     source_sha256=DEPLOY_MUJOCO_SHA256,
                     sha256='02965829f83a6ea66b9d3292b4212634c7f01159b201fa6ddb5af551d3ba2992',
                     make=TRACE_RECIPE),
            _file(RL_GYM, G1_DESCRIPTION + 'scene.xml',
                  sha256='482d49902ca2b9fdc49d84ef5d8779fa69d66bc53ef440b4bf50079d1bac9995'),
            _derived('unitree_deploy_config.yaml', RL_GYM, 'deploy/deploy_mujoco/configs/g1.yaml',
                     source_sha256=G1_YAML_SHA256,
                     sha256='385763a1626daa66c256a357138e736f5defd309575972bb733c9bbe5b1ba1ff',
                     make=DEPLOY_CONFIG_RECIPE, transform='values_only'),
        )),
    AssetSpec(
        'unitree_g1_29dof',
        'Unitree G1, 29 joints: the vendor simulator\'s MuJoCo model and unitree_rl_lab\'s Isaac '
        'Lab velocity policy (ONNX and deploy.yaml)',
        ((*MUJOCO, 'model and meshes'), (*RL_LAB, 'policy/')),
        (
            _file(MUJOCO, 'LICENSE',
                  dest='LICENSE.unitree_mujoco',
                  sha256='a5d73fc4aca9074e3e6fe0b1a0ba763cf9514b2249b7390ed20fe8d53630bf25'),
            _file(MUJOCO, G1_MUJOCO + 'g1_29dof.xml',
                  sha256='423e28bd718b19f7a65cda539b6f794ddbb268b4b9bdbd85f4bd982b30729617'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/head_link.STL',
                  sha256='d297328b3569fc85074355e76cba6c889d19de5361224bcd3c5b8ce82e13b9b6'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_ankle_pitch_link.STL',
                  sha256='d49e3abc6f5b12e532062cd575b87b5ef40cd2a3fc18f54a1ca5bba4f773d51d'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_ankle_roll_link.STL',
                  sha256='c4092af943141d4d9f74232f3cfa345afc6565f46a077793b8ae0e68b39dc33f'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_elbow_link.STL',
                  sha256='fa752198accd104d5c4c3a01382e45165b944fbbc5acce085059223324e5bed3'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_hip_pitch_link.STL',
                  sha256='4725168105ee768ee31638ef22b53f6be2d7641bfd7cfefe803488d884776fa4'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_hip_roll_link.STL',
                  sha256='91f25922ee8a7c3152790051bebad17b4d9cd243569c38fe340285ff93a97acf'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_hip_yaw_link.STL',
                  sha256='a16d88aa6ddac8083aa7ad55ed317bea44b1fa003d314fba88965b7ed0f3b55b'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_knee_link.STL',
                  sha256='8d92b9e3d3a636761150bb8025e32514c4602b91c7028d523ee42b3e632de477'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_rubber_hand.STL',
                  sha256='cff2221a690fa69303f61fce68f2d155c1517b52efb6ca9262dd56e0bc6e70fe'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_shoulder_pitch_link.STL',
                  sha256='f0d1cfd02fcf0d42f95e678eeca33da3afbcc366ffba5c052847773ec4f31d52'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_shoulder_roll_link.STL',
                  sha256='fb9df21687773522598dc384f1a2945c7519f11cbc8bd372a49170316d6eee88'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_shoulder_yaw_link.STL',
                  sha256='1aa97e9748e924336567992181f78c7cd0652fd52a4afcca3df6b2ef6f9e712e'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_wrist_pitch_link.STL',
                  sha256='b251d8e05047f695d0f536cd78c11973cfa4e78d08cfe82759336cc3471de3a9'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_wrist_roll_link.STL',
                  sha256='edc387c9a0ba8c2237e9b296d32531426fabeb6f53e58df45c76106bca74148c'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/left_wrist_yaw_link.STL',
                  sha256='83f8fb3a726bf9613d65dd14f0f447cb918c3c95b3938042a0c9c09749267d3b'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/logo_link.STL',
                  sha256='8571a0a19bc4916fa55f91449f51d5fdefd751000054865a842449429d5f155b'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/pelvis.STL',
                  sha256='5ba6bbc888e630550140d3c26763f10206da8c8bd30ed886b8ede41c61f57a31'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/pelvis_contour_link.STL',
                  sha256='5cc5c2c7a312329e3feeb2b03d3fc09fc29705bd01864f6767e51be959662420'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_ankle_pitch_link.STL',
                  sha256='15be426539ec1be70246d4d82a168806db64a41301af8b35c197a33348c787a9'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_ankle_roll_link.STL',
                  sha256='4b66222ea56653e627711b56d0a8949b4920da5df091da0ceb343f54e884e3a5'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_elbow_link.STL',
                  sha256='1be925d7aa268bb8fddf5362b9173066890c7d32092c05638608126e59d1e2ab'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_hip_pitch_link.STL',
                  sha256='e4f3c99d7f4a7d34eadbef9461fc66e3486cb5442db1ec50c86317d459f1a9c6'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_hip_roll_link.STL',
                  sha256='4c254ef66a356f492947f360dd931965477b631e3fcc841f91ccc46d945d54f6'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_hip_yaw_link.STL',
                  sha256='e479c2936ca2057e9eb2f7dff6c189b7419d7b8484dea0b298cbb36a2a6aa668'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_knee_link.STL',
                  sha256='63c4008449c9bbe701a6e2b557b7a252e90cf3a5abcf54cee46862b9a69f8ec8'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_rubber_hand.STL',
                  sha256='99533b778bca6246144fa511bb9d4e555e075c641f2a0251e04372869cd99d67'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_shoulder_pitch_link.STL',
                  sha256='24cdb387e0128dfe602770a81c56cdce3a0181d34d039a11d1aaf8819b7b8c02'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_shoulder_roll_link.STL',
                  sha256='962b97c48f9ce9e8399f45dd9522e0865d19aa9fd299406b2d475a8fc4a53e81'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_shoulder_yaw_link.STL',
                  sha256='a0b76489271da0c72461a344c9ffb0f0c6e64f019ea5014c1624886c442a2fe5'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_wrist_pitch_link.STL',
                  sha256='d22f8f3b3127f15a63e5be1ee273cd5075786c3142f1c3d9f76cbf43d2a26477'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_wrist_roll_link.STL',
                  sha256='a7ee9212ff5b94d6cb7f52bb1bbf3f352194d5b598acff74f4c77d340c5b344f'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/right_wrist_yaw_link.STL',
                  sha256='bc9dece2d12509707e0057ba2e48df8f3d56db0c79410212963a25e8a50f61a6'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/torso_link.STL',
                  sha256='e96d023f0368a4e3450b86ca5d4f10227d8141156a373e7da8cb3c93266523e0'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/waist_roll_link.STL',
                  sha256='34f0aa73f41131230be4d25876c944fdf6c24d62553f199ff8b980c15e8913df'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/waist_support_link.STL',
                  sha256='1fae9e1bb609848a1667d32eed8d6083ae443538a306843056a2a660f1b2926a'),
            _file(MUJOCO, G1_MUJOCO + 'meshes/waist_yaw_link.STL',
                  sha256='2883f20e03f09b669b5b4ce10677ee6b5191c0934b584d7cbaef2d0662856ffb'),
            _file(RL_LAB, 'LICENCE',
                  dest='policy/LICENCE.unitree_rl_lab',
                  sha256='ff28cacaef7b9919a0fb905136cf4ccffba5191522bf5d024c4339932c0edc28'),
            _file(RL_LAB, 'deploy/robots/g1/config/policy/velocity/v0/params/deploy.yaml',
                  dest='policy/deploy.yaml',
                  sha256='1d46c440c2ab141b9a9b99e2c002f65454590b21117a36c7b633ba4a361ea899'),
            _file(RL_LAB, 'deploy/robots/g1/config/policy/velocity/v0/exported/policy.onnx',
                  dest='policy/policy.onnx',
                  sha256='610c27e463a8f666aa50a06346678c00b4df3859f10b54bcc1f817c28251406f'),
            _file(MUJOCO, G1_MUJOCO + 'scene_29dof.xml',
                  sha256='e254f11acce2ec6f6efa5bf9b15e288bbd0ca29aeeabb1e1d0fea92f65436bbf'),
        )),
    AssetSpec(
        'unitree_mujoco_simulate_python',
        'unitree_mujoco\'s Python simulator bridge (simulate_python/): the vendor\'s own '
        'simulator, to rehearse the Unitree path (tools/vendor_rehearsal.py)',
        ((*MUJOCO, 'simulate_python/'),),
        (
            _file(MUJOCO, 'LICENSE',
                  sha256='a5d73fc4aca9074e3e6fe0b1a0ba763cf9514b2249b7390ed20fe8d53630bf25'),
            _file(MUJOCO, SIMULATE_PYTHON + 'config.py',
                  sha256='9d14af3937cf0a842976d8c4c8c3158d6c8cdc70c588d3c2645ac4cbf82b6027'),
            _file(MUJOCO, SIMULATE_PYTHON + 'unitree_mujoco.py',
                  sha256='d8a199899a1f076c1f8a2f8a90e1058e746b8f48c0aee15fb9238ad054898879'),
            _file(MUJOCO, SIMULATE_PYTHON + 'unitree_sdk2py_bridge.py',
                  sha256='3ddb54ddddc6a20255e9bb77760537774b2eb77ce50073bf1f4a69bfaa77b599'),
        )),
)
