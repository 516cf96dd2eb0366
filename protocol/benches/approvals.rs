//! Approval policy benchmark (issue 37): evaluating a `bash` call (a three-command pipeline,
//! analysed with brush-parser) and an MCP call against a policy of 200 rules (the shipped
//! defaults and 194 more: bash rules on 60 programs, path rules, MCP tool globs with argument
//! matchers, exact tools), beside the same calls against the empty policy, in the same run.
//! Criterion measures each case; then alternating rounds of the four cases (so drift on a
//! shared machine hits all alike) give per-call p50s and the time the policy adds.
//! Run: `cargo bench -p antler-protocol --bench approvals` (ANTLER_BENCH_ROUNDS to change the
//! rounds of the p50 summary).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use antler_protocol::approvals::{
    shell, ApprovalPolicy, ApprovalsConfig, ArgMatcher, CallFacts, CallSource, Decision, PolicyEnv,
    RuleConfig,
};
use criterion::Criterion;
use serde_json::{json, Value};

const PIPELINE: &str = "git log --oneline -n 50 | grep -i fix | head -n 5";

/// The defaults and generated rules, 200 in all.
fn policy_of_200() -> ApprovalPolicy {
    let env = PolicyEnv {
        writable_mounts: vec!["/mnt/host-data".to_owned()],
        ..PolicyEnv::default()
    };
    let config = ApprovalsConfig::default();
    let defaults = ApprovalPolicy::from_config(&config, &env).unwrap();
    let shipped = antler_protocol::approvals::default_rules(&env).len();
    let mut rules = Vec::new();
    // Bash rules on 60 programs, two prefixes each, a third with flags and paths outside.
    for p in 0..60 {
        let program = format!("tool{p}");
        rules.push(RuleConfig {
            command: Some(vec![program.clone(), "deploy".into()]),
            ..RuleConfig::new(format!("{program}-deploy"), Decision::Ask)
        });
        rules.push(RuleConfig {
            command: Some(vec![program.clone(), "delete".into()]),
            flags: Some(vec!["--force".into(), "-f".into()]),
            ..RuleConfig::new(format!("{program}-delete"), Decision::Deny)
        });
    }
    // Rules on the pipeline's own programs, which match nothing in it.
    for (i, prefix) in [
        vec!["git", "reset", "--hard"],
        vec!["git", "clean"],
        vec!["git", "branch", "-D"],
        vec!["grep", "-r"],
        vec!["head", "-c"],
        vec!["git", "rebase"],
    ]
    .into_iter()
    .enumerate()
    {
        rules.push(RuleConfig {
            command: Some(prefix.into_iter().map(String::from).collect()),
            ..RuleConfig::new(format!("pipeline-{i}"), Decision::Ask)
        });
    }
    // Path rules for every command and file tool.
    for i in 0..10 {
        rules.push(RuleConfig {
            paths: Some(vec![format!("**/secret{i}/**"), format!("/etc/app{i}/*")]),
            ..RuleConfig::new(format!("paths-{i}"), Decision::Ask)
        });
    }
    // MCP tools: a glob and a source per server, with argument matchers.
    for s in 0..40 {
        rules.push(RuleConfig {
            tool: Some(format!("mcp_srv{s}_*")),
            source: Some(format!("mcp:srv{s}")),
            args: Some(vec![ArgMatcher {
                pointer: "/target".into(),
                equals: None,
                glob: Some("prod-*".into()),
                regex: None,
                present: None,
            }]),
            ..RuleConfig::new(format!("mcp-{s}"), Decision::Ask)
        });
    }
    rules.push(RuleConfig {
        tool: Some("mcp_github_*".into()),
        args: Some(vec![ArgMatcher {
            pointer: "/repo".into(),
            equals: None,
            glob: None,
            regex: Some("^(infra|secrets)$".into()),
            present: None,
        }]),
        ..RuleConfig::new("github-infra", Decision::Ask)
    });
    rules.push(RuleConfig {
        tool: Some("mcp_github_delete_*".into()),
        ..RuleConfig::new("github-delete", Decision::Deny)
    });
    // Exact tools with argument matchers.
    while rules.len() + shipped < 200 {
        let i = rules.len();
        rules.push(RuleConfig {
            tool: Some(format!("tool_{i}")),
            args: Some(vec![ArgMatcher {
                pointer: "/mode".into(),
                equals: Some(json!("dangerous")),
                glob: None,
                regex: None,
                present: None,
            }]),
            ..RuleConfig::new(format!("exact-{i}"), Decision::Ask)
        });
    }
    let extra = ApprovalPolicy::layer(&rules, "bench", &env).unwrap();
    let policy = defaults.with(&extra);
    assert_eq!(rules.len() + shipped, 200);
    policy
}

