//! Schedules: recurring tool calls an operator declares, their cadence (a cron expression in
//! a time zone, or a fixed interval), what becomes of firings that were missed, and the id
//! of the task a firing creates. Pure rules; the store keeps the rows and the server fires.
//!
//! A firing happens once because its decision is a compare-and-set on the schedule's row
//! committed with the task it creates: the row's `next_at` moves past the firing in the
//! same commit as the task is created, so of two nodes (or a node and its restart) that
//! plan the same firing, one commits and the other finds the row changed. The task's id is
//! derived from the schedule and the firing time as well ([`firing_id`]), so even a replay
//! that slipped past the row would meet the store's unique-id rule.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{TaskId, Timestamp};

/// Most schedules one store keeps.
pub const MAX_SCHEDULES: usize = 1_000;
/// Longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME: usize = 64;
/// The shortest fixed interval: a second.
pub const MIN_INTERVAL_MS: u64 = 1_000;
/// The most missed firings `missed = "all"` fires in one catch-up.
pub const MAX_CATCH_UP: u32 = 1_000;
/// How far one plan counts missed firings before it stops counting (the count is a figure
/// for operators; a schedule asleep for years must not make a pass slow).
const COUNT_BOUND: u64 = 100_000;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Cadence {
    /// A cron expression (five fields, or six with seconds first) read in an IANA time
    /// zone: "0 9 * * MON-FRI" in "Europe/Paris" fires at nine in Paris, summer and winter.
    Cron {
        /// The expression.
        expr: String,
        /// The IANA time zone it is read in (`UTC` by default).
        zone: String,
    },
    /// Every `ms` milliseconds from the schedule's anchor (its creation).
    Every {
        /// The interval, at least [`MIN_INTERVAL_MS`].
        ms: u64,
    },
}

/// A parsed cadence, ready to compute firing times.
#[derive(Debug, Clone)]
enum Compiled {
    Cron(Box<croner::Cron>, jiff::tz::TimeZone),
    Every(u64),
}

impl Cadence {
    /// Checks the cadence: a cron expression croner parses in a zone jiff knows, or an
    /// interval of at least [`MIN_INTERVAL_MS`]. The error says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        self.compile().map(|_| ())
    }

    fn compile(&self) -> Result<Compiled, String> {
        match self {
            Cadence::Cron { expr, zone } => {
                let cron = croner::parser::CronParser::builder()
                    .seconds(croner::parser::Seconds::Optional)
                    .build()
                    .parse(expr)
                    .map_err(|e| format!("cron expression {expr:?}: {e}"))?;
                let tz = jiff::tz::TimeZone::get(zone)
                    .map_err(|e| format!("time zone {zone:?}: {e}"))?;
                Ok(Compiled::Cron(Box::new(cron), tz))
            }
            Cadence::Every { ms } if *ms < MIN_INTERVAL_MS => Err(format!(
                "an interval of {ms} ms is shorter than the least, {MIN_INTERVAL_MS} ms"
            )),
            Cadence::Every { ms } => Ok(Compiled::Every(*ms)),
        }
    }

    /// The first firing strictly after `t`, for a schedule anchored at `anchor`; `None`
    /// when the cadence has no later firing (or is invalid).
    pub fn next_after(&self, anchor: Timestamp, t: Timestamp) -> Option<Timestamp> {
        self.compile().ok()?.next_after(anchor, t)
    }

    /// A short description for people: "0 9 * * MON-FRI in Europe/Paris", "every 5 s".
    pub fn describe(&self) -> String {
        match self {
            Cadence::Cron { expr, zone } => format!("{expr} in {zone}"),
            Cadence::Every { ms } if ms % 1_000 == 0 => format!("every {} s", ms / 1_000),
            Cadence::Every { ms } => format!("every {ms} ms"),
        }
    }
}

