"""Secrets are masked across agents in logs and JSON data; log lines name their agent."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import anyio.to_thread
import pytest
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from harness_core.errors import ConfigError
from harness_core.logs import (
    AgentContextInterceptor,
    agent_context,
    configure_logging,
    current_agent,
)
from harness_core.secrets import MASK, SECRETS, SecretRegistry

Install = Callable[..., tuple[logging.Logger, io.StringIO]]
"""The ``log_output`` fixture: ``install(fmt="text", level="DEBUG") -> (logger, stream)``."""

KEY_A = "sk-agent-a-0123456789"
KEY_B = "sk-agent-b-9876543210"


@pytest.fixture
def secrets() -> Iterator[None]:
    """Agents ``a`` and ``b`` registered in the process-wide registry, removed afterwards."""
    SECRETS.register("a", [KEY_A])
    SECRETS.register("b", [KEY_B])
    try:
        yield
    finally:
        SECRETS.unregister("a")
        SECRETS.unregister("b")


@pytest.fixture
def log_output() -> Iterator[Install]:
    """Install the harness handler on a StringIO; restore the root logger's state afterwards."""
    root = logging.getLogger()
    saved_level = root.level
    saved_quiet = logging.getLogger("temporalio").level
    installed: list[logging.Handler] = []

    def install(
        fmt: Literal["text", "json"] = "text", level: str = "DEBUG"
    ) -> tuple[logging.Logger, io.StringIO]:
        stream = io.StringIO()
        installed.append(configure_logging(level, fmt=fmt, stream=stream))
        return logging.getLogger("harness.test"), stream

    try:
        yield install
    finally:
        for handler in installed:
            root.removeHandler(handler)
        root.setLevel(saved_level)
        logging.getLogger("temporalio").setLevel(saved_quiet)


# --- the registry ----------------------------------------------------------------------------


def test_text_with_nothing_registered_is_returned_unchanged() -> None:
    registry = SecretRegistry()
    text = "nothing to hide"
    assert registry.redact(text) is text


def test_every_owners_values_are_masked_in_one_text() -> None:
    registry = SecretRegistry()
    registry.register("a", [KEY_A])
    registry.register("b", [KEY_B])
    assert registry.redact(f"a={KEY_A} b={KEY_B}") == f"a={MASK} b={MASK}"


def test_registering_again_replaces_the_owners_previous_values() -> None:
    registry = SecretRegistry()
    registry.register("a", ["old-secret"])
    registry.register("a", ["new-secret"])
    assert registry.values() == {"new-secret"}
    assert registry.redact("old-secret new-secret") == f"old-secret {MASK}"


def test_unregister_stops_masking_that_owners_values_only() -> None:
    registry = SecretRegistry()
    registry.register("a", [KEY_A])
    registry.register("b", [KEY_B])
    registry.unregister("a")
    assert registry.redact(f"{KEY_A} {KEY_B}") == f"{KEY_A} {MASK}"


def test_a_value_that_contains_another_is_masked_whole() -> None:
    registry = SecretRegistry()
    registry.register("a", ["token"])
    registry.register("b", ["token-with-suffix"])
    assert registry.redact("x token-with-suffix y") == f"x {MASK} y"


def test_overlapping_values_leave_no_tail_of_either() -> None:
    registry = SecretRegistry()
    registry.register("a", ["abcdef", "defghi"])
    assert registry.redact("<abcdefghi>") == f"<{MASK}>"


def test_empty_and_short_values_are_ignored() -> None:
    registry = SecretRegistry()
    registry.register("a", ["", "a", "ab", "abc", "abcd"])
    assert registry.values() == {"abcd"}
    assert registry.redact("a ab abc abcd") == f"a ab abc {MASK}"


def test_values_with_regex_metacharacters_are_matched_literally() -> None:
    registry = SecretRegistry()
    registry.register("a", ["p4ss.w*rd(1)"])
    assert registry.redact("p4ssXwwrd1 p4ss.w*rd(1)") == f"p4ssXwwrd1 {MASK}"


def test_version_grows_on_every_change() -> None:
    registry = SecretRegistry()
    seen = [registry.version]
    registry.register("a", [KEY_A])
    seen.append(registry.version)
    registry.register("a", [KEY_B])
    seen.append(registry.version)
    registry.unregister("a")
    seen.append(registry.version)
    assert seen == sorted(set(seen))


def test_redact_json_masks_nested_strings_and_keys_and_leaves_the_input_alone() -> None:
    registry = SecretRegistry()
    registry.register("b", [KEY_B])
    data: dict[str, Any] = {
        "parts": [{"text": f"the key is {KEY_B}"}, ("tuple", KEY_B)],
        KEY_B: 1,
        "n": 2.5,
        "ok": True,
        "none": None,
    }
    masked = registry.redact_json(data)
    assert masked == {
        "parts": [{"text": f"the key is {MASK}"}, ("tuple", MASK)],
        MASK: 1,
        "n": 2.5,
        "ok": True,
        "none": None,
    }
    assert data["parts"][0]["text"] == f"the key is {KEY_B}"
    assert KEY_B in data


def test_masking_while_another_thread_registers_never_fails() -> None:
    registry = SecretRegistry()
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            registry.register(f"owner-{n % 3}", [f"secret-{n}"])
            n += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        registry.register("fixed", [KEY_A])
        for _ in range(2000):
            assert KEY_A not in registry.redact(f"x {KEY_A} y")
    finally:
        stop.set()
        thread.join()


# --- log lines -------------------------------------------------------------------------------