struct Case {
    name: &'static str,
    policy: ApprovalPolicy,
    tool: &'static str,
    source: CallSource<'static>,
    args: Value,
}

impl Case {
    fn run(&self) -> Decision {
        self.policy
            .evaluate(&CallFacts {
                tool: self.tool,
                source: self.source,
                args: &self.args,
            })
            .decision
    }
}

fn cases() -> Vec<Case> {
    let full = policy_of_200();
    let empty = ApprovalPolicy::default();
    let bash = json!({ "description": "recent fixes", "command": PIPELINE });
    let mcp = json!({
        "owner": "acme", "repo": "web", "title": "Broken link on the pricing page",
        "body": "The link to /enterprise returns 404.", "labels": ["bug"],
    });
    let github = CallSource::Mcp { server: "github" };
    vec![
        Case {
            name: "bash, 200 rules",
            policy: full.clone(),
            tool: "bash",
            source: CallSource::Sandbox,
            args: bash.clone(),
        },
        Case {
            name: "bash, empty policy",
            policy: empty.clone(),
            tool: "bash",
            source: CallSource::Sandbox,
            args: bash,
        },
        Case {
            name: "mcp, 200 rules",
            policy: full,
            tool: "mcp_github_create_issue",
            source: github,
            args: mcp.clone(),
        },
        Case {
            name: "mcp, empty policy",
            policy: empty,
            tool: "mcp_github_create_issue",
            source: github,
            args: mcp,
        },
    ]
}

/// Per-call p50 of each case, from alternating rounds of batches.
fn p50_summary(cases: &[Case]) {
    const BATCH: u32 = 64;
    let rounds: usize = std::env::var("ANTLER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for (case, out) in cases.iter().zip(&mut samples) {
            let start = Instant::now();
            for _ in 0..BATCH {
                black_box(case.run());
            }
            out.push(start.elapsed() / BATCH);
        }
    }
    let p50 = |s: &mut Vec<Duration>| {
        s.sort_unstable();
        s[s.len() / 2]
    };
    let p50s: Vec<Duration> = samples.iter_mut().map(p50).collect();
    println!("\np50 per call ({rounds} alternating rounds of {BATCH} calls):");
    for (case, p) in cases.iter().zip(&p50s) {
        println!("  {:<22} {:>9.3} µs", case.name, p.as_secs_f64() * 1e6);
    }
    for (i, kind) in [(0, "bash"), (2, "mcp")] {
        let added = p50s[i].as_secs_f64() - p50s[i + 1].as_secs_f64();
        println!(
            "  added by 200 rules, {kind}: {:>6.2} µs (target ≤ 20 µs)",
            added * 1e6
        );
    }
}

fn main() {
    let cases = cases();
    assert_eq!(cases[0].run(), Decision::Allow);
    assert_eq!(cases[2].run(), Decision::Allow);
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut group = criterion.benchmark_group("approvals");
    for case in &cases {
        group.bench_function(case.name, |b| b.iter(|| black_box(case.run())));
    }
    group.bench_function("analyse the pipeline alone", |b| {
        b.iter(|| black_box(shell::analyse(black_box(PIPELINE))))
    });
    group.finish();
    criterion.final_summary();
    p50_summary(&cases);
}
