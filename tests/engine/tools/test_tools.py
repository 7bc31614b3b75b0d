"""Tools from plain functions: schema from hints and docstrings, validation before the call, failures and
timeouts as observations, sync tools off the event loop, return values as text, configuration problems.

Timing tests assert on timestamps recorded during the calls (overlaps, ticks inside an interval), never on
absolute wall-clock limits.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dagmagic import ConfigurationError
from dagmagic.engine.tools.functions import Tool, ToolOutcome, as_tools, tool
from dagmagic.engine.tools.threads import ToolThreads, ToolThreadsExhausted, ToolTimeout


class Address(BaseModel):
    """A postal address."""

    street: str
    city: str = Field(description="The city name.")


class Parcel(BaseModel):
    weight_kg: float
    fragile: bool = False


@tool
def book_table(restaurant: str, people: int, when: Literal["lunch", "dinner"] = "dinner") -> str:
    """Book a table at a restaurant.

    Uses the booking service; this second paragraph is not part of the description.

    Args:
        restaurant: The restaurant's name.
        people (int): How many guests,
            children included.
        when: Lunch or dinner.

    Returns:
        A confirmation line.
    """
    return f"{restaurant} for {people} at {when}"


@tool(name="lookup_weather", description="Weather for a city.", timeout=2.5)
async def weather(city: str, days: int = 1) -> dict[str, Any]:
    """Not this text: the description given to @tool wins.

    :param str city: The city to look up.
    :param days: How many days ahead,
        counting today.
    :returns: a forecast
    """
    await asyncio.sleep(0)
    return {"city": city, "days": days}


def ship(parcel: Parcel, to: Address, express: bool = False) -> str:
    """Ship a parcel."""
    assert isinstance(parcel, Parcel) and isinstance(to, Address)  # validated into the models
    return f"{parcel.weight_kg}kg to {to.city}{' express' if express else ''}"


def undocumented(x: int) -> int:
    return x


# --- name, description, schema ----------------------------------------------------------------------------------


def test_tool_decorator_takes_name_description_and_schema_from_the_function() -> None:
    assert isinstance(book_table, Tool)
    assert book_table.name == "book_table"
    assert book_table.description == "Book a table at a restaurant."
    assert book_table.timeout is None
    params = book_table.parameters
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["restaurant", "people"]
    props = params["properties"]
    assert set(props) == {"restaurant", "people", "when"}  # "Returns:" is not a parameter
    assert props["restaurant"] == {"type": "string", "title": "Restaurant", "description": "The restaurant's name."}
    assert props["people"]["type"] == "integer"
    assert props["people"]["description"] == "How many guests, children included."  # continuation line kept
    assert props["when"]["enum"] == ["lunch", "dinner"] and props["when"]["default"] == "dinner"
    assert props["when"]["description"] == "Lunch or dinner."


def test_tool_with_arguments_overrides_name_description_and_timeout_and_reads_sphinx_params() -> None:
    assert isinstance(weather, Tool)
    assert (weather.name, weather.description, weather.timeout) == ("lookup_weather", "Weather for a city.", 2.5)
    assert weather.is_async
    props = weather.parameters["properties"]
    assert weather.parameters["required"] == ["city"]
    assert props["city"]["description"] == "The city to look up."
    assert props["days"] == {
        "type": "integer",
        "default": 1,
        "title": "Days",
        "description": "How many days ahead, counting today.",
    }
    assert "returns" not in props


def test_plain_functions_become_tools_through_as_tools() -> None:
    tools = as_tools([ship, book_table, undocumented])
    assert [t.name for t in tools] == ["ship", "book_table", "undocumented"]
    assert tools[1] is book_table  # a Tool is kept as is
    shipping, _, bare = tools
    assert shipping.description == "Ship a parcel."
    assert bare.description == "Call undocumented."  # no docstring: still a description
    assert bare.parameters["properties"]["x"]["type"] == "integer"


def test_nested_pydantic_models_are_described_and_validated_into_instances() -> None:
    params = as_tools([ship])[0].parameters
    assert params["required"] == ["parcel", "to"]
    assert params["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert params["properties"]["express"]["type"] == "boolean"
    address = params["$defs"]["Address"]
    assert address["required"] == ["street", "city"]
    assert address["properties"]["city"]["description"] == "The city name."
    assert params["$defs"]["Parcel"]["properties"]["weight_kg"]["type"] == "number"


async def test_nested_model_arguments_reach_the_function_as_models() -> None:
    outcome = await Tool(ship).run(
        {"parcel": {"weight_kg": "2.5"}, "to": {"street": "Main St 1", "city": "Oslo"}, "express": True}, timeout=5
    )
    assert outcome == ToolOutcome("2.5kg to Oslo express", duration=outcome.duration)
    bad = await Tool(ship).run({"parcel": {"weight_kg": 1}, "to": {"street": "x"}}, timeout=5)
    assert bad.error is not None and "to.city: Field required" in bad.observation


def test_schema_is_the_function_calling_format() -> None:
    schema = book_table.schema()
    assert schema == {
        "type": "function",
        "function": {
            "name": "book_table",
            "description": "Book a table at a restaurant.",
            "parameters": book_table.parameters,
        },
    }
    assert "title" not in schema["function"]["parameters"]
    assert json.loads(json.dumps(schema)) == schema  # plain JSON, ready for the provider


async def test_decorated_functions_still_work_when_called_directly() -> None:
    assert book_table("Chez Anna", 4) == "Chez Anna for 4 at dinner"
    assert book_table(restaurant="Nomad", people=2, when="lunch") == "Nomad for 2 at lunch"
    assert await weather("Oslo", days=3) == {"city": "Oslo", "days": 3}
    assert repr(book_table) == "Tool('book_table')"


def test_lambda_needs_a_name_and_works_with_one() -> None:
    with pytest.raises(ConfigurationError, match=r"'<lambda>'.*pass name="):
        Tool(lambda text: text)
    echo = Tool(lambda text: text, name="echo")
    assert echo.name == "echo" and echo.parameters["required"] == ["text"]


# --- validation before the call ---------------------------------------------------------------------------------


def counting_add() -> tuple[Tool, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []

    def add(a: int, b: int = 0) -> int:
        """Add two numbers."""
        calls.append((a, b))
        return a + b

    return Tool(add), calls


async def test_a_wrong_type_is_refused_before_the_call_naming_the_argument() -> None:
    add, calls = counting_add()
    outcome = await add.run({"a": "abc", "b": 1}, timeout=5)
    assert calls == []
    assert outcome.observation.startswith("Invalid arguments for add: a: ")
    assert "valid integer" in outcome.observation and "'abc'" in outcome.observation
    assert outcome.observation.endswith("Fix them and call add again.")
    assert outcome.error is not None and outcome.error.startswith("ValidationError: a: ")


async def test_a_missing_required_argument_is_refused() -> None:
    add, calls = counting_add()
    outcome = await add.run({"b": 2}, timeout=5)
    assert calls == []
    assert "a: Field required" in outcome.observation and "call add again" in outcome.observation
    assert outcome.error is not None


async def test_an_unknown_extra_argument_is_refused() -> None:
    add, calls = counting_add()
    outcome = await add.run({"a": 1, "c": 2}, timeout=5)
    assert calls == []
    assert "c: Extra inputs are not permitted" in outcome.observation
    assert outcome.error is not None


async def test_several_problems_are_reported_together() -> None:
    add, calls = counting_add()
    outcome = await add.run({"a": "x", "b": "y"}, timeout=5)
    assert calls == []
    assert "a: " in outcome.observation and "b: " in outcome.observation


async def test_arguments_as_a_json_string_are_parsed_and_coerced() -> None:
    add, calls = counting_add()
    outcome = await add.run('{"a": "2", "b": 3}', timeout=5)
    assert calls == [(2, 3)]
    assert (outcome.observation, outcome.error) == ("5", None)
    assert outcome.duration >= 0


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ("42", "must be a JSON object, got int"),
    ],
)
async def test_arguments_that_are_not_a_json_object_become_an_observation(arguments: str, expected: str) -> None:
    add, calls = counting_add()
    outcome = await add.run(arguments, timeout=5)
    assert calls == []
    assert expected in outcome.observation and "call add again" in outcome.observation
    assert outcome.error is not None and outcome.error.startswith("ValueError: ")


@pytest.mark.parametrize("arguments", [None, "", {}, "{}"])
async def test_a_tool_without_parameters_accepts_no_arguments(arguments: Any) -> None:
    def ping() -> str:
        return "pong"

    outcome = await Tool(ping).run(arguments, timeout=5)
    assert (outcome.observation, outcome.error) == ("pong", None)


# --- failures and timeouts as observations ----------------------------------------------------------------------


def failing_sync(x: int) -> str:
    raise ValueError(f"bad input {x}")


async def failing_async(x: int) -> str:
    await asyncio.sleep(0)
    raise ValueError(f"bad input {x}")


@pytest.mark.parametrize("function", [failing_sync, failing_async])
async def test_a_tool_exception_becomes_an_observation(function: Any) -> None:
    outcome = await Tool(function).run({"x": 7}, timeout=5)
    assert outcome.observation == "Error: ValueError: bad input 7"
    assert outcome.error == "ValueError: bad input 7"


async def test_a_tool_calling_sys_exit_becomes_an_observation_not_the_end_of_the_loop() -> None:
    def cli(flag: str) -> str:
        sys.exit(2)  # what argparse's error() does

    outcome = await Tool(cli).run({"flag": "x"}, timeout=5)
    assert (outcome.observation, outcome.error) == ("Error: SystemExit: 2", "SystemExit: 2")


async def test_a_timeout_error_the_tool_raises_itself_is_its_own_failure_not_the_limit() -> None:
    async def connect(host: str) -> str:
        raise TimeoutError(f"connecting to {host} timed out")

    outcome = await Tool(connect).run({"host": "db"}, timeout=30)
    assert outcome.error == "TimeoutError: connecting to db timed out"
    assert "30s" not in outcome.observation


async def test_an_async_tool_past_its_timeout_becomes_a_timeout_observation() -> None:
    async def slow(x: int) -> str:
        await asyncio.sleep(20)
        return "never"

    outcome = await Tool(slow).run({"x": 1}, timeout=0.1)
    assert outcome.observation == "Error: TimeoutError: slow did not finish within 0.1s"
    assert outcome.error == "TimeoutError: slow did not finish within 0.1s"
    assert outcome.duration < 20 / 2  # cut short, far from the 20 s sleep


async def test_a_sync_tool_past_its_timeout_becomes_a_timeout_observation() -> None:
    released, ended = threading.Event(), threading.Event()

    def slow_sync() -> str:
        released.wait(30)  # holds its thread until the test has its outcome
        ended.set()
        return "late"

    try:
        outcome = await Tool(slow_sync).run({}, timeout=0.05)
        still_running = not ended.is_set()
    finally:
        released.set()
    assert outcome.error == "TimeoutError: slow_sync did not finish within 0.05s"
    assert still_running  # the outcome came while the tool ran on: cut at the timeout, not at the tool's end


async def test_the_tools_own_timeout_overrides_the_session_value() -> None:
    @tool(timeout=0.1)
    async def strict() -> str:
        await asyncio.sleep(20)
        return "never"

    @tool(timeout=10)
    async def patient() -> str:
        await asyncio.sleep(0.2)
        return "finished"

    cut = await strict.run({}, timeout=30)
    assert cut.error == "TimeoutError: strict did not finish within 0.1s"
    allowed = await patient.run({}, timeout=0.05)
    assert (allowed.observation, allowed.error) == ("finished", None)
    assert allowed.duration >= 0.05 * 2  # it ran past the session value


# --- sync tools off the event loop ------------------------------------------------------------------------------


async def test_a_sync_tool_runs_while_the_event_loop_keeps_ticking() -> None:
    interval: list[float] = []

    def blocking() -> str:
        interval.append(time.perf_counter())
        time.sleep(0.3)
        interval.append(time.perf_counter())
        return "slept"

    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    try:
        outcome = await Tool(blocking).run({}, timeout=10)
    finally:
        ticking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ticking
    assert outcome.observation == "slept"
    start, end = interval
    inside = [t for t in ticks if start < t < end]
    assert len(inside) >= 5, f"the loop was blocked: {len(inside)} ticks in {end - start:.3f}s"


async def test_an_async_tool_and_a_slow_sync_tool_run_concurrently() -> None:
    intervals: dict[str, tuple[float, float]] = {}

    async def waiting() -> str:
        start = time.perf_counter()
        await asyncio.sleep(0.3)
        intervals["async"] = (start, time.perf_counter())
        return "a"

    def sleeping() -> str:
        start = time.perf_counter()
        time.sleep(0.3)
        intervals["sync"] = (start, time.perf_counter())
        return "s"

    outcomes = await asyncio.gather(Tool(waiting).run({}, timeout=10), Tool(sleeping).run({}, timeout=10))
    assert [o.observation for o in outcomes] == ["a", "s"]
    (a_start, a_end), (s_start, s_end) = intervals["async"], intervals["sync"]
    overlap = min(a_end, s_end) - max(a_start, s_start)
    assert overlap > 0.5 * min(a_end - a_start, s_end - s_start)


# --- tool threads ------------------------------------------------------------------------------------------


def waiting(until: threading.Event, log: list[str], name: str) -> Callable[[], str]:
    def call() -> str:
        log.append(f"{name} started")
        until.wait(30)
        log.append(f"{name} ended")
        return name

    return call


async def test_a_call_waits_for_the_thread_a_running_call_frees_then_runs() -> None:
    threads, log, release = ToolThreads(), [], threading.Event()
    first = asyncio.create_task(threads.run("first", waiting(release, log, "first"), {}, threads=1, timeout=30))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(threads.run("second", lambda: "second", {}, threads=1, timeout=30))
    await asyncio.sleep(0.05)
    assert (log, second.done()) == (["first started"], False)  # it waits: the one thread is busy
    release.set()
    assert await first == ("first", None) and await second == ("second", None)
    assert threads.held() == []


async def test_a_call_that_cannot_get_a_thread_in_time_says_what_holds_them() -> None:
    threads, log, release = ToolThreads(), [], threading.Event()
    try:
        busy = asyncio.create_task(threads.run("lookup", waiting(release, log, "lookup"), {}, threads=1, timeout=30))
        await asyncio.sleep(0.05)
        with pytest.raises(ToolTimeout) as waited:
            await threads.run("ping", lambda: "pong", {}, threads=1, timeout=0.05)
        assert str(waited.value) == "ping did not start within 0.05s: all 1 tool threads were busy (1 running: lookup)"
    finally:
        release.set()
    assert await busy == ("lookup", None)


async def test_calls_past_their_timeout_holding_every_thread_are_named_and_the_next_call_is_not_made() -> None:
    threads, log, release = ToolThreads(), [], threading.Event()
    try:
        for _ in range(2):
            with pytest.raises(ToolTimeout, match=r"^fetch did not finish within 0\.05s$"):
                await threads.run("fetch", waiting(release, log, "fetch"), {}, threads=3, timeout=0.05)
        assert await threads.run("ping", lambda: "pong", {}, threads=3, timeout=5) == ("pong", None)  # one is free
        with pytest.raises(ToolTimeout):
            await threads.run("lookup", waiting(release, log, "lookup"), {}, threads=3, timeout=0.05)
        with pytest.raises(ToolThreadsExhausted) as exhausted:
            await threads.run("ping", lambda: "pong", {}, threads=3, timeout=5)
    finally:
        release.set()
    assert str(exhausted.value).startswith(
        "3 tool threads are still running past their timeout: fetch (2×), lookup. ping was not called. "
    )
    assert "DAG_TOOL_THREADS" in str(exhausted.value)


# --- return values ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "observation"),
    [
        ("plain text, not quoted", "plain text, not quoted"),
        ({"a": 1, "b": [1, 2], "c": "ü"}, '{"a": 1, "b": [1, 2], "c": "ü"}'),
        ([1, "x", None], '[1, "x", null]'),
        (Address(street="Main St 1", city="Oslo"), '{"street":"Main St 1","city":"Oslo"}'),
        ([Address(street="a", city="b")], '[{"street": "a", "city": "b"}]'),
        ({"where": Address(street="a", city="b")}, '{"where": {"street": "a", "city": "b"}}'),
        (None, "null"),
        (3.5, "3.5"),
    ],
)
async def test_return_values_become_text(value: Any, observation: str) -> None:
    def give() -> Any:
        return value

    outcome = await Tool(give).run({}, timeout=5)
    assert (outcome.observation, outcome.error) == (observation, None)


# --- other callables --------------------------------------------------------------------------------------------


class Counter:
    def __init__(self) -> None:
        self.total = 0

    async def __call__(self, step: int) -> str:
        await asyncio.sleep(0)
        self.total += step
        return f"total {self.total}"


async def test_an_object_with_an_async_call_is_an_async_tool() -> None:
    counter = Counter()
    count = Tool(counter, name="count", description="Count up.")
    assert count.is_async
    assert count.parameters["properties"]["step"]["type"] == "integer"
    assert (await count.run({"step": 3}, timeout=5)).observation == "total 3"
    refused = await count.run({"step": "many"}, timeout=5)
    assert refused.error is not None and counter.total == 3


async def test_a_sync_function_returning_a_coroutine_has_it_awaited() -> None:
    async def fetch_page(page: int) -> str:
        await asyncio.sleep(0)
        return f"page {page}"

    def page(page: int) -> Any:  # a plain wrapper around an async call, as some decorators make
        return fetch_page(page)

    outcome = await Tool(page).run({"page": 2}, timeout=5)
    assert (outcome.observation, outcome.error) == ("page 2", None)


async def test_parameters_named_like_model_methods_work_without_warnings() -> None:
    def fetch(url: str, json: bool = False, copy: int = 0) -> str:
        return f"{url} json={json} copy={copy}"

    fetching = Tool(fetch)  # warnings are errors here: pydantic's "shadows an attribute" must not surface
    assert set(fetching.parameters["properties"]) == {"url", "json", "copy"}
    outcome = await fetching.run({"url": "u", "json": True, "copy": 2}, timeout=5)
    assert outcome.observation == "u json=True copy=2"


# --- configuration problems -------------------------------------------------------------------------------------


def collect(*items: str) -> str:
    return ""


def configure(**options: str) -> str:
    return ""


def positional(text: str, /) -> str:
    return text


@pytest.mark.parametrize(
    ("function", "problem"),
    [
        (collect, r"tool 'collect': \*items cannot be described"),
        (configure, r"tool 'configure': \*\*options cannot be described"),
        (positional, r"tool 'positional': text is positional-only"),
    ],
)
def test_parameters_a_model_cannot_call_are_refused(function: Any, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        tool(function)


@pytest.mark.parametrize("name", ["bad name", "1st", "x" * 65, "dots.not.allowed"])
def test_a_bad_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match=r"a tool name must be .*pass name="):
        tool(name=name)(undocumented)


def test_all_problems_are_collected_and_raised_once() -> None:
    def everything(a: int, /, *rest: int, **more: int) -> None:
        pass

    with pytest.raises(ConfigurationError) as raised:
        Tool(everything, name="every thing")
    message = str(raised.value)
    assert message.startswith("tool 'every thing': ")
    for problem in ("a tool name must be", "a is positional-only", "*rest cannot", "**more cannot"):
        assert problem in message
    assert isinstance(raised.value, ValueError)


def test_duplicate_names_are_refused_by_as_tools() -> None:
    with pytest.raises(ConfigurationError, match=r"share the name book_table; rename one with @tool\(name=\.\.\.\)"):
        as_tools([book_table, Tool(undocumented, name="book_table")])
    assert [t.name for t in as_tools([book_table, Tool(undocumented, name="other")])] == ["book_table", "other"]


def _described(function: Any) -> dict[str, str | None]:
    schema = Tool(function).schema()["function"]["parameters"]["properties"]
    return {name: field.get("description") for name, field in schema.items()}


def test_parameter_descriptions_come_from_google_numpy_and_sphinx_docstrings() -> None:
    def google(river: str, unit: str = "km") -> str:
        """Length of a river.

        Args:
            river: The river's English name,
                e.g. "Nile".
            unit (str): km or mi.

        Returns:
            The length.
        """
        return ""

    def numpy(river: str, unit: str = "km") -> str:
        """Length of a river.

        Parameters
        ----------
        river : str
            The river's English name.
        unit : str
            km or mi.
        """
        return ""

    def sphinx(river: str, unit: str = "km") -> str:
        """Length of a river.

        :param river: The river's English name.
        :param unit: km or mi.
        """
        return ""

    assert _described(google) == {"river": 'The river\'s English name, e.g. "Nile".', "unit": "km or mi."}
    assert _described(numpy) == {"river": "The river's English name.", "unit": "km or mi."}
    assert _described(sphinx) == {"river": "The river's English name.", "unit": "km or mi."}
    for function in (google, numpy, sphinx):
        assert Tool(function).description == "Length of a river."


def test_a_docstring_without_parameters_describes_none_and_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    def plain(river: str) -> str:
        """Length of a river, in kilometres: Args: none here."""
        return ""

    assert _described(plain) == {"river": None}
    assert Tool(plain).description == "Length of a river, in kilometres: Args: none here."
    assert capsys.readouterr().err == ""  # griffe's warnings about missing types are not the user's concern
