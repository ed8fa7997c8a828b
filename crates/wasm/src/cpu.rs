//! CPU shared by tenant: a guest holds one of a few "executing" turns only while it is
//! polled, and queued guests get the turns round-robin between tenants.
//!
//! Budgets elsewhere count guests (instances, slots); this counts the CPU they use. A guest
//! runs on an async worker thread between yields: a yield at every epoch tick, and every
//! import that waits (a sleep, a question, a store write). [`CpuShare::run`] wraps one
//! guest's future so that each poll first takes a turn and gives it back when the poll
//! returns. So a guest that waits in an import holds no turn, and a CPU-bound guest gives
//! its turn up at every tick, when the next queued tenant gets it.
//!
//! A tenant's share adapts to the tenants present: `per_tenant` turns when it is alone, and
//! `per_tenant / active` (at least one) while others are active too, a tenant being active
//! while it runs or queues a guest and for [`ACTIVE_FOR`] after. A tenant over its share is
//! not stopped (a poll is never interrupted by the gate): it queues at its next yield, at
//! the latest one epoch tick later.
//!
//! Invariants:
//! - At most `total` polls run at once, and at most `per_tenant` of one tenant. A tenant's
//!   share of the CPU therefore does not grow with the number of guests it starts.
//! - A freed turn goes to the tenant after the last one served (a ring of the tenants with
//!   queued guests), first come first served within a tenant, except that a guest which
//!   has computed for less than [`QUANTUM`] goes first. A newcomer does not jump a
//!   queued guest that could use the turn.
//! - `total` is below the async worker count (`snodo serve` sizes the runtime with one
//!   worker more), so request handling always finds a worker that no guest holds.
//! - A turn granted to a guest that is dropped before it uses it is handed on.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Turns for executing guests: at most `total` at once, `per_tenant` of one tenant.
#[derive(Debug)]
pub struct CpuShare {
    per_tenant: usize,
    total: usize,
    active_for: Duration,
    state: Mutex<State>,
}

/// Within a tenant, a guest that has computed for less than this in all and queues again
/// (it waited in an import, or yielded early) goes ahead of the tenant's other guests. Short
/// calls then finish before new ones start, as they would on a plain worker pool: without
/// it, every call in flight advances a little each round, and the calls in flight (each
/// holding a request slot) pile up under load. A guest that computes longer takes its
/// place at the back like any other.
pub const QUANTUM: Duration = Duration::from_millis(10);

