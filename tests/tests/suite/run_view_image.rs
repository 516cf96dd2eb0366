//! Images reach a vision model (spec C) through the whole cluster, seen by
//! `recording_server` (a stand-in OpenAI-compatible endpoint): after `view_image` the next
//! request carries the image as an `image_url` part with a base64 data URL of the right
//! MIME type, the request after it no longer does (an image is sent once), and a model
//! without `supports_vision` is never offered `view_image` and never gets image parts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support::{antler_run, recording_server, Reply};
use serde_json::{json, Value};

/// A PNG's signature and a few bytes: what view_image checks.
const PNG: &[u8] = &[0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3];

fn run(vision: bool) -> (Value, Vec<Value>) {
    let server = recording_server(vec![
        Reply::call(
            "view_image",
            json!({"image_path": "/mnt/user-data/outputs/chart.png"}),
        ),
        Reply::call(
            "ls",
            json!({"description": "look", "path": "/mnt/user-data/outputs"}),
        ),
        Reply::text("A chart."),
    ]);
    let dir = tempfile::Builder::new()
        .prefix("antler-img")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    // The run's thread is `t1` of user `default`: put the image where it looks.
    let outputs = d.join("base/users/default/threads/t1/user-data/outputs");
    std::fs::create_dir_all(&outputs).unwrap();
    std::fs::write(outputs.join("chart.png"), PNG).unwrap();
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\n    supports_vision: {vision}\ntools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            server.base_url
        ),
    )
    .unwrap();
    let (view, _) = antler_run(
        d,
        &["Describe the chart", "--model", "rec", "--thread", "t1"],
    );
    let requests = server.requests.lock().unwrap().clone();
    (view, requests)
}

/// The image parts of a request.
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

#[test]
fn a_vision_model_sees_a_viewed_image_once() {
    let (view, requests) = run(true);
    assert_eq!(view["status"], "success", "{view}");
    assert_eq!(requests.len(), 3);
    assert!(image_parts(&requests[0]).is_empty());
    let parts = image_parts(&requests[1]);
    assert_eq!(
        parts,
        [
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoBAgM="}})
        ]
    );
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"][0]["text"],
        "Here are the images you've viewed:"
    );
    assert_eq!(
        last["content"][1]["text"],
        "\n- **/mnt/user-data/outputs/chart.png** (image/png)"
    );
    assert!(
        image_parts(&requests[2]).is_empty(),
        "an image is sent once"
    );
    let text = requests[1].to_string();
    assert!(
        !text.contains("/users/default/threads"),
        "a host path reached the model"
    );
}

#[test]
fn a_model_without_vision_gets_neither_view_image_nor_images() {
    let (_, requests) = run(false);
    for request in &requests {
        let tools: Vec<&str> = request["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert!(!tools.contains(&"view_image"), "{tools:?}");
        assert!(image_parts(request).is_empty());
    }
}
