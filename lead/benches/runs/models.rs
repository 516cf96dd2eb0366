//! Section 5 of the runs benchmark: what each provider's client costs on top of the HTTP
//! stream it reads. A loopback server answers every request with one canned 2,000-token
//! streamed reply in the provider's own format (one token per event, as providers send
//! them); in the same rounds, interleaved, a raw reqwest client reads the same body to its
//! end. The figures: the client's added cost to parse the whole reply (client total − raw
//! total) and its added latency to the first token (the observer's first `text_delta`
//! against the raw client's first body chunk; target ≤ 0.5 ms). Then the request side: a
//! request with the 5,000-deferred-tool catalog's prompt against the same request with an
//! empty prompt, both answered by an instant one-token reply (the cost of encoding the
//! prompt and tools into the provider's body).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use antler_engine::{model_from_entry, Message, ModelObserver, ModelRequest};
use antler_protocol::config::ModelConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Tokens in the streamed reply.
pub const TOKENS: usize = 2_000;
/// Rounds per provider (client and raw interleaved).
const ROUNDS: usize = 40;

/// One provider's stream format.
#[derive(Clone, Copy, Debug)]
pub enum Format {
    OpenAi,
    Anthropic,
    Gemini,
    Responses,
    Ollama,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::OpenAi,
        Format::Anthropic,
        Format::Gemini,
        Format::Responses,
        Format::Ollama,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Format::OpenAi => "OpenAI chat (SSE)",
            Format::Anthropic => "Anthropic Messages (SSE)",
            Format::Gemini => "Gemini streamGenerateContent (SSE)",
            Format::Responses => "OpenAI Responses (SSE)",
            Format::Ollama => "Ollama /api/chat (NDJSON)",
        }
    }

    /// The `models:` entry that speaks this format to `base`.
    fn entry(self, base: &str) -> ModelConfig {
        let (use_, base_url, extra) = match self {
            Format::OpenAi => ("langchain_openai:ChatOpenAI", format!("{base}/v1"), ""),
            Format::Anthropic => ("langchain_anthropic:ChatAnthropic", base.to_owned(), ""),
            Format::Gemini => (
                "langchain_google_genai:ChatGoogleGenerativeAI",
                base.to_owned(),
                "",
            ),
            Format::Responses => (
                "langchain_openai:ChatOpenAI",
                format!("{base}/v1"),
                "use_responses_api: true\n",
            ),
            Format::Ollama => ("langchain_ollama:ChatOllama", base.to_owned(), ""),
        };
        serde_yaml::from_str(&format!(
            "name: bench\nuse: {use_}\nmodel: m\nbase_url: {base_url}\napi_key: k\nmax_retries: 0\n{extra}"
        ))
        .expect("bench entry")
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }

    /// The whole reply body: `tokens` text tokens, then the end of the reply.
    fn body(self, tokens: usize) -> String {
        let mut out = String::with_capacity(tokens * 160);
        let token = |i: usize| format!("tok{} ", i % 97);
        match self {
            Format::OpenAi => {
                for i in 0..tokens {
                    out.push_str(&format!(
                        "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
                        token(i)
                    ));
                }
                out.push_str("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2000,\"total_tokens\":2010}}\n\ndata: [DONE]\n\n");
            }
            Format::Anthropic => {
                out.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
                out.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
                for i in 0..tokens {
                    out.push_str(&format!(
                        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n",
                        token(i)
                    ));
                }
                out.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
                out.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2000}}\n\n");
                out.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
            }
            Format::Gemini => {
                for i in 0..tokens {
                    out.push_str(&format!(
                        "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{}\"}}],\"role\":\"model\"}},\"index\":0}}]}}\r\n\r\n",
                        token(i)
                    ));
                }
                out.push_str("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":2000,\"totalTokenCount\":2010}}\r\n\r\n");
            }
            Format::Responses => {
                out.push_str("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n");
                out.push_str("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n");
                for i in 0..tokens {
                    out.push_str(&format!(
                        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{}\"}}\n\n",
                        token(i)
                    ));
                }
                out.push_str("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":10,\"output_tokens\":2000,\"total_tokens\":2010}}}\n\n");
            }
            Format::Ollama => {
                for i in 0..tokens {
                    out.push_str(&format!(
                        "{{\"model\":\"m\",\"created_at\":\"2026-12-05T00:00:00Z\",\"message\":{{\"role\":\"assistant\",\"content\":\"{}\"}},\"done\":false}}\n",
                        token(i)
                    ));
                }
                out.push_str("{\"model\":\"m\",\"created_at\":\"2026-12-05T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":10,\"eval_count\":2000}\n");
            }
        }
        out
    }
}

/// A loopback server answering every request with `body`, written event by event.
async fn serve(format: Format, body: Arc<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                // Read the request head and body (Content-Length), then answer.
                let mut buf = Vec::with_capacity(64 * 1024);
                let mut chunk = [0u8; 16 * 1024];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                    format.content_type()
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let separator = match format {
                    Format::Ollama => "\n",
                    Format::Gemini => "\r\n\r\n",
                    _ => "\n\n",
                };
                for event in body.split_inclusive(separator) {
                    let frame = format!("{:x}\r\n{event}\r\n", event.len());
                    if socket.write_all(frame.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
                let _ = socket.shutdown().await;
            });
        }
    });
    base
}

