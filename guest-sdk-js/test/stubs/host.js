//! Stand-ins for the host's imports, so the SDK's logic runs under Node in tests: each
//! records its calls in `globalThis.host` and answers what the test put there.

const host = (globalThis.host ??= { calls: [], cancelled: false, answers: [], caller: null, capabilities: "{}" });

export function isCancelled() {
  return host.cancelled;
}
export function awaitInput(key, request) {
  host.calls.push(["awaitInput", key, request]);
  const next = host.answers.shift();
  if (next instanceof Error) throw next;
  return JSON.stringify(next);
}
export function awaitInputs(requests) {
  host.calls.push(["awaitInputs", requests]);
  return requests.map(() => JSON.stringify(host.answers.shift()));
}
export function setStatus(message) {
  host.calls.push(["setStatus", message]);
}
export function progress(p, total, message) {
  host.calls.push(["progress", p, total, message]);
}
export function log(level, message) {
  host.calls.push(["log", level, message]);
}
export function current() {
  return host.caller;
}
export function clientCapabilities() {
  return host.capabilities;
}
function slept(call) {
  host.calls.push(call);
  if (host.cancelled) throw { payload: "cancelled" };
}
export function sleepFor(ms) {
  slept(["sleepFor", ms]);
}
export function sleepUntil(ms) {
  slept(["sleepUntil", ms]);
}
export function handle() {
  throw { payload: { tag: "HTTP-request-denied" } };
}
export class Fields {
  static fromList() {
    return new Fields();
  }
}
export class OutgoingRequest {}
export class OutgoingBody {}
export class IncomingBody {}
