//! `RecentCalls`: the calls this sandbox-host ran lately, by (sandbox, run, call id). A call
//! that comes again (a lead that resent it, a resumed lead, a reply lost in flight) is not
//! run a second time: it gets the first run's result, waiting for it while it runs. Bounded:
//! the oldest finished calls are forgotten first.

use std::collections::{HashMap, VecDeque};

use antler_protocol::messages::ToolResult;
use tokio::sync::oneshot;

/// What a repeat of a call that never finished gets (the first one was cut off: it may
/// have had its effects, so it is not run again).
pub const CALL_NOT_FINISHED: &str =
    "Error: this tool call was already issued to the sandbox and did not finish; it is not run again.";

/// Finished calls remembered.
pub const REMEMBERED_CALLS: usize = 4096;

/// One call's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub sandbox_id: String,
    pub run_id: String,
    pub call_id: String,
}

enum Record {
    Running(Vec<oneshot::Sender<ToolResult>>),
    Done(ToolResult),
}

/// What a call that arrives should do.
pub enum Begin {
    /// It is new: run it (and report with [`RecentCalls::end`]).
    Run,
    /// The same call is running: its result comes here.
    Wait(oneshot::Receiver<ToolResult>),
    /// The same call ran: this was its result.
    Done(ToolResult),
}

/// How a call that began ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Finished(ToolResult),
    /// It never reached the sandbox (no supervisor could be had): it may be sent again.
    NotRun,
    /// It was cut off while running.
    CutOff,
}

/// The recent calls of one host.
pub struct RecentCalls {
    calls: HashMap<CallKey, Record>,
    order: VecDeque<CallKey>,
    cap: usize,
}

impl Default for RecentCalls {
    fn default() -> Self {
        Self::with_capacity(REMEMBERED_CALLS)
    }
}

impl RecentCalls {
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            calls: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// A call arrives.
    pub fn begin(&mut self, key: CallKey) -> Begin {
        match self.calls.get_mut(&key) {
            Some(Record::Done(result)) => Begin::Done(result.clone()),
            Some(Record::Running(waiters)) => {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                Begin::Wait(rx)
            }
            None => {
                self.calls.insert(key.clone(), Record::Running(Vec::new()));
                self.order.push_back(key);
                self.forget_oldest();
                Begin::Run
            }
        }
    }

    /// A call that began ended.
    pub fn end(&mut self, key: &CallKey, ending: Ending) {
        let result = match ending {
            Ending::Finished(result) => result,
            Ending::CutOff => crate::tools::result(CALL_NOT_FINISHED.to_owned()),
            Ending::NotRun => {
                if let Some(Record::Running(waiters)) = self.calls.remove(key) {
                    let cut = crate::tools::result(CALL_NOT_FINISHED.to_owned());
                    for w in waiters {
                        let _ = w.send(cut.clone());
                    }
                }
                self.order.retain(|k| k != key);
                return;
            }
        };
        if let Some(record) = self.calls.get_mut(key) {
            if let Record::Running(waiters) =
                std::mem::replace(record, Record::Done(result.clone()))
            {
                for w in waiters {
                    let _ = w.send(result.clone());
                }
            }
        }
    }

    /// Past the cap, forgets the oldest finished calls (running ones stay).
    fn forget_oldest(&mut self) {
        let mut looked = 0;
        while self.calls.len() > self.cap && looked < self.order.len() {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            if matches!(self.calls.get(&key), Some(Record::Running(_))) {
                self.order.push_back(key);
                looked += 1;
            } else {
                self.calls.remove(&key);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(call: &str) -> CallKey {
        CallKey {
            sandbox_id: "s".into(),
            run_id: "r".into(),
            call_id: call.into(),
        }
    }

    fn text(t: &str) -> ToolResult {
        ToolResult {
            content: t.into(),
            is_error: false,
        }
    }

    #[test]
    fn a_repeated_call_gets_the_first_result_and_never_runs_again() {
        let mut recent = RecentCalls::default();
        assert!(matches!(recent.begin(key("c1")), Begin::Run));
        let Begin::Wait(mut waiting) = recent.begin(key("c1")) else {
            panic!("a repeat while running must wait");
        };
        assert!(waiting.try_recv().is_err());
        recent.end(&key("c1"), Ending::Finished(text("one line")));
        assert_eq!(waiting.try_recv().unwrap(), text("one line"));
        assert!(matches!(recent.begin(key("c1")), Begin::Done(r) if r == text("one line")));
        assert!(matches!(recent.begin(key("c2")), Begin::Run));
    }

    #[test]
    fn a_cut_off_call_is_not_run_again_but_one_never_run_may_be() {
        let mut recent = RecentCalls::default();
        assert!(matches!(recent.begin(key("c1")), Begin::Run));
        recent.end(&key("c1"), Ending::CutOff);
        match recent.begin(key("c1")) {
            Begin::Done(r) => {
                assert_eq!((r.content.as_str(), r.is_error), (CALL_NOT_FINISHED, true))
            }
            _ => panic!("a cut-off call must not run again"),
        }
        assert!(matches!(recent.begin(key("c2")), Begin::Run));
        recent.end(&key("c2"), Ending::NotRun);
        assert!(matches!(recent.begin(key("c2")), Begin::Run));
    }

    #[test]
    fn the_oldest_finished_calls_are_forgotten_first() {
        let mut recent = RecentCalls::with_capacity(2);
        assert!(matches!(recent.begin(key("running")), Begin::Run));
        for c in ["a", "b", "c"] {
            assert!(matches!(recent.begin(key(c)), Begin::Run));
            recent.end(&key(c), Ending::Finished(text(c)));
        }
        assert!(matches!(recent.begin(key("running")), Begin::Wait(_)));
        assert!(matches!(recent.begin(key("c")), Begin::Done(_)));
    }
}
