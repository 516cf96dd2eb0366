//! Conversion of an upload to its Markdown twin (spec B.2) INSIDE the thread's sandbox:
//! the converter script (`convert.py`: pymupdf4llm for PDFs with DeerFlow's `auto`
//! fallback, else MarkItDown) runs through sandbox-host's `bash` in the (user, thread)
//! sandbox (`CallOnce`: acquire, run, release), under `timeout`, and writes a staging file
//! the gateway then checks and renames. Nothing of the document is parsed by the lead.
//! A conversion that cannot be done says why ([`ConversionError`]); the upload stays.

use std::time::Duration;

use antler_engine::{HostOf, ToolHosts};
use antler_protocol::calls::SandboxCalls as _;
use antler_protocol::config::PdfConverter;
use antler_protocol::messages::{Principal, ToolCall};
use antler_protocol::Role;
use serde_json::json;

/// The converter the sandbox runs.
const SCRIPT: &str = include_str!("convert.py");
/// The script's status lines.
const CONVERTED: &str = "ANTLER_CONVERTED ";
const FAILED: &str = "ANTLER_CONVERT_FAILED ";
/// Beyond the conversion's own deadline: acquiring the sandbox and releasing it.
const CALL_MARGIN: Duration = Duration::from_secs(30);

/// Why an upload got no twin (the response's `conversion_error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The converter ran and could not read the document (or is not installed).
    #[error("{0}")]
    Converter(String),
    #[error("the conversion did not finish within {0} s")]
    Timeout(u64),
    /// No sandbox could be had, or it refused the command.
    #[error("the thread's sandbox could not run the converter: {0}")]
    Sandbox(String),
    #[error("the converter wrote no Markdown")]
    NoOutput,
}

/// One conversion: `source` and `output` are names in the thread's uploads directory.
pub struct Conversion<'a> {
    pub hosts: &'a dyn ToolHosts,
    pub user: &'a str,
    pub thread: &'a str,
    pub source: &'a str,
    pub output: &'a str,
    pub pdf_converter: PdfConverter,
    pub timeout_s: u64,
}

/// `s` as one shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

impl Conversion<'_> {
    /// The command the sandbox's `bash` runs.
    fn command(&self) -> String {
        let uploads = antler_engine::VIRTUAL_UPLOADS;
        format!(
            "timeout -k 5 {secs} python3 - {src} {out} {mode} <<'ANTLER_CONVERTER_EOF'\n{SCRIPT}\nANTLER_CONVERTER_EOF\nstatus=$?; [ $status -eq 124 ] && echo ANTLER_CONVERT_TIMEOUT; exit 0",
            secs = self.timeout_s.max(1),
            src = quote(&format!("{uploads}/{}", self.source)),
            out = quote(&format!("{uploads}/{}", self.output)),
            mode = self.pdf_converter.as_str(),
        )
    }

    /// Runs the converter; `Ok(converter)` once it wrote the output file.
    pub async fn run(&self) -> Result<String, ConversionError> {
        let host = HostOf {
            hosts: self.hosts,
            role: Role::SandboxHost,
        };
        let principal = Principal {
            user_id: self.user.to_owned(),
            thread_id: self.thread.to_owned(),
            roles: Vec::new(),
        };
        let call = ToolCall {
            tool: "bash".to_owned(),
            args:
                json!({"command": self.command(), "description": "convert an upload to Markdown"})
                    .into(),
            secrets: Vec::new(),
            clearance: None,
        };
        let deadline = Duration::from_secs(self.timeout_s) + CALL_MARGIN;
        let result = host
            .call_once(principal, call, deadline)
            .await
            .map_err(|e| ConversionError::Sandbox(e.to_string()))?
            .map_err(|e| ConversionError::Sandbox(e.to_string()))?;
        outcome(&result.content, self.timeout_s)
    }
}

/// What the script's output says.
fn outcome(output: &str, timeout_s: u64) -> Result<String, ConversionError> {
    for line in output.lines() {
        if let Some(used) = line.trim().strip_prefix(CONVERTED) {
            return Ok(used.trim().to_owned());
        }
        if let Some(why) = line.trim().strip_prefix(FAILED) {
            return Err(ConversionError::Converter(why.trim().to_owned()));
        }
        if line.trim() == "ANTLER_CONVERT_TIMEOUT" {
            return Err(ConversionError::Timeout(timeout_s));
        }
    }
    let first = output.lines().next().unwrap_or("").trim();
    if first.starts_with("Error:") {
        return Err(ConversionError::Sandbox(
            first
                .trim_start_matches("Error:")
                .trim()
                .chars()
                .take(300)
                .collect(),
        ));
    }
    Err(ConversionError::NoOutput)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_status_lines_say_what_happened() {
        assert_eq!(
            outcome("ANTLER_CONVERTED pymupdf4llm\n", 5),
            Ok("pymupdf4llm".into())
        );
        assert_eq!(
            outcome(
                "noise\nANTLER_CONVERT_FAILED markitdown is not installed in the sandbox",
                5
            ),
            Err(ConversionError::Converter(
                "markitdown is not installed in the sandbox".into()
            ))
        );
        assert_eq!(
            outcome("ANTLER_CONVERT_TIMEOUT", 7),
            Err(ConversionError::Timeout(7))
        );
        assert!(matches!(
            outcome("Error: Host bash execution is disabled", 5),
            Err(ConversionError::Sandbox(_))
        ));
        assert_eq!(outcome("", 5), Err(ConversionError::NoOutput));
        let c = Conversion {
            hosts: &NoHosts,
            user: "u",
            thread: "t",
            source: "it's.pdf",
            output: ".upload-x.part",
            pdf_converter: PdfConverter::Auto,
            timeout_s: 60,
        };
        let command = c.command();
        assert!(command.starts_with(
            "timeout -k 5 60 python3 - '/mnt/user-data/uploads/it'\"'\"'s.pdf' '/mnt/user-data/uploads/.upload-x.part' auto <<'ANTLER_CONVERTER_EOF'\n"
        ), "{command}");
    }

    /// Hosts that answer nothing (the command is only built).
    struct NoHosts;
    impl ToolHosts for NoHosts {
        fn request(
            &self,
            _: Role,
            _: antler_protocol::messages::Request,
            _: Duration,
        ) -> futures::future::BoxFuture<
            '_,
            Result<antler_protocol::messages::Reply, antler_engine::HostError>,
        > {
            Box::pin(async { Err(antler_engine::HostError::failed("none")) })
        }
    }
}
