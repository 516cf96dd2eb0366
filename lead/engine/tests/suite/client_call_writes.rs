//! A client's call (Antler's MCP server) is answered while its writes land: through the
//! real run loop, with a journal whose writes wait for the test's word (a stand-in for a
//! store under load, or one that fails a write, which a real SQLite file does not do on
//! demand: `GatedJournalStandIn`), the call's answer comes while its turn and result are
//! still being written, in order; the session's next call waits for them before it runs;
//! a write that failed fails that next call with the store's message; the session's end
//! waits for them too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{
    catalog::{builtins, Catalog},
    DeliveryReceipt, Journal, JournalError, JournalResult, NoJournal, OutputsSnapshot, RunLoop,
    RunRecord, RunStatus, ScriptedModel, ThreadState, ToolCall,
};
use futures::future::BoxFuture;
use tokio::sync::watch;

use super::run_model_mistakes::{local_context, NoHosts};

/// Records each step written as it is started; a step's write lands once the gate is open
/// (whether or not its answer is awaited), and fails when the step is in `fail`.
#[derive(Clone)]
struct GatedJournalStandIn(Arc<Gated>);

struct Gated {
    started: Mutex<Vec<i64>>,
    landed: Mutex<Vec<i64>>,
    fail: Mutex<HashSet<i64>>,
    gate: watch::Sender<bool>,
}

const FAILED_WRITE: &str = "disk I/O error (the stand-in's failed write)";

impl std::ops::Deref for GatedJournalStandIn {
    type Target = Gated;

    fn deref(&self) -> &Gated {
        &self.0
    }
}

impl GatedJournalStandIn {
    fn new() -> GatedJournalStandIn {
        GatedJournalStandIn(Arc::new(Gated {
            started: Mutex::default(),
            landed: Mutex::default(),
            fail: Mutex::default(),
            gate: watch::channel(true).0,
        }))
    }

    fn started(&self) -> Vec<i64> {
        self.started.lock().unwrap().clone()
    }

    fn landed(&self) -> Vec<i64> {
        self.landed.lock().unwrap().clone()
    }
}

impl Journal for GatedJournalStandIn {
    fn create_run(
        &self,
        record: &RunRecord,
        state: &ThreadState,
    ) -> BoxFuture<'static, JournalResult<()>> {
        NoJournal.create_run(record, state)
    }

    fn save(&self, _: &str, step: i64, _: &ThreadState) -> BoxFuture<'static, JournalResult<()>> {
        self.started.lock().unwrap().push(step);
        let fails = self.fail.lock().unwrap().contains(&step);
        let mut gate = self.gate.subscribe();
        let me = self.clone();
        // The write goes on whether or not its answer is awaited, as a store's does.
        let write = tokio::spawn(async move {
            gate.wait_for(|open| *open).await.unwrap();
            me.landed.lock().unwrap().push(step);
        });
        Box::pin(async move {
            write.await.unwrap();
            if fails {
                Err(JournalError::new(FAILED_WRITE))
            } else {
                Ok(())
            }
        })
    }

    // The rest as the journal that keeps nothing does.
    fn latest(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, JournalResult<Option<(i64, ThreadState)>>> {
        NoJournal.latest(run_id)
    }

    fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        detail: Option<String>,
    ) -> BoxFuture<'static, JournalResult<()>> {
        NoJournal.set_status(run_id, status, detail)
    }

    fn save_outputs_snapshot(
        &self,
        run_id: &str,
        snapshot: OutputsSnapshot,
    ) -> BoxFuture<'static, JournalResult<()>> {
        NoJournal.save_outputs_snapshot(run_id, snapshot)
    }

    fn outputs_snapshot(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, JournalResult<Option<OutputsSnapshot>>> {
        NoJournal.outputs_snapshot(run_id)
    }

    fn put_receipt_if_absent(
        &self,
        run_id: &str,
        receipt: DeliveryReceipt,
    ) -> BoxFuture<'static, JournalResult<bool>> {
        NoJournal.put_receipt_if_absent(run_id, receipt)
    }

    fn receipt(&self, run_id: &str) -> BoxFuture<'static, JournalResult<Option<DeliveryReceipt>>> {
        NoJournal.receipt(run_id)
    }
}

async fn session(dir: &std::path::Path, journal: GatedJournalStandIn) -> RunLoop {
    let catalog = Arc::new(Catalog::build(vec![builtins::list_uploaded_files()], false).unwrap());
    let context = local_context(dir, "session-1");
    let model = Arc::new(ScriptedModel::from_yaml("turns: [{content: unused}]", "unused").unwrap());
    RunLoop::builder(context, model, catalog, Arc::new(NoHosts))
        .journal(Arc::new(journal))
        .start_for_client(ThreadState::default(), "(a client's session)")
        .await
        .unwrap()
}

fn list(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: builtins::list_uploaded_files().name,
        args: serde_json::json!({}),
    }
}

#[tokio::test]
async fn a_clients_call_is_answered_while_its_writes_land_and_the_next_call_waits_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let journal = GatedJournalStandIn::new();
    let mut run = session(dir.path(), journal.clone()).await;
    journal.gate.send_replace(false);

    // Answered with its result while neither of its writes (its turn, its result) landed.
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        run.call_from_client(list("c1"), std::future::pending::<()>()),
    )
    .await
    .expect("the call is answered before its writes land")
    .unwrap();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(journal.started(), vec![1, 2]);
    assert!(journal.landed().is_empty());

    // The next call waits for them: nothing of it is written while they have not landed.
    {
        let next = run.call_from_client(list("c2"), std::future::pending::<()>());
        futures::pin_mut!(next);
        let waited = tokio::time::timeout(Duration::from_millis(200), next.as_mut()).await;
        assert!(
            waited.is_err(),
            "the next call ran before the last one's writes landed"
        );
        assert_eq!(journal.started(), vec![1, 2]);
        journal.gate.send_replace(true);
        next.await.unwrap();
    }
    assert_eq!(journal.started(), vec![1, 2, 3, 4]);

    // A write that fails: the call it belongs to was answered; the next call fails with
    // the store's message and runs nothing.
    journal.fail.lock().unwrap().insert(6);
    run.call_from_client(list("c3"), std::future::pending::<()>())
        .await
        .unwrap();
    let refused = run
        .call_from_client(list("c4"), std::future::pending::<()>())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains(FAILED_WRITE), "{refused}");
    assert_eq!(journal.started(), vec![1, 2, 3, 4, 5, 6]);

    // The session's end waits for the last call's writes.
    journal.gate.send_replace(false);
    run.call_from_client(list("c5"), std::future::pending::<()>())
        .await
        .unwrap();
    let ending = run.end_client_session();
    futures::pin_mut!(ending);
    let waited = tokio::time::timeout(Duration::from_millis(200), ending.as_mut()).await;
    assert!(
        waited.is_err(),
        "the session ended before its last writes landed"
    );
    journal.gate.send_replace(true);
    ending.await;
    let mut landed = journal.landed();
    landed.sort();
    assert_eq!(landed, journal.started());
}
