//! [`CheckpointStore`] as the engine's [`Journal`] for the lead's runs: each write is a
//! request to the store's own thread (`thread`), queued with the `RunManager`'s in the
//! order they were made; the run loop awaits each, so a run's writes land in its order and
//! before its drive ends. A write the storage fails is tried again for up to
//! [`STORAGE_RETRY_WINDOW`] (the pauses are on the caller's task, not the store's thread),
//! so a volume read-only or full for a while delays a run, it does not fail it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{CheckpointError, CheckpointStore, RunRecord, RunStatus, STORAGE_RETRY_WINDOW};
use antler_engine::ThreadState;
use antler_engine::{DeliveryReceipt, OutputsSnapshot};
use antler_engine::{Journal, JournalError, JournalResult};

impl From<CheckpointError> for JournalError {
    fn from(error: CheckpointError) -> JournalError {
        JournalError {
            busy: error.is_busy(),
            message: error.to_string(),
        }
    }
}

impl CheckpointStore {
    /// Sends `write` to the store's thread now (so it lands after every request made
    /// before it, and before every one made after); the future is its answer. A write the
    /// storage fails is tried again for up to [`STORAGE_RETRY_WINDOW`] (logged once): a
    /// volume read-only or full for a while delays a run, it does not fail it.
    fn on_store_thread<T: Send + 'static>(
        &self,
        write: impl Fn(&CheckpointStore) -> Result<T, CheckpointError> + Send + Sync + 'static,
    ) -> BoxFuture<'static, JournalResult<T>> {
        let store = self.clone();
        let attempt = {
            let (store, write) = (self.clone(), Arc::new(write));
            move || {
                let w = Arc::clone(&write);
                store.call(move |s| w(s))
            }
        };
        let first = attempt();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let mut pause = Duration::from_millis(50);
            let mut warned = false;
            let mut answer = first;
            loop {
                match answer.await {
                    Err(CheckpointError::ThreadGone) => {
                        return Err(JournalError::new(
                            "checkpoint write did not finish: the store's thread is gone",
                        ))
                    }
                    Err(e) if e.is_storage() && started.elapsed() < STORAGE_RETRY_WINDOW => {
                        if e.is_read_only() {
                            let _ = store.call(|s| Ok(s.reopen_if_read_only())).await;
                        }
                        if !warned {
                            tracing::warn!(
                                "runs database cannot be written ({e}); trying again for up to {} s",
                                STORAGE_RETRY_WINDOW.as_secs()
                            );
                            warned = true;
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(2));
                        answer = attempt();
                    }
                    Err(e) => return Err(JournalError::from(e)),
                    Ok(value) => {
                        if warned {
                            tracing::info!(
                                "runs database written again after {} ms",
                                started.elapsed().as_millis()
                            );
                        }
                        return Ok(value);
                    }
                }
            }
        })
    }
}

impl Journal for CheckpointStore {
    fn create_run(
        &self,
        record: &RunRecord,
        state: &ThreadState,
    ) -> BoxFuture<'static, JournalResult<()>> {
        let record = record.clone();
        let encoded = serde_json::to_string(state);
        let encoded = match encoded {
            Ok(e) => e,
            Err(e) => {
                return Box::pin(async move { Err(JournalError::from(CheckpointError::from(e))) })
            }
        };
        self.on_store_thread(move |store| store.create_run_encoded(&record, &encoded))
    }

    fn save(
        &self,
        run_id: &str,
        step: i64,
        state: &ThreadState,
    ) -> BoxFuture<'static, JournalResult<()>> {
        let run_id = run_id.to_owned();
        let encoded = serde_json::to_string(state);
        let encoded = match encoded {
            Ok(e) => e,
            Err(e) => {
                return Box::pin(async move { Err(JournalError::from(CheckpointError::from(e))) })
            }
        };
        self.on_store_thread(move |store| store.save_encoded(&run_id, step, &encoded).map(|_| ()))
    }

    fn latest(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, JournalResult<Option<(i64, ThreadState)>>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.latest(&run_id))
    }

    fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        detail: Option<String>,
    ) -> BoxFuture<'static, JournalResult<()>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.set_status(&run_id, status, detail.as_deref()))
    }

    fn save_outputs_snapshot(
        &self,
        run_id: &str,
        snapshot: OutputsSnapshot,
    ) -> BoxFuture<'static, JournalResult<()>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.save_outputs_snapshot(&run_id, &snapshot))
    }

    fn outputs_snapshot(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, JournalResult<Option<OutputsSnapshot>>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.outputs_snapshot(&run_id))
    }

    fn put_receipt_if_absent(
        &self,
        run_id: &str,
        receipt: DeliveryReceipt,
    ) -> BoxFuture<'static, JournalResult<bool>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.put_receipt_if_absent(&run_id, &receipt))
    }

    fn receipt(&self, run_id: &str) -> BoxFuture<'static, JournalResult<Option<DeliveryReceipt>>> {
        let run_id = run_id.to_owned();
        self.on_store_thread(move |store| store.receipt(&run_id))
    }
}
