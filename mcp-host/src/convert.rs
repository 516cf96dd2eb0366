//! Converts an MCP `CallToolResult` into what the model sees (spec 5.3): text, image, audio,
//! resource link and embedded resource blocks; `isError` kept as an error result carrying
//! the server's text; `structuredContent` kept as JSON text. Works on the JSON form of the
//! result so every content kind the server sends is read the same way.

use antler_protocol::messages::{McpCallResult, McpContent};
use antler_protocol::Json;
use serde_json::Value;

/// Converts a result, given as its JSON form (`content`, `isError`, `structuredContent`).
pub fn call_result(result: &Value) -> McpCallResult {
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| blocks.iter().map(content_block).collect())
        .unwrap_or_default();
    McpCallResult {
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        content,
        structured: result.get("structuredContent").map(Json::from),
    }
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn content_block(block: &Value) -> McpContent {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => McpContent::Text(string(block, "text").unwrap_or_default()),
        "image" => McpContent::Image {
            data: string(block, "data").unwrap_or_default(),
            mime_type: string(block, "mimeType").unwrap_or_else(|| "image/png".into()),
        },
        "audio" => McpContent::Audio {
            data: string(block, "data").unwrap_or_default(),
            mime_type: string(block, "mimeType").unwrap_or_default(),
        },
        "resource_link" => McpContent::ResourceLink {
            uri: string(block, "uri").unwrap_or_default(),
            name: string(block, "name").unwrap_or_default(),
            mime_type: string(block, "mimeType"),
        },
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or(Value::Null);
            McpContent::Resource {
                uri: string(&r, "uri").unwrap_or_default(),
                mime_type: string(&r, "mimeType"),
                text: string(&r, "text"),
                blob: string(&r, "blob"),
            }
        }
        // A kind this host does not know: keep it readable rather than drop it.
        _ => McpContent::Text(block.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_block_kind_converts_and_is_error_is_kept() {
        let r = call_result(&json!({
            "isError": true,
            "content": [
                {"type": "text", "text": "boom"},
                {"type": "image", "data": "AAA=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///x", "name": "x"},
                {"type": "resource", "resource": {"uri": "mem://a", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "mem://b", "blob": "QkI=", "mimeType": "application/octet-stream"}}
            ],
            "structuredContent": {"n": 1}
        }));
        assert!(r.is_error);
        assert_eq!(r.text(), "boom\ninside");
        assert_eq!(r.content.len(), 5);
        assert_eq!(
            r.structured.as_ref().map(ToString::to_string).as_deref(),
            Some(r#"{"n":1}"#)
        );
        assert!(matches!(&r.content[4], McpContent::Resource { blob: Some(b), .. } if b == "QkI="));
    }
}
