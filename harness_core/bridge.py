"""The Temporal bridge: the one module that knows whether asyncio or Trio runs.

temporalio runs only on asyncio. Everything else in a2a-harness is AnyIO, so every Temporal call
(client calls, worker runs, connecting) goes through :meth:`TemporalBridge.call`:

* under asyncio the call is awaited directly: no thread, no overhead;
* under Trio one dedicated asyncio event-loop thread (one per bridge, and the pool keeps one bridge
  per process) hosts every Temporal client and worker. A Trio caller schedules its coroutine there
  with ``call_soon_threadsafe`` and sleeps on a ``trio.Event`` that the asyncio task's done-callback
  sets through the Trio token, so no worker thread is blocked per call. Cancelling the Trio caller
  cancels the asyncio task and waits (shielded, bounded) for it to finish, so cancellation stays
  structured.

Traps handled here (``shared/reference/trio-bridge.md``): the coroutine runs in a copy of the caller's
context with sniffio's context variable reset, so AnyIO code inside activities sees asyncio, not Trio;
trio-asyncio is not used (it patches asyncio process-wide).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import anyio.lowlevel
import sniffio
import trio

__all__ = ["InlineActivations", "TemporalBridge", "current_backend", "loop_caller", "open_bridge"]

T = TypeVar("T")
log = logging.getLogger("harness.bridge")

# How long a cancelled Trio caller waits for the asyncio side to acknowledge the cancellation.
_CANCEL_GRACE = 30.0


def current_backend() -> str:
    """``"asyncio"`` or ``"trio"``: the AnyIO backend of the running task."""
    return sniffio.current_async_library()


def loop_caller() -> Callable[[Callable[[], None]], None]:
    """A function any thread may call, never blocking, to run a callback soon in the running loop
    (the caller's). Callbacks after the loop ended are dropped: nothing waits for them there.

    The live fan-out uses it: a turn on the Temporal loop (another thread under Trio) wakes the
    streams waiting in the HTTP server's loop.
    """
    if current_backend() == "trio":
        token = trio.lowlevel.current_trio_token()

        def call_trio(callback: Callable[[], None]) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(callback)

        return call_trio
    loop = asyncio.get_running_loop()

    def call_asyncio(callback: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(callback)

    return call_asyncio


class TemporalBridge(Protocol):
    """Runs temporalio coroutines on an asyncio loop, whichever backend the caller is on."""

    @property
    def backend(self) -> str: ...

    async def call(self, fn: Callable[..., Awaitable[T]], /, *args: object) -> T:
        """Await ``fn(*args)`` on the Temporal loop and return its result or raise its exception.

        If the caller is cancelled, the call is cancelled on the Temporal loop and awaited before the
        cancellation propagates.
        """
        ...


class _DirectBridge:
    """Under asyncio, Temporal shares the caller's loop."""

    backend = "asyncio"

    async def call(self, fn: Callable[..., Awaitable[T]], /, *args: object) -> T:
        try:
            return await fn(*args)
        except Exception:
            # temporalio turns a cancelled RPC into its own RPCTimeoutOrCancelledError; when our
            # caller's scope was cancelled, the caller must see the cancellation instead.
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise


class PortalTaskCancelledError(RuntimeError):
    """The asyncio-side task was cancelled by something other than its Trio caller."""


class _ThreadBridge:
    """Under Trio, Temporal lives on one asyncio loop in a thread the bridge owns."""

    backend = "trio"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        token = trio.lowlevel.current_trio_token()
        ready = trio.Event()
        failure: list[BaseException] = []

        def thread_main() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                token.run_sync_soon(ready.set)
                await self._stop.wait()

            try:
                with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                    runner.run(main())
            except BaseException as exc:  # reported to the starter, never swallowed
                failure.append(exc)
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(ready.set)

        self._thread = threading.Thread(target=thread_main, name="harness-temporal-loop")
        self._thread.start()
        await ready.wait()
        if failure:
            raise failure[0]

    async def aclose(self) -> None:
        """Stop the loop (cancelling leftovers) and join the thread without blocking Trio."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is None or stop is None or thread is None:
            return
        loop.call_soon_threadsafe(stop.set)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(thread.join)
        self._loop = self._stop = self._thread = None

    async def call(self, fn: Callable[..., Awaitable[T]], /, *args: object) -> T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the Temporal bridge is closed")
        if threading.current_thread() is self._thread:  # re-entrant: already on the loop
            return await fn(*args)
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        holder: list[asyncio.Task[T]] = []
        context = contextvars.copy_context()
        # anyio/sniffio must see asyncio inside the loop thread, not the caller's Trio.
        context.run(sniffio.current_async_library_cvar.set, None)

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        def schedule() -> None:
            async def run() -> T:
                return await fn(*args)

            task = loop.create_task(run(), context=context)
            task.add_done_callback(wake)
            holder.append(task)

        loop.call_soon_threadsafe(schedule)
        try:
            await done.wait()
        except BaseException:
            # Cancelled (or interrupted): cancel the asyncio side and wait for it, so no Temporal
            # call outlives its caller.
            def cancel() -> None:
                if holder:
                    holder[0].cancel()

            loop.call_soon_threadsafe(cancel)
            # Bounded, in case the coroutine ignores cancellation; the loop still owns such a task,
            # and closing the bridge (asyncio.Runner) cancels and awaits it.
            with trio.move_on_after(_CANCEL_GRACE) as scope:
                scope.shield = True
                await done.wait()
            if holder and holder[0].done() and not holder[0].cancelled():
                # temporalio turns the cancellation into its own error; the caller is leaving
                # with its cancellation, so mark this one retrieved (asyncio would log it).
                holder[0].exception()
            raise
        task = holder[0]
        if task.cancelled():
            raise PortalTaskCancelledError("a Temporal call was cancelled on the Temporal loop")
        return task.result()


@contextlib.asynccontextmanager
async def open_bridge() -> AsyncGenerator[TemporalBridge, None]:
    """Open a bridge for the running backend; on exit, a Trio bridge stops and joins its thread."""
    if current_backend() == "trio":
        bridge = _ThreadBridge()
        # Shielded: a cancellation while the thread starts would leave it running with no owner.
        with anyio.CancelScope(shield=True):
            await bridge.start()
        try:
            yield bridge
        finally:
            await bridge.aclose()
    else:
        yield _DirectBridge()


class InlineActivations(ThreadPoolExecutor):
    """Runs workflow activations on the worker's own event loop, between its other callbacks.

    temporalio hands every activation to a thread (``workflow_task_executor``) and waits for it
    there, only to notice a workflow that never yields (deadlock detection). Our workflows run only
    our own code, which never blocks (user code runs in activities), and a thread per activation
    costs two thread switches and a GIL handover each, a large share of a short task's CPU
    (bench/README.md). This runs each one as the next callback of the loop, as temporalio's own
    ``debug_mode`` does, without that mode's breakpoint hook. An activation sets the workflow's
    loop as the thread's running loop and clears it when done; the worker's loop is put back.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        future: Future[Any] = Future()
        loop = asyncio.get_running_loop()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)
            finally:
                asyncio.events._set_running_loop(loop)  # pyright: ignore[reportPrivateUsage]

        # A callback of its own, not inside the task that asked: the activation steps the
        # workflow's own tasks, and a task must not be entered while another is mid-step.
        loop.call_soon(run)
        return future