/// How long a tenant counts as active after its last guest let go of its turn: a victim
/// calling a short tool now and then keeps its share, so a busy tenant leaves it a core.
pub const ACTIVE_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct State {
    /// Turns held (including granted and not yet used).
    running: usize,
    /// Tenants that hold a turn or queue for one; an idle tenant's entry is removed.
    tenants: HashMap<Arc<str>, Tenant>,
    /// Tenants with queued guests, in the order they are served.
    ring: VecDeque<Arc<str>>,
    /// Tickets whose turn was granted while they waited.
    granted: Vec<u64>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Tenant {
    running: usize,
    waiting: VecDeque<(u64, Waker)>,
    /// When a guest of it last held a turn.
    last: Instant,
}

impl Default for Tenant {
    fn default() -> Self {
        Self {
            running: 0,
            waiting: VecDeque::new(),
            last: Instant::now(),
        }
    }
}

impl Tenant {
    fn active(&self, now: Instant, active_for: Duration) -> bool {
        self.running > 0 || !self.waiting.is_empty() || now.duration_since(self.last) < active_for
    }
}

impl CpuShare {
    /// At most `total` guests executing at once, `per_tenant` of one tenant (both at least 1).
    pub fn new(per_tenant: usize, total: usize) -> Arc<Self> {
        Self::remembering(per_tenant, total, ACTIVE_FOR)
    }

    /// The same, counting a tenant as active for `active_for` after its last turn.
    pub fn remembering(per_tenant: usize, total: usize, active_for: Duration) -> Arc<Self> {
        Arc::new(Self {
            per_tenant: per_tenant.max(1),
            total: total.max(1),
            active_for,
            state: Mutex::new(State::default()),
        })
    }

    /// Turns one tenant may hold now: `per_tenant` divided by the active tenants (the
    /// asking one included), at least one.
    fn share(&self, s: &State, asking: Option<&str>) -> usize {
        (self.per_tenant / self.active(s, asking).max(1)).max(1)
    }

    /// The tenants active now, `asking` included.
    fn active(&self, s: &State, asking: Option<&str>) -> usize {
        let now = Instant::now();
        let mut active = s
            .tenants
            .values()
            .filter(|t| t.active(now, self.active_for))
            .count();
        if let Some(name) = asking
            && !s
                .tenants
                .get(name)
                .is_some_and(|t| t.active(now, self.active_for))
        {
            active += 1;
        }
        active
    }

    /// Forgets tenants that are no longer active.
    fn forget_idle(&self, s: &mut State) {
        let now = Instant::now();
        s.tenants.retain(|_, t| t.active(now, self.active_for));
    }

    /// Guests executing now (holding a turn).
    pub fn executing(&self) -> usize {
        self.state.lock().running
    }

    /// Guests waiting for a turn now.
    pub fn queued(&self) -> usize {
        let s = self.state.lock();
        s.tenants.values().map(|t| t.waiting.len()).sum()
    }

    /// Runs `guest` for `tenant`, polling it only while it holds a turn.
    pub async fn run<F: Future>(self: &Arc<Self>, tenant: &Arc<str>, guest: F) -> F::Output {
        let mut guest = pin!(guest);
        let mut turn = Turn {
            cpu: self,
            tenant,
            ticket: None,
            ran: Duration::ZERO,
        };
        std::future::poll_fn(|cx| {
            let Some(_held) = turn.enter(cx) else {
                return Poll::Pending;
            };
            let started = Instant::now();
            let polled = guest.as_mut().poll(cx);
            turn.ran += started.elapsed();
            polled
        })
        .await
    }

    /// Runs `work`, CPU work that cannot yield (a schema check), on the blocking pool
    /// while holding one of `tenant`'s turns for all of it: it waits its turn as a guest
    /// would, and its time counts in the tenant's share. The turn stays held until `work`
    /// returns, even if the caller stops waiting for it, so `work` must bound itself.
    pub async fn run_blocking<R: Send + 'static>(
        self: &Arc<Self>,
        tenant: &Arc<str>,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, tokio::task::JoinError> {
        let mut turn = Turn {
            cpu: self,
            tenant,
            ticket: None,
            ran: Duration::ZERO,
        };
        let held = std::future::poll_fn(|cx| match turn.enter(cx) {
            Some(held) => Poll::Ready(held),
            None => Poll::Pending,
        })
        .await;
        // The turn moves into the work, so that it is given back when the work ends.
        std::mem::forget(held);
        let owned = OwnedTurn {
            cpu: self.clone(),
            tenant: tenant.clone(),
        };
        tokio::task::spawn_blocking(move || {
            let _turn = owned;
            work()
        })
        .await
    }

    /// Whether `tenant` may start now: a turn is free, the tenant is under its share, and
    /// no queued guest that could use the turn waits.
    fn may_start(&self, s: &State, tenant: &str) -> bool {
        // A tenant alone has no one to be fair to: its guests start at once, as on a plain
        // worker pool (handing turns over between its own guests would only add wake-ups
        // to every call). They are counted, so a tenant that arrives meanwhile finds the
        // turns taken and the lone tenant at its share from its next yield.
        if s.ring.is_empty() && self.active(s, Some(tenant)) == 1 {
            return true;
        }
        if s.running >= self.total {
            return false;
        }
        let share = self.share(s, Some(tenant));
        s.tenants.get(tenant).map_or(0, |t| t.running) < share
            && !s.ring.iter().any(|t| s.tenants[t].running < share)
    }

    /// Hands free turns to queued guests, a tenant at a time; returns whom to wake.
    fn dispatch(&self, s: &mut State) -> Vec<Waker> {
        let mut wake = Vec::new();
        let mut passed = 0;
        let share = self.share(s, None);
        while s.running < self.total && passed < s.ring.len() {
            let Some(name) = s.ring.pop_front() else {
                break;
            };
            let tenant = s.tenants.get_mut(&name).expect("a ringed tenant is known");
            if tenant.running >= share {
                // At its share: it keeps its place in the ring for the next free turn.
                s.ring.push_back(name);
                passed += 1;
                continue;
            }
            let (ticket, waker) = tenant.waiting.pop_front().expect("a ringed tenant waits");
            tenant.running += 1;
            tenant.last = Instant::now();
            let more = !tenant.waiting.is_empty();
            s.running += 1;
            s.granted.push(ticket);
            wake.push(waker);
            if more {
                s.ring.push_back(name);
            }
            passed = 0;
        }
        wake
    }

    /// Gives a turn of `tenant` back and hands it on.
    fn release(&self, tenant: &Arc<str>) {
        let wake = {
            let mut s = self.state.lock();
            s.running -= 1;
            let t = s
                .tenants
                .get_mut(tenant)
                .expect("a running tenant is known");
            t.running -= 1;
            t.last = Instant::now();
            if t.running == 0 && t.waiting.is_empty() {
                self.forget_idle(&mut s);
            }
            self.dispatch(&mut s)
        };
        wake.into_iter().for_each(Waker::wake);
    }
}

/// One guest's place: nothing, a queued ticket, or a granted one.
struct Turn<'a> {
    cpu: &'a Arc<CpuShare>,
    tenant: &'a Arc<str>,
    ticket: Option<u64>,
    /// How long the guest has held turns so far.
    ran: Duration,
}

