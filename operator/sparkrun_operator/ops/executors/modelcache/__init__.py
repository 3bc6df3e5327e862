"""``model_cache.*``: the ten daemon operations over ModelCaches and their volumes (ADR 0023).

``cache_dir`` names a claim and a directory in it (:mod:`.location`); what is on the volume is
read and changed by short tool Jobs (:mod:`.tooljob`, ``render/cachetool.py``) running the cache
tool and the downloader; tracking (pins, claims, last use) is the ModelCaches stored there
(:mod:`.inventory`). Retention verbs are in :mod:`.retention`, file verbs in :mod:`.files`.
"""

from __future__ import annotations

from sparkrun_operator.ops.executors.modelcache import files, retention
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor

EXECUTORS: dict[str, Executor] = {**retention.EXECUTORS, **files.EXECUTORS}
CHECKS: dict[str, ArgumentCheck] = {**retention.CHECKS, **files.CHECKS}
