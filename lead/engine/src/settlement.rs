//! Delivery settlement (spec 8): the outputs directory is snapshotted when a run starts
//! and when it ends; the files created or modified in between are the produced outputs,
//! `present_files`' artifacts are the presented ones, and a presented path covers a
//! produced one when equal or a directory above it. A run that produced outputs and
//! presented none of them fails. `.tool-results` (the output budget's files) is excluded.

use std::collections::BTreeMap;
use std::path::Path;

use antler_protocol::messages::ThreadFileError;
use antler_protocol::thread_dir;
use serde::{Deserialize, Serialize};

use crate::catalog::builtins::PRESENT_FILES;
use crate::thread::files::ThreadFiles;

/// The run's error when outputs were produced and none was presented.
pub const DELIVERY_INCOMPLETE: &str =
    "Artifact delivery incomplete: no produced output artifact was presented";
/// The run's error when the receipt could not be written.
pub const RECEIPT_NOT_PERSISTED: &str =
    "Artifact delivery verification failed: terminal delivery receipt could not be persisted";

/// Regular, non-symlink files under `outputs` by virtual path: (size, modification ns).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputsSnapshot {
    pub files: BTreeMap<String, (u64, u128)>,
}

impl OutputsSnapshot {
    /// Walks `outputs` (a missing directory is empty) beneath a handle on it: the walk
    /// never enters a directory through a link, so a link planted or swapped in by
    /// sandboxed code lists nothing outside the thread.
    pub fn take(outputs: &Path) -> std::io::Result<OutputsSnapshot> {
        thread_dir::snapshot_outputs(outputs).map(|files| OutputsSnapshot { files })
    }

    /// The same walk, of the thread's outputs wherever they are (this disk or the
    /// sandbox-host replica that owns the thread).
    pub async fn take_through(files: &dyn ThreadFiles) -> Result<OutputsSnapshot, ThreadFileError> {
        files
            .snapshot_outputs()
            .await
            .map(|files| OutputsSnapshot { files })
    }

    /// Files of `after` that are new or changed since `self`, sorted.
    pub fn produced_since(&self, after: &OutputsSnapshot) -> Vec<String> {
        after
            .files
            .iter()
            .filter(|(path, meta)| self.files.get(*path) != Some(meta))
            .map(|(path, _)| path.clone())
            .collect()
    }
}

/// `verification` of a receipt whose run changed its outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub source: String,
    pub requirement: String,
}

/// The delivery receipt (`run.delivery`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReceipt {
    pub presented: usize,
    pub paths: Vec<String>,
    pub by_tool: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub produced_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub presented_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matched_paths: Vec<String>,
    /// `presented` (a produced output is covered), `mismatched` (files were presented
    /// but none covers a produced output), `not_started` (nothing presented); only when
    /// outputs were produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub satisfied: Option<bool>,
}

impl DeliveryReceipt {
    /// The receipt for a run that presented `artifacts` and produced `produced`.
    pub fn settle(artifacts: &[String], produced: &[String]) -> DeliveryReceipt {
        let mut receipt = DeliveryReceipt {
            presented: artifacts.len(),
            paths: artifacts.to_vec(),
            by_tool: BTreeMap::from([(PRESENT_FILES.to_owned(), artifacts.to_vec())]),
            verification: None,
            produced_paths: Vec::new(),
            presented_paths: Vec::new(),
            matched_paths: Vec::new(),
            stage: None,
            satisfied: None,
        };
        if produced.is_empty() {
            return receipt;
        }
        let matched: Vec<String> = produced
            .iter()
            .filter(|q| artifacts.iter().any(|p| covers(p, q)))
            .cloned()
            .collect();
        let stage = match (artifacts.is_empty(), matched.is_empty()) {
            (true, _) => "not_started",
            (false, true) => "mismatched",
            (false, false) => "presented",
        };
        receipt.verification = Some(Verification {
            source: "outputs_changed".to_owned(),
            requirement: "present_files_matches_produced_output".to_owned(),
        });
        receipt.satisfied = Some(!matched.is_empty());
        receipt.produced_paths = produced.to_vec();
        receipt.presented_paths = artifacts.to_vec();
        receipt.matched_paths = matched;
        receipt.stage = Some(stage.to_owned());
        receipt
    }

    /// The error a run that would succeed ends with, when delivery is incomplete.
    pub fn verdict(&self) -> Result<(), &'static str> {
        match self.satisfied {
            Some(false) => Err(DELIVERY_INCOMPLETE),
            _ => Ok(()),
        }
    }
}

