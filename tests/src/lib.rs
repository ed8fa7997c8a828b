//! Shared helpers for the end-to-end tests: the workload vocabulary the crash test's child
//! process speaks, and the runtime the helper processes run on.

/// What the workload does with a task after creating and claiming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Complete it.
    Complete,
    /// Ask for input and leave it parked.
    Input,
    /// Leave it claimed, as if its guest were still running.
    Run,
}

impl Plan {
    /// The plan for the n-th task.
    pub fn for_index(n: usize) -> Self {
        match n % 3 {
            0 => Plan::Complete,
            1 => Plan::Input,
            _ => Plan::Run,
        }
    }

    /// The word used on the wire between child and parent.
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Complete => "complete",
            Plan::Input => "input",
            Plan::Run => "run",
        }
    }

    /// Parses [`Plan::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "complete" => Some(Plan::Complete),
            "input" => Some(Plan::Input),
            "run" => Some(Plan::Run),
            _ => None,
        }
    }
}

/// A multi-threaded runtime for a helper process; exits the process if none can be built.
pub fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            std::process::exit(1);
        }
    }
}
