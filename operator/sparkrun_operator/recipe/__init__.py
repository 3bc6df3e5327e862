"""Recipe resolution: a workload spec (+ its Recipe) -> the effective serving spec, identities, issues.

Pure (no I/O), between ``api`` and ``render``: ``resolve`` gives what the pods are rendered from,
``identity`` reproduces sparkrun's recipe revision and intent id, ``flags`` handles the
``vllm serve`` arguments, ``status`` is the Recipe planner (a Recipe spec -> its status).
"""
