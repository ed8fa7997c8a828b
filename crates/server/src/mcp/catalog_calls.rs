//! Resources, prompts and completion: listing what components serve, and reads, renders
//! and completions run like synchronous tool calls (a request-path slot, the wall-clock
//! limit, MRTR when the guest asks for input).

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::protocol::{self, RequestMeta, ResultObject, RpcError};
use snodo_core::model::Principal;
use snodo_runner::CatalogSource;
use snodo_wasm::{AttemptError, Completing, ComponentCatalog, Execution, ExecutionIo};

use super::mrtr::{self, given_answers};
use super::{McpServer, Revision, SyncIo};

/// What a guest call on the request path produced.
pub(super) enum Answered<T = Value> {
    /// The result.
    Complete(T),
    /// The guest asked for input the request did not carry: an `InputRequiredResult`.
    InputRequired(Value),
}

/// The request a read or render answers: what it carried, who sent it, on which revision.
#[derive(Clone, Copy)]
pub(super) struct Asking<'a>(
    pub(super) &'a Map<String, Value>,
    pub(super) &'a RequestMeta,
    pub(super) &'a Principal,
    pub(super) Revision,
);

/// A list or read result of this revision: 2026-07-28 marks it complete and says how long
/// it may be cached ([`protocol::complete_uncached`]).
fn finished(revision: Revision, result: ResultObject) -> Value {
    match revision {
        Revision::Current => protocol::complete_uncached(result),
        Revision::Handshake => Value::Object(result),
    }
}

/// A result with one field.
fn object(key: &str, value: Value) -> ResultObject {
    let mut m = ResultObject::new();
    m.insert(key.into(), value);
    m
}

/// An optional object parameter: absent or null is an empty object.
pub(super) fn object_field(
    params: &Map<String, Value>,
    key: &str,
) -> Result<Map<String, Value>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(RpcError::invalid_params(format!(
            "params.{key} must be an object"
        ))),
    }
}

fn string_field<'a>(params: &'a Map<String, Value>, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("params.{key} must be a string")))
}

impl McpServer {
    /// The `key` list of every source's catalog entries `pick` selects, in the order the
    /// components were added.
    fn listed<'a, I>(
        &'a self,
        revision: Revision,
        key: &str,
        pick: impl Fn(&'a ComponentCatalog) -> I,
    ) -> Value
    where
        I: Iterator<Item = &'a Value>,
    {
        let entries: Vec<Value> = self
            .config
            .catalog
            .sources()
            .iter()
            .flat_map(|s| pick(s.component.catalog()).cloned())
            .collect();
        finished(revision, object(key, Value::from(entries)))
    }

    pub(super) fn resources_list(&self, revision: Revision) -> Value {
        self.listed(revision, "resources", |c| {
            c.resources.iter().map(|r| &r.listing)
        })
    }

    pub(super) fn resource_templates_list(&self, revision: Revision) -> Value {
        self.listed(revision, "resourceTemplates", |c| {
            c.templates.iter().map(|t| &t.listing)
        })
    }

    pub(super) fn prompts_list(&self, revision: Revision) -> Value {
        self.listed(revision, "prompts", |c| {
            c.prompts.iter().map(|p| &p.listing)
        })
    }

    /// Runs a read or render of `source` for `subject` on the request path.
    async fn catalog_call<F, Fut, T>(
        &self,
        request: Asking<'_>,
        subject: &str,
        source: &CatalogSource,
        call: F,
    ) -> Result<Answered<T>, RpcError>
    where
        F: FnOnce(Execution) -> Fut,
        Fut: Future<Output = Result<Option<Result<T, RpcError>>, AttemptError>>,
    {
        let Asking(params, meta, principal, revision) = request;
        let key = self.server_key().await?;
        let responses = given_answers(params, &key, subject, principal)?;
        let _slot = self.sync_slot(principal)?;
        let mut io = SyncIo::new(responses.clone(), meta.client_capabilities.clone());
        if revision == Revision::Handshake {
            // No stream to ask on here: a question is refused with a reason the guest sees.
            io = io.asking(self.outstanding.clone(), principal.clone());
        }
        let io: Arc<dyn ExecutionIo> = Arc::new(io);
        let mut exec = Execution::new(subject, Value::Null, io);
        exec.limits = source.limits;
        exec.grants = source.grants.clone();
        match self.within_wall_clock(call(exec)).await? {
            Ok(Some(Ok(v))) => Ok(Answered::Complete(v)),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(RpcError::invalid_params("Resource not found")),
            Err(AttemptError::NeedInput(q)) => Ok(Answered::InputRequired(mrtr::input_required(
                q, &key, subject, principal, &responses,
            ))),
            Err(e) => Err(e.to_rpc_error()),
        }
    }

