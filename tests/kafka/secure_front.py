"""A TLS and SASL/PLAIN front for the test broker, on loopback.

Tansu 0.6.0, the test broker, cannot serve either itself: its ``--cert``/``--key`` flags refuse
each other and ``--authentication`` offers no SASL mechanism that librdkafka shares. So the
secured listener is this front: it ends TLS, answers the client's SASL handshake and login
itself (Kafka's SaslHandshake v0-1 and SaslAuthenticate v0-1), forwards the client's first
ApiVersions request to the broker (whose answer lists the SASL requests), then passes bytes
both ways untouched. The broker advertises the front's address, so every connection a client
makes, to the bootstrap server or to a partition's leader, comes through it.

A wrong password is refused with Kafka's SASL_AUTHENTICATION_FAILED and the connection closed;
a client that skips the login is disconnected, as a Kafka broker with SASL does.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading

__all__ = ["SecureFront"]

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58


def _frame(correlation_id: int, body: bytes) -> bytes:
    """A response: its size, the header (the correlation id) and ``body``."""
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def _string(s: bytes | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s)) + s


class SecureFront:
    """Listens on ``127.0.0.1:port`` and forwards to ``upstream`` (host, port).

    ``users``: name -> password for SASL/PLAIN, or None for TLS alone. ``ssl_context``: the
    server side of TLS, or None for plaintext. ``failed_logins`` counts refused logins."""

    def __init__(self, upstream: tuple[str, int], port: int, users: dict[str, str] | None, ssl_context: ssl.SSLContext | None) -> None:
        self.upstream = upstream
        self.port = port
        self.users = users
        self.ssl_context = ssl_context
        self.failed_logins = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._tasks: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._serve, name="kafka-secure-front", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the Kafka test front did not start")

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", self.port, ssl=self.ssl_context)
        )
        self._started.set()
        self._loop.run_forever()

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_writer = None
        try:
            up_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            if self.users is None or await self._login(reader, writer, up_reader, upstream_writer):
                await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, upstream_writer):
                if w is not None:
                    w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    @staticmethod
    async def _request(reader: asyncio.StreamReader) -> bytes:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        """Serve requests until a SASL/PLAIN login succeeds (True) or is refused (False)."""
        assert self.users is not None
        while True:
            request = await self._request(reader)
            api_key, version, correlation_id = struct.unpack(">hhi", request[:8])
            client_id_len = struct.unpack(">h", request[8:10])[0]
            body = request[10 + max(client_id_len, 0):]
            if api_key == API_VERSIONS:
                up_writer.write(struct.pack(">i", len(request)) + request)
                await up_writer.drain()
                answer = await self._request(up_reader)
                writer.write(struct.pack(">i", len(answer)) + answer)
            elif api_key == SASL_HANDSHAKE:
                n = struct.unpack(">h", body[:2])[0]
                mechanism = body[2:2 + n]
                error = 0 if mechanism == b"PLAIN" else UNSUPPORTED_SASL_MECHANISM
                writer.write(_frame(correlation_id, struct.pack(">hi", error, 1) + _string(b"PLAIN")))
                if error:
                    await writer.drain()
                    return False
            elif api_key == SASL_AUTHENTICATE:
                n = struct.unpack(">i", body[:4])[0]
                parts = body[4:4 + n].split(b"\0")  # authzid NUL user NUL password
                ok = len(parts) == 3 and self.users.get(parts[1].decode()) == parts[2].decode()
                message = None if ok else b"Authentication failed: Invalid username or password"
                out = struct.pack(">h", 0 if ok else SASL_AUTHENTICATION_FAILED) + _string(message) + struct.pack(">i", 0)
                if version >= 1:
                    out += struct.pack(">q", 0)  # session lifetime: no re-authentication
                writer.write(_frame(correlation_id, out))
                await writer.drain()
                if not ok:
                    self.failed_logins += 1
                return ok
            else:
                return False  # a request before the login: disconnect, as Kafka does
            await writer.drain()
