//! Loading never panics on bad input: DeerFlow's example files with random bytes cut out
//! or spliced in either load or fail with an error that names the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use antler_protocol::config::{parse_app_config, parse_extensions_config};
use proptest::prelude::*;

const APP_EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/deerflow-config.example.yaml"
));
const EXTENSIONS_EXAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/conformance/deerflow-extensions_config.example.json"
));

fn no_env(_: &str) -> Option<String> {
    None
}

/// `text` with the chars in `[at, at + cut)` replaced by `splice` (indices wrap around).
fn mutate(text: &str, at: usize, cut: usize, splice: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let start = at % chars.len();
    let end = (start + cut).min(chars.len());
    chars[..start]
        .iter()
        .chain(splice.chars().collect::<Vec<_>>().iter())
        .chain(chars[end..].iter())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn mutated_config_yaml_never_panics(
        at in any::<usize>(),
        cut in 0usize..40,
        splice in "[ -~\n\t:{}\\[\\]$#-]{0,12}",
    ) {
        let text = mutate(APP_EXAMPLE, at, cut, &splice);
        if let Err(error) = parse_app_config(Path::new("config.yaml"), &text, &no_env) {
            prop_assert!(error.to_string().starts_with("config.yaml:"), "{}", error);
        }
    }

    #[test]
    fn mutated_extensions_json_never_panics(
        at in any::<usize>(),
        cut in 0usize..20,
        splice in "[ -~\n\"{}\\[\\],:$]{0,8}",
    ) {
        let text = mutate(EXTENSIONS_EXAMPLE, at, cut, &splice);
        if let Err(error) = parse_extensions_config(Path::new("ext.json"), &text, &no_env) {
            let shown = error.to_string();
            prop_assert!(
                shown.starts_with("ext.json:")
                    || shown.starts_with("Extensions config file at ext.json is not valid JSON: "),
                "{}",
                shown
            );
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse_app_config(Path::new("config.yaml"), &text, &no_env);
        let _ = parse_extensions_config(Path::new("ext.json"), &text, &no_env);
    }
}
