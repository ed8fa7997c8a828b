"""Walkthrough: tools in Python and JavaScript. `snodo new --lang python` scaffolds a tool,
its one build command builds it, and the component is served unchanged: a long text asks for
confirmation as a durable task, the server is killed with SIGKILL while the task waits, and
after the restart the answer completes it, once. Then `snodo new --lang js` and its build
command make a component that serves the same tool, its resource and its prompt."""

import os
import subprocess
import tempfile

from snodo_client import ROOT, SNODO, Server, check, inspect

LONG_TEXT = " ".join(["word"] * 60)
work = tempfile.mkdtemp(prefix="snodo-polyglot-")

# --- Python
project = os.path.join(work, "py-counter")
made = subprocess.run([SNODO, "new", "py-counter", "--lang", "python", "--path", project],
                      capture_output=True, text=True, check=True)
check("./build.sh" in made.stdout and "snodo serve --component py_counter.wasm" in made.stdout,
      "snodo new --lang python prints the one build command and the serve command")
# Only for speed: the componentize-py scripts/guests installed (the same pinned version);
# an author's first ./build.sh installs it into the project's .venv.
env = dict(os.environ, COMPONENTIZE_PY=os.path.join(ROOT, ".tools", "cpy", "bin", "componentize-py"))
subprocess.run(["./build.sh"], cwd=project, env=env, check=True, capture_output=True)
component = os.path.join(project, "py_counter.wasm")
check(os.path.exists(component), "./build.sh builds the Python app into a component")

server = Server("--component", component).start()
data = server.data
listed = server.rpc("tools/list", {})["tools"]
schema = listed[0]["inputSchema"]
check(listed[0]["name"] == "count_words" and schema["required"] == ["text"]
      and schema["properties"]["text"]["description"] == "The text whose words to count."
      and listed[0]["outputSchema"]["properties"]["words"] == {"type": "integer"},
      "the input and output schemas come from the Python type hints")
sync = server.rpc("tools/call", {"name": "count_words", "arguments": {"text": "one two three"}}, caps={})
check(sync["structuredContent"] == {"words": 3, "characters": 13}, "a short text is counted on the call")

task = server.call("count_words", {"text": LONG_TEXT})
check(task["resultType"] == "task", "a long text becomes a durable task")
waiting = server.wait(task["taskId"], lambda t: t["status"] == "input_required", "input_required")
check("confirm" in waiting["inputRequests"], "the Python tool asks for confirmation")
server.kill9()
print("killed the server with SIGKILL while the task waits for its answer")

server = Server("--component", component, data=data).start()
try:
    still = server.get(task["taskId"])
    check(still["status"] == "input_required" and "confirm" in still["inputRequests"],
          "after the restart the task still waits, with the same question")
    server.rpc("tasks/update", {"taskId": task["taskId"], "inputResponses": {
        "confirm": {"action": "accept", "content": {"go": True}}}})
    done = server.wait(task["taskId"], lambda t: t["status"] == "completed", "completed")
    check(done["result"]["structuredContent"] == {"words": 60, "characters": len(LONG_TEXT)},
          "the answer given after the restart completes the task")
    about = server.rpc("resources/read", {"uri": "docs://py-counter"})["contents"][0]
    check(about["text"].startswith("count_words counts"), "the Python resource is read")
    got = server.rpc("prompts/get", {"name": "count_this", "arguments": {"text": "a b"}})
    check(got["messages"][0]["content"]["text"].endswith("a b"), "the Python prompt is served")
finally:
    server.stop()
facts = inspect(os.path.join(data, "tasks.redb"), task["taskId"])
check(facts["status"] == "completed", "one terminal state in the store")

# --- JavaScript
project = os.path.join(work, "js-counter")
made = subprocess.run([SNODO, "new", "js-counter", "--lang", "js", "--path", project],
                      capture_output=True, text=True, check=True)
check("npm install && npm run build" in made.stdout, "snodo new --lang js prints the build command")
node_bin = os.path.dirname(subprocess.run([os.path.join(ROOT, "scripts", "node"), "--path"],
                                          capture_output=True, text=True, check=True).stdout.strip())
env = dict(os.environ, PATH=node_bin + os.pathsep + os.environ["PATH"])
subprocess.run("npm install --no-audit --no-fund --loglevel=error && npm run build --silent", shell=True,
               cwd=project, env=env, check=True, capture_output=True)
component = os.path.join(project, "js_counter.wasm")
check(os.path.exists(component), "npm run build builds the JavaScript app into a component")
server = Server("--component", component).start()
try:
    listed = server.rpc("tools/list", {})["tools"]
    check(listed[0]["inputSchema"]["properties"]["text"]["type"] == "string",
          "the input schema comes from zod")
    sync = server.rpc("tools/call", {"name": "count_words", "arguments": {"text": "one two"}}, caps={})
    check(sync["structuredContent"] == {"words": 2, "characters": 7}, "the JavaScript tool answers on the call")
    task = server.call("count_words", {"text": LONG_TEXT})
    server.wait(task["taskId"], lambda t: t["status"] == "input_required", "input_required")
    server.rpc("tasks/update", {"taskId": task["taskId"], "inputResponses": {
        "confirm": {"action": "decline"}}})
    done = server.wait(task["taskId"], lambda t: t["status"] == "completed", "completed")
    check(done["result"]["isError"] is True and "not confirmed" in done["result"]["content"][0]["text"],
          "a declined confirmation ends the JavaScript task with the tool's own error")
    about = server.rpc("resources/read", {"uri": "docs://js-counter"})["contents"][0]
    check(about["text"].startswith("count_words counts"), "the JavaScript resource is read")
finally:
    server.stop()
print("polyglot walkthrough: ok")
