//! `limits = { … }` of a tool as an operator writes it: the caps of one execution of its
//! guest, checked before they become the stored [`ExecutionLimits`].

use serde::Deserialize;
use snodo_core::model::ExecutionLimits;

/// A tool's per-execution caps, each optional (the engine's own cap holds where one is
/// unset). Written in snake_case; stored with the task as [`ExecutionLimits`].
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLimits {
    /// Linear memory cap in bytes.
    pub memory_bytes: Option<u64>,
    /// Table elements cap.
    pub table_elements: Option<u32>,
    /// Running-time cap in ms.
    pub deadline_ms: Option<u64>,
    /// Fuel budget.
    pub fuel: Option<u64>,
    /// Wall-clock cap of one execution in ms.
    pub wall_clock_ms: Option<u64>,
}

impl ToolLimits {
    /// The limits as stored, or why they cannot be: a cap of zero would refuse every
    /// execution before it starts.
    pub fn check(self) -> Result<ExecutionLimits, &'static str> {
        let zero = |v: Option<u64>| v == Some(0);
        if zero(self.memory_bytes)
            || zero(self.deadline_ms)
            || zero(self.fuel)
            || zero(self.wall_clock_ms)
        {
            return Err("limits must be positive when set");
        }
        Ok(ExecutionLimits {
            memory_bytes: self.memory_bytes,
            table_elements: self.table_elements,
            deadline_ms: self.deadline_ms,
            fuel: self.fuel,
            wall_clock_ms: self.wall_clock_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_cap_is_refused_and_the_rest_are_kept() {
        let l = ToolLimits {
            memory_bytes: Some(1 << 20),
            wall_clock_ms: Some(5_000),
            ..Default::default()
        };
        let stored = l.check().expect("positive caps");
        assert_eq!(stored.memory_bytes, Some(1 << 20));
        assert_eq!(stored.wall_clock_ms, Some(5_000));
        assert_eq!(stored.fuel, None);
        let zero = ToolLimits { fuel: Some(0), ..l };
        assert_eq!(
            zero.check().unwrap_err(),
            "limits must be positive when set"
        );
    }
}