def test_a_key_of_agent_b_is_masked_in_a_line_logged_for_agent_a(
    secrets: None, log_output: Install
) -> None:
    log, stream = log_output()
    with agent_context("a"):
        log.info("calling upstream with %s", KEY_B)
    line = stream.getvalue()
    assert "[a]" in line
    assert MASK in line
    assert KEY_B not in line


def test_a_line_outside_any_agent_shows_a_dash(
    log_output: Install,
) -> None:
    log, stream = log_output()
    log.info("started")
    assert " harness.test [-] started" in stream.getvalue()


def test_exception_text_holding_a_secret_is_masked(secrets: None, log_output: Install) -> None:
    log, stream = log_output()
    try:
        raise RuntimeError(f"upstream rejected {KEY_A}")
    except RuntimeError:
        log.exception("turn failed")
    text = stream.getvalue()
    assert "RuntimeError: upstream rejected " + MASK in text
    assert KEY_A not in text


def test_json_lines_parse_and_name_the_agent_only_inside_its_context(
    secrets: None, log_output: Install
) -> None:
    log, stream = log_output(fmt="json")
    with agent_context("billing"):
        log.warning("key %s", KEY_A)
    log.info("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["agent"] == "billing"
    assert inside["level"] == "WARNING"
    assert inside["logger"] == "harness.test"
    assert inside["message"] == f"key {MASK}"
    assert inside["time"].endswith("Z")
    assert "agent" not in outside
    assert "exc" not in outside


def test_a_json_line_masks_a_secret_that_json_escapes(
    log_output: Install,
) -> None:
    tricky = 'pa"ss\\word\n1'
    SECRETS.register("tricky", [tricky])
    try:
        log, stream = log_output(fmt="json")
        try:
            raise ValueError(tricky)
        except ValueError:
            log.exception("said %s", tricky)
        entry = json.loads(stream.getvalue())
    finally:
        SECRETS.unregister("tricky")
    assert entry["message"] == f"said {MASK}"
    assert tricky not in entry["exc"]
    assert "ValueError: " + MASK in entry["exc"]


def test_configuring_again_replaces_only_the_harness_handler(
    log_output: Install,
) -> None:
    other = logging.NullHandler()
    root = logging.getLogger()
    root.addHandler(other)
    try:
        _, first = log_output()
        log, second = log_output()
        log.info("once")
        assert first.getvalue() == ""
        assert second.getvalue().count("once") == 1
        assert other in root.handlers
    finally:
        root.removeHandler(other)


def test_temporalio_stays_at_warning_unless_the_level_is_debug(
    log_output: Install,
) -> None:
    log_output(level="INFO")
    assert logging.getLogger("temporalio").level == logging.WARNING
    log_output(level="ERROR")
    assert logging.getLogger("temporalio").level == logging.ERROR
    log_output(level="debug")
    assert logging.getLogger("temporalio").level == logging.DEBUG


def test_an_unknown_level_is_a_config_error_that_names_it() -> None:
    with pytest.raises(ConfigError, match="'LOUD'"):
        configure_logging("LOUD")


# --- the activity interceptor ----------------------------------------------------------------
#
# These call the interceptor's execute_activity with a stand-in for temporalio's own inbound
# implementation; the real worker cannot run here without a Temporal server, and an integration test
# with one is separate. They run under asyncio only: Temporal workers run activities on an asyncio
# loop (under Trio, on the bridge thread's asyncio loop), so the interceptor never runs under Trio.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _AsyncRunner(ActivityInboundInterceptor):
    """Stands in for temporalio's inbound for an async activity: awaits it on the loop."""

    def __init__(self) -> None:
        pass  # the innermost interceptor has no next one

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await input.fn(*input.args)


class _SyncRunner(ActivityInboundInterceptor):
    """Stands in for temporalio's inbound for a sync activity: runs it on the executor's thread.

    Unlike temporalio's thread-pool path, it does not copy contextvars into the thread (as with a
    process pool or any other executor), so the agent can reach the activity only through the
    interceptor's own doing.
    """

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self.executor = executor

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        future = self.executor.submit(input.fn, *input.args)
        return await anyio.to_thread.run_sync(future.result)


def _inbound(runner: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
    return AgentContextInterceptor("billing").intercept_activity(runner)


def _input(fn: Callable[..., Any], executor: ThreadPoolExecutor | None) -> ExecuteActivityInput:
    return ExecuteActivityInput(fn=fn, args=("arg",), executor=executor, headers={})


@pytest.mark.anyio
async def test_an_async_activity_runs_as_the_interceptors_agent() -> None:
    async def activity_fn(arg: str) -> tuple[str | None, str]:
        return current_agent.get(), arg

    result = await _inbound(_AsyncRunner()).execute_activity(_input(activity_fn, None))
    assert result == ("billing", "arg")
    assert current_agent.get() is None


@pytest.mark.anyio
async def test_a_sync_activity_runs_as_the_interceptors_agent_in_a_thread_without_copied_context() -> (
    None
):
    def activity_fn(arg: str) -> tuple[str | None, str, str]:
        return current_agent.get(), arg, threading.current_thread().name

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="activity") as executor:
        agent, arg, thread = await _inbound(_SyncRunner(executor)).execute_activity(
            _input(activity_fn, executor)
        )
        # The executor's thread ends as it began: a later activity of another agent starts clean.
        leftover = executor.submit(current_agent.get).result()
    assert (agent, arg) == ("billing", "arg")
    assert thread.startswith("activity")
    assert leftover is None


def test_traces_are_off_unless_the_otel_variables_ask_for_them() -> None:
    from harness_core import telemetry

    assert telemetry.configure_from_env({}) is False
    assert telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "none"}) is False
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER is 'zipkin'"):
        telemetry.configure_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
