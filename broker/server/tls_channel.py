"""TlsChannel: TLS over one of the socket server's raw non-blocking sockets (Kafka's SslTransportLayer).

An ``ssl.SSLObject`` works between two memory BIOs; this channel moves ciphertext between them and the socket
itself, so the socket server keeps its own reading (``recv_into`` into its receive buffer, under its memory pool),
its MSG_PEEK checks for a client gone and its timeouts. The calls mirror the plain socket's:

- ``recv_into(view, n)`` returns the plaintext bytes read, 0 at the end of the stream, and raises
  BlockingIOError when neither the TLS engine nor the socket has any (the caller then waits for the socket);
- ``sendall(data)`` and ``send_region(fd, position, size)`` encrypt in large pieces (``WRITE_CHUNK``) and send each
  with one ``sock_sendall``: sendfile cannot encrypt, so a file region is read with ``os.preadv`` into one reused
  buffer, and the per-record work (16 KiB TLS records) stays inside OpenSSL.

TLS errors after the handshake end the connection as a ConnectionError; a failed handshake raises
:class:`TlsHandshakeFailed`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Callable

__all__ = ["TlsChannel", "TlsHandshakeFailed", "WRITE_CHUNK"]

# Plaintext encrypted and handed to the socket at once: large enough that the Python work per write is small
# against the encryption, small enough to bound the ciphertext held in memory per connection.
WRITE_CHUNK = 1 << 20
# Ciphertext read from the socket at once (a TLS record is at most ~16.7 KiB).
_RAW_READ = 256 * 1024


class TlsHandshakeFailed(ConnectionError):
    """The client's TLS handshake failed (not TLS, an untrusted or missing client certificate, no common
    protocol or cipher)."""


class TlsChannel:
    """The TLS side of one server connection; ``handshake()`` first, then the socket-like calls."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, loop: asyncio.AbstractEventLoop,
                 ready: Callable[..., object]) -> None:
        self.sock = sock
        self.loop = loop
        self._ready = ready
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        # Ciphertext the engine produced while reading (a TLS 1.3 key update's answer), sent with the next write.
        self._unsent = b""
        self._region_buffer: bytearray | None = None

    # -- handshake --------------------------------------------------------------------------------

    async def handshake(self) -> None:
        """Run the server side of the handshake; TlsHandshakeFailed if it fails, ConnectionError if the client
        leaves."""
        while True:
            try:
                self.ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._send_outgoing()
                await self._receive_ciphertext()
            except ssl.SSLError as exc:
                # Send the alert telling the client why, if it still listens.
                try:
                    await self._send_outgoing()
                except OSError:
                    pass
                raise TlsHandshakeFailed(_describe(exc)) from None
        await self._send_outgoing()

    async def _receive_ciphertext(self) -> None:
        while True:
            try:
                data = self.sock.recv(_RAW_READ)
            except (BlockingIOError, InterruptedError):
                await self._ready(self.loop, self.sock, self.loop.add_reader, self.loop.remove_reader)
                continue
            if not data:
                raise ConnectionError("the client closed the connection during the TLS handshake")
            self._incoming.write(data)
            return

    async def _send_outgoing(self) -> None:
        data = self._unsent + self._outgoing.read() if self._unsent else self._outgoing.read()
        self._unsent = b""
        if data:
            await self.loop.sock_sendall(self.sock, data)

    # -- after the handshake ----------------------------------------------------------------------

    @property
    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER), if it sent one."""
        return self.ssl.getpeercert(binary_form=True)

    def recv_into(self, view: memoryview, size: int) -> int:
        """Plaintext into ``view`` (at most ``size`` bytes): the count, 0 at the end of the stream; BlockingIOError
        when nothing can be read now."""
        sslobj, incoming = self.ssl, self._incoming
        while True:
            try:
                received = sslobj.read(size, view)
            except ssl.SSLWantReadError:
                data = self.sock.recv(_RAW_READ)  # BlockingIOError goes to the caller, which waits for the socket
                if not data:
                    return 0
                incoming.write(data)
                continue
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS error: {_describe(exc)}") from None
            # One read gives one TLS record (16 KiB at most): take the rest of the ciphertext already received too,
            # so that a large request costs one pass of the socket server's read loop, not one per record.
            while received < size and incoming.pending:
                try:
                    more = sslobj.read(size - received, view[received:])
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    break
                except ssl.SSLError as exc:
                    raise ConnectionError(f"TLS error: {_describe(exc)}") from None
                received += more
            if self._outgoing.pending:
                self._unsent += self._outgoing.read()
            return received

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send ``data`` in pieces of WRITE_CHUNK."""
        view = memoryview(data)
        write, read, sendall, sock = self.ssl.write, self._outgoing.read, self.loop.sock_sendall, self.sock
        try:
            for start in range(0, len(view), WRITE_CHUNK):
                write(view[start:start + WRITE_CHUNK])
                if self._unsent:
                    await self._send_outgoing()
                else:
                    await sendall(sock, read())
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS error: {_describe(exc)}") from None
        finally:
            view.release()

    async def send_region(self, fd: int, position: int, size: int) -> None:
        """Send ``size`` bytes of the file ``fd`` from ``position``, read in pieces of WRITE_CHUNK."""
        if self._region_buffer is None:
            self._region_buffer = bytearray(WRITE_CHUNK)
        buffer = memoryview(self._region_buffer)
        try:
            while size > 0:
                piece = buffer[:min(size, WRITE_CHUNK)]
                read = os.preadv(fd, [piece], position)
                piece.release()
                if read == 0:
                    raise ConnectionError(f"file region ended {size} bytes early")
                await self.sendall(buffer[:read])
                position += read
                size -= read
        finally:
            buffer.release()

    def release_buffers(self) -> None:
        """Give the file-region buffer back while the connection is quiet."""
        self._region_buffer = None


def _describe(exc: ssl.SSLError) -> str:
    """An SSLError in one line: OpenSSL's reason (``CERTIFICATE_VERIFY_FAILED``, ``WRONG_VERSION_NUMBER``)."""
    verify = getattr(exc, "verify_message", None)
    reason = getattr(exc, "reason", None) or type(exc).__name__
    return f"{reason} ({verify})" if verify else str(reason)
