"""Pydantic models of every custom resource: the only schema source.

The CRD YAML in ``crds/`` is generated from these types by ``make generate``
(``python -m sparkrun_operator.api.generate``); nothing here talks to a cluster.
"""
