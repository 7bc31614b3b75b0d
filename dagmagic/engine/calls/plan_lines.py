"""The plan as the planner writes it: one numbered line a step.

::

    1. search(query="Scott Derrickson")
    2. search(query="Ed Wood")
    3. Say whether $1 and $2 give the same nationality [fast]

A line that is a call (``name(key=value, ...)``, or positional values in the tool's parameter order) is a *tool
step*: its tool runs without a model. Any other line is a task for an agent, followed by optional hints in
brackets: the tool it should use, a role (``fast``, ``reasoning``, a custom one), ``subplan``. ``$N`` is step
N's result and makes step N a dependency, so dependencies are never written twice; in brackets (``[$1, $2]``)
it is a dependency the text does not mention. ``$r1.s2`` is a completed step of an earlier round.
``domain: legal`` (medical, financial) on a line of its own says the goal's domain. A line labelled with a word
instead of a number (``fetch. ...``) is the step of that id. Lines that are not steps (prose, code fences,
LLMCompiler's ``join()`` and ``<END_OF_PLAN>``) are skipped.

Why lines rather than a JSON object per step: on LLMCompiler's five shapes, counted in cl100k_base, the JSON plan
(ids, a task restating the arguments, dependencies the ``$sN`` already imply, keys and punctuation) wrote 3.4-3.9x
the tokens of LLMCompiler's own plan and needed a 480-token schema in the prompt; a step of this format costs what
LLMCompiler's does, and each is complete, so it can start, at its newline.

The reader returns steps as the plan's JSON form has them (``id``, ``task``, ``dependencies``, ``tool_hint``,
``model_hint``, ``tool_args``), so recovery, validation and repair are the same for both forms; a reply with no
step line is read as JSON (``plan_drafts.recover_plan``), as models that ignore the format write it.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from dagmagic.models import split_round_reference

__all__ = ["LineReader", "read_plan_lines", "render_plan_lines"]

_STEP = re.compile(r"^\s*(?:[-*]\s+)?(?:step\s+)?(?:(\d+)[.):]|([A-Za-z_][\w-]*)[.)])\s+(.+?)\s*$", re.IGNORECASE)
_CALL = re.compile(r"^`?([A-Za-z_][\w.-]*)\((.*)\)`?$", re.DOTALL)
_EMBEDDED = re.compile(r"[`\"“]([A-Za-z_][\w.-]*\([^`\"“”]*\))[`\"”]|:\s*([A-Za-z_][\w.-]*\(.*\))\s*$")
"""A call inside a task in words: in backticks or double quotes, or after a colon at the line's end."""
_HINTS = re.compile(r"\s*\[([^\[\]]*)\]\s*$")
_NOTE = re.compile(r"\s+(?:#|-|–|—)\s+(.+)$")
_ANNOTATED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*:\s*")
"""``city: Paris``: an argument written as the tool list writes its parameters (small models copy it)."""
_DOMAIN = re.compile(r"^\s*\**domain\**\s*[:=]\s*\**\s*([A-Za-z]+)", re.IGNORECASE)
_REFERENCE = re.compile(r"\$(r\d+\.\w+|\w+)(?![\w.,]*\d)")
_CONTEXT_ECHO = re.compile(r"^\$?r\d+\.\w+\s*\((?:completed|failed|skipped|pending|running|cancelled)\)", re.I)
"""A line of the replan context written back (``$r1.s2 (completed): ...``): what happened, not a step."""
_RESULT_STATED = re.compile(
    r"^(?:the\s+)?(?:final\s+)?(?:result|answer|output)\s*(?:is|was|will be|=|:)\s"
    r"|^the\s[^$]{0,80}?\s(?:is|are|was|were)\s+(?:about\s+|approximately\s+|around\s+)?\d[\d,.]*\b[^$]*$",
    re.I,
)
"""A line that states a result ("The result is 3,000,000.", "The population of X is 300,000."): the 1.5B invents
one as a step; no step."""
_NOT_STEPS = frozenset({"join", "finish", "end_of_plan"})
_CONSTANTS = {"true": True, "false": False, "null": None, "none": None}
ECHO_CHARS = 24
"""A line this long found word for word in the instructions repeats them (shorter ones may be tasks)."""


