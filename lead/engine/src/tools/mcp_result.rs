//! What the model reads of an MCP tool result (spec 5.3's conversion, nothing dropped):
//! text and embedded text resources as they are; an image as a line naming its MIME type
//! and size, its bytes kept on the tool message (`additional_kwargs.mcp_images`) for a
//! vision model, which sees them with the next model call only, as `view_image`'s; audio
//! and binary resources as a line naming their type and size; a resource link as a line
//! naming its URI. `structuredContent` stands in for a result without text.

use antler_protocol::messages::{McpCallResult, McpContent};
use base64::Engine as _;
use serde_json::{json, Value};

use crate::model::ImagePart;
use crate::thread::state::Message;

/// The largest image a run attaches (20 MiB): one `view_image` reads, or one an MCP
/// result carries.
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
/// The key of the attached images in a tool message's `additional_kwargs`.
pub const IMAGES_KEY: &str = "mcp_images";
/// An image a vision model sees with its next call.
pub const IMAGE_ATTACHED: &str = "[image {mime}, {size} bytes: attached below]";
/// An image the model cannot see (no vision, an unsupported type, too large).
pub const IMAGE_NOT_SHOWN: &str = "[image {mime}, {size} bytes: not shown]";
/// Audio: the model gets no sound.
pub const AUDIO: &str = "[audio {mime}, {size} bytes: not played]";
/// A link to a resource.
pub const RESOURCE_LINK: &str = "[resource link {name}: {uri}{mime}]";
/// An embedded binary resource.
pub const RESOURCE_BLOB: &str = "[resource {uri}: {mime}, {size} bytes]";
/// Content whose base64 does not decode.
pub const UNDECODABLE: &str = "[{kind} {mime}: the data is not valid base64]";

/// Image types a vision model takes (as `view_image`).
const VISION_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// The text of a result and the images a vision model is to see.
#[derive(Debug, Default, PartialEq)]
pub struct Rendered {
    pub text: String,
    /// `{mime_type, data}` objects (base64), for `additional_kwargs.mcp_images`.
    pub images: Vec<Value>,
}

/// Renders `result`; `vision`: the model takes images.
pub fn render(result: &McpCallResult, vision: bool) -> Rendered {
    let mut lines = Vec::new();
    let mut images = Vec::new();
    let mut has_text = false;
    for block in &result.content {
        match block {
            McpContent::Text(text) => {
                has_text = true;
                lines.push(text.clone());
            }
            McpContent::Image { data, mime_type } => match decoded_len(data) {
                None => lines.push(undecodable("image", mime_type)),
                Some(size) => {
                    let shown = vision
                        && VISION_TYPES.contains(&mime_type.as_str())
                        && size as u64 <= MAX_IMAGE_BYTES;
                    let template = if shown {
                        images.push(json!({"mime_type": mime_type, "data": data}));
                        IMAGE_ATTACHED
                    } else {
                        IMAGE_NOT_SHOWN
                    };
                    lines.push(sized(template, mime_type, size));
                }
            },
            McpContent::Audio { data, mime_type } => lines.push(match decoded_len(data) {
                Some(size) => sized(AUDIO, mime_type, size),
                None => undecodable("audio", mime_type),
            }),
            McpContent::ResourceLink {
                uri,
                name,
                mime_type,
            } => lines.push(
                RESOURCE_LINK
                    .replacen("{name}", name, 1)
                    .replacen("{uri}", uri, 1)
                    .replacen(
                        "{mime}",
                        &mime_type
                            .as_ref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default(),
                        1,
                    ),
            ),
            McpContent::Resource {
                uri,
                mime_type,
                text,
                blob,
            } => match (text, blob) {
                (Some(text), _) => {
                    has_text = true;
                    lines.push(text.clone());
                }
                (None, Some(blob)) => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    lines.push(match decoded_len(blob) {
                        Some(size) => RESOURCE_BLOB
                            .replacen("{uri}", uri, 1)
                            .replacen("{mime}", mime, 1)
                            .replacen("{size}", &size.to_string(), 1),
                        None => undecodable("resource", mime),
                    });
                }
                (None, None) => lines.push(format!("[resource {uri}]")),
            },
        }
    }
    if !has_text {
        if let Some(structured) = &result.structured {
            lines.insert(0, structured.to_string());
        }
    }
    Rendered {
        text: lines.join("\n"),
        images,
    }
}

fn sized(template: &str, mime: &str, size: usize) -> String {
    template
        .replacen("{mime}", mime, 1)
        .replacen("{size}", &size.to_string(), 1)
}

