"""``AnsweringWidget``: a widget whose front end asks the kernel things, each request answered once by its id.

The wire is anywidget's command protocol (what ``anywidget.experimental.command`` and the front end's ``invoke``
speak)::

    {"kind": "anywidget-command", "id": "v1-3", "name": "approve", "msg": {"plan": null}}
    {"kind": "anywidget-command-response", "id": "v1-3", "response": {"ok": true, "value": null}}
    {"kind": "anywidget-command-response", "id": "v1-4", "response": {"ok": false, "error": "no plan of ..."}}

Every request with an id gets exactly one answer, a refusal included, so it reaches only the part of the view
that asked. Requests are dispatched here rather than through ``anywidget.experimental.command``, whose
dispatcher answers nothing when a command raises or its name is unknown (ipywidgets then prints the traceback
into the notebook) and names each command after a method (``continue`` is a keyword).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import anywidget
from IPython.core.error import UsageError

from dagmagic.errors import DagError

__all__ = ["FRONT_END", "AnsweringWidget", "Reply"]

_REQUEST = "anywidget-command"
_ANSWER = "anywidget-command-response"
FRONT_END = "dagmagic-front-end"
"""What the front end says when it makes a widget's model: a front end that draws widgets holds it."""
_REFUSALS = (DagError, UsageError, ValueError, TypeError, KeyError)
"""What a request is refused with: its message is meant for the user as it is (the magics' resume and start
over raise ``UsageError``; a lookup that finds nothing, ``KeyError``)."""
log = logging.getLogger("dagmagic")

Reply = dict[str, Any] | None
"""What a request's answer carries back besides ``ok`` (its ``value``): JSON, or nothing."""


class AnsweringWidget(anywidget.AnyWidget):
    """An anywidget whose front end's requests are answered by the functions of ``handlers``, by name."""

    handlers: ClassVar[Mapping[str, Callable[[Any, dict[str, Any]], Reply]]] = {}
    """Request name → what it does, given the widget and the request's ``msg``; what it returns is the answer."""
    front_end_seen: ClassVar[bool] = False
    """A front end made a dagmagic widget in this kernel (it draws widgets, even if it never asks for their
    state)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.front_end = False
        """A front end made this widget's model (it will draw its views)."""
        self.on_msg(self._on_message)

    def _on_message(self, _: Any, content: Any, buffers: Any) -> None:
        """A request of the front end, answered with its id (see the module's docstring)."""
        if isinstance(content, dict) and content.get("kind") == FRONT_END:
            self.front_end = AnsweringWidget.front_end_seen = True
            return
        if not isinstance(content, dict) or content.get("kind") != _REQUEST:
            return
        request_id = content.get("id")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return  # nobody could tell the answer was theirs
        response = self._respond(str(content.get("name")), content.get("msg"))
        self.send({"id": request_id, "kind": _ANSWER, "response": response})

    def _respond(self, name: str, msg: Any) -> dict[str, Any]:
        """What the front end's request ``name`` (with ``msg``) does, and its answer: ``{"ok": True, "value":
        ...}``, or ``{"ok": False, "error": message}``. Never raises: the user's click gets an answer, not a
        traceback in the notebook.
        """
        handler = self.handlers.get(name)
        if handler is None:
            return {"ok": False, "error": f"this view asked for {name!r}, which this kernel's dagmagic does not know"}
        try:
            value = handler(self, msg if isinstance(msg, dict) else {})
        except _REFUSALS as exc:
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            return {"ok": False, "error": str(text) or type(exc).__name__}
        except Exception as exc:  # a bug, or a failure of the run store: the view says which, the log has the rest
            log.debug("[dagmagic] the view's %r request failed", name, exc_info=True)
            return {"ok": False, "error": f"{name.replace('_', ' ')} failed: {type(exc).__name__}: {exc}"}
        return {"ok": True, "value": value}
