"""Walkthrough: two nodes on one PostgreSQL database behind one identity provider.

Both nodes serve the same resource (as behind a load balancer) and trust the same issuer:
a client discovers the provider from the Protected Resource Metadata, obtains a token for
the resource with the client-credentials grant, creates a task on node A and reads it on
node B with the same token. The tenant comes from the `org_id` claim: another
organisation's token does not find the task. A token for another resource, one from an
untrusted issuer and one lacking a scope are refused, with the challenges the MCP
authorization specification asks for.
"""

import base64
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

from idp import Client, IdentityProvider
from snodo_client import GUESTS, PG_URL, SNODO, Server, check, node_config, postgres_available

RESOURCE = "https://mcp.example.com/mcp"
SCHEMA = f"snodo_walkthrough_oauth_{os.getpid()}"

if not postgres_available("the OAuth walkthrough"):
    sys.exit(0)

idp = IdentityProvider({
    "acme-reports": Client("acme-secret", claims={"org_id": "acme"}),
    "globex-etl": Client("globex-secret", claims={"org_id": "globex"}),
})
work = tempfile.mkdtemp(prefix="snodo-oauth-")


def config(node):
    store = {"kind": "postgres", "url": PG_URL, "schema": SCHEMA}
    return node_config(work, node, store, [f"{GUESTS}/fixtures.wasm"], f"""[auth.oauth]
resource = "{RESOURCE}"

{idp.trusted_as("org_id")}
[auth.scopes]
tools_call = ["tools:call"]
tasks_get = ["tasks:read"]
tasks_cancel = ["tasks:write"]
""")


def raw(server, method, params, token, rid=1):
    """A JSON-RPC request with `token` as bearer: (status, challenge, body)."""
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    name = params.get("name") or params.get("taskId")
    if name:
        headers["Mcp-Name"] = name
    if token:
        headers["Authorization"] = f"Bearer {token}"
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}), headers)
    r = c.getresponse()
    body = r.read()
    return r.status, r.getheader("www-authenticate") or "", json.loads(body) if body else None


def fetch_json(url, form=None, basic=None):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    headers = {}
    body = None
    if form is not None:
        body = urllib.parse.urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if basic:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
    c.request("POST" if form is not None else "GET", u.path, body, headers)
    r = c.getresponse()
    return r.status, json.loads(r.read())


def token_for(client, secret, scope):
    """What an MCP client does after a 401: metadata, then the token endpoint, for RESOURCE."""
    status, meta = fetch_json(f"{idp.issuer}/.well-known/oauth-authorization-server")
    check(status == 200, "the issuer publishes its authorization-server metadata")
    status, answer = fetch_json(
        meta["token_endpoint"],
        form={"grant_type": "client_credentials", "resource": RESOURCE, "scope": scope},
        basic=(client, secret),
    )
    check(status == 200, f"the provider issues {client} a token for the resource")
    return answer["access_token"]


a = b = None
try:
    a_conf, b_conf = config("node-a"), config("node-b")
    out = subprocess.run([SNODO, "migrate", "--config", a_conf], capture_output=True, text=True)
    check(out.returncode == 0, f"snodo migrate created schema {SCHEMA}" + ("" if out.returncode == 0 else f": {out.stderr}"))
    a = Server(config=a_conf).start()
    b = Server(config=b_conf).start()

    # 1. Without a token: 401, pointing at the metadata, which names the provider.
    for node in (a, b):
        status, challenge, _ = raw(node, "tools/list", {}, None)
        check(status == 401 and 'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"' in challenge,
              f"node {node.port}: no token is 401 with the metadata's address ({challenge})")
        c = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
        c.request("GET", "/.well-known/oauth-protected-resource/mcp")
        prm = json.loads(c.getresponse().read())
        check(prm["resource"] == RESOURCE and prm["authorization_servers"] == [idp.issuer],
              "both nodes publish the same Protected Resource Metadata")

    # 2. A token for the resource, from the client-credentials grant.
    acme = token_for("acme-reports", "acme-secret", "tools:call tasks:read tasks:write")
    status, _, body = raw(a, "tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "report"}}, acme)
    check(status == 200 and "taskId" in body["result"], "node A accepts the token and creates a task")
    task = body["result"]["taskId"]

    # 3. Node B accepts the same token and sees the same task, to the end.
    status, _, body = raw(b, "tasks/get", {"taskId": task}, acme)
    check(status == 200 and body["result"]["taskId"] == task, "node B accepts the same token and finds the task")
    for _ in range(600):
        status, _, body = raw(b, "tasks/get", {"taskId": task}, acme)
        if body["result"]["status"] == "completed":
            break
        time.sleep(0.05)
    check(body["result"]["status"] == "completed", "the task completes, as read on node B")

    # 4. The tenant comes from org_id: globex's token does not find acme's task.
    globex = token_for("globex-etl", "globex-secret", "tasks:read")
    status, _, body = raw(b, "tasks/get", {"taskId": task}, globex)
    check("error" in body, f"another organisation's token does not find the task ({body.get('error')})")

    # 5. Refusals: another resource's audience, an untrusted issuer, a missing scope.
    other = idp.sign({"sub": "acme-reports", "aud": "https://other.example.com/mcp", "org_id": "acme", "scope": "tasks:read"})
    status, challenge, _ = raw(a, "tasks/get", {"taskId": task}, other)
    check(status == 401 and 'error="invalid_token"' in challenge, "a token for another resource is refused")
    stranger = IdentityProvider({})
    forged = stranger.sign({"sub": "acme-reports", "aud": RESOURCE, "org_id": "acme", "scope": "tasks:read"})
    stranger.close()
    status, _, _ = raw(b, "tasks/get", {"taskId": task}, forged)
    check(status == 401, "a token from an issuer the nodes do not trust is refused")
    status, challenge, _ = raw(a, "tools/call", {"name": "greet", "arguments": {"name": "x"}}, globex)
    check(status == 403 and 'error="insufficient_scope"' in challenge and 'scope="tools:call"' in challenge,
          f"a token without tools:call is 403 naming the scope ({challenge})")
    print("OK: two nodes accept the same tokens; audience, issuer, tenant and scope are enforced")
finally:
    for node in (a, b):
        if node:
            node.stop()
    idp.close()
    if shutil.which("psql"):
        subprocess.run(["psql", PG_URL, "-qc", f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