class LineReader:
    """Reads plan lines one at a time, as they stream in: each complete line is a step (or the domain)."""

    def __init__(
        self,
        parameters: Mapping[str, Sequence[str]] | None = None,
        earlier: Collection[str] = (),
        roles: Collection[str] = ("fast", "reasoning", "general"),
        prompt: str = "",
        computing: Collection[str] = (),
    ) -> None:
        """``parameters``: each tool's parameter names in order (for positional arguments, and to tell a tool
        hint from a role); ``earlier``: earlier rounds' reusable results (``r1.s2``); ``roles``: the hints that
        name a model; ``prompt``: the instructions the plan was asked with (a line that only repeats them is
        no step).
        """
        self.parameters = dict(parameters or {})
        self.roles = set(roles)
        self.prompt = " ".join(prompt.split()).lower()
        self.prompt_lines = {" ".join(line.split()).lower() for line in prompt.splitlines() if line.strip()}
        self.echoes = 0
        """Lines that only repeated the instructions (a small model writes its prompt back as a plan)."""
        self.computing = set(computing)
        """The computing tools: one given nothing but another tool's call (``calculate(population(X))``) is that
        call."""
        self.earlier = set(earlier)
        self.ids: list[str] = []
        self.calls: dict[str, str] = {}
        """Each tool step's call (``_call_key``) -> its id: the same call written inside a later call is its result."""
        self.domain: str | None = None

    def read(self, line: str) -> dict[str, Any] | None:
        """The step ``line`` writes, as the JSON form has it; None for a line that is no step."""
        match = _STEP.match(line)
        domain = _DOMAIN.match(match.group(3) if match is not None else line)
        if domain is not None:
            self.domain = self.domain or domain.group(1).lower()
            return None
        if match is None:
            return None
        label = f"s{match.group(1)}" if match.group(1) else match.group(2)
        body = match.group(3).strip()
        if label.lower() in {"note", "domain", "goal", "plan", "result", "answer", "thought"}:
            return None
        if self._echoes(body) or _CONTEXT_ECHO.match(body) or _RESULT_STATED.match(body):
            self.echoes += 1
            return None
        note = _NOTE.search(body)
        if note is not None and _CALL.match(_HINTS.sub("", body[: note.start()]).strip()):
            body = body[: note.start()]
        else:
            note = None
        hints: list[str] = []
        bracket = _HINTS.search(body)
        if bracket is not None:
            hints = [hint.strip() for hint in bracket.group(1).split(",") if hint.strip()]
            body = body[: bracket.start()].rstrip()
        step = (
            self._call(label, body) or self._embedded_call(label, body) or {"id": label, "task": self._references(body)}
        )
        dependencies = [self._id(hint[1:]) for hint in hints if hint.startswith("$")]
        for hint in (hint for hint in hints if not hint.startswith("$")):
            # a tool, else a role: a word that names neither is a made-up role, which the validation names
            is_tool = hint in self.parameters or hint == "subplan"
            step.setdefault("tool_hint" if is_tool and "tool_hint" not in step else "model_hint", hint)
        if note is not None and step.get("tool_args") is not None:
            step["task"] = note.group(1).strip()
        written = step.get("tool_args") if step.get("tool_args") is not None else step["task"]
        mentioned = [ref for ref in _mentioned(written) if ref in self.ids or split_round_reference(ref) is not None]
        step["dependencies"] = list(dict.fromkeys([*dependencies, *mentioned]))
        if step["task"].strip().lower() in _NOT_STEPS or not step["task"].strip():
            return None
        self.ids.append(label)
        if step.get("tool_args") is not None:
            self.calls.setdefault(_call_key(step["tool_hint"], step["tool_args"]), label)
        return step

    def _embedded_call(self, label: str, body: str) -> dict[str, Any] | None:
        """A task in words that holds one call of a tool of this session (``Get Dorvania's population:
        `population(Dorvania)` ``, or the call after a colon at its end) is that call, the words its description.
        """
        found = [
            m for m in _EMBEDDED.finditer(body) if self._tool(_called(m.group(1) or m.group(2))) in self.parameters
        ]
        if len(found) != 1:
            return None
        match = found[0]
        step = self._call(label, match.group(1) or match.group(2))
        if step is None:
            return None
        words = re.sub(r"[\s:.,;]+$", "", body[: match.start()] + body[match.end() :]).strip()
        step["task"] = self._references(words) or step["task"]
        return step

    def _echoes(self, body: str) -> bool:
        """Whether ``body`` only repeats the instructions: a line of them, a sentence of them (long enough not to
        be a short task that happens to be in them: "block" is in "blocking()"), or a heading.
        """
        said = " ".join(body.split()).lower()
        if not self.prompt:
            return False
        return said.endswith(":") or said in self.prompt_lines or (len(said) >= ECHO_CHARS and said in self.prompt)

    def _call(self, label: str, body: str) -> dict[str, Any] | None:
        """A tool step, or None when ``body`` is not a call (a task in words)."""
        match = _CALL.match(body)
        if match is None:
            return None
        name, text = self._tool(match.group(1)), match.group(2)
        if name.lower() in _NOT_STEPS:
            return {"id": label, "task": name.lower()}
        wrapped = self._wrapped(name, text)
        if wrapped is not None:
            return self._call(label, wrapped)
        try:
            arguments = self._arguments(name, text)
        except (SyntaxError, ValueError):
            return None  # not Python-like arguments: the line is a task in words that ends in brackets
        return {"id": label, "task": self._references(body.strip("`")), "tool_hint": name, "tool_args": arguments}

    def _tool(self, written: str) -> str:
        """The tool a call names, its case as written or not (the 1.5B wrote ``Calculate(...)``)."""
        if written in self.parameters:
            return written
        named = [name for name in self.parameters if name.lower() == written.lower()]
        return named[0] if len(named) == 1 else written

    def _wrapped(self, name: str, text: str) -> str | None:
        """The call a computing tool is given as its only argument, with nothing to compute (the 1.5B wrote
        ``calculate(population('Dorvania'))`` for a lookup); None otherwise.
        """
        if name not in self.computing:
            return None
        try:
            call = ast.parse(f"f({text})", mode="eval").body
        except SyntaxError:
            return None
        if not isinstance(call, ast.Call):
            return None
        given = [*call.args, *(keyword.value for keyword in call.keywords)]
        if len(given) != 1 or not isinstance(inner := given[0], ast.Call) or not isinstance(inner.func, ast.Name):
            return None
        inner_name = self._tool(inner.func.id)
        if inner_name not in self.parameters or inner_name == name:
            return None
        return f"{inner_name}({ast.unparse(inner).split('(', 1)[1]}"

    def _arguments(self, name: str, text: str) -> dict[str, Any]:
        references: dict[str, str] = {}

        def named(match: re.Match[str]) -> str:
            placeholder = f"_ref_{len(references)}"
            references[placeholder] = f"${self._id(match.group(1))}"
            return placeholder

        # outside a string ``$x`` can only be a reference (the validation names one to no step); inside one, only
        # a step written before is ("$5" in a query is money)
        def written(part: str, quoted: str | None) -> str:
            if quoted is None:
                part = _ANNOTATED.sub(r"\1=", part)
            return _REFERENCE.sub(lambda m: named(m) if quoted is None or self._known(m.group(1)) else m.group(0), part)

        source = "".join(written(part, quoted) for part, quoted in _string_parts(text))
        call = ast.parse(f"f({source})", mode="eval").body
        if not isinstance(call, ast.Call):
            raise ValueError("not a call")
        names = list(self.parameters.get(name, ()))
        arguments: dict[str, Any] = {}
        for position, node in enumerate(call.args):
            key = names[position] if position < len(names) else f"arg{position + 1}"
            arguments[key] = self._argument(node, references)
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError("** is not an argument")
            arguments[keyword.arg] = self._argument(keyword.value, references)
        return arguments

    def _argument(self, node: ast.expr, references: dict[str, str]) -> Any:
        """An argument's value: a literal, a reference, or an expression written unquoted (``calculate($1 > $2)``),
        which is its text; a call of a tool inside it that an earlier step makes is that step's result
        (``calculate(population(Dorvania) > population(Kelmar))`` after those two calls).
        """
        node = _Inliner(self, references).visit(node)
        try:
            return _value(node, references)
        except ValueError:
            if not _is_expression(node):
                raise
        text = ast.unparse(node)
        return re.sub(r"_ref_\d+", lambda m: references.get(m.group(0), m.group(0)), text)

    def inlined(self, call: ast.Call, references: dict[str, str]) -> ast.expr:
        """``call`` as the reference to the earlier step that makes it, when one does (else unchanged)."""
        if not isinstance(call.func, ast.Name) or (tool := self._tool(call.func.id)) not in self.parameters:
            return call
        try:
            source = ast.unparse(call)
            arguments = self._arguments(tool, source[source.index("(") + 1 : -1])
        except (SyntaxError, ValueError):
            return call
        made_by = self.calls.get(_call_key(tool, arguments))
        if made_by is None:
            return call
        placeholder = f"_ref_{len(references)}"
        references[placeholder] = f"${made_by}"
        return ast.Name(id=placeholder, ctx=ast.Load())

    def _references(self, text: str) -> str:
        """``text`` with each reference to a step written as that step's id (``$1`` -> ``$s1``)."""
        return _REFERENCE.sub(lambda m: f"${self._id(m.group(1))}" if self._known(m.group(1)) else m.group(0), text)

    def _known(self, written: str) -> bool:
        """Whether ``$written`` is a step of this plan written before, or an earlier round's result."""
        return self._id(written) in self.ids or (split_round_reference(written) is not None)

    @staticmethod
    def _id(written: str) -> str:
        return f"s{written}" if written.isdigit() else written


