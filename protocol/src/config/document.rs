//! One config file's text and the passes every load runs over it: the syntax pass, the typed
//! pass over the raw text (the first bad value with its line, column and field path, and
//! every unknown key), and the effective pass over the `$VAR`-resolved value. `$VAR`s only
//! ever replace strings with strings, so the raw text and the effective value type-check alike.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::diagnostics::{
    humanize, ConfigError, ConfigWarning, FieldError, FieldPath, Location, WarningKind,
};
use super::env::{self, EnvLookup};
use super::locate::{locate_nearest, Format};

/// A config file being loaded.
pub(crate) struct Document<'a> {
    pub file: &'a Path,
    pub text: &'a str,
    pub format: Format,
}

impl Document<'_> {
    /// Checks the raw text against `T` and returns its effective value (after `$VAR`s) and
    /// the paths of keys that `T` does not know.
    pub fn load<T: DeserializeOwned + Default>(
        &self,
        env: EnvLookup<'_>,
    ) -> Result<(T, Vec<FieldPath>), ConfigError> {
        match self.format {
            Format::Yaml => {
                let mut value: serde_yaml::Value =
                    serde_yaml::from_str(self.text).map_err(|e| self.yaml_syntax_error(&e))?;
                if value.is_null() {
                    // An empty file (or one that is all comments) is an empty config.
                    return Ok((T::default(), Vec::new()));
                }
                let unknown = self.check_types::<T>()?;
                env::resolve_yaml(&mut value, env);
                let typed = serde_path_to_error::deserialize(value)
                    .map_err(|e| self.value_error(e.path(), &e.inner().to_string()))?;
                Ok((typed, unknown))
            }
            Format::Json => {
                let mut value: serde_json::Value =
                    serde_json::from_str(self.text).map_err(|e| self.json_syntax_error(&e))?;
                if !value.is_object() {
                    // serde would read a top-level array as a struct's fields in order.
                    return Err(self.not_an_object(&value));
                }
                let unknown = self.check_types::<T>()?;
                env::resolve_json(&mut value, env);
                let typed = serde_path_to_error::deserialize(value)
                    .map_err(|e| self.value_error(e.path(), &e.inner().to_string()))?;
                Ok((typed, unknown))
            }
        }
    }

    /// The typed pass over the raw text.
    fn check_types<T: DeserializeOwned>(&self) -> Result<Vec<FieldPath>, ConfigError> {
        let mut unknown = Vec::new();
        let mut on_ignored = |path: serde_ignored::Path<'_>| {
            unknown.push(FieldPath::from_ignored(&path));
        };
        match self.format {
            Format::Yaml => {
                let de = serde_yaml::Deserializer::from_str(self.text);
                let de = serde_ignored::Deserializer::new(de, &mut on_ignored);
                serde_path_to_error::deserialize::<_, T>(de)
                    .map_err(|e| self.yaml_type_error(e))?;
            }
            Format::Json => {
                let mut de = serde_json::Deserializer::from_str(self.text);
                let de = serde_ignored::Deserializer::new(&mut de, &mut on_ignored);
                serde_path_to_error::deserialize::<_, T>(de)
                    .map_err(|e| self.json_type_error(e))?;
            }
        }
        Ok(unknown)
    }

    /// The location of `path`, or of its nearest ancestor in the text.
    pub fn locate(&self, path: &FieldPath) -> Option<Location> {
        locate_nearest(self.text, self.format, path)
    }

    /// A warning at `path`.
    pub fn warning(
        &self,
        kind: WarningKind,
        path: FieldPath,
        message: impl Into<String>,
    ) -> ConfigWarning {
        self.warning_expecting(kind, path, message, None)
    }

    /// A warning at `path` that also says what would be accepted.
    pub fn warning_expecting(
        &self,
        kind: WarningKind,
        path: FieldPath,
        message: impl Into<String>,
        expected: Option<String>,
    ) -> ConfigWarning {
        ConfigWarning {
            kind,
            file: self.file.to_path_buf(),
            location: self.locate(&path),
            path,
            message: message.into(),
            expected,
        }
    }

    /// An error at `path` that fails the load.
    pub fn invalid(
        &self,
        path: FieldPath,
        message: impl Into<String>,
        expected: Option<String>,
    ) -> ConfigError {
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file.to_path_buf(),
            location: self.locate(&path),
            path,
            message: message.into(),
            expected,
        }))
    }

    fn yaml_syntax_error(&self, error: &serde_yaml::Error) -> ConfigError {
        let location = error.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        });
        let message = strip_first_position(&error.to_string(), location);
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file.to_path_buf(),
            location,
            path: FieldPath::root(),
            message: format!("invalid YAML: {message}"),
            expected: None,
        }))
    }

    fn json_syntax_error(&self, error: &serde_json::Error) -> ConfigError {
        ConfigError::InvalidJson {
            file: self.file.to_path_buf(),
            location: Location {
                line: error.line(),
                column: error.column(),
            },
            message: error.to_string(),
        }
    }

    fn not_an_object(&self, value: &serde_json::Value) -> ConfigError {
        let kind = match value {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "boolean",
            serde_json::Value::Number(_) => "number",
            serde_json::Value::String(_) => "string",
            serde_json::Value::Array(_) => "array",
            serde_json::Value::Object(_) => "object",
        };
        let start = self.text.lines().enumerate().find_map(|(i, line)| {
            let column = line.chars().position(|c| !c.is_whitespace())?;
            Some(Location {
                line: i + 1,
                column: column + 1,
            })
        });
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file.to_path_buf(),
            location: start,
            path: FieldPath::root(),
            message: format!("invalid type: {kind}, expected an object"),
            expected: None,
        }))
    }

    fn yaml_type_error(&self, error: serde_path_to_error::Error<serde_yaml::Error>) -> ConfigError {
        let path = FieldPath::from_path_to_error(error.path());
        let yaml_path = error.path().to_string();
        let inner = error.into_inner();
        let position = inner.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        });
        let mut message = strip_first_position(&inner.to_string(), position);
        if let Some(rest) = message.strip_prefix(&format!("{yaml_path}: ")) {
            message = rest.to_owned();
        }
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file.to_path_buf(),
            location: position.or_else(|| self.locate(&path)),
            path,
            message: humanize(&message),
            expected: None,
        }))
    }

    fn json_type_error(&self, error: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
        let path = FieldPath::from_path_to_error(error.path());
        let inner = error.into_inner();
        let position = (inner.line() != 0).then(|| Location {
            line: inner.line(),
            column: inner.column(),
        });
        let message = strip_first_position(&inner.to_string(), position);
        // serde_json stops after the offending value (or at the end of an object missing a
        // field); the key that holds it is where a reader looks.
        ConfigError::Invalid(Box::new(FieldError {
            file: self.file.to_path_buf(),
            location: self.locate(&path).or(position),
            path,
            message: humanize(&message),
            expected: None,
        }))
    }

    /// An error from the effective pass, which has a path but no position of its own.
    fn value_error(&self, path: &serde_path_to_error::Path, message: &str) -> ConfigError {
        let path = FieldPath::from_path_to_error(path);
        let message = humanize(message);
        self.invalid(path, message, None)
    }
}

/// Removes the parser's own ` at line L column C` (the location is shown in front instead).
fn strip_first_position(message: &str, location: Option<Location>) -> String {
    let Some(Location { line, column }) = location else {
        return message.to_owned();
    };
    let needle = format!(" at line {line} column {column}");
    match message.find(&needle) {
        Some(start) => format!("{}{}", &message[..start], &message[start + needle.len()..]),
        None => message.to_owned(),
    }
}