impl Compiled {
    fn next_after(&self, anchor: Timestamp, t: Timestamp) -> Option<Timestamp> {
        match self {
            Compiled::Every(ms) => {
                let (a, t) = (anchor.as_millis(), t.as_millis());
                if t < a {
                    return Some(Timestamp(a));
                }
                let k = (t - a) / ms + 1;
                k.checked_mul(*ms)?.checked_add(a).map(Timestamp)
            }
            Compiled::Cron(cron, tz) => {
                let zoned = zoned(t, tz)?;
                let next = cron.find_next_occurrence(&zoned, false).ok()?;
                stamp(next.timestamp())
            }
        }
    }

    /// The last firing at or before `t` (and not before the anchor), if any.
    fn at_or_before(&self, anchor: Timestamp, t: Timestamp) -> Option<Timestamp> {
        match self {
            Compiled::Every(ms) => {
                let (a, t) = (anchor.as_millis(), t.as_millis());
                (t >= a).then(|| Timestamp(a + (t - a) / ms * ms))
            }
            Compiled::Cron(cron, tz) => {
                let zoned = zoned(t, tz)?;
                let prev = cron.find_previous_occurrence(&zoned, true).ok()?;
                stamp(prev.timestamp())
            }
        }
    }
}

fn zoned(t: Timestamp, tz: &jiff::tz::TimeZone) -> Option<jiff::Zoned> {
    let ms = i64::try_from(t.as_millis()).ok()?;
    let ts = jiff::Timestamp::from_millisecond(ms).ok()?;
    Some(ts.to_zoned(tz.clone()))
}

fn stamp(ts: jiff::Timestamp) -> Option<Timestamp> {
    u64::try_from(ts.as_millisecond()).ok().map(Timestamp)
}

/// What becomes of firings whose time passed while no node could fire them (every node was
/// down, or the schedule's tool could not take a task) by more than the schedule's
/// `missed_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Drop them; the schedule goes on from its next firing (the default).
    #[default]
    Skip,
    /// Fire once for all of them (the latest), then go on.
    One,
    /// Fire each of them, oldest first, up to the schedule's `catch_up` bound (the latest
    /// ones are kept when there are more).
    All,
}

impl FromStr for Missed {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "skip" => Ok(Missed::Skip),
            "one" => Ok(Missed::One),
            "all" => Ok(Missed::All),
            other => Err(format!(
                "missed must be \"skip\", \"one\" or \"all\", not {other:?}"
            )),
        }
    }
}

/// Where a schedule was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleOrigin {
    /// The configuration's `[[schedules]]`: each node's start makes the store agree with
    /// it, and the admin API may pause and resume it but not change or remove it.
    Config,
    /// The admin API.
    Api,
}

/// What an operator declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// Unique in the store: letters, digits, `-`, `_` and `.`, at most
    /// [`MAX_SCHEDULE_NAME`] bytes.
    pub name: String,
    /// The tool each firing calls.
    pub tool: String,
    /// Its arguments, checked against the tool's schema when the schedule is declared and
    /// again at each firing (a deployment may change the schema).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// The tenant the firings' tasks belong to.
    pub tenant: String,
    /// The subject they run as, shown to the tool as its caller.
    pub subject: String,
    /// When it fires.
    pub cadence: Cadence,
    /// What becomes of missed firings.
    #[serde(default)]
    pub missed: Missed,
    /// How late a firing may be and still count as on time.
    pub missed_after_ms: u64,
    /// The most missed firings `missed = "all"` fires (1..=[`MAX_CATCH_UP`]).
    pub catch_up: u32,
}

/// The default of `missed_after_ms`: a minute.
pub const DEFAULT_MISSED_AFTER_MS: u64 = 60_000;
/// The default of `catch_up`.
pub const DEFAULT_CATCH_UP: u32 = 100;