class _Inliner(ast.NodeTransformer):
    """Replaces the calls of tools an earlier step makes by references to that step."""

    def __init__(self, reader: LineReader, references: dict[str, str]) -> None:
        self.reader = reader
        self.references = references

    def visit_Call(self, node: ast.Call) -> ast.expr:
        return self.reader.inlined(node, self.references)


_EXPRESSION_NODES = (ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp)


def _is_expression(node: ast.expr) -> bool:
    """Whether an argument is arithmetic or a comparison over names and literals (written unquoted)."""
    if not isinstance(node, _EXPRESSION_NODES):
        return False
    allowed = (*_EXPRESSION_NODES, ast.Name, ast.Constant, ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.Load)
    return all(isinstance(child, allowed) for child in ast.walk(node))


def _called(call: str) -> str:
    """The name a written call calls."""
    return call.split("(", 1)[0].strip()


def _call_key(tool: str, arguments: Any) -> str:
    return f"{tool}:{json.dumps(arguments, sort_keys=True, default=str)}"


def _string_parts(text: str) -> list[tuple[str, str | None]]:
    """``text`` cut into the parts outside and inside string literals: (part, its quote or None)."""
    parts: list[tuple[str, str | None]] = []
    start, quote, position = 0, None, 0
    while position < len(text):
        char = text[position]
        if quote is None and char in "\"'":
            parts.append((text[start:position], None))
            start, quote = position, char
        elif quote is not None and char == "\\":
            position += 1
        elif quote is not None and char == quote:
            parts.append((text[start : position + 1], quote))
            start, quote = position + 1, None
        position += 1
    parts.append((text[start:], quote))
    return parts


