//! A component built for snodo:tasks@0.2.0 exactly as that version was published: one tool
//! and one resource, bound to the 0.2.0 world directly (not through the SDK, which builds
//! 0.3.0 components). The proof that 0.2.0 components keep loading and running.

mod bindings {
    wit_bindgen::generate!({
        world: "snodo:tasks/executor@0.2.0",
        path: "../../wit",
        generate_all,
    });
}

use bindings::exports::snodo::tasks0_1_0::tools::Guest as Tools;
use bindings::exports::snodo::tasks0_2_0::catalog::Guest as Catalog;
use bindings::snodo::tasks0_1_0::types::{
    ContentBlock, Outcome, RpcError, TaskMode, Tool, ToolResult, Work,
};
use bindings::snodo::tasks0_2_0::catalog_types::{
    Catalog as Served, Completion, CompletionRef, PromptResult, Resource, ResourceContents,
    ResourceRequest,
};

struct V2;

impl Tools for V2 {
    fn describe() -> Vec<Tool> {
        vec![Tool {
            name: "v2_echo".into(),
            title: None,
            description: Some("Echoes its arguments (a 0.2.0 component)".into()),
            input_schema: r#"{"type":"object"}"#.into(),
            output_schema: None,
            mode: TaskMode::Optional,
            required_capabilities: None,
            has_prepare: false,
            has_mode_rule: false,
        }]
    }

    fn choose_mode(_tool: String, _arguments: String) -> TaskMode {
        TaskMode::Sync
    }

    fn prepare(_tool: String, arguments: String) -> Result<String, RpcError> {
        Ok(arguments)
    }

    fn execute(work: Work) -> Outcome {
        if work.tool != "v2_echo" {
            return Outcome::Failed(RpcError {
                code: -32602,
                message: format!("unknown tool {}", work.tool),
                data: None,
            });
        }
        Outcome::Completed(ToolResult {
            content: vec![ContentBlock::Text(format!("v2: {}", work.arguments))],
            structured_content: None,
            is_error: false,
        })
    }
}

impl Catalog for V2 {
    fn describe_catalog() -> Served {
        Served {
            resources: vec![Resource {
                uri: "v2://readme".into(),
                name: "readme".into(),
                title: None,
                description: None,
                mime_type: Some("text/plain".into()),
            }],
            resource_templates: Vec::new(),
            prompts: Vec::new(),
            completions: false,
        }
    }

    fn read_resource(request: ResourceRequest) -> Result<Vec<ResourceContents>, RpcError> {
        Ok(vec![ResourceContents {
            uri: request.uri,
            mime_type: Some("text/plain".into()),
            text: Some("served by a 0.2.0 component".into()),
            blob: None,
        }])
    }

    fn get_prompt(name: String, _arguments: String) -> Result<PromptResult, RpcError> {
        Err(RpcError {
            code: -32602,
            message: format!("no prompt {name}"),
            data: None,
        })
    }

    fn complete(
        _target: CompletionRef,
        _argument: String,
        _value: String,
        _context: String,
    ) -> Result<Completion, RpcError> {
        Ok(Completion {
            values: Vec::new(),
            total: None,
            has_more: false,
        })
    }
}

bindings::export!(V2 with_types_in bindings);