/// Records when the first text token reached the observer.
#[derive(Default)]
struct FirstToken(Mutex<Option<Instant>>);

impl ModelObserver for FirstToken {
    fn text_delta(&self, _text: &str) {
        let mut first = self.0.lock().expect("lock");
        first.get_or_insert_with(Instant::now);
    }
}

/// One provider's figures (medians over [`ROUNDS`]).
pub struct ProviderFigures {
    pub format: Format,
    pub raw_total: Duration,
    pub client_total: Duration,
    pub raw_first: Duration,
    /// `None`: the client never reported a text delta.
    pub client_first: Option<Duration>,
    /// The request with the 5,000-tool prompt minus the same with an empty prompt.
    pub prompt_encode: Duration,
    pub error: Option<String>,
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Measures every provider; `prompt` is the 5,000-deferred-tool system prompt and
/// `tools` the tools a model sees with deferral on.
pub fn bench_models(
    prompt: &str,
    tools: &[antler_engine::catalog::ToolSpec],
) -> Vec<ProviderFigures> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut figures = Vec::new();
        for format in Format::ALL {
            figures.push(bench_one(format, prompt, tools).await);
        }
        figures
    })
}

async fn bench_one(
    format: Format,
    prompt: &str,
    tools: &[antler_engine::catalog::ToolSpec],
) -> ProviderFigures {
    let body = Arc::new(format.body(TOKENS));
    let base = serve(format, body.clone()).await;
    let entry = format.entry(&base);
    let mut figures = ProviderFigures {
        format,
        raw_total: Duration::ZERO,
        client_total: Duration::ZERO,
        raw_first: Duration::ZERO,
        client_first: None,
        prompt_encode: Duration::ZERO,
        error: None,
    };
    let model = match model_from_entry(&entry, &|_| None) {
        Ok(model) => model,
        Err(e) => {
            figures.error = Some(e.to_string());
            return figures;
        }
    };
    let http = reqwest::Client::new();
    let messages = [Message::human("Write a long answer.")];
    let (mut raw_total, mut raw_first) = (Vec::new(), Vec::new());
    let (mut client_total, mut client_first) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 2 {
        // Raw: the same bytes read to the end, no parsing.
        let start = Instant::now();
        let response = http
            .post(format!("{base}/raw"))
            .body("{}")
            .send()
            .await
            .expect("raw send");
        let mut response = response;
        let mut first = None;
        while let Some(chunk) = response.chunk().await.expect("raw chunk") {
            first.get_or_insert_with(|| start.elapsed());
            std::hint::black_box(chunk);
        }
        let raw = start.elapsed();

        let observer = FirstToken::default();
        let mut request = ModelRequest::new(&messages, &[], &[]);
        request.observer = Some(&observer);
        let start = Instant::now();
        let reply = model.complete(request).await;
        let client = start.elapsed();
        match reply {
            Ok(reply) if reply.content.len() >= TOKENS * 4 => {}
            Ok(reply) => {
                figures.error = Some(format!(
                    "the reply has {} characters, not the {TOKENS} tokens sent",
                    reply.content.len()
                ));
                return figures;
            }
            Err(e) => {
                figures.error = Some(e.to_string());
                return figures;
            }
        }
        // Two warm-up rounds are not counted.
        if round >= 2 {
            raw_total.push(raw);
            raw_first.push(first.unwrap_or(raw));
            client_total.push(client);
            if let Some(at) = *observer.0.lock().expect("lock") {
                client_first.push(at - start);
            }
        }
    }
    figures.raw_total = median(raw_total);
    figures.raw_first = median(raw_first);
    figures.client_total = median(client_total);
    figures.client_first = (!client_first.is_empty()).then(|| median(client_first));

    // The request side: the big prompt and the visible tools against an empty request.
    let short = Arc::new(format.body(1));
    let base = serve(format, short).await;
    let model = match model_from_entry(&format.entry(&base), &|_| None) {
        Ok(model) => model,
        Err(e) => {
            figures.error = Some(e.to_string());
            return figures;
        }
    };
    let big = [
        Message::System {
            content: prompt.to_owned(),
        },
        Message::human("Hello."),
    ];
    let small = [Message::human("Hello.")];
    let visible: Vec<&antler_engine::catalog::ToolSpec> = tools.iter().collect();
    let (mut with_prompt, mut without) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 2 {
        let start = Instant::now();
        let _ = model.complete(ModelRequest::new(&big, &visible, &[])).await;
        let a = start.elapsed();
        let start = Instant::now();
        let _ = model.complete(ModelRequest::new(&small, &[], &[])).await;
        let b = start.elapsed();
        if round >= 2 {
            with_prompt.push(a);
            without.push(b);
        }
    }
    figures.prompt_encode = median(with_prompt).saturating_sub(median(without));
    figures
}