impl ScheduleSpec {
    /// Checks everything that does not depend on the tools served: the name, the tenant and
    /// subject, the cadence and the catch-up bound. The error names the field.
    pub fn check(&self) -> Result<(), String> {
        check_schedule_name(&self.name)?;
        if self.tool.is_empty() {
            return Err("tool: must name a tool".into());
        }
        if self.tenant.is_empty() || self.tenant.len() > 256 {
            return Err("tenant: must be 1 to 256 bytes".into());
        }
        if self.subject.is_empty() || self.subject.len() > 256 {
            return Err("subject: must be 1 to 256 bytes".into());
        }
        self.cadence.check().map_err(|e| format!("cadence: {e}"))?;
        if !(1..=MAX_CATCH_UP).contains(&self.catch_up) {
            return Err(format!("catch_up: must be 1..={MAX_CATCH_UP}"));
        }
        Ok(())
    }

    /// Whether `other` fires differently: a change of cadence starts a new anchor.
    pub fn same_cadence(&self, other: &ScheduleSpec) -> bool {
        self.cadence == other.cadence
    }
}

/// Checks a schedule's name: 1 to [`MAX_SCHEDULE_NAME`] bytes of letters, digits, `-`,
/// `_` and `.` (it appears in URLs and in the firings' status messages).
pub fn check_schedule_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SCHEDULE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name {name:?}: must be 1 to {MAX_SCHEDULE_NAME} letters, digits, '-', '_' or '.'"
        ))
    }
}

/// A schedule as an operator writes it: a `[[schedules]]` table of the configuration, or the
/// body of `POST /admin/v1/schedules`. Exactly one of `cron` and `every_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDeclaration {
    /// The schedule's name.
    pub name: String,
    /// The tool each firing calls.
    pub tool: String,
    /// Its arguments (default: none).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// The tenant its tasks belong to.
    pub tenant: String,
    /// The subject they run as (default: `scheduler`).
    #[serde(default)]
    pub subject: Option<String>,
    /// A cron expression: five fields, or six with seconds first.
    #[serde(default)]
    pub cron: Option<String>,
    /// The IANA time zone `cron` is read in (default: `UTC`).
    #[serde(default)]
    pub zone: Option<String>,
    /// A fixed interval in milliseconds, instead of `cron`.
    #[serde(default, alias = "everyMs")]
    pub every_ms: Option<u64>,
    /// `skip` (the default), `one` or `all`.
    #[serde(default)]
    pub missed: Missed,
    /// How late a firing may be and still count as on time (default: a minute).
    #[serde(default, alias = "missedAfterMs")]
    pub missed_after_ms: Option<u64>,
    /// The most missed firings `missed = "all"` fires (default: 100).
    #[serde(default, alias = "catchUp")]
    pub catch_up: Option<u32>,
}

impl ScheduleDeclaration {
    /// The declared schedule, checked as far as it can be without the tools served (see
    /// [`ScheduleSpec::check`]); the error names the field.
    pub fn spec(&self) -> Result<ScheduleSpec, String> {
        let cadence = match (&self.cron, self.every_ms, &self.zone) {
            (Some(expr), None, zone) => Cadence::Cron {
                expr: expr.clone(),
                zone: zone.clone().unwrap_or_else(|| "UTC".to_owned()),
            },
            (None, Some(ms), None) => Cadence::Every { ms },
            (None, Some(_), Some(_)) => {
                return Err("zone: only a cron expression is read in a time zone".into());
            }
            (Some(_), Some(_), _) => return Err("give cron or every_ms, not both".into()),
            (None, None, _) => return Err("give cron or every_ms: when it fires".into()),
        };
        let spec = ScheduleSpec {
            name: self.name.clone(),
            tool: self.tool.clone(),
            arguments: self.arguments.clone(),
            tenant: self.tenant.clone(),
            subject: self
                .subject
                .clone()
                .unwrap_or_else(|| "scheduler".to_owned()),
            cadence,
            missed: self.missed,
            missed_after_ms: self.missed_after_ms.unwrap_or(DEFAULT_MISSED_AFTER_MS),
            catch_up: self.catch_up.unwrap_or(DEFAULT_CATCH_UP),
        };
        spec.check()?;
        Ok(spec)
    }
}

