"""Connecting to Temporal: the ``temporalio`` SDK is an optional extra, and a server that cannot be reached is the
user's to start; both say so in a sentence rather than a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagmagic.errors import ConfigurationError, DagError
from dagmagic.temporal.address import TemporalAddress

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["connect", "require_sdk"]

_INSTALL = 'Temporal needs the temporalio SDK: pip install "dagmagic[temporal]"'


def require_sdk() -> None:
    """``ConfigurationError`` naming the extra when ``temporalio`` is not installed."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise ConfigurationError(_INSTALL) from None


async def connect(address: TemporalAddress) -> Client:
    """A client of the Temporal service at ``address`` (its namespace), sending dagmagic's pydantic payloads."""
    require_sdk()
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    try:
        return await Client.connect(address.target, namespace=address.namespace, data_converter=pydantic_data_converter)
    except RuntimeError as exc:
        raise DagError(
            f"cannot reach Temporal at {address.target} (namespace {address.namespace!r}): {exc}. Start a server "
            "(`temporal server start-dev`, or your team's) and check the address on= names."
        ) from None
