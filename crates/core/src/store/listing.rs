//! The operators' queries: tasks listed by filter with keyset paging, and counts by status
//! and tool.
//!
//! A listing walks ordered indexes newest first. Each is keyed by a status (and the tenant,
//! when the filter names one), then by creation time and id, so a created-time range and a
//! cursor are key ranges and a first page costs a seek per status walked: one when the
//! filter names a status, else one per status, merged newest first. What the index does
//! not pin (the tool, the update time) is checked on the entries walked, at most
//! [`LIST_SCAN`] of them per page: a page that reaches the bound returns what it found
//! with a cursor that continues after the last entry walked, so no filter can make a page
//! slow. The embedded stores keep these indexes as two entries per task that the engine
//! writes in the same commit as the task ([`listing_keys`]); PostgreSQL keeps them as SQL
//! indexes over the same columns and walks them the same way.
//!
//! Counts are kept per (tenant, tool, status) in the commit that changes them, so reading
//! them never scans tasks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Task, TaskId, TaskStatus, Timestamp, Work};

use super::{StoreError, StoreResult};

/// The most tasks one page holds.
pub const MAX_LIST_LIMIT: usize = 500;

/// The most index entries one page walks past (see the module documentation).
pub const LIST_SCAN: usize = 5_000;

/// Which tasks a listing covers. Every field narrows; none set is every task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskFilter {
    /// Only this tenant's tasks (every subject's, under per-subject isolation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only tasks in this status (`input_required` is "waiting for input").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// Only calls of this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Created at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<Timestamp>,
    /// Created before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<Timestamp>,
    /// Last updated at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_after: Option<Timestamp>,
    /// Last updated before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_before: Option<Timestamp>,
}

impl TaskFilter {
    /// Whether `summary` passes every condition (the index walk checks some of them by
    /// its range; this is the whole definition, for tests and for post-checks).
    pub fn admits(&self, summary: &TaskSummary) -> bool {
        let within = |t: Timestamp, after: Option<Timestamp>, before: Option<Timestamp>| {
            after.is_none_or(|a| t >= a) && before.is_none_or(|b| t < b)
        };
        self.tenant.as_deref().is_none_or(|t| summary.tenant == t)
            && self.status.is_none_or(|s| summary.status == s)
            && self.tool.as_deref().is_none_or(|t| summary.tool == t)
            && within(summary.created_at, self.created_after, self.created_before)
            && within(
                summary.last_updated_at,
                self.updated_after,
                self.updated_before,
            )
    }
}

/// Where a page starts: after this task in the listing's order (creation time, then id,
/// newest first). Opaque on the wire: 48 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    /// The creation time of the last task of the previous page (or the last entry walked).
    pub created_at: Timestamp,
    /// Its id.
    pub id: TaskId,
}

impl Cursor {
    /// The wire form.
    pub fn encode(&self) -> String {
        format!("{:016x}{}", self.created_at.as_millis(), self.id)
    }

    /// Parses the wire form; anything else is [`StoreError::Invalid`].
    pub fn parse(text: &str) -> StoreResult<Self> {
        let bad = || StoreError::invalid("a cursor is 48 lowercase hex digits from a listing");
        if text.len() != 48 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let created = u64::from_str_radix(&text[..16], 16).map_err(|_| bad())?;
        let id = TaskId::parse(&text[16..]).ok_or_else(bad)?;
        Ok(Self {
            created_at: Timestamp(created),
            id,
        })
    }

    fn of(s: &TaskSummary) -> Self {
        Self {
            created_at: s.created_at,
            id: s.id,
        }
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.encode())
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Cursor::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One page's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    /// Which tasks.
    pub filter: TaskFilter,
    /// At most this many (1..=[`MAX_LIST_LIMIT`]).
    pub limit: usize,
    /// Continue after this cursor (from the previous page's `next`).
    pub after: Option<Cursor>,
}

impl TaskQuery {
    /// The first page of `filter`, `limit` tasks long.
    pub fn new(filter: TaskFilter, limit: usize) -> Self {
        Self {
            filter,
            limit,
            after: None,
        }
    }