fn undecodable(kind: &str, mime: &str) -> String {
    UNDECODABLE
        .replacen("{kind}", kind, 1)
        .replacen("{mime}", mime, 1)
}

/// The decoded size of base64 `data` (`None`: it does not decode).
fn decoded_len(data: &str) -> Option<usize> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()
        .map(|bytes| bytes.len())
}

/// The images attached to the tool messages in `messages` that answer `call_ids`, for the
/// next model call; each is labelled with its tool's name.
pub fn attached_images(messages: &[Message], call_ids: &[&str]) -> Vec<ImagePart> {
    let mut parts = Vec::new();
    for message in messages {
        let Message::Tool {
            tool_call_id,
            name,
            additional_kwargs: Some(kwargs),
            ..
        } = message
        else {
            continue;
        };
        if !call_ids.contains(&tool_call_id.as_str()) {
            continue;
        }
        let images = kwargs.get(IMAGES_KEY).and_then(Value::as_array);
        for image in images.into_iter().flatten() {
            let (Some(mime), Some(data)) = (
                image.get("mime_type").and_then(Value::as_str),
                image.get("data").and_then(Value::as_str),
            ) else {
                continue;
            };
            parts.push(ImagePart {
                path: format!("{name} result"),
                mime_type: mime.to_owned(),
                base64: Some(data.trim().to_owned()),
            });
        }
    }
    parts
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolStatus;

    fn result(content: Vec<McpContent>) -> McpCallResult {
        McpCallResult {
            is_error: false,
            content,
            structured: None,
        }
    }

    #[test]
    fn every_block_reaches_the_model_and_images_only_a_vision_one() {
        let r = result(vec![
            McpContent::Text("A tiny image:".into()),
            McpContent::Image {
                data: "iVBORw0KGgo=".into(),
                mime_type: "image/png".into(),
            },
            McpContent::Audio {
                data: "AAAA".into(),
                mime_type: "audio/wav".into(),
            },
            McpContent::ResourceLink {
                uri: "file:///r/1".into(),
                name: "one".into(),
                mime_type: Some("text/plain".into()),
            },
            McpContent::Resource {
                uri: "mem://b".into(),
                mime_type: None,
                text: None,
                blob: Some("QkI=".into()),
            },
        ]);
        let seen = render(&r, true);
        assert_eq!(
            seen.text,
            "A tiny image:\n[image image/png, 8 bytes: attached below]\n[audio audio/wav, 3 bytes: not played]\n[resource link one: file:///r/1 (text/plain)]\n[resource mem://b: application/octet-stream, 2 bytes]"
        );
        assert_eq!(
            seen.images,
            [json!({"mime_type": "image/png", "data": "iVBORw0KGgo="})]
        );
        let blind = render(&r, false);
        assert!(blind.text.contains("[image image/png, 8 bytes: not shown]"));
        assert!(blind.images.is_empty());
    }

    #[test]
    fn bad_base64_and_odd_types_are_named_not_attached() {
        let r = result(vec![
            McpContent::Image {
                data: "***".into(),
                mime_type: "image/png".into(),
            },
            McpContent::Image {
                data: "PHN2Zz4=".into(),
                mime_type: "image/svg+xml".into(),
            },
        ]);
        let seen = render(&r, true);
        assert_eq!(
            seen.text,
            "[image image/png: the data is not valid base64]\n[image image/svg+xml, 5 bytes: not shown]"
        );
        assert!(seen.images.is_empty());
    }

    #[test]
    fn structured_content_stands_in_for_missing_text() {
        let mut r = result(vec![McpContent::Image {
            data: "iVBORw0KGgo=".into(),
            mime_type: "image/png".into(),
        }]);
        r.structured = Some(antler_protocol::Json::parse(r#"{"n":1}"#).unwrap());
        assert_eq!(
            render(&r, false).text,
            "{\"n\":1}\n[image image/png, 8 bytes: not shown]"
        );
    }

    #[test]
    fn attached_images_are_found_for_the_calls_answered() {
        let mut m = Message::tool("c1", "everything_get-tiny-image", "x", ToolStatus::Success);
        if let Message::Tool {
            additional_kwargs, ..
        } = &mut m
        {
            *additional_kwargs = Some(Box::new(
                json!({IMAGES_KEY: [{"mime_type": "image/png", "data": "iVBORw0KGgo="}]}),
            ));
        }
        let parts = attached_images(std::slice::from_ref(&m), &["c1"]);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].path, "everything_get-tiny-image result");
        assert!(attached_images(&[m], &["c2"]).is_empty());
    }
}
