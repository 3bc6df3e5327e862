"""A local Hugging Face-compatible Hub for tests, benchmarks and the demo.

Serves generated repositories (:class:`Repo`) over HTTP/1.1 on loopback with the routes the real
``huggingface_hub`` client uses (revision info, tree, refs, HEAD/GET ``/resolve/`` with Range),
its error headers (``X-Error-Code``), gated and private repos, and fault knobs (drop, corrupt,
slow, status, ignore Range) settable from Python or ``/_admin/faults``. Never emits Xet headers.

    with Hub(default_repos(), tokens=[TOKEN]) as hub:
        snapshot_download(TINY, endpoint=hub.url, ...)

CLI: ``python -m sparkrun_testbed.hfhub --port 0 --print-url``.
"""

from sparkrun_testbed.hfhub.faults import Fault, PathStats
from sparkrun_testbed.hfhub.fixtures import (
    BENCH,
    BIG,
    BRANCH,
    DATASET,
    GATED,
    PRIVATE,
    TAG,
    TINY,
    TOKEN,
    TOKENIZER,
    default_repos,
)
from sparkrun_testbed.hfhub.hub import Hub
from sparkrun_testbed.hfhub.repo import Repo, RepoFile, generated, git_blob_sha1

__all__ = [
    "BENCH",
    "BIG",
    "BRANCH",
    "DATASET",
    "GATED",
    "PRIVATE",
    "TAG",
    "TINY",
    "TOKEN",
    "TOKENIZER",
    "Fault",
    "Hub",
    "PathStats",
    "Repo",
    "RepoFile",
    "default_repos",
    "generated",
    "git_blob_sha1",
]
