//! The files a run is prepared from, config.yaml and the extensions file, parsed when they
//! change rather than for every run. Whether a file changed is a cheap look at it (its
//! size, modification and change times, inode and device), made on the blocking pool
//! together with any parse, never on an actor's thread; an unchanged file is answered its
//! parsed document (or its error) from the cache. Config edits still apply to the next run.
//! An extensions file that does not load, or is gone after one did, gives way to the last
//! good one, with the run's warning.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use antler_protocol::config::{
    load_app_config, load_extensions_config, AppConfig, ExtensionsConfig,
};

use super::{PrepareError, RunEnv, EXTENSIONS_FALLBACK_WARNING};

/// Files whose documents are kept (a run may name its own config.yaml): beyond it the
/// cache starts again.
const MAX_FILES: usize = 32;

/// What identifies one version of a file: any write changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            inode: m.ino(),
            len: m.len(),
            modified: (m.mtime(), m.mtime_nsec()),
            changed: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// A file's parsed document as it stands now, or why it does not load.
pub(crate) type Document<T> = Result<Arc<T>, String>;

/// The parsed documents of one kind of file, by path and version.
struct Documents<T> {
    parse: fn(&Path) -> Result<T, String>,
    files: Mutex<HashMap<PathBuf, (Stamp, Document<T>)>>,
}

impl<T: Send + Sync + 'static> Documents<T> {
    fn new(parse: fn(&Path) -> Result<T, String>) -> Documents<T> {
        Documents {
            parse,
            files: Mutex::new(HashMap::new()),
        }
    }

    /// `path`'s document now (blocking: run it off the actors' threads). `None`: there is
    /// no file there (it cannot be looked at).
    fn now(&self, path: &Path) -> Option<Document<T>> {
        let stamp = Stamp::of(path)?;
        let files = || self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((kept, document)) = files().get(path) {
            if *kept == stamp {
                return Some(document.clone());
            }
        }
        let document = (self.parse)(path).map(Arc::new);
        let mut files = files();
        if files.len() >= MAX_FILES && !files.contains_key(path) {
            files.clear();
        }
        files.insert(path.to_path_buf(), (stamp, document.clone()));
        Some(document)
    }
}

/// config.yaml and the extensions file, each parsed once per version.
pub(crate) struct ConfigFiles {
    app: Arc<Documents<AppConfig>>,
    extensions: Arc<Documents<ExtensionsConfig>>,
}

impl Default for ConfigFiles {
    fn default() -> ConfigFiles {
        ConfigFiles {
            app: Arc::new(Documents::new(|path| {
                load_app_config(path)
                    .map(|loaded| loaded.value)
                    .map_err(|e| e.to_string())
            })),
            extensions: Arc::new(Documents::new(|path| {
                load_extensions_config(path)
                    .map(|loaded| loaded.value)
                    .map_err(|e| e.to_string())
            })),
        }
    }
}

impl ConfigFiles {
    /// The config.yaml at `path`; a file that is not there fails as a read of it does.
    pub(crate) async fn app_config(&self, path: &Path) -> Document<AppConfig> {
        let (documents, path) = (Arc::clone(&self.app), path.to_path_buf());
        let read = tokio::task::spawn_blocking(move || {
            documents
                .now(&path)
                .unwrap_or_else(|| (documents.parse)(&path).map(Arc::new))
        });
        read.await
            .unwrap_or_else(|e| Err(format!("config.yaml was not read: {e}")))
    }

    /// The extensions file at `path` (`None`: there is none).
    pub(crate) async fn extensions(&self, path: &Path) -> Option<Document<ExtensionsConfig>> {
        let (documents, path) = (Arc::clone(&self.extensions), path.to_path_buf());
        tokio::task::spawn_blocking(move || documents.now(&path))
            .await
            .unwrap_or_else(|e| Some(Err(format!("the extensions config was not read: {e}"))))
    }
}

impl RunEnv {
    /// Reads config.yaml (`override_path` for this run, else the cluster's).
    /// Parsed again only when the file changed (`config_files`).
    pub(crate) async fn load_config(
        &self,
        override_path: Option<&Path>,
    ) -> Result<Arc<AppConfig>, PrepareError> {
        match override_path.or(self.config_path.as_deref()) {
            Some(path) => self
                .files
                .app_config(path)
                .await
                .map_err(PrepareError::Config),
            None => Ok(Arc::new(AppConfig::default())),
        }
    }

    /// Reads the extensions file. One that does not load, or is gone after one did, gives
    /// way to the last good one (as mcp-host keeps its servers), with a warning; with none
    /// yet, the run fails.
    pub(super) async fn load_extensions(
        &self,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Arc<ExtensionsConfig>>, PrepareError> {
        let Some(loaded) = self.files.extensions(&self.extensions_path).await else {
            let last = self.feed().last_good_extensions.clone().flatten();
            if last.is_some() {
                tracing::warn!(path = %self.extensions_path.display(), "the extensions config is gone; runs use the last good one");
                warnings.push(EXTENSIONS_FALLBACK_WARNING.to_owned());
            }
            return Ok(last);
        };
        match loaded.map(Some) {
            Ok(extensions) => {
                self.feed().last_good_extensions = Some(extensions.clone());
                Ok(extensions)
            }
            Err(e) => {
                let Some(last) = self.feed().last_good_extensions.clone() else {
                    return Err(PrepareError::Config(e));
                };
                tracing::warn!("{e}; runs use the last good extensions config");
                warnings.push(EXTENSIONS_FALLBACK_WARNING.to_owned());
                Ok(last)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_is_parsed_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("extensions_config.json");
        let files = ConfigFiles::default();
        assert!(files.extensions(&path).await.is_none());
        std::fs::write(&path, r#"{"mcpServers": {}}"#).unwrap();
        let first = files.extensions(&path).await.unwrap().unwrap();
        let again = files.extensions(&path).await.unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged file is not parsed again"
        );
        std::fs::write(&path, "{ not json").unwrap();
        assert!(files.extensions(&path).await.unwrap().is_err());
        std::fs::write(&path, r#"{"mcpServers": {}}"#).unwrap();
        let fixed = files.extensions(&path).await.unwrap().unwrap();
        assert!(
            !Arc::ptr_eq(&first, &fixed),
            "a changed file is parsed again"
        );
    }
}
