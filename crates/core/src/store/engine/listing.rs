//! Operators' listings: pages of tasks walked down the listing indexes, newest first, and
//! the counts by status and tool kept in tallies.

use crate::store::StoreResult;
use crate::store::listing::{self, Fed, PageBuilder, TaskCounts, TaskPage, TaskQuery};

use super::{Ctx, View};

/// A listing entry: its key and the task's tool.
type Entry = (Vec<u8>, String);

/// One page of tasks: a walk down the listing ranges the query picks (see [`listing`]),
/// merged newest first, reading only the tasks whose entries can match.
pub(crate) fn list(view: &dyn View, ctx: &Ctx, q: &TaskQuery) -> StoreResult<TaskPage> {
    q.check()?;
    let walk = listing::walk(q);
    let mut page = PageBuilder::new(q, ctx.now);
    // Read in chunks: a first page without checks left reads one more entry than it shows.
    let chunk = if walk.tool.is_some() || q.filter.updated_after.is_some() {
        256
    } else {
        q.limit + 1
    };
    // Per range: entries read and not yet fed (newest last, so `pop` takes the newest),
    // and where the next read ends (`None`: the range is exhausted).
    let mut heads: Vec<(Vec<Entry>, Option<Vec<u8>>)> = walk
        .ranges
        .iter()
        .map(|r| (Vec::new(), Some(r.to.clone())))
        .collect();
    loop {
        for (i, (buf, to)) in heads.iter_mut().enumerate() {
            if buf.is_empty()
                && let Some(upto) = to.take()
            {
                let mut entries = view.listing(&walk.ranges[i].from, &upto, chunk)?;
                if entries.len() == chunk
                    && let Some((last, _)) = entries.last()
                {
                    *to = Some(last.clone());
                }
                entries.reverse();
                *buf = entries;
            }
        }
        // The newest entry of all the ranges' heads.
        let mut best: Option<(usize, listing::Cursor)> = None;
        for (i, (buf, _)) in heads.iter().enumerate() {
            if let Some((key, _)) = buf.last() {
                let at = listing::cursor_of_key(key)?;
                if best.is_none_or(|(_, b)| at > b) {
                    best = Some((i, at));
                }
            }
        }
        let Some((i, at)) = best else {
            return Ok(page.finish(true));
        };
        let Some((_, tool)) = heads[i].0.pop() else {
            return Ok(page.finish(true));
        };
        let task = if PageBuilder::wants(&walk, &tool) {
            view.load_task(&at.id)?
        } else {
            None
        };
        if let Fed::Done = page.feed(at, task.as_ref().map(|t| (t, tool.as_str()))) {
            return Ok(page.finish(false));
        }
    }
}

/// Stored tasks by status and by tool, of one tenant or of all.
pub(crate) fn counts(view: &dyn View, tenant: Option<&str>) -> StoreResult<TaskCounts> {
    let mut counts = TaskCounts::default();
    for (key, n) in view.tallies(&listing::tally_prefix(tenant))? {
        listing::add_tally(&mut counts, &key, n)?;
    }
    Ok(counts.with_every_status())
}
