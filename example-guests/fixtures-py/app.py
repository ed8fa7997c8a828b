"""The conformance fixture tools in Python: the seven tools the official suite's ten
`tasks-*` scenarios call, with the behaviour example-guests/fixtures gives them in Rust,
plus `open_ticket` (outbound HTTP, as example-guests/outbound has it), a resource, a
resource template and a prompt, built with snodo_guest."""

from typing import Annotated

from snodo_guest import Call, Context, Form, ModeChoice, RpcError, ToolResult, http, prompt, resource, tool
from snodo_guest.exports import *  # noqa: F401,F403  (the component's exports)


@tool(description="Greets someone by name (default: World)")
def greet(cx: Context, name: str = "World") -> str:
    return f"Hello, {name}!"


def _compute(cx: Context, seconds: float) -> bool:
    """Busy for `seconds` with a live guest, as a computation is: slices shorter than any
    sleep the host parks. `False` when cancelled."""
    left = seconds
    while left > 0:
        step = min(left, 0.05)
        if not cx.sleep(step):
            return False
        left -= step
    return not cx.is_cancelled()


def _slow_mode(arguments: dict, call: Call):
    if float(arguments.get("seconds") or 0) < 1:
        return "sync"
    return ModeChoice("optional")


@tool(mode="optional", mode_rule=_slow_mode, description="Computes for the given number of seconds")
def slow_compute(cx: Context, seconds: float = 0, label: str = "computation") -> ToolResult:
    seconds = min(max(seconds, 0.0), 3600.0)
    cx.set_status(f"computing {label}")
    if not _compute(cx, seconds):
        return ToolResult.error("slow_compute was cancelled")
    return ToolResult(f"Completed {label} after {seconds:g} seconds")


@tool(mode="required", description="A job that fails in its own domain")
def failing_job(cx: Context) -> ToolResult:
    _compute(cx, 1)
    return ToolResult.error("The job failed: the input data was rejected")


@tool(mode="required", description="Sleeps the host's durable sleep, then says which attempt woke")
def test_sleep(cx: Context, ms: int = 0) -> str:
    if not cx.sleep(ms / 1000):
        return ToolResult.error("test_sleep was cancelled")
    return f"woke on attempt {cx.attempt}"


@tool(mode="required", description="A job that fails with a protocol error")
def protocol_error_job(cx: Context) -> str:
    raise RpcError.internal("Internal error while processing the job")


@tool(mode="required", description="Deletes a file after asking for confirmation")
def confirm_delete(cx: Context, filename: str) -> str:
    answer = cx.elicit("confirm", Form(f"Delete {filename}?")
                       .boolean("confirm", "Confirm deletion").require("confirm"))
    if answer.accepted and answer.get("confirm") is not False:
        return f"Deleted {filename}"
    return f"Kept {filename}: deletion was not confirmed"


@tool(mode="required", description="Asks two questions at once")
def multi_input(cx: Context) -> str:
    a, b = cx.elicit_all([
        ("input-a", Form("What is your name?").string("name", "Name")),
        ("input-b", Form("Do you confirm?").boolean("confirm", "Confirm")),
    ])
    return f"Received both answers: {a.raw} and {b.raw}"


def _ask_name(cx: Context, arguments: dict) -> dict:
    answer = cx.elicit("user_name", Form("What is your name?").string("name", "Name").require("name"))
    return {**arguments, "name": answer.get("name") or "stranger"}


@tool(mode="required", prepare=_ask_name, description="Asks for a name, then greets asynchronously")
def test_tool_with_task(cx: Context, name: str = "stranger") -> str:
    return f"Hello, {name}! (async)"


@tool(mode="optional", description="Answers with the caller the host shows it and the attempt")
def test_whoami(cx: Context) -> dict:
    return {**cx.caller(), "attempt": cx.attempt,
            "elicitation": "elicitation" in cx.client_capabilities()}


@tool(mode="required", title="Open a ticket",
      description="Reads the ticket template, asks to confirm, then opens the ticket")
def open_ticket(cx: Context, base: str, title: str) -> ToolResult:
    try:
        template = http.get(f"{base}/template").error_for_status().text()
    except http.HttpError as e:
        return ToolResult.error(f"template: {e}")
    answer = cx.elicit("confirm-ticket", Form(f"Open the ticket {title!r}?")
                       .boolean("confirm", "Open it").require("confirm"))
    if not (answer.accepted and answer.get("confirm") is True):
        return ToolResult("The ticket was not opened")
    try:
        created = http.post(f"{base}/tickets", json={"title": title, "template": template}).error_for_status()
    except http.HttpError as e:
        return ToolResult.error(f"creating the ticket: {e}")
    return ToolResult(structured={"status": created.status, "ticket": created.json()})


@resource("test://static-text", name="static-text", mime_type="text/plain",
          description="A fixed text resource")
def static_text() -> str:
    return "This is the content of the static text resource."


@resource("test://template/{id}/data", name="template-data", mime_type="application/json",
          description="Data for one id", complete={"id": lambda value, context: [
              i for i in ("alpha", "beta", "gamma") if i.startswith(value)]})
def template_data(id: str) -> dict:
    return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}


@prompt(description="A prompt with arguments")
def test_prompt_with_arguments(arg1: Annotated[str, "First test argument"],
                               arg2: Annotated[str, "Second test argument"]) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
