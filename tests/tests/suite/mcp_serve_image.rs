//! `view_image` through `/mcp` returns the image as MCP image content: with a vision
//! model first in `models:` a member's session (the official MCP Python SDK client,
//! `tests/peers/mcp_serve_client.py`) is offered `view_image`; a PNG written with bash in
//! the session thread's sandbox comes back as `type: image` with its MIME type and the
//! file's bytes in base64, beside DeerFlow's success text; a file whose contents are no
//! image gets DeerFlow's error text and no image.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::serve::{cluster, config, mcp_driver, mcp_url, ALICE};
use serde_json::{json, Value};

/// A PNG's signature and the start of its header chunk, as bash's printf writes them.
const PNG_PRINTF: &str = r"\211PNG\r\n\032\n\000\000\000\rIHDR";
const PNG_BYTES: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";

#[test]
fn view_image_returns_the_sandbox_file_as_image_content() {
    use base64::Engine as _;
    // The model is never called: it makes the session's catalog offer view_image.
    let cluster = cluster(
        &config("models:\n  - name: vision\n    use: langchain_openai:ChatOpenAI\n    model: unused\n    base_url: http://127.0.0.1:9/v1\n    api_key: sk-x\n    supports_vision: true\ntools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n"),
        None,
        0,
    );
    let url = mcp_url(&cluster);
    let dot = "/mnt/user-data/workspace/dot.png";
    let fake = "/mnt/user-data/workspace/fake.png";
    let calls = json!([
        ["bash", {"description": "draw", "command": format!("printf '{PNG_PRINTF}' > {dot} && echo not-an-image > {fake} && echo drawn")}],
        ["view_image", {"image_path": dot}],
        ["view_image", {"image_path": fake}],
    ]);
    let r: Value = mcp_driver(|c| c.args(["calls", &url, ALICE, "pictures", &calls.to_string()]));
    assert!(
        r["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("view_image")),
        "{r}"
    );
    let calls = r["calls"].as_array().unwrap();
    assert_eq!(calls[0]["is_error"], false, "{r}");
    // The image: DeerFlow's text, then the file's bytes as image content.
    let viewed = &calls[1];
    assert_eq!(viewed["is_error"], false, "{viewed}");
    assert_eq!(viewed["text"], "Successfully read image", "{viewed}");
    let images: Vec<&Value> = viewed["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "image")
        .collect();
    assert_eq!(images.len(), 1, "{viewed}");
    assert_eq!(images[0]["mime_type"], "image/png", "{viewed}");
    let data = base64::engine::general_purpose::STANDARD
        .decode(images[0]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, PNG_BYTES);
    // No image in a file that is none.
    let refused = &calls[2];
    assert_eq!(refused["is_error"], true, "{refused}");
    assert_eq!(
        refused["text"], "Error: File contents do not match a supported image format",
        "{refused}"
    );
    assert!(
        !refused["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "image"),
        "{refused}"
    );
}
