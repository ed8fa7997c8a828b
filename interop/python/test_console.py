"""The console in a real browser: Debian's chromium driven by Playwright (the system browser;
nothing is downloaded). An operator signs in with an admin token, filters the list, answers a
waiting task's form and watches it complete on a page that never reloads, and bulk-cancels a
filtered set after a confirmation. Forms without the session's CSRF token, or posted from
another origin, are refused. On the schedules page an operator sees a configured schedule's
next firings, fires it now and follows its task, and pauses and resumes it. On the webhooks
page an operator sees a delivery that failed every try as a dead letter and redelivers it to
a receiver that came back. The audit page lists the schedule's actions as done through the
console. Screenshots go to target/artifacts/console/."""

import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from conftest import ROOT, configured, free_port, start_task

CHROMIUM = os.environ.get("SNODO_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "target" / "artifacts" / "console"
ALICE = "alice-token-0123456789"
OPS = "acme-ops-token-0123456789"


def call_tool(port, name, arguments):
    """Starts a task of `name` as alice."""
    return start_task(port, name, arguments, ALICE)


class Receiver:
    """A webhook receiver on a free port that answers `status` and counts what it took."""

    def __init__(self):
        self.port = free_port()
        self.status = 503
        self.taken = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                if receiver.status == 204:
                    receiver.taken += 1
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hooks():
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture(scope="module")
def console(tmp_path_factory, hooks):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/browser installs Debian's chromium")
    work = tmp_path_factory.mktemp("console")
    store = {"kind": "redb", "path": work / "tasks.redb"}
    with configured(work, store, f"""[[auth.tokens]]
token = "{ALICE}"
tenant = "acme"
subject = "alice"

[[admin.tokens]]
token = "{OPS}"
tenant = "acme"
subject = "ops"

[[schedules]]
name = "new-year-greeting"
tool = "greet"
tenant = "acme"
arguments = {{ name = "Operator" }}
cron = "0 0 1 1 *"
zone = "Europe/Paris"

[webhooks]
allowed_hosts = ["http://127.0.0.1:{hooks.port}"]
retry_ms = [100]

[[webhooks.subscriptions]]
name = "acme-hooks"
tenant = "acme"
url = "http://127.0.0.1:{hooks.port}/hooks"
tools = ["test_whoami"]
""") as (port, _):
        yield port


@pytest.fixture(scope="module")
def browser():
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page, base):
    page.goto(f"{base}/console/tasks")
    expect(page).to_have_url(f"{base}/console/login?next=/console/tasks")
    # The field is found by its label, and the form is sent from the keyboard.
    page.get_by_label("Admin token or access token").fill(OPS)
    shot(page, "01-sign-in")
    page.get_by_label("Admin token or access token").press("Enter")
    expect(page).to_have_url(f"{base}/console/tasks")


def test_an_operator_filters_answers_live_and_bulk_cancels(console, browser):
    port = console
    base = f"http://127.0.0.1:{port}"
    waiting = call_tool(port, "confirm_delete", {"filename": "report.pdf"})
    slow = [call_tool(port, "slow_compute", {"seconds": 600}) for _ in range(2)]

    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, base)
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()
    for t in [waiting, *slow]:
        expect(page.locator(f'tr[data-task="{t}"]')).to_be_visible()
    shot(page, "02-list")

    # Filter: waiting for input, from the form's labelled select.
    page.get_by_label("Status").select_option("input_required")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(f"{base}/console/tasks?status=input_required&tool=&created_after=&created_before=")
    expect(page.locator(f'tr[data-task="{waiting}"]')).to_be_visible()
    for t in slow:
        expect(page.locator(f'tr[data-task="{t}"]')).to_have_count(0)
    expect(page.locator('[data-count="input_required"] strong')).to_have_text("1")
    shot(page, "03-filtered")

    # The list of confirm_delete tasks stays open in this tab; it must never reload.
    page.goto(f"{base}/console/tasks?tool=confirm_delete")
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    page.evaluate("window.__loadedOnce = true")
    row = page.locator(f'tr[data-task="{waiting}"]')
    expect(row.locator(".status")).to_have_text("waiting for input")

    # In a second tab: the task's page, its question as a form, answered.
    task = ctx.new_page()
    task.goto(f"{base}/console/tasks/{waiting}")
    expect(task.get_by_role("heading", name="Waiting on")).to_be_visible()
    expect(task.get_by_text("Delete report.pdf?")).to_be_visible()
    shot(task, "04-waiting-task")
    task.get_by_label("Confirm deletion (required)").check()
    task.get_by_role("button", name="Submit").click()
    expect(task.get_by_role("status")).to_have_text("Answer accepted.")
    expect(task.locator("[data-status]")).to_have_attribute("data-status", "completed", timeout=30_000)
    expect(task.locator('[data-event="input_answered"]')).to_be_visible()
    expect(task.locator('[data-event="completed"]')).to_be_visible()
    shot(task, "05-completed")

    # The first tab saw it complete live, without a reload.
    expect(row.locator(".status")).to_have_text("completed", timeout=30_000)
    assert page.evaluate("window.__loadedOnce") is True
    shot(page, "06-list-live")

    # A form without the session's CSRF token, or from another origin, is refused.
    forged = task.request.post(f"{base}/console/tasks/{slow[0]}/cancel",
                               form={"message": "forged"}, headers={"origin": base})
    assert forged.status == 403, forged.status
    foreign = task.request.post(f"{base}/console/tasks/{slow[0]}/cancel",
                                form={"message": "forged"}, headers={"origin": "http://evil.example"})
    assert foreign.status == 403, foreign.status

    # Bulk cancel: the filtered set, a preview with its count, a confirmation, a summary.
    page.goto(f"{base}/console/tasks?tool=slow_compute")
    page.get_by_role("link", name="Cancel every live task this filter selects…").click()
    expect(page.locator("[data-matched]")).to_have_text("2")
    shot(page, "07-bulk-preview")
    page.get_by_label("Reason").fill("nightly batch stopped")
    page.get_by_label("I want to cancel these 2 task(s)").check()
    page.get_by_role("button", name="Cancel them").click()
    expect(page.locator("[data-cancelled]")).to_have_attribute("data-cancelled", "2")
    shot(page, "08-bulk-done")
    page.goto(f"{base}/console/tasks?tool=slow_compute")
    for t in slow:
        expect(page.locator(f'tr[data-task="{t}"] .status')).to_have_text("cancelled")
    expect(page.locator('[data-count="cancelled"] strong')).to_have_text("2")

    # Signing out ends the session: the next page asks to sign in again.
    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{base}/console/tasks")
    expect(page).to_have_url(f"{base}/console/login?next=/console/tasks")
    ctx.close()


