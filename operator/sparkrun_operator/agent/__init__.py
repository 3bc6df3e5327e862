"""The GPU telemetry agent (``sparkrun-k8s agent``, ADR 0058): one pod per GPU node samples NVML
and the host, serves ``/v1/sample`` (:class:`~sparkrun_operator.api.telemetry.NodeSample`) and
``/metrics`` (DCGM-exporter names), and labels its node in GPU feature discovery's convention where
GFD does not run.

- :mod:`.nvml`: the GPUs, through the NVML binding (``pynvml``, or a fake with its interface)
- :mod:`.host`: the host's CPU, memory and network from ``/proc``
- :mod:`.metrics`: a sample as Prometheus text
- :mod:`.labels`: the node labels and their publisher
- :mod:`.server`: the HTTP endpoints
- :mod:`.run`: the sampling loop and the process
"""
