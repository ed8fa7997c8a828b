//! What an execution returns: [`ToolResult`], [`RpcError`] and [`Outcome`].

use serde_json::Value;

/// One content block of a result.
///
/// ```
/// use snodo_guest::{Content, ToolResult};
/// let r = ToolResult::text("see the attached report").with(Content::Resource {
///     uri: "report://2026/q3".into(),
///     mime_type: Some("text/csv".into()),
///     text: "region,total\neu,12\n".into(),
/// });
/// # let _ = r;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// An image: base64 data and its MIME type.
    Image {
        /// Base64-encoded bytes.
        data: String,
        /// E.g. `image/png`.
        mime_type: String,
    },
    /// Audio: base64 data and its MIME type.
    Audio {
        /// Base64-encoded bytes.
        data: String,
        /// E.g. `audio/wav`.
        mime_type: String,
    },
    /// An embedded text resource.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its text.
        text: String,
    },
    /// An embedded binary resource.
    ResourceBlob {
        /// The resource's URI.
        uri: String,
        /// Its MIME type.
        mime_type: Option<String>,
        /// Its bytes, base64-encoded.
        blob: String,
    },
    /// A link to a resource.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
    },
}

/// An MCP `CallToolResult`.
///
/// ```
/// use serde_json::json;
/// use snodo_guest::{Content, ToolResult};
///
/// let ok = ToolResult::text("3 rows exported");
/// let with_data = ToolResult::structured(json!({"rows": 3}));
/// let domain_failure = ToolResult::error("the report is empty");
/// let mixed = ToolResult::text("chart:").with(Content::Image {
///     data: "iVBORw0KGgo=".into(),
///     mime_type: "image/png".into(),
/// });
/// assert!(domain_failure.is_error);
/// # let _ = (ok, with_data, mixed);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The content blocks.
    pub content: Vec<Content>,
    /// Structured content matching the tool's output schema.
    pub structured_content: Option<Value>,
    /// The tool failed in its own domain (the call still completes).
    pub is_error: bool,
}

impl ToolResult {
    /// A result with one text block.
    ///
    /// ```
    /// let r = snodo_guest::ToolResult::text("done");
    /// assert!(!r.is_error);
    /// ```
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text(text.into())],
            structured_content: None,
            is_error: false,
        }
    }

    /// A result carrying `value` as structured content, and as JSON text for clients that
    /// only read content blocks.
    ///
    /// ```
    /// let r = snodo_guest::ToolResult::structured(serde_json::json!({"rows": 3}));
    /// assert!(r.structured_content.is_some());
    /// ```
    pub fn structured(value: Value) -> Self {
        Self {
            content: vec![Content::Text(value.to_string())],
            structured_content: Some(value),
            is_error: false,
        }
    }

    /// Structured content from a value of the type the spec's output schema was derived
    /// from ([`crate::ToolSpec::output`]), with its JSON text as the text block.
    ///
    /// ```
    /// #[derive(serde::Serialize)]
    /// struct Sum { sum: u64 }
    /// let r = snodo_guest::ToolResult::structured_from(&Sum { sum: 3 });
    /// assert_eq!(r.structured_content, Some(serde_json::json!({"sum": 3})));
    /// ```
    pub fn structured_from<T: serde::Serialize>(value: &T) -> Self {
        match serde_json::to_value(value) {
            Ok(v) => Self::structured(v),
            Err(e) => Self::error(format!("the result could not be encoded: {e}")),
        }
    }

    /// A tool-domain error: the call completes with `isError: true` and this text.
    ///
    /// ```
    /// assert!(snodo_guest::ToolResult::error("no such file").is_error);
    /// ```
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// The same result with one more content block.
    ///
    /// ```
    /// use snodo_guest::{Content, ToolResult};
    /// let r = ToolResult::text("a").with(Content::Text("b".into()));
    /// assert_eq!(r.content.len(), 2);
    /// ```
    pub fn with(mut self, block: Content) -> Self {
        self.content.push(block);
        self
    }
}

/// A JSON-RPC error: a protocol failure, which fails the call or the task.
///
/// ```
/// use snodo_guest::RpcError;
/// let e = RpcError::internal("the export service refused the request")
///     .with_data(serde_json::json!({"status": 503}));
/// assert_eq!(e.code, -32603);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional detail.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`. Codes -32020..=-32099 are reserved by MCP; the
    /// host replaces them with -32603.
    ///
    /// ```
    /// let e = snodo_guest::RpcError::new(-32000, "quota exceeded");
    /// # let _ = e;
    /// ```
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// JSON-RPC -32603 (internal error).
    ///
    /// ```
    /// assert_eq!(snodo_guest::RpcError::internal("boom").code, -32603);
    /// ```
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, message)
    }

    /// JSON-RPC -32602 (invalid params).
    ///
    /// ```
    /// assert_eq!(snodo_guest::RpcError::invalid_params("bad").code, -32602);
    /// ```
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }

    /// The same error with `data`.
    ///
    /// ```
    /// let e = snodo_guest::RpcError::internal("x").with_data(serde_json::json!(1));
    /// assert!(e.data.is_some());
    /// ```
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// How an execution ends.
///
/// `From` conversions let a tool return a [`ToolResult`], an [`RpcError`] or a
/// `Result<ToolResult, RpcError>` with `.into()`.
///
/// ```
/// use snodo_guest::{Outcome, RpcError, ToolResult};
/// let a: Outcome = ToolResult::text("ok").into();
/// let b: Outcome = RpcError::internal("down").into();
/// let c = Outcome::retry(RpcError::internal("busy"), "the backend is busy; retrying");
/// # let _ = (a, b, c);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A result.
    Completed(ToolResult),
    /// A protocol failure. A failed task's status message is the error's message.
    Failed(RpcError),
    /// A protocol failure that ends the task with its own status message (say what the
    /// user should know, where the error says what went wrong).
    FailedWithStatus {
        /// The error the call or task fails with.
        error: RpcError,
        /// The task's last status message.
        status_message: String,
    },
    /// Try again after the next delay of the task's retry policy.
    Retry {
        /// The error the task fails with when no retry is left.
        error: RpcError,
        /// Shown while waiting.
        status_message: String,
    },
}

impl Outcome {
    /// A failure that ends the task with `status_message`.
    ///
    /// ```
    /// use snodo_guest::{Outcome, RpcError};
    /// let o = Outcome::failed_with_status(RpcError::internal("quota exceeded"), "gave up after 3 pages");
    /// # let _ = o;
    /// ```
    pub fn failed_with_status(error: RpcError, status_message: impl Into<String>) -> Self {
        Self::FailedWithStatus {
            error,
            status_message: status_message.into(),
        }
    }

    /// A retry request.
    ///
    /// ```
    /// let o = snodo_guest::Outcome::retry(snodo_guest::RpcError::internal("busy"), "retrying");
    /// # let _ = o;
    /// ```
    pub fn retry(error: RpcError, status_message: impl Into<String>) -> Self {
        Self::Retry {
            error,
            status_message: status_message.into(),
        }
    }
}

impl From<ToolResult> for Outcome {
    fn from(r: ToolResult) -> Self {
        Self::Completed(r)
    }
}

impl From<RpcError> for Outcome {
    fn from(e: RpcError) -> Self {
        Self::Failed(e)
    }
}

impl From<Result<ToolResult, RpcError>> for Outcome {
    fn from(r: Result<ToolResult, RpcError>) -> Self {
        match r {
            Ok(r) => Self::Completed(r),
            Err(e) => Self::Failed(e),
        }
    }
}