    pub(super) async fn resources_read(&self, asking: Asking<'_>) -> Result<Value, RpcError> {
        let Asking(params, _, _, revision) = asking;
        let uri = string_field(params, "uri")?;
        // SEP-2164: an unknown URI is -32602 with the URI, never an empty `contents`.
        let not_found =
            || RpcError::invalid_params("Resource not found").with_data(json!({"uri": uri}));
        let source = self
            .config
            .catalog
            .resource_source(uri)
            .ok_or_else(not_found)?;
        let subject = format!("resource:{uri}");
        let component = source.component.clone();
        let answered = self
            .catalog_call(asking, &subject, source, |exec| async move {
                component.read_resource(exec, uri).await
            })
            .await
            .map_err(|e| {
                if e.code == protocol::codes::INVALID_PARAMS && e.data.is_none() {
                    e.with_data(json!({"uri": uri}))
                } else {
                    e
                }
            })?;
        Ok(match answered {
            Answered::Complete(contents) => finished(revision, object("contents", contents)),
            Answered::InputRequired(v) => v,
        })
    }

    pub(super) async fn prompts_get(&self, asking: Asking<'_>) -> Result<Value, RpcError> {
        let Asking(params, _, _, revision) = asking;
        let name = string_field(params, "name")?;
        let (source, prompt) = self
            .config
            .catalog
            .prompt(name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))?;
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) if a.values().all(Value::is_string) => a.clone(),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "params.arguments must be an object of strings",
                ));
            }
        };
        if let Some((missing, _)) = prompt
            .arguments
            .iter()
            .find(|(n, required)| *required && !arguments.contains_key(n))
        {
            return Err(RpcError::invalid_params(format!(
                "prompt {name:?} needs the argument {missing:?}"
            )));
        }
        let subject = format!("prompt:{name}");
        let component = source.component.clone();
        let arguments = Value::Object(arguments);
        let answered = self
            .catalog_call(asking, &subject, source, |exec| async move {
                component.get_prompt(exec, name, &arguments).await.map(Some)
            })
            .await?;
        Ok(match answered {
            Answered::Complete(result) => match revision {
                Revision::Current => protocol::complete(result),
                Revision::Handshake => Value::Object(result),
            },
            Answered::InputRequired(v) => v,
        })
    }

    pub(super) async fn complete(
        &self,
        params: &Map<String, Value>,
        revision: Revision,
    ) -> Result<Value, RpcError> {
        let reference = params
            .get("ref")
            .and_then(Value::as_object)
            .ok_or_else(|| RpcError::invalid_params("params.ref must be an object"))?;
        let argument = params
            .get("argument")
            .and_then(Value::as_object)
            .ok_or_else(|| RpcError::invalid_params("params.argument must be an object"))?;
        let arg_name = string_field(argument, "name")?;
        let value = string_field(argument, "value")?;
        let context = params
            .get("context")
            .and_then(|c| c.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let (source, target) = match string_field(reference, "type")? {
            "ref/prompt" => {
                let name = string_field(reference, "name")?;
                let (source, _) =
                    self.config.catalog.prompt(name).ok_or_else(|| {
                        RpcError::invalid_params(format!("Unknown prompt: {name}"))
                    })?;
                (source, Completing::Prompt(name))
            }
            "ref/resource" => {
                let uri = string_field(reference, "uri")?;
                let source = self.config.catalog.template_source(uri).ok_or_else(|| {
                    RpcError::invalid_params(format!("Unknown resource template: {uri}"))
                })?;
                (source, Completing::Template(uri))
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "params.ref.type {other:?} is neither ref/prompt nor ref/resource"
                )));
            }
        };
        let completion = if source.component.catalog().completions {
            self.within_wall_clock(source.component.complete(target, arg_name, value, &context))
                .await?
                .map_err(|e| e.to_rpc_error())??
        } else {
            json!({"values": [], "hasMore": false})
        };
        let result = object("completion", completion);
        Ok(match revision {
            Revision::Current => protocol::complete(result),
            Revision::Handshake => Value::Object(result),
        })
    }
}