/// One firing that created a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Firing {
    /// The firing time it stood for (for a manual run, when it was asked for).
    pub at: Timestamp,
    /// The task it created.
    pub task_id: TaskId,
    /// When it was fired.
    pub fired_at: Timestamp,
    /// An operator's run-now, outside the cadence.
    #[serde(default)]
    pub manual: bool,
}

/// A schedule as the store keeps it: what was declared, and where its firings stand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// What was declared.
    #[serde(flatten)]
    pub spec: ScheduleSpec,
    /// Where.
    pub origin: ScheduleOrigin,
    /// Random, fixed when the schedule is made: a schedule removed and declared again under
    /// its name never derives the task id of an earlier one's firing.
    pub key: u64,
    /// Where an interval counts from: when the schedule (or its cadence) was declared.
    pub anchor: Timestamp,
    /// Paused: no firing until resumed; the firings of the pause are not missed ones.
    #[serde(default)]
    pub paused: bool,
    /// The earliest firing not yet decided; `None` when the cadence has none left.
    pub next_at: Option<Timestamp>,
    /// The last firing that created a task.
    pub last: Option<Firing>,
    /// Firings that created a task.
    #[serde(default)]
    pub fired: u64,
    /// Firings dropped: missed ones `missed` did not fire, and those whose task could not
    /// be created (`last_error` says why).
    #[serde(default)]
    pub skipped: u64,
    /// Why the last firing that could not create its task could not.
    pub last_error: Option<String>,
    /// Grows by one with every change of the row: the compare-and-set's witness.
    pub revision: u64,
    /// When it was declared.
    pub created_at: Timestamp,
    /// When the row last changed.
    pub updated_at: Timestamp,
}

/// What a pass at some time does with one schedule: which due firings create a task
/// (oldest first), how many are dropped, and the schedule's next firing after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The firings that create a task, oldest first.
    pub fire: Vec<Timestamp>,
    /// Due firings dropped (counted up to a bound).
    pub skipped: u64,
    /// The next firing after the pass.
    pub next_at: Option<Timestamp>,
}

impl Schedule {
    /// A new schedule declared at `now`: anchored there, first firing after it.
    pub fn new(spec: ScheduleSpec, origin: ScheduleOrigin, now: Timestamp) -> Self {
        let next_at = spec.cadence.next_after(now, now);
        Self {
            spec,
            origin,
            key: crate::ids::random_u64(),
            anchor: now,
            paused: false,
            next_at,
            last: None,
            fired: 0,
            skipped: 0,
            last_error: None,
            revision: 0,
            created_at: now,
            updated_at: now,
        }
    }

