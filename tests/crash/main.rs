//! Crash tests, one binary: child processes killed with SIGKILL mid-workload, their stores
//! reopened and checked.

mod runner_crash;
mod store_crash;
