//! InfoQuest (`deerflow.community.infoquest.tools:web_search_tool | web_fetch_tool |
//! image_search_tool`) against stand-ins for its search and reader hosts: the cleaned
//! result lists (pages and news, images, each deduplicated by URL), the request bodies
//! with their config keys, the reader's HTML through readability, and E.9's texts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::web_support::{call, entry, Reply, Seen, StandIn};
use serde_json::json;

fn search(seen: &Seen) -> Reply {
    if seen.json()["query"] == "wrong" {
        return Reply::json(json!({"content": "x"}));
    }
    if seen.json()["search_type"] == "Images" {
        return images(seen);
    }
    Reply::json(
        json!({"search_result": {"results": [{"content": {"results": {
            "organic": [{"title": "P", "desc": "d", "url": "https://p.example/"}, {"title": "dup", "url": "https://p.example/"}],
            "top_stories": {"items": [{"title": "N", "source": "S", "url": "https://n.example/"}, {"url": "https://untitled.example/"}]}
        }}}]}}),
    )
}

fn reader(_seen: &Seen) -> Reply {
    Reply::json(
        json!({"reader_result": "<html><head><title>Read</title></head><body><article><p>What the reader fetched, long enough to be the article that readability keeps here.</p></article></body></html>"}),
    )
}

#[tokio::test]
async fn search_cleans_the_reply_and_fetch_reads_the_html() {
    let api = StandIn::start(search).await;
    let read = StandIn::start(reader).await;
    let entries = [
        entry(
            "web_search",
            "deerflow.community.infoquest.tools:web_search_tool",
            json!({"base_url": api.base(), "search_time_range": 7}),
        ),
        entry(
            "web_fetch",
            "deerflow.community.infoquest.tools:web_fetch_tool",
            json!({"reader_url": read.base(), "fetch_time": 5}),
        ),
    ];
    let s = call(&entries, "web_search", json!({"query": "q"})).await;
    let v: serde_json::Value = serde_json::from_str(&s.text).unwrap();
    assert_eq!(
        v,
        json!([
            {"type": "page", "title": "P", "desc": "d", "snippet": "d", "url": "https://p.example/"},
            {"type": "news", "source": "S", "title": "N", "url": "https://n.example/"}
        ])
    );
    assert_eq!(
        api.one().json(),
        json!({"format": "JSON", "query": "q", "time_range": 7})
    );
    let wrong = call(&entries, "web_search", json!({"query": "wrong"})).await;
    assert_eq!(wrong.text, "Error: web search API return wrong format");
    let f = call(
        &entries,
        "web_fetch",
        json!({"url": "https://93.184.216.34/r"}),
    )
    .await;
    assert!(
        f.text.starts_with("# Read\n\nWhat the reader fetched"),
        "{}",
        f.text
    );
    assert_eq!(
        read.one().json(),
        json!({"url": "https://93.184.216.34/r", "format": "HTML", "fetch_time": 5})
    );
}

/// The search host's answer to `"search_type": "Images"`, shaped as InfoQuest's.
fn images(seen: &Seen) -> Reply {
    match seen.json()["query"].as_str().unwrap_or("") {
        "down" => Reply::with(503, "text/plain", "overloaded".into()),
        "garbled" => Reply::with(200, "text/html", "<html>maintenance</html>".into()),
        "nothing" => {
            Reply::json(json!({"search_result": {"results": [{"content": {"results": {}}}]}}))
        }
        "odd" => Reply::json(json!({"status": "queued"})),
        _ => Reply::json(json!({"search_result": {"results": [
            {"content": {"results": {"images_results": [
                {"original": "https://img.example/owl.jpg", "title": "Owl", "thumbnail": "https://img.example/owl-t.jpg"},
                {"original": "https://img.example/owl.jpg", "title": "Owl again"},
                {"title": "No original"},
                {"original": "https://img.example/fox.png"}
            ]}}},
            {"content": {"results": {"images_results": [
                {"original": "https://img.example/fox.png", "title": "Fox, second block"},
                {"original": "https://img.example/lynx.webp", "title": "Lynx"}
            ]}}}
        ]}})),
    }
}