/// A turn held for the length of one poll.
struct Held<'a> {
    cpu: &'a Arc<CpuShare>,
    tenant: &'a Arc<str>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.cpu.release(self.tenant);
    }
}

/// A turn held by work on another thread, given back when it is dropped.
struct OwnedTurn {
    cpu: Arc<CpuShare>,
    tenant: Arc<str>,
}

impl Drop for OwnedTurn {
    fn drop(&mut self) {
        self.cpu.release(&self.tenant);
    }
}

impl<'a> Turn<'a> {
    /// Takes a turn for this poll, or queues (or stays queued) and returns `None`.
    fn enter(&mut self, cx: &mut Context<'_>) -> Option<Held<'a>> {
        let cpu = self.cpu;
        let mut s = cpu.state.lock();
        let held = Held {
            cpu,
            tenant: self.tenant,
        };
        if let Some(ticket) = self.ticket {
            if let Some(i) = s.granted.iter().position(|&g| g == ticket) {
                s.granted.swap_remove(i);
                self.ticket = None;
                return Some(held);
            }
            let waiting = &mut s
                .tenants
                .get_mut(self.tenant)
                .expect("a queued tenant is known")
                .waiting;
            if let Some((_, w)) = waiting.iter_mut().find(|(t, _)| *t == ticket) {
                w.clone_from(cx.waker());
            }
            std::mem::forget(held);
            return None;
        }
        if cpu.may_start(&s, self.tenant) {
            s.running += 1;
            let t = s.tenants.entry(self.tenant.clone()).or_default();
            t.running += 1;
            t.last = Instant::now();
            return Some(held);
        }
        std::mem::forget(held);
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        let tenant = s.tenants.entry(self.tenant.clone()).or_default();
        if self.ran > Duration::ZERO && self.ran < QUANTUM {
            tenant.waiting.push_front((ticket, cx.waker().clone()));
        } else {
            tenant.waiting.push_back((ticket, cx.waker().clone()));
        }
        if tenant.waiting.len() == 1 {
            s.ring.push_back(self.tenant.clone());
        }
        self.ticket = Some(ticket);
        None
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        let granted = {
            let mut s = self.cpu.state.lock();
            if let Some(i) = s.granted.iter().position(|&g| g == ticket) {
                s.granted.swap_remove(i);
                true
            } else {
                let t = s
                    .tenants
                    .get_mut(self.tenant)
                    .expect("a queued tenant is known");
                t.waiting.retain(|(w, _)| *w != ticket);
                if t.waiting.is_empty() {
                    s.ring.retain(|n| n != self.tenant);
                    self.cpu.forget_idle(&mut s);
                }
                false
            }
        };
        // A turn granted and never used is handed on as if it had been used.
        if granted {
            self.cpu.release(self.tenant);
        }
    }
}

/// The default turns for a node with `cores` cores: a tenant alone may execute on every
/// core; with others active its share shrinks (`per_tenant / active`), which leaves them
/// cores. More turns than cores would only add runtime workers, which cost every request
/// a share of their scheduling.
pub fn default_shares(cores: usize) -> (usize, usize) {
    let cores = cores.max(1);
    (cores, cores)
}

/// The cores this process may use (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Guest<'a> = std::pin::Pin<Box<dyn Future<Output = &'static str> + 'a>>;

