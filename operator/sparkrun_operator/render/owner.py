"""The owner reference of a controller's children (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sparkrun_operator.api.meta import API_VERSION


@dataclass(frozen=True, kw_only=True)
class Owner:
    """One of our objects its children are owned by (``kind`` set by each subclass)."""

    kind: ClassVar[str]
    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """The controller owner reference: the children go with the owner."""
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
