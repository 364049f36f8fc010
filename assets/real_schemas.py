"""Fifty JSON Schemas from real projects, as their packages ship them on PyPI (pure data and one
lookup: no torch). Test data for structured outputs on schemas users bring (issue 40): SchemaStore's
CI/config schemas as check-jsonschema vendors them, Jupyter's notebook format, the ``pyproject.toml``
schemas of validate-pyproject and JupyterLab's settings schemas. Each wheel is only downloaded,
never installed; every schema file is pinned by sha256 like the other assets (``manifest.py``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from assets.download import ensure_members
from assets.manifest import Artifact, Member

__all__ = ["REAL_SCHEMA_WHEELS", "real_schema_files"]


CHECK_JSONSCHEMA_WHEEL = Artifact(
    key="schemas-check-jsonschema",
    registry="pypi",
    package="check-jsonschema",
    version="0.39.0",
    filename="check_jsonschema-0.39.0-py3-none-any.whl",
    sha256="14ce5c94871c551268ea948ffe21e9f1464dc48fb20bf9a4c13deeaaf756cf9b",
    size=485_805,
    members=(
        Member(
            "check_jsonschema/builtin_schemas/custom/github-workflows-require-timeout.json",
            "ed2e268daa41fcef72cb6204d2b24845e8e2c1fc17173b902d07c10d2cc0ff68",
            2_126,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/azure-pipelines.json",
            "f00a9630f6550204148634d9a13f634b5750a225559886effe09a751482f0459",
            1_640_523,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/bamboo-spec.json",
            "03808ea111ee9ccda6ac0b3895ef97af090f74670e06330d8af5bb83fce3edf8",
            34_187,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/bitbucket-pipelines.json",
            "b37319267d9922bd9f0a5142d657551ae844e136fa205068c8660622d66bcf64",
            33_271,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/buildkite.json",
            "da8e5f1e0413b975ba599d65ec6bb707065f919d6231e3c7cab0a1759e4804a2",
            50_978,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/changie.json",
            "73147ce17b4e1c5d7d50dc7ccbc13e07a941a43f6e1e1012aa132f1e07959906",
            20_516,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/circle-ci.json",
            "bcc3e60a5a1e137fc45ad2cb435953de5f525ae881c5f0fd371b82a9f20bdb7a",
            238_703,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/citation-file-format.json",
            "17bc7993c67b95eec988dadca78b65cb29cd489d1fceba71040a141dfb9791df",
            63_762,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/cloudbuild.json",
            "68524c6a0a83f91767cabe96ec92bd59924c336f114551e5254027d14dbdc1f3",
            31_283,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/codecov.json",
            "b1c166a4d737b85a58c6e20a0063f85a0e279fd0787f1aad2d7926b7e5d49c2c",
            17_986,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/compose-spec.json",
            "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64",
            91_345,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/dependabot.json",
            "f310bfb4960eea6a5fb7d75de54ab49ba36f947757c8f4d5de88d3ea8ac51d3f",
            52_540,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/drone-ci.json",
            "4c9a6b8ef2bafd49d6777bde27a749d6d174ee1f3dbbbf8f272bc77b7592db56",
            21_904,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/github-actions.json",
            "224326cc5a334bdb97b56b6fc320cd4381ba7d61b477b425ed506e6a420b52ba",
            31_255,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/github-discussion.json",
            "14cf1562338184fa10109cfb4c7855e7070ea6339e5bc3bc83bdb6e1088aca4f",
            1_699,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/github-issue-config.json",
            "899e718f4b8c965413b07ec63d8f089792a10c42409270db560b9a7ec0224a5a",
            2_361,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/github-issue-forms.json",
            "c2722dbf00334ce4fdeffa960b8c9047caf4f1cbb8f3809663f4d604b1d3ae76",
            83_802,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/github-workflows.json",
            "d10c9f4656e1bd5bc6727e9b35080e017dc167154726fca93da33c7a6bd1c4f3",
            118_601,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/gitlab-ci.json",
            "1c6eeb7d3a34c39996afbfe1ade220480eb05bbeae674e86d3c745dfeeded7fd",
            128_105,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/meltano.json",
            "cc4b01929310a69544ded81ebb4d48514e9edcb1e5dac8aa1798eec4a8381cdf",
            40_977,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/mergify.json",
            "4774c98030acea051a951c4371f7ffcb9962f1d3c590379b77c13ab728b9ead3",
            258_992,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/readthedocs.json",
            "9cbf6059a2b60f68867e650e45f74bfbde6ed1f28d4bcaebe766b5c184030e74",
            17_249,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/renovate.json",
            "8310e7b51da681b60e553c52b42eaa72ab8baf1388ccaf598aaedb6d881d8db8",
            2_272_934,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/snapcraft.json",
            "fdbb55f2fa8e4a68f264b225596c77eabeb45511c16d0e88d32153a598443069",
            201_746,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/taskfile.json",
            "7cc09d47d1f09b80613b83ac0598c736df5f0be5c009854c7c63f39a2f3928c2",
            31_264,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/travis.json",
            "27d37ed6bbc691cd410451467c733d2d0aca5612a57c3162ebc0988cea3ae46c",
            63_896,
        ),
        Member(
            "check_jsonschema/builtin_schemas/vendor/woodpecker-ci.json",
            "b448916fea06650f833a355496b33a5672213d6801ca9e3def60bf198c1a492e",
            38_991,
        ),
    ),
)

NBFORMAT_WHEEL = Artifact(
    key="schemas-nbformat",
    registry="pypi",
    package="nbformat",
    version="5.11.1",
    filename="nbformat-5.11.1-py3-none-any.whl",
    sha256="cc6698fa75f4fab8755ead786317815f13a6fee3b53311c0abb1a8b51d52f7ec",
    size=79_849,
    members=(
        Member(
            "nbformat/v3/nbformat.v3.schema.json",
            "525e86765b18c6e1b08005eb9fee01e13d6fd42b0daad4b43d153e49a833205d",
            12_198,
        ),
        Member(
            "nbformat/v4/nbformat.v4.5.schema.json",
            "523e3578ddbfcad52933d2423dc5951114ef73f48df180b6a601498ba5ca071a",
            16_104,
        ),
    ),
)

VALIDATE_PYPROJECT_WHEEL = Artifact(
    key="schemas-validate-pyproject",
    registry="pypi",
    package="validate-pyproject",
    version="0.27",
    filename="validate_pyproject-0.27-py3-none-any.whl",
    sha256="6ad8a9a80480a5a833753f4e1c1b22cb01b8a5ad0015b1e9dbd4a5f8e898aba0",
    size=55_852,
    members=(
        Member(
            "validate_pyproject/project_metadata.schema.json",
            "ad7d31e1bd2566a1a5e331eb98f467aa2047d3d418a32a0d82f0ed98c0924122",
            12_449,
        ),
        Member(
            "validate_pyproject/plugins/setuptools.schema.json",
            "069ead4f046f4b2f7afdd09de4ea8a4e27ee21c4d639de700c6442af0601ce34",
            16_047,
        ),
        Member(
            "validate_pyproject/plugins/distutils.schema.json",
            "4dca77da44678703911b0ffda7a1848b4f258f6875e6d411cce6016f31a67015",
            972,
        ),
        Member(
            "validate_pyproject/pyproject_toml.schema.json",
            "56646426ab4057bb04de663cb2c9b4f334f5b29fae086df1311cc912a5be7bd8",
            3_089,
        ),
    ),
)

JUPYTERLAB_WHEEL = Artifact(
    key="schemas-jupyterlab",
    registry="pypi",
    package="jupyterlab",
    version="4.6.6",
    filename="jupyterlab-4.6.6-py3-none-any.whl",
    sha256="4261910ccf1ecad6e0b3ca0debe96d4fde9735bfc9707509c125aab850e06b81",
    size=17_334_944,
    members=(
        Member(
            "jupyterlab/schemas/@jupyterlab/application-extension/commands.json",
            "84c22d298d41e28eb30c05da20ed5a0afa46eaaa554f53822701534f56d864d0",
            11_247,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/application-extension/context-menu.json",
            "9f2c2e0c4c1d462bc5dbfc19456d5e80175abeb0ee426f7640d76f72ef693354",
            3_529,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/application-extension/shell.json",
            "df18114b8b16317ee0efff2892503468ab5708cb81d7b9399690f3fa6ed86dc5",
            5_014,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/application-extension/top-bar.json",
            "245773c0581cd1496d1191893de35c4f5fff5dbd7f50a123f7016bccfe069308",
            2_253,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/apputils-extension/themes.json",
            "dfc36cb96b8452f32c4dbbee687f796f8f9f718145fcbe4679072dfe11a109b3",
            5_222,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/apputils-extension/sanitizer.json",
            "ccf12b985ce003de551536d434a2517b094388968c4d2b2cd4d281500af1b9e9",
            1_293,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/apputils-extension/notification.json",
            "f9f42636592f62cdd03e3d5552b020811e3f8be6fc47c03d5a92396941b8d5d8",
            1_565,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/cell-toolbar-extension/plugin.json",
            "084bc56ba60f6ce00f214aa2ebff34944edbbe7b0c09428a616861bbad464906",
            3_046,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/completer-extension/inline-completer.json",
            "19fe442991074993e3c85aa1c453c8256ce024e876e13ed5574b70cb6620f728",
            3_925,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/console-extension/tracker.json",
            "b991b0b36b85cc395d641e2b66cc1231d0d7c28a25499a5f472b31ffb745eb1e",
            7_479,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/csvviewer-extension/csv.json",
            "b270c70202d6520785c52ff242c607a2f0ac447d7d19cd7db40388afedba1bb8",
            2_346,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/debugger-extension/main.json",
            "0eb7d1f5270be01139a092b78213901e87231992d2ae392f4b1bd2a357f612e7",
            3_743,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/docmanager-extension/plugin.json",
            "6c5e35dc66f25490eea94bb4f50b4a55dc0949a8091880e6f0e8d26e5d410a02",
            4_162,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/documentsearch-extension/plugin.json",
            "ada6bfc45c48b7ee77f14912b61de40cb170a0d203b14e1d844b1360a63bb66e",
            2_615,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/filebrowser-extension/browser.json",
            "26a970e5835c94f23c1e0bb3e5512d1d6028d8ebc580cd9089f0ff27f7b9b554",
            9_531,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/fileeditor-extension/plugin.json",
            "7cbfdf4e3810072ba16ab853023409df4c3f8373d3d563439a4f239dc5a48e04",
            6_719,
        ),
        Member(
            "jupyterlab/schemas/@jupyterlab/notebook-extension/tracker.json",
            "773b8109a307c0f426e5cca4bebd9aa0210450f26b7e59dc6f316c5f3a7ba568",
            28_455,
        ),
    ),
)

REAL_SCHEMA_WHEELS: tuple[Artifact, ...] = (
    CHECK_JSONSCHEMA_WHEEL,
    NBFORMAT_WHEEL,
    VALIDATE_PYPROJECT_WHEEL,
    JUPYTERLAB_WHEEL,
)
"""The four wheels; 50 schema files in all."""


def real_schema_files(cache_dir: Path) -> dict[str, Path]:
    """``{package/file name: extracted path}`` of the 50 schemas (downloaded and verified once)."""
    out: dict[str, Path] = {}
    for artifact in REAL_SCHEMA_WHEELS:
        for path, file in ensure_members(artifact, cache_dir).items():
            out[f"{artifact.package}/{_label(path)}"] = file
    return out


def _label(path: str) -> str:
    """``.../notebook-extension/tracker.json`` -> ``notebook-extension/tracker``; else the file's stem."""
    file = PurePosixPath(path)
    stem = file.name.removesuffix(".json").removesuffix(".schema")
    return f"{file.parent.name}/{stem}" if file.parent.name.endswith("-extension") else stem
