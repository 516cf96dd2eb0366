//! `web_capture` from a lead without sandbox-host's volume: the screenshot a Browserless
//! stand-in renders is written through a real `antler-sandbox-host`
//! (`ThreadFileOp::WriteOutput`) into the thread's `outputs` there, where a sandbox tool
//! reads it; a second capture under the same name gets `-1` and leaves the first as it
//! was; both are declared artifacts that settle the run; the lead side's directory stays
//! empty throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::standin::StandIn;
use crate::sandbox_support::RemoteThread;
use antler_engine::{DeliveryReceipt, Message, OutputsSnapshot, ToolCall, WebTools};
use antler_protocol::config::ToolConfig;
use serde_json::json;

/// What a screenshot stand-in answers: a PNG's signature and a few bytes.
const PNG: &[u8] = &[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n', 7, 7, 7];

/// A Browserless stand-in on loopback: every screenshot is [`PNG`].
fn browserless_stand_in() -> StandIn {
    StandIn::serving("image/png", PNG.to_vec())
}

fn text(messages: &[Message]) -> String {
    match messages {
        [Message::Tool { content, .. }] => content.clone(),
        other => panic!("{other:?}"),
    }
}

#[actix_rt::test]
async fn a_capture_lands_on_sandbox_host_and_settles_the_run() {
    let RemoteThread {
        host,
        client,
        lead_root,
        files,
        ..
    } = RemoteThread::start().await;
    files.ensure_dirs().await.unwrap();
    let before = OutputsSnapshot::take_through(&*files).await.unwrap();

    let browserless = browserless_stand_in();
    let port = browserless.port;
    let web = WebTools::from_config(&[ToolConfig {
        name: "web_capture".into(),
        group: "web".into(),
        use_: "deerflow.community.browserless.tools:web_capture_tool".into(),
        extra: json!({"base_url": format!("http://127.0.0.1:{port}"), "token": "bt"})
            .as_object()
            .cloned()
            .unwrap(),
    }]);
    let capture = ToolCall {
        id: "call-capture".into(),
        name: "web_capture".into(),
        args: json!({"url": "https://93.184.216.34/status", "filename": "status.png"}),
    };
    let mut artifacts = Vec::new();
    for expected in ["status.png", "status-1.png"] {
        let update = web
            .execute(&capture, Duration::from_secs(30), files.as_ref())
            .await
            .expect("web_capture is a web tool")
            .unwrap();
        assert_eq!(
            text(&update.messages),
            format!("Captured screenshot: /mnt/user-data/outputs/{expected}")
        );
        assert_eq!(
            update.artifacts,
            [format!("/mnt/user-data/outputs/{expected}")]
        );
        artifacts.extend(update.artifacts);
    }
    let seen: Vec<String> = browserless
        .received()
        .iter()
        .map(|r| r.request_line().to_owned())
        .collect();
    assert_eq!(seen, ["POST /screenshot?token=bt HTTP/1.1"; 2]);

    // The images are on sandbox-host's volume, where the sandbox reads them.
    let remote = host.user_data("u1", "t1");
    assert_eq!(
        std::fs::read(remote.join("outputs/status.png")).unwrap(),
        PNG
    );
    assert_eq!(
        std::fs::read(remote.join("outputs/status-1.png")).unwrap(),
        PNG
    );
    let id = client.acquire("u1", "t1").await.unwrap().sandbox_id;
    let sizes = client
        .bash(&id, "wc -c < /mnt/user-data/outputs/status.png; wc -c < /mnt/user-data/outputs/status-1.png")
        .await;
    assert_eq!(
        sizes.split_whitespace().collect::<Vec<_>>(),
        [PNG.len().to_string(), PNG.len().to_string()],
        "{sizes}"
    );

    // Both captures are produced outputs, and declared: the run settles.
    let after = OutputsSnapshot::take_through(&*files).await.unwrap();
    let produced = before.produced_since(&after);
    assert_eq!(
        produced,
        [
            "/mnt/user-data/outputs/status-1.png",
            "/mnt/user-data/outputs/status.png"
        ]
    );
    let receipt = DeliveryReceipt::settle(&artifacts, &produced);
    assert_eq!(receipt.satisfied, Some(true));

    // Nothing of the thread was ever on the lead side's disk.
    assert_eq!(std::fs::read_dir(lead_root.path()).unwrap().count(), 0);
}
