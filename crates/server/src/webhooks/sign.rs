//! Standard Webhooks signatures: `v1,` and the base64 HMAC-SHA256, keyed by the secret's
//! decoded bytes, of `{webhook-id}.{webhook-timestamp}.{body}`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use snodo_core::model::SECRET_PREFIX;

/// A new random secret: `whsec_` and 32 random bytes, base64.
pub(crate) fn new_secret() -> String {
    let key = snodo_core::ids::random_bytes::<32>();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The signature of `body` sent as event `id` at `at` (seconds since the epoch) under
/// `secret`; `None` when the secret is not one ([`snodo_core::model::check_secret`]).
pub(crate) fn signature(secret: &str, id: &str, at: u64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(at.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    Some(format!("v1,{}", STANDARD.encode(ctx.sign().as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn the_specifications_example_signs_as_published() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let got = signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        assert_eq!(
            got.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn a_new_secret_is_a_valid_one_and_never_the_same() {
        let (a, b) = (new_secret(), new_secret());
        assert!(snodo_core::model::check_secret(&a).is_ok());
        assert_ne!(a, b);
        assert!(signature(&a, "id", 1, b"{}").is_some());
        assert!(signature("not a secret", "id", 1, b"{}").is_none());
    }
}
