"""Which local command a container of a process-node pod runs: the testbed's "image store".

There are no images on a process node. Each container's image is looked up in an ordered list of
:class:`ImageRule` s (the user's first, then :data:`DEFAULT_RULES`); the first rule whose pattern
matches the image's repository supplies what the image would: its ``ENTRYPOINT``, ``CMD`` and
``ENV``. The command line is then assembled as a container runtime would (``command`` replaces
the entrypoint and drops ``CMD``; ``args`` replace ``CMD``) and translated:

- ``vllm serve ...`` and ``python -m vllm.entrypoints.openai.api_server ...`` become the engine
  stand-in, ``<this interpreter> -m sparkrun_testbed.engine serve ...``;
- the Gateway API Inference Extension's endpoint picker image (:data:`PICKER_IMAGE`, any
  registry prefix and tag) runs the picker binary that ``hack/epp-bin.sh`` built
  (:mod:`.epp`), when it is there: :func:`load_rules` adds that rule;
- anything else runs as is, with a ``PATH`` whose first entry holds shims: ``vllm`` (the engine
  stand-in, so ``sh -c "... exec vllm serve ..."`` works), ``python``/``python3`` (this
  interpreter, which can import the project) and ``nc`` (``nc -z HOST PORT`` for init containers
  that wait for a port); then this interpreter's ``bin`` directory (the project's entrypoints,
  such as ``sparkrun-k8s``); then the host's usual directories (``sh``, ``sleep``, ...).

An image no rule matches is refused with :data:`IMAGE_NOT_MAPPED`; the container then stays
Waiting with that reason rather than pretending to run. An executable that is not on ``PATH``
is refused with :data:`START_ERROR`, which a kubelet reports as a terminated container with exit
code 128. Rules come from code or from a YAML file (:func:`load_rules`)::

    images:
    - image: "registry.example.com/tools/*"   # fnmatch pattern on the repository, tag dropped
      entrypoint: ["my-tool"]                  # the image's ENTRYPOINT (optional)
      cmd: ["--help"]                          # the image's CMD (optional)
      env: {MY_TOOL_HOME: /tmp}                # the image's ENV (optional)

Everything here is pure except :func:`write_shims` (writes files) and :func:`load_rules` (reads
the file and locates the picker binary).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import epp
from .binaries import BinariesMissing

IMAGE_NOT_MAPPED = "ImageNotMapped"
START_ERROR = "StartError"
CREATE_ERROR = "CreateContainerError"
ENGINE_MODULE = "sparkrun_testbed.engine"
IMAGES_FILE_ENV = "SPARKRUN_TESTBED_PROCESS_IMAGES"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_VLLM_API_SERVER = "vllm.entrypoints.openai.api_server"
#: The endpoint picker's repository, with any registry (or mirror) in front of it.
PICKER_IMAGE = "*" + epp.IMAGE.removeprefix("registry.k8s.io")


@dataclass(frozen=True)
class ImageRule:
    """What an image provides; ``image`` is an fnmatch pattern over its repository."""

    image: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def matches(self, image: str) -> bool:
        return fnmatch.fnmatchcase(repository(image), self.image)


_PYTHON_ENV = {"PYTHONUNBUFFERED": "1"}

DEFAULT_RULES: tuple[ImageRule, ...] = (
    # vLLM's server image: ENTRYPOINT ["vllm", "serve"] since v0.9 (older tags used the
    # api_server module, which the translation below covers too).
    ImageRule("vllm/vllm-openai", entrypoint=("vllm", "serve"), env=_PYTHON_ENV),
    ImageRule("*/vllm/vllm-openai", entrypoint=("vllm", "serve"), env=_PYTHON_ENV),
    ImageRule("*/vllm-openai", entrypoint=("vllm", "serve"), env=_PYTHON_ENV),
    # The tools image: ModelCache download Jobs give the command (python -m
    # sparkrun_operator.runtime.download ...); its CMD runs the downloader's help, as the image.
    ImageRule(
        "*/sparkrun-tools",
        entrypoint=(),
        cmd=("python", "-m", "sparkrun_operator.runtime.download"),
        env=_PYTHON_ENV,
    ),
    # The project's own images (operator, gateway, shim, runtime).
    ImageRule("sparkrun*", entrypoint=("sparkrun-k8s",), env=_PYTHON_ENV),
    ImageRule("*/sparkrun*", entrypoint=("sparkrun-k8s",), env=_PYTHON_ENV),
    # General-purpose images that init containers and tests use for shell one-liners.
    *(
        ImageRule(pattern, cmd=("sh",))
        for base in ("busybox", "alpine", "debian", "ubuntu", "bash", "curlimages/curl")
        for pattern in (base, f"*/{base}")
    ),
    ImageRule("python", cmd=("python3",), env=_PYTHON_ENV),
    ImageRule("*/python", cmd=("python3",), env=_PYTHON_ENV),
)


@dataclass(frozen=True)
class Launch:
    """A command that can be started: absolute executable first, and the image's env."""

    argv: tuple[str, ...]
    image_env: Mapping[str, str]
    rule: ImageRule


@dataclass(frozen=True)
class Refusal:
    """Why a container cannot start. ``terminated``: report it as exited (128), else Waiting."""

    reason: str
    message: str
    terminated: bool = False


