"""The readers' fork server: a process of its own, started once by its owner (the projector service, a
rebuild, or ``follow.project`` itself), that forks a reader process (reading.py) for each socket it is handed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any

from .reading import main


class Forks:
    """A fork server: a process of its own with this module imported (started once, ~0.5 s), that forks
    a reader for each socket it is handed, so that starting one takes milliseconds. It runs one thread and
    no event loop when it forks (forking is safe there, unlike in the projector's process: see
    ``SINGLE_THREADED``); it ends when its owner calls ``stop`` (or the owner's process ends, closing its
    end of the control socket), and its readers when their sockets close. No module-level instance: each
    owner starts and stops its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.control: socket.socket | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.live: weakref.WeakSet[Any] = weakref.WeakSet()
        """Readers (``reader.Reader``, which imports this module) started and not yet closed (to see, or stop,
        their processes)."""

    def start(self) -> None:
        """Start the fork server now (about half a second) rather than at the first reader; once."""
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return
            ours, theirs = socket.socketpair()
            command = [sys.executable, "-c", SERVE.format(module=__name__, fd=theirs.fileno())]
            env = os.environ | SINGLE_THREADED
            self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
            theirs.close()
            self.control = ours

    def stop(self) -> None:
        """End the fork server (its readers end with their sockets); it starts again at the next ``fork``."""
        with self.lock:
            if self.control is not None:
                self.control.close()
                self.control = None
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(2.0)
                if self.process.poll() is None:
                    self.process.kill()
                    self.process.wait()
                self.process = None

    def fork(self, sock: socket.socket) -> int:
        """A new reader serving ``sock``; its process id."""
        self.start()
        with self.lock:
            assert self.control is not None
            socket.send_fds(self.control, [b"r"], [sock.fileno()])
            answer = self.control.recv(8)
        if len(answer) != 8:
            raise OSError("the readers' fork server did not answer")
        (pid,) = struct.unpack("<q", answer)
        return pid


SINGLE_THREADED = {"JE_ARROW_MALLOC_CONF": "background_thread:false", "OPENBLAS_NUM_THREADS": "1"}
"""Keeps the fork server at one thread: pyarrow's jemalloc and numpy's OpenBLAS would each start one at
import (fork copies only the calling thread)."""
SERVE = """import signal
for stop in (signal.SIGINT, signal.SIGTERM):  # a stop of the process group also reaches the projector
    signal.signal(stop, signal.SIG_IGN)
from {module} import serve_forks
serve_forks({fd})
"""
"""The fork server's program: it ignores the stop signals from its start (its imports take ~0.5 s)."""


def serve_forks(fd: int) -> None:
    """The fork server's loop (see ``Forks``)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # readers are reaped by the system
    # SIGINT and SIGTERM are ignored from SERVE's first line, and readers inherit that: a stop of the process
    # group reaches the projector, and its sockets' closing ends them
    control = socket.socket(fileno=fd)
    gc.freeze()  # what the imports made stays out of the readers' collections (and unshared pages untouched)
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, 1)
        if not message:
            gc.unfreeze()  # else at exit DuckDB's bindings report what was frozen as leaked
            return  # the projector is gone
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                main(socket.socket(fileno=fds[0]))
            finally:
                os._exit(0)
        os.close(fds[0])
        control.sendall(struct.pack("<q", pid))


def supported() -> bool:
    """Whether reader processes can be started here (fork and descriptor passing: a POSIX system)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds")


@contextlib.asynccontextmanager
async def owned(forks: Forks | None, wanted: bool, start: bool = True) -> AsyncIterator[Forks | None]:
    """``forks`` when the caller has one; else, when ``wanted`` (reader processes may start) and ``supported``, a
    fork server of this block's own, stopped at its end (``start``: started at its beginning, else at its first
    reader); else None."""
    if forks is not None or not (wanted and supported()):
        yield forks
        return
    own = Forks()
    try:
        if start:
            await asyncio.to_thread(own.start)
        yield own
    finally:
        await asyncio.to_thread(own.stop)