def test_an_operator_runs_pauses_and_resumes_a_schedule(console, browser):
    base = f"http://127.0.0.1:{console}"
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, base)
    page.get_by_role("link", name="Schedules").click()
    expect(page).to_have_url(f"{base}/console/schedules")
    row = page.locator('tr[data-schedule="new-year-greeting"]')
    expect(row).to_contain_text("0 0 1 1 * in Europe/Paris")
    expect(row).to_contain_text("configured")
    # The next firing is midnight on the first of January in Paris: 23:00 UTC the day before.
    expect(row.locator("ol li").first).to_contain_text("-12-31T23:00:00.000Z")
    expect(row).to_contain_text("not yet")
    shot(page, "09-schedules")

    # Run now: the task it made, followed to its result.
    row.get_by_role("button", name="Run now new-year-greeting").click()
    expect(page).to_have_url(re.compile(re.escape(f"{base}/console/tasks/") + "[0-9a-f]{32}$"))
    expect(page.locator("[data-status]")).to_have_attribute("data-status", "completed", timeout=30_000)
    expect(page.get_by_text("Hello, Operator!")).to_be_visible()
    task = page.url.rsplit("/", 1)[-1]
    shot(page, "10-schedule-run")

    page.goto(f"{base}/console/schedules")
    expect(row.get_by_role("link", name=task)).to_be_visible()
    expect(row.locator(".status-completed")).to_be_visible()
    row.get_by_role("button", name="Pause new-year-greeting").click()
    expect(page).to_have_url(f"{base}/console/schedules")
    expect(row).to_contain_text("paused")
    expect(row.locator("ol li")).to_have_count(0)
    row.get_by_role("button", name="Resume new-year-greeting").click()
    expect(row.locator("ol li")).to_have_count(5)
    shot(page, "11-schedule-resumed")

    # The audit: each of those actions, newest first, as done through the console.
    page.get_by_role("link", name="Audit").click()
    expect(page).to_have_url(f"{base}/console/audit")
    rows = page.locator("tr[data-audit]")
    ours = [r for r in rows.all_inner_texts() if "new-year-greeting" in r]
    assert [next(a for a in ("schedule.resume", "schedule.pause", "schedule.run") if a in r) for r in ours[:3]] == [
        "schedule.resume", "schedule.pause", "schedule.run"], ours
    assert all("console" in r and "ok" in r for r in ours[:3]), ours
    shot(page, "11b-audit")
    ctx.close()


def reload_until(page, cond, seconds=10):
    """Reloads `page` until `cond()` holds (the webhooks page has no live updates), or the
    time runs out; the assertions after it say what was missing."""
    deadline = time.monotonic() + seconds
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
        page.reload()


def test_an_operator_redelivers_a_dead_letter(console, browser, hooks):
    base = f"http://127.0.0.1:{console}"
    task = call_tool(console, "test_whoami", {})
    ctx = browser.new_context()
    page = ctx.new_page()
    sign_in(page, base)
    page.get_by_role("link", name="Webhooks").click()
    expect(page).to_have_url(f"{base}/console/webhooks")
    row = page.locator('tr[data-webhook="acme-hooks"]')
    expect(row).to_contain_text("configured")
    # The receiver answers 503: tried twice (at once, then after 100 ms), then a dead letter.
    reload_until(page, lambda: row.locator("[data-dead]").count() == 1)
    dead = row.locator("[data-dead]")
    expect(dead).to_contain_text("task.completed")
    expect(dead.get_by_role("link", name=task)).to_be_visible()
    expect(dead).to_contain_text("2 tries; the receiver answered 503")
    shot(page, "12-webhook-dead-letter")

    hooks.status = 204
    event = dead.get_attribute("data-dead")
    dead.get_by_role("button", name=f"Redeliver {event}").click()
    expect(page).to_have_url(f"{base}/console/webhooks")
    # Taken by the receiver, then settled on the row: delivered once, no dead letter left.
    reload_until(page, lambda: hooks.taken == 1 and "1 / 2" in row.inner_text())
    assert hooks.taken == 1
    expect(row.locator("[data-dead]")).to_have_count(0)
    expect(row).to_contain_text("1 / 2")
    shot(page, "13-webhook-redelivered")
    ctx.close()
