//! MRTR (multi-round-trip requests): the answers a request carries for a guest that asks,
//! and the `input_required` result that asks for more. The sealing of `requestState` is
//! `state.rs`'s; the rounds themselves are run by `tools/call` and the catalog calls.

use serde_json::{Map, Value, json};

use crate::protocol::RpcError;
use snodo_core::model::Principal;
use snodo_wasm::InputRequests;

use super::request::Answers;
use super::state;

/// What a `requestState` is sealed for: `subject` (a tool name, `prompt:<name>` or
/// `resource:<uri>`) and a digest of the arguments the round was called with. A state
/// opens only for the same subject and the same arguments, so it cannot carry answers
/// given to one call into a call with other arguments.
pub(super) fn sealed_for(subject: &str, arguments: &Value) -> String {
    use base64::Engine;
    use sha2::Digest;
    // Arguments are a `serde_json::Map` (sorted keys): equal arguments serialize alike.
    let text = serde_json::to_vec(arguments).unwrap_or_else(|_| arguments.to_string().into_bytes());
    let digest = sha2::Sha256::digest(&text);
    let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
    format!("{subject}\n{digest}")
}

/// The answers a request carries for a guest that asks (MRTR): its `inputResponses`, plus
/// the earlier rounds' sealed in its `requestState` for `subject` (what the state was
/// issued for: a tool name, `prompt:<name>` or `resource:<uri>`).
pub(super) fn given_answers(
    answers: Answers,
    key: &[u8; 32],
    subject: &str,
    principal: &Principal,
) -> Result<Map<String, Value>, RpcError> {
    let Answers {
        mut responses,
        state,
    } = answers;
    if let Some(s) = state {
        let earlier =
            state::verify(key, subject, principal, &s).map_err(RpcError::invalid_params)?;
        for (k, v) in earlier {
            responses.entry(k).or_insert(v);
        }
    }
    Ok(responses)
}

/// An `InputRequiredResult` asking `questions`, with a `requestState` sealed for `subject`
/// and `principal` that carries every answer given so far, so the next round can replay
/// them all.
pub(super) fn input_required(
    questions: InputRequests,
    key: &[u8; 32],
    subject: &str,
    principal: &Principal,
    answered: &Map<String, Value>,
) -> Value {
    let request_state = state::issue(key, subject, principal, answered);
    let requests: Map<String, Value> = questions.into_iter().collect();
    json!({"resultType": "input_required", "inputRequests": requests, "requestState": request_state})
}
