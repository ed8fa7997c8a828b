"""The fixture server for the tests of the Python `mcp` 1.x SDK (the last release line with
2025-11-25's experimental tasks), which run in their own virtualenv: the same server the
other Python interop tests start (`interop/python/conftest.py`), loaded under its own name."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "snodo_interop_server", Path(__file__).resolve().parents[1] / "python" / "conftest.py"
)
_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server)

anyio_backend = _server.anyio_backend
server_url = _server.server_url
configured = _server.configured
HANDLES = _server.HANDLES
upstream = _server.upstream
calls = _server.calls
gateway_config = _server.gateway_config