def repository(image: str) -> str:
    """The image reference without tag, digest and the implicit ``docker.io[/library]/``."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)
    if ":" in last[-1]:
        ref = ref[: ref.rindex(":")]
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


def find_rule(image: str, rules: Sequence[ImageRule]) -> ImageRule | None:
    return next((rule for rule in rules if rule.matches(image)), None)


def resolve(
    container: Mapping[str, Any],
    rules: Sequence[ImageRule],
    *,
    path: str,
) -> Launch | Refusal:
    """The local command for ``container`` (a pod spec container), or why there is none.

    ``path`` is the ``PATH`` the process will get; executables are looked up in it. Nothing
    is started.
    """
    image = str(container.get("image") or "")
    rule = find_rule(image, rules)
    if rule is None:
        hint = f"add a rule to ${IMAGES_FILE_ENV} or run the pod on a KWOK node"
        if fnmatch.fnmatchcase(repository(image), PICKER_IMAGE):
            hint = f"build the endpoint picker with hack/epp-bin.sh or set ${epp.BIN_ENV}"
        return Refusal(
            IMAGE_NOT_MAPPED,
            f"image {image!r} is not mapped to a local command on this process node ({hint})",
        )
    command = [str(a) for a in container.get("command") or ()]
    args = [str(a) for a in container.get("args") or ()]
    # As a container runtime does: `command` replaces ENTRYPOINT and drops CMD; `args` replace CMD.
    argv = command + args if command else list(rule.entrypoint) + (args or list(rule.cmd))
    if not argv:
        return Refusal(CREATE_ERROR, f"no command specified: image {image!r} has no entrypoint or cmd")
    argv = translate(argv)
    exe = argv[0]
    found = exe if "/" in exe else shutil.which(exe, path=path)
    if found is None or not os.access(found, os.X_OK):
        return Refusal(
            START_ERROR,
            f'exec: "{exe}": executable file not found in $PATH ({path})',
            terminated=True,
        )
    return Launch(argv=(found, *argv[1:]), image_env=dict(rule.env), rule=rule)


def translate(argv: Sequence[str]) -> list[str]:
    """``vllm serve ...`` (and vLLM's old api_server module) -> the engine stand-in."""
    argv = list(argv)
    if len(argv) >= 2 and os.path.basename(argv[0]) == "vllm" and argv[1] == "serve":
        return [sys.executable, "-m", ENGINE_MODULE, "serve", *argv[2:]]
    if (
        len(argv) >= 3
        and os.path.basename(argv[0]).startswith("python")
        and argv[1] == "-m"
        and argv[2] == _VLLM_API_SERVER
    ):
        return [sys.executable, "-m", ENGINE_MODULE, "serve", *argv[3:]]
    return argv


def pod_path(shim_dir: Path) -> str:
    """``PATH`` for pod processes: shims, this interpreter's bin directory, the system's."""
    return os.pathsep.join([str(shim_dir), str(Path(sys.executable).parent), SYSTEM_PATH])


def write_shims(shim_dir: Path) -> None:
    """Write the ``vllm``, ``python``, ``python3`` and ``nc`` shims into ``shim_dir``."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    scripts = {
        "vllm": f'#!/bin/sh\nexec "{py}" -m {ENGINE_MODULE} "$@"\n',
        "python": f'#!/bin/sh\nexec "{py}" "$@"\n',
        "python3": f'#!/bin/sh\nexec "{py}" "$@"\n',
        "nc": f'#!/bin/sh\nexec "{py}" -m sparkrun_testbed.process_nc "$@"\n',
    }
    for name, text in scripts.items():
        target = shim_dir / name
        target.write_text(text)
        target.chmod(0o755)


def picker_rule(binary: Path | None) -> ImageRule | None:
    """The endpoint picker image -> ``binary`` (None: not built, so the image stays unmapped).

    The image's ``ENTRYPOINT`` is the picker and it has no ``CMD``; a pod gives the flags.
    """
    if binary is None or not os.access(binary, os.X_OK):
        return None
    return ImageRule(PICKER_IMAGE, entrypoint=(str(binary),))


def _located_picker() -> Path | None:
    try:
        return epp.locate()
    except BinariesMissing:
        return None


def load_rules(path: Path | None = None, *, picker: Path | None = None) -> tuple[ImageRule, ...]:
    """User rules from ``path`` (default ``$SPARKRUN_TESTBED_PROCESS_IMAGES``), the endpoint
    picker's (``picker``, default :func:`.epp.locate`) when built, then the defaults.

    Raises ``ValueError`` naming the file for a malformed rule.
    """
    if path is None:
        env = os.environ.get(IMAGES_FILE_ENV)
        path = Path(env) if env else None
    user = parse_rules(yaml.safe_load(path.read_text()) or {}, source=str(path)) if path else ()
    rule = picker_rule(picker or _located_picker())
    return (*user, *((rule,) if rule else ()), *DEFAULT_RULES)


def parse_rules(data: Mapping[str, Any], *, source: str = "rules") -> tuple[ImageRule, ...]:
    """Rules from the ``images:`` list of a parsed YAML document (see the module docs)."""
    rules = []
    for i, item in enumerate(data.get("images") or ()):
        where = f"{source}: images[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("image"), str):
            raise ValueError(f"{where}: needs an `image` pattern")
        unknown = set(item) - {"image", "entrypoint", "cmd", "env"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        env = item.get("env") or {}
        if not isinstance(env, dict):
            raise ValueError(f"{where}: env must be a mapping")
        rules.append(
            ImageRule(
                image=item["image"],
                entrypoint=tuple(str(a) for a in item.get("entrypoint") or ()),
                cmd=tuple(str(a) for a in item.get("cmd") or ()),
                env={str(k): str(v) for k, v in env.items()},
            )
        )
    return tuple(rules)
