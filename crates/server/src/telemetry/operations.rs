//! The MCP operation label sets: `mcp.server.operation.duration` of the OpenTelemetry MCP
//! conventions, one histogram per method, tool and error type, bounded in how many series
//! it keeps.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::Metrics;
use super::histogram::Histogram;
use super::text::escape_label;

/// The most label sets `mcp_server_operation_duration_seconds` keeps; beyond them, new
/// tool names and error codes are counted under `_other` (deployments can rename tools
/// for ever, and a guest may fail with any code).
const MAX_OPERATION_SERIES: usize = 2_048;

/// One series of the operation-duration histogram: method, tool, `error.type`.
type OperationKey = (&'static str, Option<String>, Option<String>);

/// The operation histograms, by label set.
#[derive(Debug, Default)]
pub(super) struct Operations(Mutex<BTreeMap<OperationKey, Arc<Histogram>>>);

impl Operations {
    /// The histogram of `key`, or of its `_other` series once the cap is reached.
    fn series(&self, key: OperationKey) -> Arc<Histogram> {
        let mut ops = self.0.lock();
        if let Some(h) = ops.get(&key) {
            return h.clone();
        }
        // At the cap a new tool or error code joins `_other`: the methods are fixed, so at
        // most two series per method follow.
        let key = if ops.len() >= MAX_OPERATION_SERIES {
            let other = |l: Option<String>| l.map(|_| "_other".to_owned());
            (key.0, other(key.1), other(key.2))
        } else {
            key
        };
        ops.entry(key).or_default().clone()
    }

    /// Writes the histogram family, when any operation was recorded.
    pub(super) fn render(&self, out: &mut String) {
        let ops = self.0.lock().clone();
        if ops.is_empty() {
            return;
        }
        let name = "mcp_server_operation_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} MCP requests served, by method, tool and error type (mcp.server.operation.duration).\n# TYPE {name} histogram"
        );
        for ((method, tool, error), h) in ops {
            let mut labels = format!("mcp_method_name=\"{method}\"");
            if let Some(t) = tool {
                let _ = write!(labels, ",gen_ai_tool_name=\"{}\"", escape_label(&t));
            }
            if let Some(e) = error {
                let _ = write!(labels, ",error_type=\"{e}\"");
            }
            h.render(out, name, &labels);
        }
    }
}

impl Metrics {
    /// Records one MCP operation: its method, the tool a `tools/call` named (when the
    /// catalog serves it), its `error.type` (`None` for a result; a JSON-RPC error code, or
    /// `tool_error`) and how long it took.
    pub fn operation(
        &self,
        method: &'static str,
        tool: Option<String>,
        error: Option<String>,
        took: Duration,
    ) {
        self.operations.series((method, tool, error)).observe(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_series_are_bounded_and_their_labels_escaped() {
        let m = Metrics::new();
        let ms = Duration::from_millis(1);
        let tool_error = Some("tool_error".to_owned());
        m.operation("tools/call", Some("we\"ird".into()), tool_error, ms);
        m.operation("tasks/get", None, Some("-32602".into()), ms);
        for i in 0..MAX_OPERATION_SERIES + 50 {
            m.operation("tools/call", Some(format!("tool-{i}")), None, ms);
        }
        // Past the cap, any error code a guest fails with shares one series too.
        for code in 0..100 {
            let error = Some((-40_000 - code).to_string());
            m.operation("tools/call", None, error, ms);
        }
        let text = m.render(0, 0, 0);
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="we\"ird",error_type="tool_error"} 1"#
        ));
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tasks/get",error_type="-32602"} 1"#
        ));
        let series = text
            .lines()
            .filter(|l| l.starts_with("mcp_server_operation_duration_seconds_count"))
            .count();
        // The first two series and 2,046 tools fill the cap; the last 52 tools share one,
        // and the 100 codes another.
        assert_eq!(
            series,
            MAX_OPERATION_SERIES + 2,
            "the overflow shares two series"
        );
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",error_type="_other"} 100"#
        ));
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="_other"} 52"#
        ));
    }
}
