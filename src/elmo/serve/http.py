"""The HTTP connections of ``elmo serve``: uvicorn's h11 protocol with its own bounds set
(h11's ``max_incomplete_event_size`` on a request's line and headers, uvicorn's keep-alive
timeout), plus what uvicorn does not offer: a deadline for a request's headers.

A connection that has not sent a whole request line and headers (just opened, or idle after an
answer) is a stranger's: it is closed once :data:`HEADER_SECONDS` pass without them, and it does
not count against uvicorn's connection cap (``limit_concurrency``) meanwhile, so that connections
dribbling header lines (slowloris) cannot hold the cap and keep ``/health`` from answering. Past
the cap in such connections, the oldest is closed for each new one.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

# Seconds a connection may take to send a request's line and headers (from its opening, or from
# the previous answer on a kept-alive connection); any client sends them in one packet.
HEADER_SECONDS = 10.0
# Bytes of a request line and headers (h11 buffers no more: past it, 400 and closed); browsers'
# and HTTP clients' limits are 8 to 64 KiB.
MAX_HEADER_BYTES = 64 * 1024
# Seconds an idle kept-alive connection stays open (uvicorn's default).
KEEP_ALIVE_SECONDS = 5


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for the request's headers; a connection waiting for
    them is kept out of uvicorn's connection count (see the module's doc)."""

    header_seconds = HEADER_SECONDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        state = self.server_state
        if not hasattr(state, "elmo_waiting"):
            state.elmo_waiting = OrderedDict()  # connections waiting for headers, oldest first
        self._waiting: OrderedDict = state.elmo_waiting

    # ---------------------------------------------------------------- waiting for headers
    def _wait_for_headers(self) -> None:
        """This connection has no request under way: out of the count, a deadline set."""
        if self in self._waiting or self.transport is None or self.transport.is_closing():
            return
        self.connections.discard(self)
        self._waiting[self] = None
        self._header_timer = self.loop.call_later(self.header_seconds, self._headers_too_late)
        cap = self.limit_concurrency
        while cap is not None and len(self._waiting) > cap:
            oldest = next(iter(self._waiting))
            oldest._close_waiting()

    def _headers_came(self) -> None:
        if self not in self._waiting:
            return
        del self._waiting[self]
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if not self.transport.is_closing():
            self.connections.add(self)

    def _headers_too_late(self) -> None:
        self._header_timer = None
        if self in self._waiting and self.conn.their_state is h11.IDLE:
            self._close_waiting()

    def _close_waiting(self) -> None:
        self._waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    # ---------------------------------------------------------------- uvicorn's hooks
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a request's headers came: it is under way
            self._headers_came()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self._wait_for_headers()  # kept alive, waiting for the next request

    def connection_lost(self, exc) -> None:
        self._waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def shutdown(self) -> None:
        self._waiting.pop(self, None)
        super().shutdown()


def _close_all_waiting(server_state) -> None:
    """Close the connections of a server that wait for a request's headers. On the server's
    event loop only: a transport closed from another thread crashes uvloop (a segfault)."""
    for connection in list(getattr(server_state, "elmo_waiting", ())):
        connection._close_waiting()


class Server(uvicorn.Server):
    """uvicorn's server that also closes, when it shuts down, the connections waiting for a
    request's headers (uvicorn's shutdown tells only the connections it counts). Stop it as any
    uvicorn server, by setting ``should_exit``, from any thread."""

    async def shutdown(self, sockets=None) -> None:
        _close_all_waiting(self.server_state)
        await super().shutdown(sockets)


def server_config(app, **options):
    """The ``uvicorn.Config`` of ``elmo serve`` for ``app``: the guarded h11 protocol, its
    header bound and keep-alive timeout; ``options`` go to ``uvicorn.Config`` as they are."""
    options = {"http": GuardedH11Protocol, "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
               "timeout_keep_alive": KEEP_ALIVE_SECONDS, **options}
    return uvicorn.Config(app, **options)


__all__ = ["GuardedH11Protocol", "HEADER_SECONDS", "KEEP_ALIVE_SECONDS", "MAX_HEADER_BYTES", "Server",
           "server_config"]
