//! The methods this server answers, parsed once from the request's `method`.

/// A method this server serves. Anything else is -32601.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// `server/discover`.
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall,
    /// `resources/list`.
    ResourcesList,
    /// `resources/templates/list`.
    ResourceTemplatesList,
    /// `resources/read`.
    ResourcesRead,
    /// `prompts/list`.
    PromptsList,
    /// `prompts/get`.
    PromptsGet,
    /// `completion/complete`.
    Complete,
    /// `tasks/get`.
    TasksGet,
    /// `tasks/update`.
    TasksUpdate,
    /// `tasks/cancel`.
    TasksCancel,
    /// `subscriptions/listen`.
    SubscriptionsListen,
    /// `tasks/result` (2025-11-25 only).
    TasksResult,
    /// `tasks/list` (2025-11-25 only; SEP-2663 removed it).
    TasksList,
}

/// Every method 2026-07-28 serves with its name, the table `parse` reads.
const NAMES: [(Method, &str); 13] = [
    (Method::Discover, "server/discover"),
    (Method::ToolsList, "tools/list"),
    (Method::ToolsCall, "tools/call"),
    (Method::ResourcesList, "resources/list"),
    (Method::ResourceTemplatesList, "resources/templates/list"),
    (Method::ResourcesRead, "resources/read"),
    (Method::PromptsList, "prompts/list"),
    (Method::PromptsGet, "prompts/get"),
    (Method::Complete, "completion/complete"),
    (Method::TasksGet, "tasks/get"),
    (Method::TasksUpdate, "tasks/update"),
    (Method::TasksCancel, "tasks/cancel"),
    (Method::SubscriptionsListen, "subscriptions/listen"),
];

/// The methods only 2025-11-25 serves (its experimental tasks), beside those of [`NAMES`]
/// it shares.
const HANDSHAKE_ONLY: [(Method, &str); 2] = [
    (Method::TasksResult, "tasks/result"),
    (Method::TasksList, "tasks/list"),
];

impl Method {
    /// The method's name on the wire.
    pub(crate) fn as_str(self) -> &'static str {
        NAMES
            .iter()
            .chain(&HANDSHAKE_ONLY)
            .find(|(m, _)| *m == self)
            .map_or("", |(_, n)| n)
    }

    /// The method named `name`, if 2026-07-28 serves it.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        NAMES.iter().find(|(_, n)| *n == name).map(|(m, _)| *m)
    }

    /// The method named `name`, if 2025-11-25 serves it: not `server/discover` (that
    /// revision discovers by its handshake), `tasks/update` or subscriptions (2026-07-28
    /// only), but that revision's own `tasks/result` and `tasks/list`.
    pub(crate) fn parse_handshake(name: &str) -> Option<Self> {
        Self::parse(name)
            .filter(|m| {
                !matches!(
                    m,
                    Self::Discover | Self::TasksUpdate | Self::SubscriptionsListen
                )
            })
            .or_else(|| {
                HANDSHAKE_ONLY
                    .iter()
                    .find(|(_, n)| *n == name)
                    .map(|(m, _)| *m)
            })
    }

    /// Whether the request must declare the tasks extension (the extension's own methods).
    pub(crate) fn needs_tasks(self) -> bool {
        matches!(self, Self::TasksGet | Self::TasksUpdate | Self::TasksCancel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_methods_parse_and_others_do_not() {
        assert_eq!(Method::parse("tasks/get"), Some(Method::TasksGet));
        assert!(Method::parse("tasks/get").is_some_and(Method::needs_tasks));
        assert!(!Method::ToolsCall.needs_tasks());
        assert_eq!(
            Method::parse_handshake("tools/call"),
            Some(Method::ToolsCall)
        );
        assert_eq!(
            Method::parse_handshake("tasks/get"),
            Some(Method::TasksGet),
            "2025-11-25's experimental tasks"
        );
        assert_eq!(Method::parse_handshake("tasks/update"), None);
        assert_eq!(Method::parse_handshake("server/discover"), None);
        assert_eq!(Method::parse("tasks/list"), None, "removed by SEP-2663");
        assert_eq!(Method::parse("tasks/result"), None);
        for (m, name) in HANDSHAKE_ONLY {
            assert_eq!(Method::parse_handshake(name), Some(m));
            assert_eq!(m.as_str(), name);
        }
        assert_eq!(Method::parse("prompts/get"), Some(Method::PromptsGet));
        assert_eq!(Method::parse("initialize"), None, "removed in 2026-07-28");
        for (m, name) in NAMES {
            assert_eq!(Method::parse(name), Some(m));
            assert_eq!(m.as_str(), name);
        }
    }
}
