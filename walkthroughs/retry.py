"""Walkthrough: retries follow an exact delay list, visible in the status messages."""

import os
import time

from snodo_client import Server, check, inspect

server = Server("--retry", "flaky=300,600").start()
try:
    started = time.time()
    task_id = server.call("flaky", {"succeed_on_attempt": 3})["taskId"]
    seen = []
    done = server.wait(task_id, lambda t: t["status"] in ("completed", "failed"), "finished", seen=seen)
    elapsed = time.time() - started
    check(done["status"] == "completed", "the third attempt succeeded")
    check(done["result"]["content"][0]["text"] == "succeeded on attempt 3", "the result says attempt 3")
    check("attempt 1 failed; retrying" in seen and "attempt 2 failed; retrying" in seen,
          f"both retries showed in the status message: {seen}")
    check(elapsed >= 0.9, f"the delays (300 ms, then 600 ms) were waited: {elapsed:.2f} s in all")
finally:
    server.stop()
facts = inspect(os.path.join(server.data, "tasks.redb"), task_id)
check(facts["retry"]["policyMs"] == [300, 600] and facts["retry"]["consumed"] == 2, "the persisted policy was used up exactly")
print("retry walkthrough: ok")
