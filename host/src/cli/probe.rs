//! `snodo probe`: one GET of a node's health route, for container health checks and service
//! managers that cannot speak HTTP themselves (the image carries no other HTTP client).

use std::process::ExitCode;
use std::time::Duration;

/// Ask a node whether it is ready (exit 0) or not (exit 1, with what it answered).
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The node, `http://HOST:PORT`, and the route to ask.
    #[arg(long, default_value = "http://127.0.0.1:3001")]
    url: String,
    /// The route: `/readyz` (the store commits) or `/healthz` (the process answers).
    #[arg(long, default_value = "/readyz")]
    path: String,
    /// How long to wait for the answer, in ms.
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
}

pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: ProbeArgs) -> ExitCode {
    super::exit("snodo probe", runtime.block_on(probe(&args)), 1)
}

async fn probe(args: &ProbeArgs) -> Result<(), String> {
    let host = args
        .url
        .strip_prefix("http://")
        .ok_or_else(|| format!("--url {}: only http://HOST:PORT is spoken here", args.url))?
        .trim_end_matches('/');
    let addr = tokio::net::lookup_host(host)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("cannot resolve {host}"))?;
    let asked = async {
        let mut c = snodo::client::Connection::open(addr).await?;
        c.get(&args.path).await
    };
    match tokio::time::timeout(Duration::from_millis(args.timeout_ms), asked).await {
        Err(_) => Err(format!(
            "{host}{}: no answer within {} ms",
            args.path, args.timeout_ms
        )),
        Ok(Err(e)) => Err(format!("{host}{}: {e}", args.path)),
        Ok(Ok((200, _))) => Ok(()),
        Ok(Ok((status, body))) => Err(format!(
            "{host}{}: HTTP {status}: {}",
            args.path,
            body.trim()
        )),
    }
}
