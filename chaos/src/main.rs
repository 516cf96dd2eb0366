//! `antler-chaos`: the chaos suite's binary, which `antler chaos <suite flags>` becomes
//! (`antler chaos stop` stays the lead's). Parses the suite's flags and runs it.

use std::process::ExitCode;

use clap::Parser;

/// Chaos: a seeded schedule of faults (kill -9, SIGTERM, SIGSTOP of every process kind)
/// under concurrent runs against a local cluster of its own; prints a report and exits 1
/// when an invariant breaks. `antler chaos stop KIND NAME` stops one actor of a cluster
/// started with `antler up --chaos`, as if it had crashed.
#[derive(Debug, Parser)]
#[command(name = "antler-chaos", version)]
struct Cli {
    #[command(flatten)]
    suite: antler_chaos::ChaosArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_terminal_log();
    match antler_chaos::run(cli.suite) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("antler: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Warnings and errors on the terminal, unless `RUST_LOG` says otherwise, as every
/// `antler` command shows them (the cluster's own logs are in its directory).
fn init_terminal_log() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