    #[tokio::test]
    async fn blocking_work_holds_its_turn_until_it_returns() {
        let cpu = CpuShare::remembering(1, 1, Duration::ZERO);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel();
        let work = tokio::spawn({
            let (cpu, a) = (cpu.clone(), a.clone());
            async move {
                cpu.run_blocking(&a, move || {
                    started.send(()).expect("the test waits");
                    wait.recv().expect("the test answers");
                    7
                })
                .await
            }
        });
        running.await.expect("the work started");
        assert_eq!(cpu.executing(), 1);
        let mut other = Box::pin(cpu.run(&b, async { "b" }));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            other.as_mut().poll(&mut cx).is_pending(),
            "the only turn is held by the blocking work"
        );
        go.send(()).expect("the work waits");
        assert_eq!(work.await.expect("joined").expect("ran"), 7);
        assert_eq!(other.await, "b");
        assert_eq!(cpu.executing(), 0);
    }

    #[test]
    fn a_freed_turn_goes_to_the_next_tenant_not_the_next_guest() {
        let cpu = CpuShare::remembering(1, 1, Duration::ZERO);
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let mut cx = Context::from_waker(Waker::noop());
        let guest = |tenant: &Arc<str>, name: &'static str| -> Guest<'_> {
            let (cpu, tenant) = (cpu.clone(), tenant.clone());
            Box::pin(async move { cpu.run(&tenant, async move { name }).await })
        };
        // Tenant c queues a guest (so a is not alone), then a three, then b one, while a
        // holder of a keeps the only turn.
        let c: Arc<str> = Arc::from("c");
        let mut queued = vec![
            guest(&c, "c1"),
            guest(&a, "a2"),
            guest(&a, "a3"),
            guest(&a, "a4"),
            guest(&b, "b1"),
        ];
        let mut holder = Box::pin(cpu.run(
            &a,
            std::future::poll_fn(|cx| {
                for g in &mut queued {
                    assert!(g.as_mut().poll(cx).is_pending(), "the turn is held");
                }
                Poll::Ready(())
            }),
        ));
        assert!(holder.as_mut().poll(&mut cx).is_ready());
        drop(holder);
        assert_eq!(cpu.queued(), 4, "one guest was granted the freed turn");
        assert_eq!(queued[0].as_mut().poll(&mut cx), Poll::Ready("c1"));
        drop(queued.remove(0));
        let mut poll = |i: usize| queued[i].as_mut().poll(&mut cx);
        // Granted in the order a2 (a queued first), b1 (the next tenant, though a3 queued
        // before it), a3, a4.
        assert!(poll(1).is_pending() && poll(3).is_pending());
        assert_eq!(poll(0), Poll::Ready("a2"));
        assert!(poll(1).is_pending() && poll(2).is_pending());
        assert_eq!(poll(3), Poll::Ready("b1"));
        assert!(poll(2).is_pending());
        assert_eq!(poll(1), Poll::Ready("a3"));
        assert_eq!(poll(2), Poll::Ready("a4"));
        assert_eq!((cpu.executing(), cpu.queued()), (0, 0));
        assert!(
            cpu.state.lock().tenants.is_empty(),
            "idle tenants are forgotten"
        );
    }

    #[test]
    fn a_tenant_never_executes_more_than_its_share() {
        // Another tenant active for the whole test: a's share is one turn of two.
        let cpu = CpuShare::remembering(2, 3, Duration::from_secs(3600));
        let b: Arc<str> = Arc::from("b");
        let mut other = Box::pin(cpu.run(&b, async {}));
        assert!(
            other
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_ready()
        );
        let peak = Arc::new(AtomicUsize::new(0));
        let now = Arc::new(AtomicUsize::new(0));
        let a: Arc<str> = Arc::from("a");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .expect("runtime");
        let mut joins = Vec::new();
        for _ in 0..12 {
            let (cpu, a, peak, now) = (cpu.clone(), a.clone(), peak.clone(), now.clone());
            joins.push(rt.spawn(async move {
                cpu.run(&a, async {
                    for _ in 0..20 {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        // Busy for a while inside the poll, as a computing guest is.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        now.fetch_sub(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                    }
                })
                .await;
            }));
        }
        for j in joins {
            rt.block_on(j).expect("guest");
        }
        assert!(
            peak.load(Ordering::SeqCst) <= 1,
            "a at its share of one turn"
        );
        assert_eq!(cpu.executing(), 0);
    }

    #[test]
    fn a_granted_turn_that_is_never_used_is_handed_on() {
        let cpu = CpuShare::remembering(1, 1, Duration::ZERO);
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let mut cx = Context::from_waker(Waker::noop());
        let mut second = Box::pin(cpu.run(&b, async { 2 }));
        let mut first = Box::pin(cpu.run(
            &a,
            std::future::poll_fn(|cx| {
                // While a holds the only turn, b's guest queues.
                assert!(second.as_mut().poll(cx).is_pending());
                Poll::Ready(1)
            }),
        ));
        assert_eq!(first.as_mut().poll(&mut cx), Poll::Ready(1));
        drop(first);
        assert_eq!(cpu.executing(), 1, "a's turn went to b's queued guest");
        drop(second);
        assert_eq!((cpu.executing(), cpu.queued()), (0, 0), "and came back");
        let mut third = Box::pin(cpu.run(&a, async { 3 }));
        assert_eq!(third.as_mut().poll(&mut cx), Poll::Ready(3));
        // A guest that waits in an import holds no turn.
        let mut waits = Box::pin(cpu.run(&a, std::future::pending::<()>()));
        assert!(waits.as_mut().poll(&mut cx).is_pending());
        assert_eq!(cpu.executing(), 0);
        drop(waits);
        assert!(cpu.state.lock().tenants.is_empty());
    }

    #[test]
    fn a_tenant_alone_uses_its_whole_share_and_half_once_another_is_active() {
        let cpu = CpuShare::remembering(2, 3, Duration::from_secs(3600));
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let mut cx = Context::from_waker(Waker::noop());
        // Whether a second guest of `a` may start while a first one holds a turn.
        let second_starts = |cx: &mut Context<'_>| {
            let mut inner = Box::pin(cpu.run(&a, async {}));
            let mut outer = Box::pin(cpu.run(
                &a,
                std::future::poll_fn(|cx| Poll::Ready(inner.as_mut().poll(cx).is_ready())),
            ));
            match outer.as_mut().poll(cx) {
                Poll::Ready(started) => started,
                Poll::Pending => panic!("the first guest always starts"),
            }
        };
        assert!(second_starts(&mut cx), "alone, a holds two turns");
        let mut victim = Box::pin(cpu.run(&b, async {}));
        assert!(victim.as_mut().poll(&mut cx).is_ready());
        assert!(
            !second_starts(&mut cx),
            "with b active, a's share is one turn"
        );
    }
}
