//! The `uploads:` section (spec B.1, B.2): the gateway's upload limits under DeerFlow's
//! keys and their legacy names, Antler's per-user total across threads, and document
//! conversion (`auto_convert_documents`, `pdf_converter`). As in DeerFlow, a limit that is
//! not a positive integer falls back to its default (with a warning naming the key); an
//! unknown key is warned about, never an error.

use serde_json::Value;

/// Default `max_files`.
pub const DEFAULT_MAX_FILES: u64 = 10;
/// Default `max_file_size` (50 MiB).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 50 << 20;
/// Default `max_total_size` (100 MiB).
pub const DEFAULT_MAX_TOTAL_SIZE: u64 = 100 << 20;
/// Default `max_user_total_size` (1 GiB): everything one user keeps in uploads.
pub const DEFAULT_MAX_USER_TOTAL_SIZE: u64 = 1 << 30;
/// Default `conversion_timeout_s`: one document's conversion in the sandbox.
pub const DEFAULT_CONVERSION_TIMEOUT_S: u64 = 120;

/// The keys of `uploads:` (the legacy names included).
pub const UPLOADS_KEYS: &[&str] = &[
    "max_files",
    "max_file_count",
    "max_file_size",
    "max_single_file_size",
    "max_total_size",
    "max_user_total_size",
    "auto_convert_documents",
    "pdf_converter",
    "conversion_timeout_s",
];

/// Which converter reads a PDF (`uploads.pdf_converter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PdfConverter {
    /// pymupdf4llm, then MarkItDown when it fails or yields too little text.
    #[default]
    Auto,
    Pymupdf4llm,
    Markitdown,
}

impl PdfConverter {
    /// The name the converter script takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PdfConverter::Auto => "auto",
            PdfConverter::Pymupdf4llm => "pymupdf4llm",
            PdfConverter::Markitdown => "markitdown",
        }
    }
}

/// A value of `uploads:` that was not used as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadsWarning {
    /// The key (`None`: the section itself).
    pub key: Option<String>,
    /// Whether the key is unknown (else its value fell back to the default).
    pub unknown: bool,
    pub message: String,
}

impl std::fmt::Display for UploadsWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(f, "uploads.{key}: {}", self.message),
            None => write!(f, "uploads: {}", self.message),
        }
    }
}

fn fallback(key: &str, message: String) -> UploadsWarning {
    UploadsWarning {
        key: Some(key.to_owned()),
        unknown: false,
        message,
    }
}

/// `uploads:` as Antler applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadsConfig {
    pub max_files: u64,
    pub max_file_size: u64,
    pub max_total_size: u64,
    /// Antler's: the most one user keeps in uploads across its threads.
    pub max_user_total_size: u64,
    pub auto_convert_documents: bool,
    pub pdf_converter: PdfConverter,
    /// Antler's: the deadline of one document's conversion in the sandbox.
    pub conversion_timeout_s: u64,
}

impl Default for UploadsConfig {
    fn default() -> UploadsConfig {
        UploadsConfig {
            max_files: DEFAULT_MAX_FILES,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            max_total_size: DEFAULT_MAX_TOTAL_SIZE,
            max_user_total_size: DEFAULT_MAX_USER_TOTAL_SIZE,
            auto_convert_documents: false,
            pdf_converter: PdfConverter::Auto,
            conversion_timeout_s: DEFAULT_CONVERSION_TIMEOUT_S,
        }
    }
}

