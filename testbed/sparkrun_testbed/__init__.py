"""The testbed: a real Kubernetes control plane on one machine, for tests and ``make demo``.

Real binaries built from pinned upstream modules (``hack/testbed-bin.sh``): etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, the JobSet controller (webhooks on
127.0.0.1) and KWOK (fake GPU nodes; pods become Running and stay so). Every address is on
127.0.0.1 with free ports, so several testbeds run side by side. See ``docs/testbed.md``.

Modules:

- ``plane``: :class:`plane.Testbed` (start, attach, stop, status, install CRDs, add nodes);
- ``topology``: the fake nodes (:class:`topology.Topology`, :class:`topology.NodePool`);
- ``kubeapi``: a small synchronous admin client (server-side apply, get, list, delete, wait);
- ``binaries``: where the built binaries are, and building them;
- ``daemons``: process groups that another process can stop safely; ``state``: the run dir record;
- ``pki``: CAs and certificates; ``jobset``: JobSet controller config and webhook registration;
- ``ports``: free loopback ports;
- ``cli``: the ``sparkrun-k8s testbed`` command (the product's CLI loads it lazily).

This is a distribution of its own, ``sparkrun-testbed`` (``testbed/`` in the checkout), that the
product's wheel and image do not contain. The product never imports it, except the lazily loaded
``sparkrun-k8s demo`` command, and it never imports the product (import-linter contracts in the
root ``pyproject.toml``): it talks to Kubernetes with its own small client, ``kubeapi``.
"""
