"""Archives in an S3-compatible bucket: moto's server (from PyPI) stands in for S3. A node on
redb archives a finished task to the bucket when its TTL runs out, and only then removes it;
the object is one line of JSON under the task's id, and `snodo archive show` reads it back
after the store no longer has it."""

import http.client
import json
import os
import subprocess

import anyio
import boto3
import pytest
from moto.server import ThreadedMotoServer

from conftest import ALICE, ALICE_AND_OPS, OPS, SNODO, configured, free_port, start_task

pytestmark = pytest.mark.anyio

BUCKET = "snodo-archive"
PREFIX = "snodo/tasks"
# moto takes any credentials; the node reads them from the environment, as it would AWS's.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def bucket():
    """moto's S3 server on a free port with an empty bucket: yields its URL and a client."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        s3 = boto3.client(
            "s3", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )
        s3.create_bucket(Bucket=BUCKET)
        yield url, s3
    finally:
        server.stop()


def config(url):
    return ALICE_AND_OPS + f"""
[runner]
park_after_ms = 200

[tools.slow_compute]
ttl_ms = 3000

[archive]
interval_ms = 200

[archive.s3]
bucket = "{BUCKET}"
prefix = "{PREFIX}"
region = "us-east-1"
endpoint = "{url}"
allow_http = true
"""


def status_of(port, task_id):
    """The admin API's answer for the task: its HTTP status and body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", f"/admin/v1/tasks/{task_id}", headers={"authorization": f"Bearer {OPS}"})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


async def test_a_finished_task_is_archived_to_a_bucket_then_reaped_and_read_back(tmp_path, bucket, monkeypatch):
    url, s3 = bucket
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    store = {"kind": "redb", "path": str(tmp_path / "tasks.redb")}
    with anyio.fail_after(120), configured(tmp_path, store, config(url)) as (port, _):
        task_id = start_task(port, "slow_compute", {"seconds": 1, "label": "q3"}, ALICE)
        key = f"{PREFIX}/{task_id[-2:]}/{task_id}.ndjson"
        # Kept, then removed: once the object is there and the store no longer has the task,
        # the reaper has done both, in that order (a removal never comes first).
        while True:
            listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX).get("Contents", [])
            gone = status_of(port, task_id)[0] == 404
            if listed and gone:
                break
            await anyio.sleep(0.1)
        assert [o["Key"] for o in listed] == [key], "one object, under the task's id"
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert body.endswith(b"\n") and body.count(b"\n") == 1, "one line"
        record = json.loads(body)
        assert record["format"] == "snodo.archive.v1"
        task = record["task"]
        assert (task["id"], task["tenant"], task["tool"], task["status"]) == (task_id, "acme", "slow_compute", "completed")
        assert task["arguments"] == {"seconds": 1, "label": "q3"}
        assert task["outcome"]["result"]["content"][0]["text"] == "Completed q3 after 1 seconds"
        events = [e["event"] for e in task["history"]["entries"]]
        assert events[0] == "created" and events[-1] == "completed", events
        assert "journal" not in record, "journals are kept only when asked"

        # Read back with the CLI, from the bucket, as `snodo tasks show` prints a stored task.
        conf = str(tmp_path / "snodo.toml")
        shown = subprocess.run([str(SNODO), "archive", "show", task_id, "--config", conf],
                               capture_output=True, text=True, env=dict(os.environ), timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"task      {task_id}" in shown.stdout, shown.stdout
        assert "status    completed" in shown.stdout, shown.stdout
        assert "result    Completed q3 after 1 seconds" in shown.stdout, shown.stdout
        as_json = subprocess.run([str(SNODO), "archive", "show", task_id, "--config", conf, "--json"],
                                 capture_output=True, text=True, env=dict(os.environ), timeout=60)
        assert json.loads(as_json.stdout) == record
        unknown = "0" * 32
        missing = subprocess.run([str(SNODO), "archive", "show", unknown, "--config", conf],
                                 capture_output=True, text=True, env=dict(os.environ), timeout=60)
        assert missing.returncode == 1
        assert f"task {unknown} is not in the archive at s3://{BUCKET}/{PREFIX}" in missing.stderr, missing.stderr
