"""The on-disk record of one testbed, so another process can inspect or stop it.

A testbed owns one run directory (default ``<repo>/.run/testbed/<name>``)::

    state.json         this record (written atomically)
    kubeconfig         admin kubeconfig (token auth, CA embedded)
    pki/               keys and certificates
    logs/<component>.log
    etcd-data/         removed by ``down``
    config/            component configuration files

``phase`` moves starting -> running -> stopped (or failed).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun_testbed.daemons import Daemon

STATE_FILE = "state.json"


@dataclass
class State:
    """Everything needed to reach and stop a testbed."""

    name: str
    run_dir: Path
    bin_dir: Path
    server: str
    ports: dict[str, int]
    topology: dict[str, Any]
    owner_pid: int
    started_at: float
    phase: str = "starting"
    ready_seconds: float | None = None
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    def daemon(self, name: str) -> Daemon | None:
        return next((d for d in self.daemons if d.name == name), None)

    def save(self) -> None:
        data = {
            "name": self.name,
            "run_dir": str(self.run_dir),
            "bin_dir": str(self.bin_dir),
            "server": self.server,
            "ports": self.ports,
            "topology": self.topology,
            "owner_pid": self.owner_pid,
            "started_at": self.started_at,
            "phase": self.phase,
            "ready_seconds": self.ready_seconds,
            "daemons": [d.to_dict() for d in self.daemons],
        }
        tmp = self.run_dir / f".{STATE_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.run_dir / STATE_FILE)

    @classmethod
    def load(cls, run_dir: Path) -> State | None:
        """The saved state, or None if ``run_dir`` holds none."""
        try:
            data = json.loads((run_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        return cls(
            name=data["name"],
            run_dir=Path(data["run_dir"]),
            bin_dir=Path(data["bin_dir"]),
            server=data["server"],
            ports={k: int(v) for k, v in data["ports"].items()},
            topology=data["topology"],
            owner_pid=int(data["owner_pid"]),
            started_at=float(data["started_at"]),
            phase=data["phase"],
            ready_seconds=data.get("ready_seconds"),
            daemons=[Daemon.from_dict(d) for d in data["daemons"]],
        )
