//! The answer to one posted MCP request, as the client gets it: rmcp's session transport
//! always answers a request with an event stream (a priming event, what the request's work
//! tells the client, then its answer), but when the stream holds nothing before the answer
//! the answer goes alone as `application/json`, which streamable HTTP lets a server choose
//! and every client reads. That spares the event framing, the chunked body and the priming
//! event's separate write on every plain call. [`read`] reads the stream up to its first
//! message: the answer (a message without `method`) becomes [`Read::Answer`]; anything else
//! first (a notification, a request to the client such as an elicitation, a keep-alive
//! comment of a long call) keeps the stream, replayed whole ([`Read::Events`]).

use std::convert::Infallible;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt as _};

/// An event stream's bytes, as the client gets them.
pub type Events = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// What a request's event stream turned out to be.
pub enum Read {
    /// Only the answer: its JSON-RPC message.
    Answer(Bytes),
    /// The stream, from its first byte.
    Events(Events),
}

/// Reads `rest` (an event stream's bytes) until its first message or its end.
pub async fn read<S>(mut rest: S) -> Read
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + Unpin + 'static,
{
    // Whole events already read (replayed should the stream be kept), then the bytes of
    // an event not complete yet.
    let mut read: Vec<Bytes> = Vec::new();
    let mut pending = BytesMut::new();
    loop {
        while let Some(end) = event_end(&pending) {
            let event = pending.split_to(end).freeze();
            read.push(event.clone());
            match First::of(&event) {
                First::Priming => continue,
                First::Answer(range) => return Read::Answer(event.slice(range)),
                First::Other => return Read::Events(replay(read, pending, rest)),
            }
        }
        match rest.next().await {
            Some(Ok(chunk)) => pending.extend_from_slice(&chunk),
            // Ended without a message: what there was goes as it was.
            Some(Err(never)) => match never {},
            None => return Read::Events(replay(read, pending, rest)),
        }
    }
}

fn replay<S>(read: Vec<Bytes>, pending: BytesMut, rest: S) -> Events
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let pending = (!pending.is_empty()).then(|| pending.freeze());
    let read = futures::stream::iter(read.into_iter().chain(pending).map(Ok));
    Box::pin(read.chain(rest))
}

/// Where the first complete event of `bytes` ends (after its blank line).
fn event_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\n\n").map(|at| at + 2)
}

/// What one event is, for the answer's sake.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// No data (the priming event that opens every stream).
    Priming,
    /// One JSON-RPC message without `method` (a result or an error): the answer, at this
    /// byte range of the event.
    Answer(std::ops::Range<usize>),
    /// Anything else: a message with `method`, several data lines, a comment.
    Other,
}

impl First {
    fn of(event: &[u8]) -> First {
        let mut data = None;
        let mut at = 0;
        for line in event.split(|b| *b == b'\n') {
            let start = at;
            at += line.len() + 1;
            if line.is_empty() {
                continue;
            }
            // A comment (`:`) is a keep-alive: the call is a long one, keep streaming.
            if line.starts_with(b":") {
                return First::Other;
            }
            let Some(value) = line.strip_prefix(b"data:") else {
                continue;
            };
            if data.is_some() {
                return First::Other;
            }
            let skip = usize::from(value.first() == Some(&b' '));
            let from = start + "data:".len() + skip;
            data = Some(from..start + line.len());
        }
        let Some(range) = data else {
            return First::Priming;
        };
        if range.is_empty() {
            return First::Priming;
        }
        /// Whether a message has `method` (read without building it).
        #[derive(serde::Deserialize)]
        struct Kind {
            method: Option<serde::de::IgnoredAny>,
        }
        match serde_json::from_slice::<Kind>(&event[range.clone()]) {
            Ok(Kind { method: None }) => First::Answer(range),
            _ => First::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn body(
        chunks: &[&'static str],
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + Unpin {
        futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, Infallible>(Bytes::from_static(c.as_bytes())))
                .collect::<Vec<_>>(),
        )
    }

    async fn all(events: Events) -> String {
        let chunks: Vec<Bytes> = events.map(|c| c.unwrap()).collect().await;
        chunks.iter().map(|c| String::from_utf8_lossy(c)).collect()
    }

    const PRIMING: &str = "id: 0\nretry: 3000\ndata: \n\n";
    const ANSWER: &str =
        "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\nid: 0\n\n";

    #[tokio::test]
    async fn a_stream_of_only_the_answer_is_the_answer() {
        let Read::Answer(json) = read(body(&[PRIMING, ANSWER])).await else {
            panic!("not an answer");
        };
        assert_eq!(
            &json[..],
            br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#
        );
        // Split anywhere, and an error answer.
        let Read::Answer(json) = read(body(&[
            "id: 0\nre",
            "try: 3000\ndata:\n",
            "\ndata:{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}",
            "\n\n",
        ]))
        .await
        else {
            panic!("not an answer");
        };
        assert!(json.starts_with(b"{\"jsonrpc\""), "{json:?}");
        assert!(json.ends_with(b"}}"), "{json:?}");
    }

    #[tokio::test]
    async fn anything_before_the_answer_keeps_the_whole_stream() {
        let progress =
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n";
        let elicit = "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"elicitation/create\",\"params\":{}}\n\n";
        for first in [progress, elicit, ":\n\n"] {
            let Read::Events(events) = read(body(&[PRIMING, first, ANSWER])).await else {
                panic!("an answer after {first}");
            };
            assert_eq!(all(events).await, format!("{PRIMING}{first}{ANSWER}"));
        }
        // A stream that ends without a message is passed on as it was.
        let Read::Events(events) = read(body(&[PRIMING, "data: {"])).await else {
            panic!("an answer");
        };
        assert_eq!(all(events).await, format!("{PRIMING}data: {{"));
    }
}
