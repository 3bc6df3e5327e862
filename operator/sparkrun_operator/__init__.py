"""sparkrun-operator: run vLLM inference on Kubernetes GPU clusters.

Layers (enforced by import-linter, see ``pyproject.toml``)::

    api  <-  render / plan  <-  k8s  <-  ops  <-  controllers / shim / gateway  <-  cli

``api`` holds the pydantic types that are the only schema source; ``render`` and ``plan`` are
pure; ``k8s`` is the only code that talks to the Kubernetes API.
"""

__version__ = "0.1.0"