def _mentioned(value: Any) -> list[str]:
    """The step ids a step's task or arguments reference (``$s1``), in order."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return [match.group(1) for match in re.finditer(r"\$(r\d+\.\w+|[A-Za-z_]\w*)", text)]


def _value(node: ast.AST, references: Mapping[str, str]) -> Any:
    """An argument's value: a literal (JSON's ``true``/``false``/``null`` too), a reference's ``$id``, or a
    string with the references in it written as ``$id``.
    """
    if isinstance(node, ast.Name):
        if node.id in references:
            return references[node.id]
        if node.id.lower() in _CONSTANTS:
            return _CONSTANTS[node.id.lower()]
        return node.id  # a word left unquoted (city=Paris) is that word
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return re.sub(r"_ref_\d+", lambda m: references.get(m.group(0), m.group(0)), node.value)
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(item, references) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {
            str(_value(key, references)): _value(value, references)
            for key, value in zip(node.keys, node.values, strict=True)
            if key is not None
        }
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, references)
        if isinstance(operand, int | float):
            return -operand if isinstance(node.op, ast.USub) else operand
    raise ValueError("not a literal")


def read_plan_lines(
    text: str,
    parameters: Mapping[str, Sequence[str]] | None = None,
    earlier: Collection[str] = (),
    computing: Collection[str] = (),
) -> dict[str, Any] | None:
    """``{"domain": ..., "steps": [...]}`` from a whole reply of plan lines; None when it has no step line."""
    reader = LineReader(parameters, earlier, computing=computing)
    steps = [step for line in text.splitlines() if (step := reader.read(line)) is not None]
    return {"domain": reader.domain, "steps": steps} if steps else None


def render_plan_lines(plan: Any) -> str | None:
    """A plan in its JSON form (as scripts write it) as the lines a model would write; None when it is not a
    well-formed plan (a script testing the recovery of a malformed one keeps its JSON).
    """
    if isinstance(plan, Mapping) and not set(plan) <= {"domain", "steps"}:
        return None
    steps = plan.get("steps") if isinstance(plan, Mapping) else plan if isinstance(plan, list) else None
    if not isinstance(steps, list) or not steps or not all(_well_formed(step) for step in steps):
        return None
    labels = {str(step["id"]): _label(str(step["id"])) for step in steps if step.get("id") is not None}
    lines = []
    domain = plan.get("domain") if isinstance(plan, Mapping) else None
    if isinstance(domain, str) and domain:
        lines.append(f"domain: {domain}")
    for number, step in enumerate(steps, 1):
        label = labels.get(str(step.get("id")), str(number)) if step.get("id") is not None else str(number)
        tool, arguments = step.get("tool_hint"), step.get("tool_args")
        hints: list[str] = []
        if tool and isinstance(arguments, Mapping):
            body = f"{tool}({', '.join(f'{key}={_literal(value, labels)}' for key, value in arguments.items())})"
            mentioned = set(_mentioned(dict(arguments)))
            task = step.get("task")
            if task and task != body:
                body += f"  # {task}"
        else:
            body = _written_references(str(step["task"]), labels)
            mentioned = set(_mentioned(str(step["task"])))
            if tool:
                hints.append(str(tool))
        if step.get("model_hint"):
            hints.append(str(step["model_hint"]))
        hints += [f"${labels.get(dep, dep)}" for dep in step.get("dependencies") or [] if dep not in mentioned]
        if hints:
            head, _, note = body.partition("  # ")
            body = f"{head} [{', '.join(hints)}]" + (f"  # {note}" if note else "")
        lines.append(f"{label}. {body}")
    return "\n".join(lines)


_FIELDS = frozenset({"id", "task", "dependencies", "tool_hint", "model_hint", "tool_args"})


def _well_formed(step: Any) -> bool:
    """Whether a scripted step reads back from its line as it was written."""
    if not isinstance(step, Mapping) or not set(step) <= _FIELDS:
        return False
    if not isinstance(step.get("id"), str | None) or not re.fullmatch(r"[A-Za-z_][\w-]*", str(step.get("id") or "s")):
        return False
    task, arguments = step.get("task"), step.get("tool_args")
    if task is not None and (not isinstance(task, str) or not task.strip() or "\n" in task):
        return False
    if arguments is None and (task is None or task.rstrip().endswith("]") or _CALL.match(task.strip())):
        return False
    if arguments is not None and not (isinstance(arguments, Mapping) and step.get("tool_hint")):
        return False
    if arguments is not None and task is not None and " # " in task:
        return False
    dependencies = step.get("dependencies") or []
    hints_ok = all(isinstance(step.get(k), str | None) for k in ("tool_hint", "model_hint"))
    return isinstance(dependencies, list) and all(isinstance(d, str) for d in dependencies) and hints_ok


def _label(step_id: str) -> str:
    number = re.fullmatch(r"s(\d+)", step_id)
    return number.group(1) if number else step_id


def _written_references(text: str, labels: Mapping[str, str]) -> str:
    return re.sub(r"\$([A-Za-z_]\w*)", lambda m: f"${labels.get(m.group(1), m.group(1))}", text)


def _literal(value: Any, labels: Mapping[str, str]) -> str:
    if isinstance(value, str) and re.fullmatch(r"\$([A-Za-z_]\w*|r\d+\.\w+)", value):
        return "$" + labels.get(value[1:], value[1:])
    if isinstance(value, str):
        return json.dumps(_written_references(value, labels), ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_literal(v, labels)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(item, labels) for item in value) + "]"
    return json.dumps(value)
