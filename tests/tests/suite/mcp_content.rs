//! Tool results keep their images, audio and resource links (issue 13): through a run
//! (a recording stand-in model), server-everything's `get-tiny-image` reaches a vision
//! model as an `image_url` part (with the next request only) and a line naming the MIME
//! type and size in the tool message; a model without vision gets the line and no image;
//! `get-resource-links` names each link's URI; the raw server's audio block becomes a line
//! naming its type and size.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{npm_bin, peer_script, python, stdio};
use crate::model_support::{antler_run, recording_server, Reply};
use serde_json::{json, Value};

fn run(vision: bool) -> Vec<Value> {
    let dir = tempfile::Builder::new()
        .prefix("antler-content")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("extensions_config.json"),
        json!({"mcpServers": {
            "everything": stdio(npm_bin("mcp-server-everything").display().to_string(), &[]),
            "raw": stdio(python(), &[&peer_script("raw_server.py"), "audio"]),
        }})
        .to_string(),
    )
    .unwrap();
    let server = recording_server(vec![
        Reply::call(
            "tool_search",
            json!({"query": "select:everything_get-tiny-image,everything_get-resource-links,raw_speak"}),
        ),
        Reply::call("everything_get-tiny-image", json!({})),
        Reply::call("everything_get-resource-links", json!({"count": 2})),
        Reply::call("raw_speak", json!({})),
        Reply::text("Seen."),
    ]);
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\n    supports_vision: {vision}\n",
            server.base_url
        ),
    )
    .unwrap();
    let (view, stderr) = antler_run(d, &["Show me", "--model", "rec", "--thread", "t1"]);
    assert_eq!(view["status"], "success", "{view}\n{stderr}");
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5, "{stderr}");
    requests
}

fn image_parts(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .cloned()
        .collect()
}

fn last_tool_message(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_vision_model_sees_an_mcp_image_and_every_block_is_named() {
    let requests = run(true);
    let image = last_tool_message(&requests[2]);
    assert!(
        image.starts_with("Here's the image you requested:\n[image image/png, "),
        "{image}"
    );
    assert!(
        image.contains(" bytes: attached below]\nThe image above is the MCP logo."),
        "{image}"
    );
    let parts = image_parts(&requests[2]);
    assert_eq!(parts.len(), 1, "{parts:?}");
    let url = parts[0]["image_url"]["url"].as_str().unwrap();
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url}"
    );
    let label =
        requests[2]["messages"].as_array().unwrap().last().unwrap()["content"][1]["text"].clone();
    assert_eq!(
        label,
        "\n- **everything_get-tiny-image result** (image/png)"
    );
    assert!(
        image_parts(&requests[3]).is_empty(),
        "an image is sent once"
    );

    let links = last_tool_message(&requests[3]);
    assert_eq!(
        links,
        "Here are 2 resource links to resources available in this server:\n\
         [resource link Blob Resource 1: demo://resource/dynamic/blob/1 (text/plain)]\n\
         [resource link Text Resource 2: demo://resource/dynamic/text/2 (text/plain)]"
    );

    let audio = last_tool_message(&requests[4]);
    assert_eq!(audio, "Listen:\n[audio audio/wav, 4 bytes: not played]");
}

#[test]
fn a_model_without_vision_gets_a_placeholder_and_no_image() {
    let requests = run(false);
    let image = last_tool_message(&requests[2]);
    assert!(image.contains("[image image/png, "), "{image}");
    assert!(image.contains(" bytes: not shown]"), "{image}");
    for request in &requests {
        assert!(image_parts(request).is_empty());
    }
}
