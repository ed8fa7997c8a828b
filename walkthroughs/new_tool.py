"""Walkthrough: what a tool author does first. `snodo new`, build the component, serve it,
then call the tool synchronously, with a confirmation (MRTR on the call), as a durable task
(its confirmation answered with tasks/update), and with bad arguments (-32602 on the call,
no task created)."""

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from snodo_client import ROOT, SNODO, Server, check


class Page(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args):
        pass

LONG_TEXT = " ".join(["word"] * 60)

work = tempfile.mkdtemp(prefix="snodo-new-")
try:
    crate = os.path.join(work, "word-counter")
    made = subprocess.run([SNODO, "new", "word-counter", "--path", crate], capture_output=True, text=True, check=True)
    check("cargo build --release --target wasm32-wasip2" in made.stdout
          and "snodo serve --component target/wasm32-wasip2/release/word_counter.wasm" in made.stdout,
          "snodo new prints the build and serve commands")
    # Only for speed: the example guests' lock and target directory, so the dependencies
    # they already compiled are reused. An author runs the printed command as is.
    shutil.copy(os.path.join(ROOT, "example-guests", "Cargo.lock"), crate)
    target = os.path.join(ROOT, "target", "guests")
    subprocess.run(["cargo", "build", "--release", "--target", "wasm32-wasip2", "--quiet", "--target-dir", target],
                   cwd=crate, check=True)
    component = os.path.join(target, "wasm32-wasip2", "release", "word_counter.wasm")
    check(os.path.exists(component), "the crate builds into a component")

    server = Server("--component", component).start()
    try:
        listed = server.rpc("tools/list", {})["tools"]
        schema = listed[0]["inputSchema"]
        check(listed[0]["name"] == "count_words" and schema["required"] == ["text"]
              and schema["properties"]["text"]["description"] == "The text whose words to count.",
              "the input schema is derived from the Args type, doc comments included")

        sync = server.rpc("tools/call", {"name": "count_words", "arguments": {"text": "one two three"}}, caps={})
        check(sync["structuredContent"] == {"words": 3, "characters": 13}, "a short text is counted on the call")

        asked = server.rpc("tools/call", {"name": "count_words", "arguments": {"text": LONG_TEXT}},
                           caps={"elicitation": {}})
        check(asked["resultType"] == "input_required" and "confirm" in asked["inputRequests"],
              "a long text asks for confirmation (input_required on the call)")
        answered = server.rpc("tools/call", {
            "name": "count_words", "arguments": {"text": LONG_TEXT},
            "inputResponses": {"confirm": {"action": "accept", "content": {"go": True}}},
            "requestState": asked["requestState"]}, caps={"elicitation": {}})
        check(answered["structuredContent"]["words"] == 60, "the confirmed call answers with the count")

        task = server.call("count_words", {"text": LONG_TEXT})
        check(task["resultType"] == "task", "with tasks declared, a long text becomes a durable task")
        waiting = server.wait(task["taskId"], lambda t: t["status"] == "input_required", "input_required")
        server.rpc("tasks/update", {"taskId": task["taskId"], "inputResponses": {
            "confirm": {"action": "accept", "content": {"go": True}}}})
        done = server.wait(task["taskId"], lambda t: t["status"] == "completed", "completed")
        check(done["result"]["structuredContent"]["words"] == 60 and "confirm" in waiting["inputRequests"],
              "the task asks, is answered with tasks/update, and completes")

        def raw_call(arguments):
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                "name": "count_words", "arguments": arguments, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}}
            c.request("POST", "/mcp", json.dumps(body), {
                "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call", "Mcp-Name": "count_words"})
            return json.loads(c.getresponse().read())

        before = server.metrics().get("snodo_tasks_created_total")
        for bad in [{"text": 5}, {}, {"txt": LONG_TEXT}]:
            error = raw_call(bad).get("error", {})
            check(error.get("code") == -32602 and "count_words" in error.get("message", ""),
                  f"bad arguments {json.dumps(bad)[:40]} are -32602 on the call ({error.get('message', '')[:90]})")
        check(before == 1 and server.metrics().get("snodo_tasks_created_total") == before,
              "no task was created for them (one task in all, the confirmed one)")
        refused = server.rpc("tools/call", {"name": "check_url", "arguments": {"url": "https://example.com/"}}, caps={})
        check(refused.get("isError") and "HttpRequestDenied" in refused["content"][0]["text"],
              "check_url is refused until the configuration allows its host")
    finally:
        server.stop()

    # Allowed by a configuration, check_url reaches a local page through the host.
    page = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=page.serve_forever, daemon=True).start()
    conf = os.path.join(work, "snodo.toml")
    with open(conf, "w") as f:
        f.write(f"""listen = "127.0.0.1:0"
[store]
kind = "memory"
[[components]]
path = "{component}"
[tools.check_url]
allowed_outbound_hosts = ["http://127.0.0.1:{page.server_port}"]
""")
    server = Server(config=conf).start()
    try:
        got = server.rpc("tools/call", {"name": "check_url",
                                        "arguments": {"url": f"http://127.0.0.1:{page.server_port}/"}}, caps={})
        check(got.get("structuredContent") == {"status": 200, "bytes": 5},
              "with allowed_outbound_hosts, check_url fetches the page through the host")
        print("new_tool walkthrough: ok")
    finally:
        server.stop()
        page.shutdown()
finally:
    shutil.rmtree(work, ignore_errors=True)
