//! Resources, prompts and completion: listing what components serve, and reads, renders
//! and completions run like synchronous tool calls (a request-path slot, the wall-clock
//! limit, MRTR when the guest asks for input).

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::protocol::{self, ResultObject, RpcError};
use snodo_runner::CatalogSource;
use snodo_wasm::{AttemptError, ComponentCatalog, Execution, ExecutionIo};

use super::mrtr::{self, given_answers};
use super::request::{Answers, Complete, Completing, PromptsGet, ResourcesRead};
use super::{Ctx, Handled, McpServer, SyncIo};

/// A result with one field.
fn object(key: &str, value: Value) -> ResultObject {
    let mut m = ResultObject::new();
    m.insert(key.into(), value);
    m
}

impl McpServer {
    /// The `key` list of every source's catalog entries `pick` selects, in the order the
    /// components were added.
    fn listed(
        &self,
        ctx: &Ctx<'_>,
        key: &str,
        pick: impl Fn(&ComponentCatalog, &mut Vec<Value>),
    ) -> Value {
        let catalog = self.config.catalog.current();
        let mut entries = Vec::new();
        for s in catalog.sources() {
            pick(s.component.catalog(), &mut entries);
        }
        ctx.dialect
            .complete_uncached(object(key, Value::from(entries)))
    }

    pub(super) fn resources_list(&self, ctx: &Ctx<'_>) -> Value {
        self.listed(ctx, "resources", |c, out| {
            out.extend(c.resources.iter().map(|r| r.listing.clone()))
        })
    }

    pub(super) fn resource_templates_list(&self, ctx: &Ctx<'_>) -> Value {
        self.listed(ctx, "resourceTemplates", |c, out| {
            out.extend(c.templates.iter().map(|t| t.listing.clone()))
        })
    }

    pub(super) fn prompts_list(&self, ctx: &Ctx<'_>) -> Value {
        self.listed(ctx, "prompts", |c, out| {
            out.extend(c.prompts.iter().map(|p| p.listing.clone()))
        })
    }

    /// Runs a read or render of `source` for `subject` on the request path: its result as
    /// `finish` makes it, or the `input_required` result when the guest asked for input the
    /// request did not carry.
    async fn catalog_call<F, Fut, T>(
        &self,
        ctx: &Ctx<'_>,
        answers: Answers,
        (subject, arguments, source): (&str, &Value, &CatalogSource),
        call: F,
        finish: impl FnOnce(T) -> Value,
    ) -> Handled
    where
        F: FnOnce(Execution) -> Fut,
        Fut: Future<Output = Result<Option<Result<T, RpcError>>, AttemptError>>,
    {
        let key = self.server_key().await?;
        let sealed_for = mrtr::sealed_for(subject, arguments);
        let responses = given_answers(answers, &key, &sealed_for, ctx.principal)?;
        let _slot = self.sync_slot(ctx.principal)?;
        let io: Arc<dyn ExecutionIo> = Arc::new(SyncIo::for_request(ctx, responses.clone()));
        let mut exec = Execution::new(subject, Value::Null, io).in_tenant(super::tenant_of(ctx));
        exec.limits = source.limits;
        exec.grants = source.grants.clone();
        match self.within_wall_clock(call(exec)).await? {
            Ok(Some(Ok(v))) => Ok(finish(v)),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(RpcError::invalid_params("Resource not found")),
            Err(AttemptError::NeedInput(q)) => Ok(mrtr::input_required(
                q,
                &key,
                &sealed_for,
                ctx.principal,
                &responses,
            )),
            Err(e) => Err(e.to_rpc_error()),
        }
    }

    pub(super) async fn resources_read(&self, read: ResourcesRead, ctx: &Ctx<'_>) -> Handled {
        let uri = read.uri.as_str();
        // SEP-2164: an unknown URI is -32602 with the URI, never an empty `contents`.
        let not_found =
            || RpcError::invalid_params("Resource not found").with_data(json!({"uri": uri}));
        let catalog = self.config.catalog.current();
        let source = catalog.resource_source(uri).ok_or_else(not_found)?;
        let subject = format!("resource:{uri}");
        let component = source.component.clone();
        let read_it = |exec| async move { component.read_resource(exec, uri).await };
        let finish = |contents| ctx.dialect.complete_uncached(object("contents", contents));
        self.catalog_call(
            ctx,
            read.answers,
            (&subject, &Value::Null, source),
            read_it,
            finish,
        )
        .await
        .map_err(|e| {
            if e.code == protocol::codes::INVALID_PARAMS && e.data.is_none() {
                e.with_data(json!({"uri": uri}))
            } else {
                e
            }
        })
    }

    pub(super) async fn prompts_get(&self, get: PromptsGet, ctx: &Ctx<'_>) -> Handled {
        let name = get.name.as_str();
        let catalog = self.config.catalog.current();
        let (source, prompt) = catalog
            .prompt(name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))?;
        if let Some((missing, _)) = prompt
            .arguments
            .iter()
            .find(|(n, required)| *required && !get.arguments.contains_key(n))
        {
            return Err(RpcError::invalid_params(format!(
                "prompt {name:?} needs the argument {missing:?}"
            )));
        }
        let subject = format!("prompt:{name}");
        let component = source.component.clone();
        let arguments = &Value::Object(get.arguments);
        let render =
            |exec| async move { component.get_prompt(exec, name, arguments).await.map(Some) };
        let finish = |result| ctx.dialect.complete(result);
        self.catalog_call(
            ctx,
            get.answers,
            (&subject, arguments, source),
            render,
            finish,
        )
        .await
    }

    pub(super) async fn complete(&self, complete: Complete, ctx: &Ctx<'_>) -> Handled {
        let catalog = self.config.catalog.current();
        let (source, target) = match &complete.target {
            Completing::Prompt(name) => {
                let (source, _) = catalog
                    .prompt(name)
                    .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))?;
                (source, snodo_wasm::Completing::Prompt(name))
            }
            Completing::Template(uri) => {
                let source = catalog.template_source(uri).ok_or_else(|| {
                    RpcError::invalid_params(format!("Unknown resource template: {uri}"))
                })?;
                (source, snodo_wasm::Completing::Template(uri))
            }
        };
        let completion = if source.component.catalog().completions {
            // A completion runs a guest like any request-path call: in the caller's slot.
            let _slot = self.sync_slot(ctx.principal)?;
            let run = source.component.complete(
                super::tenant_of(ctx),
                target,
                &complete.argument,
                &complete.value,
                &complete.context,
            );
            self.within_wall_clock(run)
                .await?
                .map_err(|e| e.to_rpc_error())??
        } else {
            json!({"values": [], "hasMore": false})
        };
        Ok(ctx.dialect.complete(object("completion", completion)))
    }
}