    pub(crate) fn check(&self) -> StoreResult<()> {
        if !(1..=MAX_LIST_LIMIT).contains(&self.limit) {
            return Err(StoreError::invalid(format!(
                "a page holds 1 to {MAX_LIST_LIMIT} tasks, got {}",
                self.limit
            )));
        }
        let f = &self.filter;
        for (name, value) in [("tenant", &f.tenant), ("tool", &f.tool)] {
            if value
                .as_deref()
                .is_some_and(|v| v.is_empty() || v.len() > MAX_NAME_BYTES)
            {
                return Err(StoreError::invalid(format!(
                    "a {name} filter is 1 to {MAX_NAME_BYTES} bytes"
                )));
            }
        }
        Ok(())
    }
}

/// The longest tenant or tool name an index key holds in full; longer names are cut (so
/// they still list, but a filter on one is refused).
const MAX_NAME_BYTES: usize = 1024;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPage {
    /// The tasks, newest first.
    pub tasks: Vec<TaskSummary>,
    /// Where the next page starts; `None` when the listing is exhausted. A page may hold
    /// fewer than the limit and still have a next one (it walked [`LIST_SCAN`] entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Cursor>,
}

/// What a listing shows of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// The id.
    pub id: TaskId,
    /// The tenant.
    pub tenant: String,
    /// The subject whose task it is, under per-subject isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The tool called (or the work's kind, for work that is not a tool call).
    pub tool: String,
    /// The status.
    pub status: TaskStatus,
    /// The status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When created.
    pub created_at: Timestamp,
    /// When last changed.
    pub last_updated_at: Timestamp,
    /// Attempts started.
    pub attempt: u32,
    /// Retries used.
    pub retry_count: u32,
    /// When the pending retry may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// When a sleeping task wakes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
    /// When the TTL runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Who holds the task's claim, while one is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
    /// The keys of the questions waiting for an answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<String>,
    /// What those questions ask (each one's `message`, by key; empty for one without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asking: Vec<String>,
}

