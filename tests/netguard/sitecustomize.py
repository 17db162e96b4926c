"""Put this folder on ``PYTHONPATH`` of a subprocess: any name lookup or IP connection it tries
prints ``NETWORK ATTEMPT ...`` and exits 99, so a test proves a refusal came before any connection."""

import os
import socket
import sys

_connect = socket.socket.connect


def _refuse(*args, **kwargs):
    sys.stderr.write(f"NETWORK ATTEMPT {args!r}\n")
    os._exit(99)


def _guarded(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _refuse(address)
    return _connect(self, address)


socket.getaddrinfo = _refuse
socket.create_connection = _refuse
socket.socket.connect = _guarded