/// A presented path covers a produced one when equal, or when it is a directory above it.
pub fn covers(presented: &str, produced: &str) -> bool {
    let presented = presented.trim_end_matches('/');
    produced == presented
        || produced
            .strip_prefix(presented)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn strings(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    #[test]
    fn a_presented_directory_covers_the_files_inside_it() {
        assert!(covers(
            "/mnt/user-data/outputs/reports",
            "/mnt/user-data/outputs/reports/a.md"
        ));
        assert!(covers(
            "/mnt/user-data/outputs/reports/",
            "/mnt/user-data/outputs/reports"
        ));
        assert!(!covers(
            "/mnt/user-data/outputs/rep",
            "/mnt/user-data/outputs/reports/a.md"
        ));
    }

    #[test]
    fn produced_files_are_new_or_changed_and_tool_results_are_excluded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kept.md"), "same").unwrap();
        std::fs::write(dir.path().join("changed.md"), "v1").unwrap();
        let before = OutputsSnapshot::take(dir.path()).unwrap();
        std::fs::write(dir.path().join("changed.md"), "version 2").unwrap();
        std::fs::create_dir_all(dir.path().join("charts")).unwrap();
        std::fs::write(dir.path().join("charts/a.png"), "png").unwrap();
        std::fs::create_dir_all(dir.path().join(".tool-results")).unwrap();
        std::fs::write(dir.path().join(".tool-results/bash-1.log"), "log").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).unwrap();
        let after = OutputsSnapshot::take(dir.path()).unwrap();
        assert_eq!(
            before.produced_since(&after),
            strings(&[
                "/mnt/user-data/outputs/changed.md",
                "/mnt/user-data/outputs/charts/a.png"
            ])
        );
        assert_eq!(
            OutputsSnapshot::take(&dir.path().join("none")).unwrap(),
            OutputsSnapshot::default()
        );
    }

    /// Swaps `a` and `b` (renameat2 RENAME_EXCHANGE) in a tight loop until `stop`.
    fn swapper(
        a: std::path::PathBuf,
        b: std::path::PathBuf,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        use std::os::unix::ffi::OsStrExt;
        std::thread::spawn(move || {
            let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
            let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: valid C strings; renameat2 only reads them.
                unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    );
                }
            }
        })
    }

    #[test]
    fn a_directory_swapped_for_a_link_while_the_scan_runs_lists_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("host-file.txt"), "host").unwrap();
        std::fs::create_dir(dir.path().join("swap")).unwrap();
        std::fs::write(dir.path().join("swap/in.md"), "a").unwrap();
        std::os::unix::fs::symlink(host.path(), dir.path().join("alt")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = swapper(
            dir.path().join("swap"),
            dir.path().join("alt"),
            stop.clone(),
        );
        for _ in 0..2_000 {
            let snapshot = OutputsSnapshot::take(dir.path()).unwrap();
            assert!(
                snapshot.files.keys().all(|k| !k.contains("host-file")),
                "{snapshot:?}"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn the_scan_never_enters_a_link_out_of_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("host-file.txt"), "host").unwrap();
        std::os::unix::fs::symlink(host.path(), dir.path().join("hostlink")).unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/a.md"), "a").unwrap();
        let snapshot = OutputsSnapshot::take(dir.path()).unwrap();
        let paths: Vec<&String> = snapshot.files.keys().collect();
        assert_eq!(paths, ["/mnt/user-data/outputs/real/a.md"]);
    }

    #[test]
    fn a_run_that_produced_but_presented_nothing_fails_with_deerflows_text() {
        let produced = strings(&["/mnt/user-data/outputs/report.md"]);
        let receipt = DeliveryReceipt::settle(&[], &produced);
        assert_eq!(receipt.stage.as_deref(), Some("not_started"));
        assert_eq!(
            receipt.verdict(),
            Err("Artifact delivery incomplete: no produced output artifact was presented")
        );
        let wrong =
            DeliveryReceipt::settle(&strings(&["/mnt/user-data/outputs/other.md"]), &produced);
        assert_eq!(wrong.stage.as_deref(), Some("mismatched"));
        assert!(wrong.verdict().is_err());
    }

    #[test]
    fn a_presented_output_settles_the_run() {
        let produced = strings(&["/mnt/user-data/outputs/reports/a.md"]);
        let artifacts = strings(&["/mnt/user-data/outputs/reports"]);
        let receipt = DeliveryReceipt::settle(&artifacts, &produced);
        assert_eq!(receipt.verdict(), Ok(()));
        let json = serde_json::to_value(&receipt).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "presented": 1,
                "paths": ["/mnt/user-data/outputs/reports"],
                "by_tool": {"present_files": ["/mnt/user-data/outputs/reports"]},
                "verification": {"source": "outputs_changed", "requirement": "present_files_matches_produced_output"},
                "produced_paths": ["/mnt/user-data/outputs/reports/a.md"],
                "presented_paths": ["/mnt/user-data/outputs/reports"],
                "matched_paths": ["/mnt/user-data/outputs/reports/a.md"],
                "stage": "presented",
                "satisfied": true
            })
        );
        let nothing = DeliveryReceipt::settle(&[], &[]);
        assert_eq!((nothing.verdict(), nothing.stage), (Ok(()), None));
    }
}