impl TaskSummary {
    /// The summary of `task`, a call of `tool`.
    pub fn of(task: &Task, tool: &str) -> Self {
        Self {
            id: task.id,
            tenant: task.scope.tenant().to_owned(),
            subject: task.scope.subject().map(str::to_owned),
            tool: tool.to_owned(),
            status: task.status,
            status_message: task.status_message.clone(),
            created_at: task.created_at,
            last_updated_at: task.last_updated_at,
            attempt: task.attempt,
            retry_count: task.retry_count,
            retry_at: task.retry_at,
            wake_at: task.wake_at,
            expires_at: task.expires_at(),
            claimed_by: task.claim.as_ref().map(|c| c.owner.clone()),
            waiting_on: task
                .outstanding_inputs()
                .map(|(k, _)| k.to_owned())
                .collect(),
            asking: task
                .outstanding_inputs()
                .map(|(_, request)| {
                    request["params"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect(),
        }
    }
}

/// Stored tasks by status, and by tool and status. Tasks past their TTL are counted until
/// the reaper removes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCounts {
    /// Every status, with zero for none.
    pub by_status: BTreeMap<TaskStatus, u64>,
    /// Per tool, its tasks by status (statuses with none left out).
    pub by_tool: BTreeMap<String, BTreeMap<TaskStatus, u64>>,
}

impl TaskCounts {
    /// Every task counted.
    pub fn total(&self) -> u64 {
        self.by_status.values().sum()
    }

    /// Adds `n` tasks of `tool` in `status`.
    pub(crate) fn add(&mut self, tool: &str, status: TaskStatus, n: u64) {
        if n == 0 {
            return;
        }
        *self.by_status.entry(status).or_default() += n;
        *self
            .by_tool
            .entry(tool.to_owned())
            .or_default()
            .entry(status)
            .or_default() += n;
    }

    pub(crate) fn with_every_status(mut self) -> Self {
        for s in ALL_STATUSES {
            self.by_status.entry(s).or_default();
        }
        self
    }
}

/// Every status, in lifecycle order.
pub const ALL_STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

/// The tool a task's work calls: the tool call's `tool`, else the work's kind.
pub fn tool_of(work: &Work) -> &str {
    work.input
        .get("tool")
        .and_then(|t| t.as_str())
        .unwrap_or(&work.kind)
}

/// A status's one-byte code in index keys.
pub(crate) fn status_code(s: TaskStatus) -> u8 {
    match s {
        TaskStatus::Working => 1,
        TaskStatus::InputRequired => 2,
        TaskStatus::Completed => 3,
        TaskStatus::Failed => 4,
        TaskStatus::Cancelled => 5,
    }
}

/// The key under which a (tenant, tool, status) count is kept.
pub(crate) fn tally_key(tenant: &str, tool: &str, status: TaskStatus) -> String {
    format!("{tenant}\u{1f}{}\u{1f}{}", cut(tool), status.as_str())
}

/// The tally keys' prefix for `tenant` (every tenant's for `None`).
pub(crate) fn tally_prefix(tenant: Option<&str>) -> String {
    tenant.map_or_else(String::new, |t| format!("{t}\u{1f}"))
}

/// Adds a tally read back (`key`, `n`) to `counts`; a key of another shape is damage.
pub(crate) fn add_tally(counts: &mut TaskCounts, key: &str, n: u64) -> StoreResult<()> {
    let mut parts = key.splitn(3, '\u{1f}');
    let (_, tool, status) = (parts.next(), parts.next(), parts.next());
    let status = status.and_then(|s| ALL_STATUSES.into_iter().find(|x| x.as_str() == s));
    match (tool, status) {
        (Some(tool), Some(status)) => {
            counts.add(tool, status, n);
            Ok(())
        }
        _ => Err(StoreError::corrupt(format!(
            "a task count has a malformed key {key:?}"
        ))),
    }
}

pub(crate) fn cut(name: &str) -> &str {
    if name.len() <= MAX_NAME_BYTES {
        return name;
    }
    let mut end = MAX_NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// The ordered indexes a listing walks. Each key is the facet's byte, what it pins, then
/// the creation time (big-endian) and the id; each value the task's tool. Two entries per
/// task keep the cost of a task small (the tool is checked on the entries walked); a query
/// that pins no status walks one range per status and merges them newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Facet {
    /// Tenant, status.
    TenantStatus,
    /// Status, every tenant.
    Status,
}

impl Facet {
    fn byte(self) -> u8 {
        match self {
            Facet::TenantStatus => 1,
            Facet::Status => 2,
        }
    }
}

fn push_name(k: &mut Vec<u8>, name: &str) {
    let name = cut(name).as_bytes();
    k.extend_from_slice(&(name.len() as u16).to_be_bytes());
    k.extend_from_slice(name);
}

/// A facet's key prefix: its byte and what it pins.
fn prefix(facet: Facet, tenant: &str, status: TaskStatus) -> Vec<u8> {
    let mut k = vec![facet.byte()];
    if facet == Facet::TenantStatus {
        push_name(&mut k, tenant);
    }
    k.push(status_code(status));
    k
}

fn entry_key(prefix: &[u8], created_at: Timestamp, id: &TaskId) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 24);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&created_at.as_millis().to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// A task's listing entries' keys. Every entry follows the task's status.
pub(crate) fn listing_keys(task: &Task) -> [Vec<u8>; 2] {
    [Facet::TenantStatus, Facet::Status].map(|f| {
        let p = prefix(f, task.scope.tenant(), task.status);
        entry_key(&p, task.created_at, &task.id)
    })
}

/// One key range of a walk: entries with `from <= key < to`, newest (largest) first.
#[derive(Debug, Clone)]
pub(crate) struct Range {
    pub(crate) from: Vec<u8>,
    pub(crate) to: Vec<u8>,
}

/// The ranges a query walks (one, or one per status to merge) and the tool left to check.
pub(crate) struct Walk {
    pub(crate) ranges: Vec<Range>,
    pub(crate) tool: Option<String>,
}

pub(crate) fn walk(q: &TaskQuery) -> Walk {
    let f = &q.filter;
    let facet = if f.tenant.is_some() {
        Facet::TenantStatus
    } else {
        Facet::Status
    };
    let statuses: Vec<TaskStatus> = match f.status {
        Some(s) => vec![s],
        None => ALL_STATUSES.to_vec(),
    };
    let lowest = TaskId::from_bytes([0; 16]);
    let ranges = statuses
        .into_iter()
        .map(|status| {
            let p = prefix(facet, f.tenant.as_deref().unwrap_or_default(), status);
            let from = entry_key(&p, f.created_after.unwrap_or(Timestamp(0)), &lowest);
            let mut to = match f.created_before {
                Some(before) => entry_key(&p, before, &lowest),
                None => {
                    // Past every entry under the prefix.
                    let mut k = p.clone();
                    k.extend_from_slice(&[0xff; 25]);
                    k
                }
            };
            if let Some(c) = q.after {
                to = to.min(entry_key(&p, c.created_at, &c.id));
            }
            Range { from, to }
        })
        .collect();
    Walk {
        ranges,
        tool: f.tool.clone(),
    }
}

/// The creation time and id at the end of a listing key.
pub(crate) fn cursor_of_key(key: &[u8]) -> StoreResult<Cursor> {
    let n = key.len();
    if n < 25 {
        return Err(StoreError::corrupt("a listing key is too short"));
    }
    let mut created = [0u8; 8];
    created.copy_from_slice(&key[n - 24..n - 16]);
    let mut id = [0u8; 16];
    id.copy_from_slice(&key[n - 16..]);
    Ok(Cursor {
        created_at: Timestamp(u64::from_be_bytes(created)),
        id: TaskId::from_bytes(id),
    })
}

/// Builds a page from a walk's entries (key, tool), newest first, as they come: `load`
/// reads a candidate's task (`None`: gone). Returns the page once it holds `limit` tasks,
/// the walk reached [`LIST_SCAN`] entries, or the entries ran out (`exhausted`).
pub(crate) struct PageBuilder<'q> {
    query: &'q TaskQuery,
    now: Timestamp,
    walked: usize,
    last: Option<Cursor>,
    tasks: Vec<TaskSummary>,
}