fn image_entries(
    api: &StandIn,
    extra: serde_json::Value,
) -> Vec<antler_protocol::config::ToolConfig> {
    let mut extra = extra.as_object().cloned().unwrap_or_default();
    extra.insert("base_url".into(), json!(api.base()));
    vec![entry(
        "image_search",
        "deerflow.community.infoquest.tools:image_search_tool",
        serde_json::Value::Object(extra),
    )]
}

#[tokio::test]
async fn image_search_lists_each_original_once() {
    let api = StandIn::start(search).await;
    let out = call(
        &image_entries(&api, json!({})),
        "image_search",
        json!({"query": "owl"}),
    )
    .await;
    assert_eq!(
        out.text,
        "[\n  {\n    \"image_url\": \"https://img.example/owl.jpg\",\n    \"title\": \"Owl\"\n  },\n  {\n    \"image_url\": \"https://img.example/fox.png\"\n  },\n  {\n    \"image_url\": \"https://img.example/lynx.webp\",\n    \"title\": \"Lynx\"\n  }\n]"
    );
    assert!(!out.error);
    let seen = api.one();
    assert_eq!((seen.method.as_str(), seen.path()), ("POST", "/"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.json(),
        json!({"format": "JSON", "query": "owl", "search_type": "Images", "image_size": "i"}),
        "image_size defaults to i; no time range unless configured"
    );
}

#[tokio::test]
async fn image_search_sends_only_valid_time_ranges_and_sizes() {
    let api = StandIn::start(search).await;
    let cases = [
        (
            json!({"image_search_time_range": 30, "image_size": "l"}),
            json!({"time_range": 30, "image_size": "l"}),
        ),
        (
            json!({"image_search_time_range": 400, "image_size": "xl"}),
            json!({}),
        ),
        (
            json!({"image_search_time_range": 0, "image_size": "m"}),
            json!({"image_size": "m"}),
        ),
    ];
    for (i, (config, sent)) in cases.iter().enumerate() {
        call(
            &image_entries(&api, config.clone()),
            "image_search",
            json!({"query": "owl"}),
        )
        .await;
        let mut expected = json!({"format": "JSON", "query": "owl", "search_type": "Images"});
        for (k, v) in sent.as_object().unwrap() {
            expected[k] = v.clone();
        }
        assert_eq!(api.seen()[i].json(), expected, "{config}");
    }
}

#[tokio::test]
async fn image_search_errors_and_empty_results() {
    let api = StandIn::start(search).await;
    let entries = image_entries(&api, json!({}));
    let empty = call(&entries, "image_search", json!({"query": "nothing"})).await;
    assert_eq!(empty.text, "[]");
    assert!(!empty.error);
    let wrong = call(&entries, "image_search", json!({"query": "wrong"})).await;
    assert_eq!(wrong.text, "Error: image search API return wrong format");
    assert!(wrong.error);
    let odd = call(&entries, "image_search", json!({"query": "odd"})).await;
    assert_eq!(
        odd.text, r#"{"status": "queued"}"#,
        "neither field: the reply as it came"
    );
    let prefix = "Error: InfoQuest Image Search - Image search tool execution failed | mode=synchronous | error=";
    let down = call(&entries, "image_search", json!({"query": "down"})).await;
    assert_eq!(
        down.text,
        format!("{prefix}503 Error for url: {}", api.base())
    );
    assert!(down.error);
    let garbled = call(&entries, "image_search", json!({"query": "garbled"})).await;
    assert_eq!(
        garbled.text,
        format!("{prefix}InfoQuest returned a body that is not JSON")
    );
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let gone = [entry(
        "image_search",
        "deerflow.community.infoquest.tools:image_search_tool",
        json!({"base_url": format!("http://127.0.0.1:{port}"), "timeout": 2}),
    )];
    let refused = call(&gone, "image_search", json!({"query": "owl"})).await;
    assert!(refused.text.starts_with(prefix), "{}", refused.text);
    assert!(refused.error);
}
