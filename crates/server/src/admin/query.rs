//! A listing's query string parsed into a [`TaskQuery`] (the admin API's listing and
//! events, the console's pages), and the filter's time bounds by key, which the console's
//! links write back with.

use std::collections::BTreeMap;

use snodo_core::model::{TaskStatus, Timestamp};
use snodo_core::store::{Cursor, TaskFilter, TaskQuery};

use super::AdminError;

/// The time bounds of a filter, by their query-string key (ms since the epoch).
pub(super) fn time_bounds(filter: &mut TaskFilter) -> [(&'static str, &mut Option<Timestamp>); 4] {
    [
        ("created_after", &mut filter.created_after),
        ("created_before", &mut filter.created_before),
        ("updated_after", &mut filter.updated_after),
        ("updated_before", &mut filter.updated_before),
    ]
}

/// Parses a listing's query string (`tenant`, `status`, `tool`, `created_after`,
/// `created_before`, `updated_after`, `updated_before` in ms since the epoch, `limit`,
/// `cursor`).
pub(crate) fn query_of(params: &BTreeMap<String, String>) -> Result<TaskQuery, AdminError> {
    let filter = filter_of(params)?;
    let limit = match params.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| AdminError::Invalid(format!("limit must be a number, got {l:?}")))?,
        None => 50,
    };
    let after = match params.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => Some(Cursor::parse(c)?),
        None => None,
    };
    Ok(TaskQuery {
        filter,
        limit,
        after,
    })
}

/// The filter part of a query string; empty values are left out.
pub(crate) fn filter_of(params: &BTreeMap<String, String>) -> Result<TaskFilter, AdminError> {
    let get = |k: &str| params.get(k).filter(|v| !v.is_empty()).cloned();
    let status = get("status")
        .map(|s| {
            TaskStatus::parse(&s).ok_or_else(|| {
                AdminError::Invalid(format!(
                    "status is one of working, input_required, completed, failed, cancelled; got {s:?}"
                ))
            })
        })
        .transpose()?;
    let mut filter = TaskFilter {
        tenant: get("tenant"),
        status,
        tool: get("tool"),
        ..TaskFilter::default()
    };
    for (key, bound) in time_bounds(&mut filter) {
        *bound = get(key)
            .map(|v| {
                v.parse::<u64>()
                    .map(Timestamp)
                    .map_err(|_| AdminError::Invalid(format!("{key} is ms since the epoch")))
            })
            .transpose()?;
    }
    Ok(filter)
}