/// What feeding one entry decided.
pub(crate) enum Fed {
    /// Keep walking.
    More,
    /// The page is done.
    Done,
}

impl<'q> PageBuilder<'q> {
    pub(crate) fn new(query: &'q TaskQuery, now: Timestamp) -> Self {
        Self {
            query,
            now,
            walked: 0,
            last: None,
            tasks: Vec::new(),
        }
    }

    /// Whether an entry of `tool` can match before its task is read.
    pub(crate) fn wants(walk: &Walk, tool: &str) -> bool {
        walk.tool.as_deref().is_none_or(|t| t == cut(tool))
    }

    /// Feeds the walk's next entry: its position, and its task when the entry's tool
    /// matched and the task is stored.
    pub(crate) fn feed(&mut self, at: Cursor, task: Option<(&Task, &str)>) -> Fed {
        self.walked += 1;
        self.last = Some(at);
        if let Some((task, tool)) = task
            && !task.is_expired(self.now)
        {
            let s = TaskSummary::of(task, tool);
            if self.query.filter.admits(&s) {
                self.tasks.push(s);
            }
        }
        if self.tasks.len() >= self.query.limit || self.walked >= LIST_SCAN {
            Fed::Done
        } else {
            Fed::More
        }
    }

    /// The page; `exhausted` when the walk ran out of entries.
    pub(crate) fn finish(self, exhausted: bool) -> TaskPage {
        let next = if self.tasks.len() >= self.query.limit {
            self.tasks.last().map(Cursor::of)
        } else if exhausted {
            None
        } else {
            self.last
        };
        TaskPage {
            tasks: self.tasks,
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let c = Cursor {
            created_at: Timestamp(1_700_000_000_123),
            id: TaskId::generate(),
        };
        assert_eq!(Cursor::parse(&c.encode()).ok(), Some(c));
        for bad in [
            "",
            "zz",
            &c.encode().to_uppercase(),
            &format!("{}0", c.encode()),
        ] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tally_keys_read_back() {
        let mut counts = TaskCounts::default();
        let key = tally_key("acme", "export", TaskStatus::InputRequired);
        assert!(key.starts_with(&tally_prefix(Some("acme"))));
        assert!(add_tally(&mut counts, &key, 3).is_ok());
        assert_eq!(counts.by_status[&TaskStatus::InputRequired], 3);
        assert_eq!(counts.by_tool["export"][&TaskStatus::InputRequired], 3);
        assert!(add_tally(&mut counts, "acme", 1).is_err());
    }
}
