//! The `[webhooks]` section: where deliveries may go, their retry list and bounds, and the
//! subscriptions the configuration declares (`[[webhooks.subscriptions]]`, the same shape
//! as the admin API's body).

use serde::{Deserialize, Serialize};
use snodo_core::config::SettingError;
use snodo_core::model::{HookEvent, RetryPolicy, WebhookSpec, check_secret};
use snodo_wasm::outbound::AllowList;

/// The `[webhooks]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Where deliveries may go (`allowed_hosts`, the allow-list syntax of
    /// `tools.<name>.allowed_outbound_hosts`); empty: no subscription can be made.
    pub allowed_hosts: Vec<String>,
    /// The delays between the tries of one event, in milliseconds (`retry_ms`; default 5 s,
    /// 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight tries over about 28 hours). Each
    /// subscription keeps the list it was made with.
    pub retry_ms: Vec<u64>,
    /// How long a rotated-out secret keeps signing beside the new one
    /// (`rotation_grace_ms`, default a day).
    pub rotation_grace_ms: u64,
    /// How long the outbox keeps an event every subscription is past, for the cursor
    /// (`retain_ms`, default 7 days).
    pub retain_ms: u64,
    /// How long a node's claim on a subscription's deliveries holds (`lease_ms`, default
    /// 60 s): longer than one round of tries.
    pub lease_ms: u64,
    /// Connecting to a receiver (`connect_timeout_ms`, default 5 s).
    pub connect_timeout_ms: u64,
    /// From a delivery sent to its answer (`answer_timeout_ms`, default 15 s).
    pub answer_timeout_ms: u64,
    /// The subscriptions the configuration declares.
    pub subscriptions: Vec<WebhookDeclaration>,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            retry_ms: vec![
                5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
            ],
            rotation_grace_ms: 24 * 3_600_000,
            retain_ms: 7 * 24 * 3_600_000,
            lease_ms: 60_000,
            connect_timeout_ms: 5_000,
            answer_timeout_ms: 15_000,
            subscriptions: Vec::new(),
        }
    }
}

impl WebhookSettings {
    /// The key and the reason of a setting that cannot hold.
    pub fn check(&self) -> Result<(), SettingError> {
        self.allow_list()?;
        RetryPolicy::new(self.retry_ms.iter().copied())
            .map_err(|e| SettingError::new("retry_ms", e.to_string()))?;
        let bounds = [
            ("lease_ms", self.lease_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("answer_timeout_ms", self.answer_timeout_ms),
        ];
        for (key, v) in bounds {
            if v == 0 {
                return Err(SettingError::new(key, "must be positive"));
            }
        }
        if self.lease_ms <= self.connect_timeout_ms + self.answer_timeout_ms {
            return Err(SettingError::new(
                "lease_ms",
                "must be longer than connect_timeout_ms and answer_timeout_ms together: a \
                 claim that ran out during a round would let another node send it too",
            ));
        }
        let allowed = self.allow_list()?;
        for (i, d) in self.subscriptions.iter().enumerate() {
            let at = |e: String| SettingError::new(format!("subscriptions[{i}]"), e);
            let (spec, _) = d.clone().into_parts().map_err(at)?;
            self.reachable(&allowed, &spec.url).map_err(at)?;
        }
        Ok(())
    }

    /// The allow-list deliveries go through.
    pub fn allow_list(&self) -> Result<AllowList, SettingError> {
        AllowList::parse(&self.allowed_hosts)
            .map_err(|e| SettingError::new("allowed_hosts", e.to_string()))
    }

    /// The retry list new subscriptions get.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retry_ms.iter().copied()).unwrap_or_default()
    }

    /// Whether `url` is a URL an entry of `allowed` allows (its addresses are checked at
    /// each delivery, after the name is resolved).
    pub(crate) fn reachable(&self, allowed: &AllowList, url: &str) -> Result<(), String> {
        if allowed.admits(url) {
            return Ok(());
        }
        let origin = url
            .parse::<axum::http::Uri>()
            .ok()
            .and_then(|u| Some(format!("{}://{}", u.scheme_str()?, u.authority()?)))
            .unwrap_or_else(|| url.to_owned());
        Err(format!(
            "url {url:?}: no entry of webhooks.allowed_hosts allows it; to allow it, add \
             \"{origin}\" to webhooks.allowed_hosts"
        ))
    }
}

/// A subscription as an operator writes it: a `[[webhooks.subscriptions]]` table, or the
/// body of `POST /admin/v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookDeclaration {
    /// Its name.
    pub name: String,
    /// The tenant whose tasks it hears.
    pub tenant: String,
    /// The endpoint.
    pub url: String,
    /// `completed`, `failed`, `cancelled`, `input_required` (default: every one).
    #[serde(default)]
    pub events: Vec<String>,
    /// The tools whose tasks it hears (default: every tool).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Heard only by calls whose `_meta` asks for its URL (`io.snodo/webhook`).
    #[serde(default, alias = "onRequest")]
    pub on_request: bool,
    /// The signing secret (`whsec_…`; default: a new random one, shown once by the API).
    #[serde(default)]
    pub secret: Option<String>,
}

impl WebhookDeclaration {
    /// The subscription and its declared secret, checked; the error names the field.
    pub fn into_parts(self) -> Result<(WebhookSpec, Option<String>), String> {
        let events = self
            .events
            .iter()
            .map(|e| {
                HookEvent::parse(e).ok_or_else(|| {
                    format!(
                        "events: {e:?} is not one of completed, failed, cancelled, input_required"
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(s) = &self.secret {
            check_secret(s).map_err(|e| format!("secret: {e}"))?;
        }
        let spec = WebhookSpec {
            name: self.name,
            tenant: self.tenant,
            url: self.url,
            events,
            tools: self.tools,
            on_request: self.on_request,
        };
        spec.check()?;
        Ok((spec, self.secret))
    }
}
