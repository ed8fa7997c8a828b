"""An upstream MCP server for the gateway tests, built with FastMCP: a small ticket desk.

Every call it receives is appended to a log file (one JSON line: the tool, its arguments,
the Idempotency-Key and Authorization headers it came with), so that a test can judge how
many times a call reached it. Usage: fastmcp_tickets.py PORT LOG [TOKEN]; with TOKEN, a
request without `Authorization: Bearer TOKEN` is refused with 401."""

import json
import sys
import time

from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension
from mcp_types import InputRequiredResult
from fastmcp.server.dependencies import get_http_headers
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

PORT = int(sys.argv[1])
LOG = sys.argv[2]
TOKEN = sys.argv[3] if len(sys.argv) > 3 else None

mcp = FastMCP("tickets")
# 2026-07-28 Tasks (SEP-2663) on FastMCP's in-memory task engine: `report` runs as a task.
mcp.add_extension(TasksExtension(url="memory://"))


def record(tool, arguments):
    headers = get_http_headers(include_all=True)
    line = {
        "tool": tool,
        "arguments": arguments,
        "idempotency_key": headers.get("idempotency-key"),
        "authorization": headers.get("authorization"),
        "at": time.time(),
    }
    with open(LOG, "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()


@mcp.tool
def create_ticket(title: str, priority: int = 3) -> str:
    """Opens a ticket and says its number."""
    record("create_ticket", {"title": title, "priority": priority})
    with open(LOG) as f:
        n = sum(1 for line in f if json.loads(line)["tool"] == "create_ticket")
    return f"ticket {n}: {title} (priority {priority})"


@mcp.tool
def slow_echo(text: str, seconds: float) -> str:
    """Waits, then answers with the text."""
    record("slow_echo", {"text": text, "seconds": seconds})
    time.sleep(seconds)
    return f"echo: {text}"


@mcp.tool(task=True)
async def report(name: str, seconds: float) -> str:
    """Builds a report in the background (an upstream task), taking `seconds`."""
    record("report", {"name": name, "seconds": seconds})
    import asyncio
    await asyncio.sleep(seconds)
    return f"report {name} is ready"


@mcp.tool
def refuse(reason: str) -> str:
    """Always fails, with the reason."""
    record("refuse", {"reason": reason})
    raise ValueError(f"refused: {reason}")


@mcp.tool
def refund(amount: int, ctx: Context) -> str:
    """Refunds an amount once a person approves it (asked by the upstream itself, as an
    incomplete result: the 2026-07-28 multi-round-trip request)."""
    answers = ctx.input_responses
    if not answers or "approve" not in answers:
        return InputRequiredResult(input_requests={"approve": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": f"Refund {amount}?", "requestedSchema": {
                "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
        }})
    answer = answers["approve"]
    answer = answer.model_dump() if hasattr(answer, "model_dump") else answer
    approved = answer.get("action") == "accept" and (answer.get("content") or {}).get("ok") is True
    record("refund", {"amount": amount, "approved": approved})
    return f"refunded {amount}" if approved else f"refund of {amount} declined"


@mcp.tool
def busy_once(label: str) -> str:
    """Answers at once; its first call under an Idempotency-Key is refused with HTTP 503."""
    record("busy_once", {"label": label})
    return f"done {label}"


# Idempotency keys of busy_once calls already refused once.
REFUSED = set()


class Bearer:
    """Refuses a request without the expected bearer token, and the first busy_once call
    under each Idempotency-Key with HTTP 503 (logged as `busy`)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and TOKEN is not None:
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            if auth != f"Bearer {TOKEN}":
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        if scope["type"] == "http" and scope["method"] == "POST":
            body, more = b"", True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            key = dict(scope["headers"]).get(b"idempotency-key", b"").decode()
            if b'"busy_once"' in body and b'"tools/call"' in body and key not in REFUSED:
                REFUSED.add(key)
                with open(LOG, "a") as f:
                    f.write(json.dumps({"tool": "busy", "arguments": {}, "idempotency_key": key,
                                        "authorization": None, "at": time.time()}) + "\n")
                await JSONResponse({"error": "busy"}, status_code=503)(scope, receive, send)
                return
            given = False

            async def replay():
                nonlocal given
                if not given:
                    given = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    import uvicorn

    app = mcp.http_app(path="/mcp", middleware=[Middleware(Bearer)])
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