    /// Up to `n` firings from `next_at` on (none while paused): what an operator is shown
    /// of what comes.
    pub fn upcoming(&self, n: usize) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let (Some(mut at), false) = (self.next_at, self.paused) else {
            return out;
        };
        let Ok(c) = self.spec.cadence.compile() else {
            return out;
        };
        while out.len() < n {
            out.push(at);
            match c.next_after(self.anchor, at) {
                Some(next) => at = next,
                None => break,
            }
        }
        out
    }

    /// The row after a change at `now`: the revision one more.
    pub fn changed(&self, now: Timestamp) -> Self {
        let mut next = self.clone();
        next.revision += 1;
        next.updated_at = now;
        next
    }

    /// The row with `spec` declared at `now`: a new cadence starts a new anchor and
    /// next firing; the same one keeps where the firings stand.
    pub fn redeclared(&self, spec: ScheduleSpec, now: Timestamp) -> Self {
        let mut next = self.changed(now);
        if !spec.same_cadence(&self.spec) {
            next.anchor = now;
            next.next_at = spec.cadence.next_after(now, now);
        }
        next.spec = spec;
        next
    }

    /// Paused or resumed at `now`. A resumed schedule goes on from its first firing after
    /// `now`: the firings of the pause were not missed, they were not wanted.
    pub fn paused_at(&self, paused: bool, now: Timestamp) -> Self {
        let mut next = self.changed(now);
        next.paused = paused;
        if !paused && self.paused {
            next.next_at = self.spec.cadence.next_after(self.anchor, now);
        }
        next
    }

    /// What a pass at `now` does (see [`Plan`]); nothing for a paused schedule or one not
    /// yet due.
    pub fn plan(&self, now: Timestamp) -> Plan {
        let idle = Plan {
            fire: Vec::new(),
            skipped: 0,
            next_at: self.next_at,
        };
        let Some(first) = self.next_at.filter(|at| *at <= now && !self.paused) else {
            return idle;
        };
        let Ok(compiled) = self.spec.cadence.compile() else {
            return idle;
        };
        let anchor = self.anchor;
        let next_at = compiled.next_after(anchor, now);
        // The latest due firing; every due one lies in [first, latest].
        let latest = compiled
            .at_or_before(anchor, now)
            .filter(|l| *l >= first)
            .unwrap_or(first);
        let due = count_between(&compiled, anchor, first, latest);
        let on_time = now.as_millis() - latest.as_millis() <= self.spec.missed_after_ms;
        let fire = match (due, self.spec.missed) {
            (1, _) if on_time => vec![latest],
            (_, Missed::Skip) if on_time => vec![latest],
            (_, Missed::Skip) => Vec::new(),
            (_, Missed::One) => vec![latest],
            (_, Missed::All) => latest_due(&compiled, anchor, first, latest, self.spec.catch_up),
        };
        Plan {
            skipped: due.saturating_sub(fire.len() as u64),
            fire,
            next_at,
        }
    }

    /// The row after the firing at `at` created `task_id` at `now`; `after` says where it
    /// leaves the schedule.
    pub fn fired(&self, at: Timestamp, task_id: TaskId, now: Timestamp, after: Firings) -> Self {
        let mut next = self.changed(now);
        next.last = Some(Firing {
            at,
            task_id,
            fired_at: now,
            manual: after.manual,
        });
        next.fired += 1;
        next.skipped += after.skipped;
        next.next_at = after.next_at;
        if !after.manual {
            next.last_error = None;
        }
        next
    }

    /// The row after the firings up to `next_at` were dropped, `error` saying why when
    /// their task could not be created.
    pub fn skipped(
        &self,
        skipped: u64,
        next_at: Option<Timestamp>,
        error: Option<String>,
        now: Timestamp,
    ) -> Self {
        let mut next = self.changed(now);
        next.skipped += skipped;
        next.next_at = next_at;
        if error.is_some() {
            next.last_error = error;
        }
        next
    }
}

/// Where a firing leaves its schedule: the next firing to decide, the dropped firings
/// its commit counts, and whether it was an operator's run-now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firings {
    /// The row's `next_at` after the firing.
    pub next_at: Option<Timestamp>,
    /// Dropped firings counted in the same commit.
    pub skipped: u64,
    /// A run-now.
    pub manual: bool,
}

