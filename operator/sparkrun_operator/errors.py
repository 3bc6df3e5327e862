"""The root of every error the product's server packages raise on purpose.

One tree (drawn in ``docs/architecture.md``, "Errors"): each layer subclasses
:class:`SparkrunError` once and names its classes after what failed, so a class name means
one thing everywhere (``tests/unit/test_one_error_tree.py`` fails on a second definition):

- ``k8s.errors.KubeError``: a Kubernetes API call failed (``KubeNotFound``, ``KubeConflict``...);
- ``ops.errors.DaemonError``: the daemon API's HTTP vocabulary (``NotFound`` 404, ``Conflict``
  409...), which ``ops.runner.as_daemon_error`` maps every other error onto, by class;
- ``gateway.errors.GatewayError`` and the gateway's upstream errors: the inference gateway's
  answers in each API family's shape;
- the controllers' and engines' own (an engine answer refused, a cancelled request).

The public Python client (``sparkrun_operator.client``) keeps its own ``DaemonError`` and
``JobFailed``: it is a library for callers, raised from HTTP answers, not part of this tree.

Pure: imports nothing of the project (it sits below every layer).
"""

from __future__ import annotations

__all__ = ["SparkrunError"]


class SparkrunError(Exception):
    """An error the product raises on purpose (anything else is a bug, reported as internal)."""