impl UploadsConfig {
    /// The section as written (`None` or `null`: the defaults), with a warning for each
    /// value that fell back to its default and each unknown key.
    pub fn from_section(section: Option<&Value>) -> (UploadsConfig, Vec<UploadsWarning>) {
        let mut config = UploadsConfig::default();
        let mut warnings = Vec::new();
        let Some(section) = section.filter(|v| !v.is_null()) else {
            return (config, warnings);
        };
        let Some(map) = section.as_object() else {
            warnings.push(UploadsWarning {
                key: None,
                unknown: false,
                message: "expected a mapping; the defaults are used".to_owned(),
            });
            return (config, warnings);
        };
        for key in map.keys() {
            if !UPLOADS_KEYS.contains(&key.as_str()) {
                warnings.push(UploadsWarning {
                    key: Some(key.clone()),
                    unknown: true,
                    message: "unknown key, ignored".to_owned(),
                });
            }
        }
        let mut limit = |key: &str, legacy: Option<&str>, default: u64| {
            let value = map
                .get(key)
                .filter(|v| !v.is_null())
                .or_else(|| legacy.and_then(|l| map.get(l)).filter(|v| !v.is_null()));
            match value.map(positive) {
                None => default,
                Some(Some(n)) => n,
                Some(None) => {
                    warnings.push(fallback(
                        key,
                        format!("not a positive integer; falling back to {default}"),
                    ));
                    default
                }
            }
        };
        config.max_files = limit("max_files", Some("max_file_count"), DEFAULT_MAX_FILES);
        config.max_file_size = limit(
            "max_file_size",
            Some("max_single_file_size"),
            DEFAULT_MAX_FILE_SIZE,
        );
        config.max_total_size = limit("max_total_size", None, DEFAULT_MAX_TOTAL_SIZE);
        config.max_user_total_size =
            limit("max_user_total_size", None, DEFAULT_MAX_USER_TOTAL_SIZE);
        config.conversion_timeout_s =
            limit("conversion_timeout_s", None, DEFAULT_CONVERSION_TIMEOUT_S);
        // `_auto_convert_documents_enabled`: a string is true for 1/true/yes/on.
        config.auto_convert_documents = match map.get("auto_convert_documents") {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => {
                matches!(
                    s.trim().to_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            }
            Some(Value::Number(n)) => n.as_f64().is_some_and(|n| n != 0.0),
            _ => false,
        };
        config.pdf_converter = match map.get("pdf_converter") {
            None | Some(Value::Null) => PdfConverter::Auto,
            Some(v) => match v.as_str().map(|s| s.trim().to_lowercase()).as_deref() {
                Some("auto") => PdfConverter::Auto,
                Some("pymupdf4llm") => PdfConverter::Pymupdf4llm,
                Some("markitdown") => PdfConverter::Markitdown,
                _ => {
                    warnings.push(fallback(
                        "pdf_converter",
                        "expected auto, pymupdf4llm or markitdown; falling back to auto".to_owned(),
                    ));
                    PdfConverter::Auto
                }
            },
        };
        (config, warnings)
    }
}

/// `int(value)` when it is positive (an integer, an integral float, or a string of one).
fn positive(value: &Value) -> Option<u64> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    (n > 0).then_some(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_legacy_names_and_invalid_values_fall_back() {
        assert_eq!(
            UploadsConfig::from_section(None).0,
            UploadsConfig::default()
        );
        let (c, w) = UploadsConfig::from_section(Some(&json!({
            "max_file_count": 3,
            "max_single_file_size": "2048",
            "max_total_size": -1,
            "auto_convert_documents": "yes",
            "pdf_converter": "MarkItDown",
            "max_user_total_size": 4096,
            "colour": "blue",
        })));
        assert_eq!(c.max_files, 3);
        assert_eq!(c.max_file_size, 2048);
        assert_eq!(c.max_total_size, DEFAULT_MAX_TOTAL_SIZE);
        assert_eq!(c.max_user_total_size, 4096);
        assert!(c.auto_convert_documents);
        assert_eq!(c.pdf_converter, PdfConverter::Markitdown);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w
            .iter()
            .any(|w| w.to_string().starts_with("uploads.max_total_size")));
        assert!(w
            .iter()
            .any(|w| w.unknown && w.key.as_deref() == Some("colour")));
        // `antler config check` names them where they are.
        let loaded = crate::config::parse_app_config(
            std::path::Path::new("config.yaml"),
            "uploads:\n  max_files: 0\n  colour: blue\n  auto_convert_documents: true\n",
            &|_| None,
        )
        .unwrap();
        let found: Vec<(String, crate::config::WarningKind)> = loaded
            .warnings
            .iter()
            .map(|w| (w.path.to_string(), w.kind))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "uploads.max_files".to_owned(),
                    crate::config::WarningKind::Clamped
                ),
                (
                    "uploads.colour".to_owned(),
                    crate::config::WarningKind::UnknownKey
                ),
            ]
        );
        // The new name wins over the legacy one.
        let (c, _) =
            UploadsConfig::from_section(Some(&json!({"max_files": 5, "max_file_count": 3})));
        assert_eq!(c.max_files, 5);
    }
}