/// How many firings lie in `[from, to]` (both firings of the cadence), counted up to
/// [`COUNT_BOUND`].
fn count_between(c: &Compiled, anchor: Timestamp, from: Timestamp, to: Timestamp) -> u64 {
    if let Compiled::Every(ms) = c {
        return (to.as_millis().saturating_sub(from.as_millis())) / ms + 1;
    }
    let mut n = 1;
    let mut t = from;
    while t < to && n < COUNT_BOUND {
        match c.next_after(anchor, t) {
            Some(next) if next <= to => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    n
}

/// The latest `max` firings in `[from, to]`, oldest first.
fn latest_due(
    c: &Compiled,
    anchor: Timestamp,
    from: Timestamp,
    to: Timestamp,
    max: u32,
) -> Vec<Timestamp> {
    let mut out = vec![to];
    let mut t = to;
    while out.len() < max as usize && t > from {
        let before = Timestamp(t.as_millis() - 1);
        match c.at_or_before(anchor, before) {
            Some(prev) if prev >= from => {
                out.push(prev);
                t = prev;
            }
            _ => break,
        }
    }
    out.reverse();
    out
}

/// The id of the task the firing of the schedule keyed `key` at `at` creates: the firing
/// time as the id's time prefix, the rest a digest of both. The same firing always derives
/// the same id, on every node.
pub fn firing_id(key: u64, at: Timestamp) -> TaskId {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"snodo schedule firing\0");
    h.update(key.to_be_bytes());
    h.update(at.as_millis().to_be_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&at.as_millis().to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&digest[..10]);
    TaskId::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn spec(cadence: Cadence, missed: Missed) -> ScheduleSpec {
        ScheduleSpec {
            name: "nightly".into(),
            tool: "echo".into(),
            arguments: Map::new(),
            tenant: "acme".into(),
            subject: "ops".into(),
            cadence,
            missed,
            missed_after_ms: DEFAULT_MISSED_AFTER_MS,
            catch_up: 3,
        }
    }

    fn cron(expr: &str, zone: &str) -> Cadence {
        Cadence::Cron {
            expr: expr.into(),
            zone: zone.into(),
        }
    }

    /// 2026-03-28T12:00:00Z, a Saturday, the day before Paris moves to summer time.
    const SAT_NOON: u64 = 1_774_699_200_000;

    #[test]
    fn a_cron_cadence_fires_in_its_zone_across_a_clock_change() {
        let nine_paris = cron("0 9 * * *", "Europe/Paris");
        let sun = nine_paris
            .next_after(Timestamp(0), Timestamp(SAT_NOON))
            .expect("a firing");
        // Sunday 09:00 in Paris is 07:00 UTC once summer time began that night.
        assert_eq!(sun.as_millis(), SAT_NOON + 19 * 3_600_000);
        let mon = nine_paris.next_after(Timestamp(0), sun).expect("a firing");
        assert_eq!(mon.as_millis() - sun.as_millis(), 24 * 3_600_000);
        let utc = cron("0 9 * * *", "UTC")
            .next_after(Timestamp(0), Timestamp(SAT_NOON))
            .expect("a firing");
        assert_eq!(utc.as_millis(), SAT_NOON + 21 * 3_600_000);
        let seconds = cron("*/10 * * * * *", "UTC")
            .next_after(Timestamp(0), Timestamp(SAT_NOON + 1))
            .expect("a firing");
        assert_eq!(seconds.as_millis(), SAT_NOON + 10_000);
    }

    #[test]
    fn bad_cadences_say_what_is_wrong() {
        let e = cron("61 * * * *", "UTC").check().expect_err("refused");
        assert!(e.contains("cron expression"), "{e}");
        let e = cron("* * * * *", "Mars/Olympus")
            .check()
            .expect_err("refused");
        assert!(e.contains("time zone \"Mars/Olympus\""), "{e}");
        let e = Cadence::Every { ms: 10 }.check().expect_err("refused");
        assert!(e.contains("1000 ms"), "{e}");
        let mut s = spec(Cadence::Every { ms: MIN }, Missed::Skip);
        s.name = "no spaces".into();
        assert!(s.check().expect_err("refused").starts_with("name"));
    }

    #[test]
    fn an_interval_counts_from_its_anchor() {
        let every = Cadence::Every { ms: MIN };
        let anchor = Timestamp(SAT_NOON + 7);
        assert_eq!(
            every.next_after(anchor, anchor),
            Some(Timestamp(SAT_NOON + 7 + MIN))
        );
        assert_eq!(
            every.next_after(anchor, Timestamp(SAT_NOON + 7 + MIN)),
            Some(Timestamp(SAT_NOON + 7 + 2 * MIN))
        );
    }

    fn due_schedule(missed: Missed) -> Schedule {
        let mut s = Schedule::new(
            spec(Cadence::Every { ms: MIN }, missed),
            ScheduleOrigin::Config,
            Timestamp(SAT_NOON),
        );
        s.spec.catch_up = 3;
        s
    }

    #[test]
    fn an_on_time_firing_fires_whatever_the_policy() {
        for missed in [Missed::Skip, Missed::One, Missed::All] {
            let s = due_schedule(missed);
            let at = Timestamp(SAT_NOON + MIN + 5);
            let plan = s.plan(at);
            assert_eq!(plan.fire, vec![Timestamp(SAT_NOON + MIN)], "{missed:?}");
            assert_eq!(plan.skipped, 0);
            assert_eq!(plan.next_at, Some(Timestamp(SAT_NOON + 2 * MIN)));
            assert_eq!(s.plan(Timestamp(SAT_NOON + MIN - 1)).fire, vec![]);
        }
    }

    #[test]
    fn missed_firings_are_skipped_fired_once_or_caught_up_to_the_bound() {
        // Ten firings due; the latest five seconds ago, so on time.
        let now = Timestamp(SAT_NOON + 10 * MIN + 5_000);
        let skip = due_schedule(Missed::Skip).plan(now);
        assert_eq!(skip.fire, vec![Timestamp(SAT_NOON + 10 * MIN)]);
        assert_eq!(skip.skipped, 9);
        let one = due_schedule(Missed::One).plan(now);
        assert_eq!(one.fire, vec![Timestamp(SAT_NOON + 10 * MIN)]);
        assert_eq!(one.skipped, 9);
        let all = due_schedule(Missed::All).plan(now);
        assert_eq!(
            all.fire,
            (8..=10)
                .map(|k| Timestamp(SAT_NOON + k * MIN))
                .collect::<Vec<_>>()
        );
        assert_eq!(all.skipped, 7);
        for p in [skip, one, all] {
            assert_eq!(p.next_at, Some(Timestamp(SAT_NOON + 11 * MIN)));
        }
        // The latest firing itself late: skip drops it too.
        let late = Timestamp(SAT_NOON + 10 * MIN + DEFAULT_MISSED_AFTER_MS + 1);
        let mut s = due_schedule(Missed::Skip);
        s.spec.cadence = Cadence::Every { ms: 2 * MIN };
        let plan = s.plan(late);
        assert!(plan.fire.is_empty(), "{plan:?}");
        assert_eq!(plan.skipped, 5);
    }

    #[test]
    fn a_cron_catch_up_walks_its_firings() {
        let mut s = Schedule::new(
            spec(cron("0 * * * *", "UTC"), Missed::All),
            ScheduleOrigin::Api,
            Timestamp(SAT_NOON),
        );
        s.spec.catch_up = 2;
        let plan = s.plan(Timestamp(SAT_NOON + 5 * 3_600_000 + 1));
        assert_eq!(
            plan.fire,
            vec![
                Timestamp(SAT_NOON + 4 * 3_600_000),
                Timestamp(SAT_NOON + 5 * 3_600_000)
            ]
        );
        assert_eq!(plan.skipped, 3);
    }

    #[test]
    fn a_paused_schedule_plans_nothing_and_resumes_after_the_pause() {
        let s = due_schedule(Missed::All).paused_at(true, Timestamp(SAT_NOON + 1));
        assert!(s.plan(Timestamp(SAT_NOON + 10 * MIN)).fire.is_empty());
        let resumed = s.paused_at(false, Timestamp(SAT_NOON + 10 * MIN + 1));
        assert_eq!(resumed.next_at, Some(Timestamp(SAT_NOON + 11 * MIN)));
        assert_eq!(resumed.revision, 2);
    }

    #[test]
    fn a_firing_derives_one_id_from_its_schedule_and_time() {
        let at = Timestamp(SAT_NOON);
        assert_eq!(firing_id(7, at), firing_id(7, at));
        assert_ne!(firing_id(7, at), firing_id(8, at));
        assert_ne!(firing_id(7, at), firing_id(7, Timestamp(SAT_NOON + 1)));
        let hex = firing_id(7, at).to_string();
        assert_eq!(TaskId::parse(&hex), Some(firing_id(7, at)));
    }

    #[test]
    fn a_row_round_trips_through_json() {
        let s = due_schedule(Missed::One);
        let bytes = serde_json::to_vec(&s).expect("encodes");
        let back: Schedule = serde_json::from_slice(&bytes).expect("decodes");
        assert_eq!(back, s);
    }
}
