//! Splitting a provider's streamed reply into its items, whatever the provider: server-sent
//! events (OpenAI, Anthropic, Gemini with `alt=sse`, the Responses API: an `event:` name
//! and `data:` lines, ended by a blank line) and newline-delimited JSON (Ollama's native
//! API). Lines may end in `\n` or `\r\n` and may be split across network chunks; comments,
//! `id:` and `retry:` fields are skipped. Invariant: the decoder never interprets a
//! payload; it hands each item, whole, to the provider's reader.

/// How a reply body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`.
    Sse,
    /// `application/x-ndjson` (one JSON value per line).
    Ndjson,
}

/// One streamed item: an SSE event (its `event:` name, when given, and its data lines
/// joined by `\n`) or one NDJSON line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamItem {
    pub event: Option<String>,
    pub data: String,
}

/// The decoder's state between network chunks.
#[derive(Debug)]
pub struct StreamDecoder {
    framing: Framing,
    pending: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl StreamDecoder {
    pub fn new(framing: Framing) -> StreamDecoder {
        StreamDecoder {
            framing,
            pending: Vec::new(),
            event: None,
            data: None,
        }
    }

    /// The items completed by `bytes`.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<StreamItem> {
        self.pending.extend_from_slice(bytes);
        let mut items = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            self.line(line.trim_end_matches('\r'), &mut items);
        }
        items
    }

    /// The items of what is left when the body ends (a last line without a newline, an
    /// event without its blank line).
    pub fn finish(&mut self) -> Vec<StreamItem> {
        let rest = std::mem::take(&mut self.pending);
        let mut items = Vec::new();
        let line = String::from_utf8_lossy(&rest);
        let line = line.trim_end_matches('\r');
        if !line.is_empty() {
            self.line(line, &mut items);
        }
        if self.framing == Framing::Sse {
            self.dispatch(&mut items);
        }
        items
    }

    fn line(&mut self, line: &str, items: &mut Vec<StreamItem>) {
        match self.framing {
            Framing::Ndjson => {
                if !line.trim().is_empty() {
                    items.push(StreamItem {
                        event: None,
                        data: line.to_owned(),
                    });
                }
            }
            Framing::Sse => {
                if line.is_empty() {
                    self.dispatch(items);
                    return;
                }
                let (field, value) = match line.split_once(':') {
                    Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                    None => (line, ""),
                };
                match field {
                    "event" => self.event = Some(value.to_owned()),
                    "data" => match &mut self.data {
                        Some(data) => {
                            data.push('\n');
                            data.push_str(value);
                        }
                        None => self.data = Some(value.to_owned()),
                    },
                    // Comments (`: ping`), `id:`, `retry:` and unknown fields.
                    _ => {}
                }
            }
        }
    }

    /// Ends the current SSE event: an event with no data (a bare `event: ping`) is dropped.
    fn dispatch(&mut self, items: &mut Vec<StreamItem>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            if !data.trim().is_empty() {
                items.push(StreamItem { event, data });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(framing: Framing, chunks: &[&str]) -> Vec<StreamItem> {
        let mut decoder = StreamDecoder::new(framing);
        let mut items: Vec<StreamItem> = chunks
            .iter()
            .flat_map(|c| decoder.push(c.as_bytes()))
            .collect();
        items.extend(decoder.finish());
        items
    }

    #[test]
    fn sse_events_keep_their_names_and_join_their_data_lines() {
        let items = all(
            Framing::Sse,
            &[
                "event: message_start\r\ndata: {\"a\":",
                "1}\r\n\r\n: ping\n\nevent: ping\n\ndata: x\ndata: y\n\n",
            ],
        );
        assert_eq!(
            items,
            vec![
                StreamItem {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                StreamItem {
                    event: None,
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn an_sse_body_that_ends_without_a_blank_line_still_yields_its_last_event() {
        let items = all(Framing::Sse, &["data: [DONE]"]);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].data, "[DONE]");
    }

    #[test]
    fn ndjson_lines_split_across_chunks_are_whole_items() {
        let items = all(Framing::Ndjson, &["{\"a\":", "1}\n\n{\"b\":2}"]);
        let data: Vec<&str> = items.iter().map(|i| i.data.as_str()).collect();
        assert_eq!(data, ["{\"a\":1}", "{\"b\":2}"]);
    }
}
