"""Where a Temporal service is, as ``on=`` names it: ``temporal://HOST:PORT/NAMESPACE``, optionally with
``?task_queue=QUEUE`` (the queue the workers poll; ``dagmagic`` unless named).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict

__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_TASK_QUEUE", "TemporalAddress"]

DEFAULT_NAMESPACE = "default"
"""The namespace a Temporal dev server has, and the one used when ``on=`` names none."""
DEFAULT_TASK_QUEUE = "dagmagic"
"""The task queue dagmagic's workers poll and its workflows are sent to, unless one is named."""

_FORM = "temporal://HOST:PORT/NAMESPACE (e.g. temporal://127.0.0.1:7233/default)"


class TemporalAddress(BaseModel):
    """A Temporal service's address, its namespace, and the task queue dagmagic's workers poll there."""

    model_config = ConfigDict(frozen=True)

    target: str
    """``HOST:PORT`` of the Temporal frontend."""
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE

    @classmethod
    def parse(cls, on: str) -> TemporalAddress:
        """The address ``on`` names; ``ValueError`` saying the form when it is not one."""
        if not isinstance(on, str):
            raise TypeError(f"on= takes a Temporal address, {_FORM}; got {type(on).__name__}")
        parts = urlsplit(on.strip())
        if parts.scheme != "temporal":
            raise ValueError(f"on= takes a Temporal address, {_FORM}; got {on!r}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise ValueError(f"{on!r} names no HOST:PORT: write {_FORM}")
        unknown = sorted(set(parse_qs(parts.query)) - {"task_queue"})
        if unknown:
            raise ValueError(f"{on!r}: unknown option {', '.join(unknown)}; the address takes ?task_queue=QUEUE")
        queue = parse_qs(parts.query).get("task_queue", [DEFAULT_TASK_QUEUE])[-1]
        namespace = parts.path.strip("/") or DEFAULT_NAMESPACE
        if "/" in namespace:
            raise ValueError(f"{on!r}: the namespace is one name after HOST:PORT/, e.g. {_FORM}")
        return cls(target=f"{parts.hostname}:{port}", namespace=namespace, task_queue=queue)

    @property
    def url(self) -> str:
        """The address as ``on=`` takes it."""
        queue = "" if self.task_queue == DEFAULT_TASK_QUEUE else f"?task_queue={self.task_queue}"
        return f"temporal://{self.target}/{self.namespace}{queue}"

    def __str__(self) -> str:
        return self.url
