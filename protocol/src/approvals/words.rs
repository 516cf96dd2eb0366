//! Shell words as the analysis sees them: quotes and escapes removed, each part known
//! statically or only at run time (expansions, brace expansions, ANSI-C strings with escapes),
//! unquoted glob characters noted, and the command substitutions inside analysed. Plain words
//! (the common case) are kept off the word parser.

use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::ParserOptions;

use super::shell::{Walker, Word};

impl Walker {
    /// Analyses the command substitutions of an expanding here-document's body.
    pub(super) fn heredoc(&mut self, body: &str) {
        let options = ParserOptions::default();
        match brush_parser::word::parse_heredoc(body, &options) {
            Ok(pieces) => self.pieces(body, &pieces, true, &mut Built::default()),
            Err(_) => self.refuse("a here-document does not parse"),
        }
    }

    /// A word with quotes removed; command substitutions in it are analysed.
    pub(super) fn word(&mut self, raw: &str) -> Word {
        if is_plain(raw) {
            return Word::literal(raw);
        }
        if has_long_tilde_number(raw) {
            // The word parser's `~N` would overflow (and panic) on it.
            self.refuse(format!("a directory-stack number too long: `{raw}`"));
            return Word::unknown(raw);
        }
        let options = ParserOptions::default();
        let parsed =
            std::panic::catch_unwind(|| brush_parser::word::parse(raw, &options).map_err(|_| ()));
        match parsed {
            Ok(Ok(pieces)) => {
                let mut built = Built::default();
                self.pieces(raw, &pieces, false, &mut built);
                built.finish()
            }
            _ => {
                self.refuse(format!("a word does not parse: `{raw}`"));
                Word::unknown(raw)
            }
        }
    }

    fn pieces(&mut self, raw: &str, pieces: &[WordPieceWithSource], quoted: bool, out: &mut Built) {
        for piece in pieces {
            let source = raw.get(piece.start_index..piece.end_index).unwrap_or("");
            match &piece.piece {
                WordPiece::Text(text) => {
                    if !quoted {
                        if text.contains(['*', '?', '[']) {
                            out.glob = true;
                        }
                        if has_brace_expansion(text) {
                            out.dynamic(text);
                            continue;
                        }
                    }
                    out.literal(text);
                }
                WordPiece::SingleQuotedText(text) => out.literal(text),
                WordPiece::AnsiCQuotedText(text) => match text.contains('\\') {
                    true => out.dynamic(source),
                    false => out.literal(text),
                },
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(raw, inner, true, out)
                }
                WordPiece::EscapeSequence(escape) => {
                    let escaped = escape.strip_prefix('\\').unwrap_or(escape);
                    if escaped != "\n" {
                        out.literal(escaped);
                    }
                }
                WordPiece::TildeExpansion(_) => out.dynamic(source),
                WordPiece::ParameterExpansion(_) => {
                    if source.contains("$(") || source.contains('`') || source.contains("<(") {
                        self.refuse("a command substitution inside a parameter expansion");
                    }
                    out.dynamic(source);
                }
                WordPiece::CommandSubstitution(inner)
                | WordPiece::BackquotedCommandSubstitution(inner) => {
                    self.program_text(inner);
                    out.dynamic(source);
                }
                WordPiece::ArithmeticExpression(expr) => {
                    self.arithmetic(&expr.value);
                    out.dynamic(source);
                }
            }
        }
    }
}

/// A word being assembled from its pieces.
#[derive(Default)]
struct Built {
    text: String,
    dynamic: bool,
    glob: bool,
    literal_len: usize,
}

impl Built {
    fn literal(&mut self, text: &str) {
        self.text.push_str(text);
        if !self.dynamic {
            self.literal_len = self.text.len();
        }
    }

    fn dynamic(&mut self, source: &str) {
        self.text.push_str(source);
        self.dynamic = true;
    }

    fn finish(self) -> Word {
        Word {
            text: self.text,
            dynamic: self.dynamic,
            glob: self.glob,
            literal_len: self.literal_len,
        }
    }
}

/// Whether `raw` is a word with nothing to unquote or expand (the common case, kept off the
/// word parser).
fn is_plain(raw: &str) -> bool {
    !raw.is_empty()
        && raw.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_'
                        | b'.'
                        | b'/'
                        | b'='
                        | b':'
                        | b','
                        | b'@'
                        | b'%'
                        | b'+'
                        | b'^'
                        | b'#'
                )
        })
}

/// Whether `raw` has a `~N`, `~+N` or `~-N` whose number does not fit a machine word.
fn has_long_tilde_number(raw: &str) -> bool {
    raw.match_indices('~').any(|(at, _)| {
        let rest = raw[at + 1..].trim_start_matches(['+', '-']);
        rest.bytes().take_while(u8::is_ascii_digit).count() >= 19
    })
}

/// Whether unquoted `text` holds a brace expansion (`{a,b}`, `{1..3}`), which makes several
/// words of one.
fn has_brace_expansion(text: &str) -> bool {
    let Some(open) = text.find('{') else {
        return false;
    };
    let rest = &text[open..];
    match rest.find('}') {
        Some(close) => {
            let inner = &rest[..close];
            inner.contains(',') || inner.contains("..")
        }
        None => false,
    }
}
