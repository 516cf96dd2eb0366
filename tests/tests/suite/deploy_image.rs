//! `deploy/build-image.sh` builds Antler's image offline, from scratch (buildah, and
//! mmdebstrap from deb.debian.org), and podman runs it as a user would: the image answers
//! `antler --help` as uid 10001, every binary starts in it, bubblewrap makes a sandbox
//! inside a container once `/proc` is unmasked (and fails with the masked one, as
//! deploy/README.md says), and the bundled example (`examples/report`) runs end to end in
//! a container and delivers its report to a mounted directory. Everything goes to a
//! private container storage under a temporary directory, removed at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use antler_tests::{bin_dir, output_text, wait_for};
use serde_json::{json, Value};

const IMAGE: &str = "localhost/antler:0.1.0";
/// The test's packages: what the four binaries and the example need (bubblewrap, tini,
/// ca-certificates; the apt variant brings libstdc++ for the test peers' node). The
/// default set adds python3 and nodejs/npm for stdio MCP servers and takes twice as long.
const PACKAGES: &str = "bubblewrap ca-certificates tini";
/// The one bubblewrap sandbox sandbox-host makes, reduced: as root in the container it
/// starts bubblewrap as nobody with every namespace new and a fresh /proc.
const BWRAP_AS_NOBODY: &str = "setpriv --reuid 65534 --regid 65534 --clear-groups \
    bwrap --unshare-all --proc /proc --dev /dev --tmpfs /tmp --ro-bind /usr /usr \
    --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin \
    -- /usr/bin/true";
/// What bubblewrap needs of a container: the /proc that container runtimes mask, unmasked.
const UNMASK_PROC: &[&str] = &["--security-opt", "unmask=/proc/*"];

/// The extensions config of both runs: the test peers' everything server, mounted in the
/// image at /opt/node_modules.
const EVERYTHING_EXTENSIONS: &str = r#"{"mcpServers": {"everything": {"type": "stdio", "command": "mcp-server-everything", "args": ["stdio"]}}}"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A private container storage (images, containers, podman's state) under a temporary
/// directory, so the test neither sees nor touches the machine's images. Dropping it
/// removes every container and image in it, unmounts what is left and deletes the
/// directory, also when an assertion failed.
struct Storage {
    dir: tempfile::TempDir,
}

impl Storage {
    fn new() -> Storage {
        let dir = tempfile::Builder::new()
            .prefix("antler-image")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("storage.conf"),
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{d}/graph\"\nrunroot = \"{d}/run\"\n"
            ),
        )
        .unwrap();
        // runc: crun refuses hosts whose cgroups are in hybrid mode. Podman's default
        // ulimits (1048576 open files) exceed the hard limits of a process without
        // CAP_SYS_RESOURCE, so containers get this process's own, and at most the 32768
        // processes podman lowers its own limit to (a pod's infra container inherits it).
        let (nofile, nproc) = hard_limits();
        let nproc = nproc.min(32768);
        std::fs::write(
            dir.path().join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
                 [engine]\nruntime = \"runc\"\nevents_logger = \"none\"\ntmp_dir = \"{d}/tmp\"\n"
            ),
        )
        .unwrap();
        Storage { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("CONTAINERS_STORAGE_CONF", self.path().join("storage.conf"))
            .env("CONTAINERS_CONF", self.path().join("containers.conf"));
        c
    }

    /// `podman` with `args`.
    fn podman(&self, args: &[&str]) -> Output {
        self.command("podman")
            .args(args)
            .output()
            .expect("run podman")
    }

    /// `podman run --rm --network none` with `args`, then the image and `cmd`.
    fn run(&self, args: &[&str], cmd: &[&str]) -> Output {
        self.command("podman")
            .args(["run", "--rm", "--network", "none"])
            .args(args)
            .arg(IMAGE)
            .args(cmd)
            .output()
            .expect("run podman")
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        for args in [
            &["rm", "--all", "--force", "--time", "0"][..],
            &["rmi", "--all", "--force"][..],
        ] {
            let _ = self.command("podman").args(args).output();
        }
        let _ = self.command("buildah").args(["rm", "--all"]).output();
        // The overlay driver keeps its directory mounted (private) after the last layer.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| Path::new(m).starts_with(self.path()))
            .collect();
        under.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in under {
            let c = std::ffi::CString::new(m).unwrap();
            // SAFETY: a NUL-terminated path; MNT_DETACH only unmounts.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// This process's hard limits of open files and processes.
fn hard_limits() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard = |name: &str| -> u64 {
        let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
        let value = line[name.len()..].split_whitespace().nth(1).unwrap();
        value.parse().unwrap_or(1 << 20)
    };
    (hard("Max open files"), hard("Max processes"))
}

#[test]
fn the_offline_image_runs_the_binaries_bubblewrap_and_the_example_under_podman() {
    let storage = Storage::new();
    let archive = storage.path().join("antler.oci.tar");

    let build = storage
        .command(&repo().join("deploy/build-image.sh").display().to_string())
        .args(["--packages", PACKAGES, "--output"])
        .arg(format!("oci-archive:{}", archive.display()))
        .env("ANTLER_BIN_DIR", bin_dir())
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "build-image.sh failed: {}",
        output_text(&build)
    );
    assert!(
        String::from_utf8_lossy(&build.stderr).contains("built antler:0.1.0"),
        "{}",
        output_text(&build)
    );
    let listing = Command::new("tar")
        .arg("tf")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&listing.stdout)
            .lines()
            .any(|l| l == "index.json"),
        "the OCI archive has no index.json: {}",
        output_text(&listing)
    );
    // The working containers are gone; the base and the image stay.
    let containers = storage
        .command("buildah")
        .args(["containers", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&containers.stdout),
        "",
        "{}",
        output_text(&containers)
    );

    // The image's default: `antler --help`, under tini, as uid 10001.
    let help = storage.run(&[], &[]);
    assert!(help.status.success(), "{}", output_text(&help));
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("Usage: antler"),
        "{}",
        output_text(&help)
    );
    let whoami = storage.run(&[], &["sh", "-c", "id -u; id -g; echo $HOME; pwd; test -s /etc/ssl/certs/ca-certificates.crt && echo certificates"]);
    assert_eq!(
        String::from_utf8_lossy(&whoami.stdout),
        "10001\n10001\n/home/antler\n/home/antler\ncertificates\n",
        "{}",
        output_text(&whoami)
    );
    for binary in [
        "antler",
        "antler-mcp-host",
        "antler-sandbox-host",
        "antler-subagent",
    ] {
        let version = storage.run(&[], &[binary, "--version"]);
        assert!(
            version.status.success(),
            "{binary}: {}",
            output_text(&version)
        );
        assert!(
            String::from_utf8_lossy(&version.stdout).starts_with(&format!("{binary} ")),
            "{binary}: {}",
            output_text(&version)
        );
    }

    // Bubblewrap, as sandbox-host starts it: refused under the runtime's masked /proc,
    // working once it is unmasked (deploy/README.md, "What bubblewrap needs in a pod").
    let masked = storage.run(&["--user", "0"], &["sh", "-c", BWRAP_AS_NOBODY]);
    assert!(!masked.status.success(), "{}", output_text(&masked));
    assert!(
        String::from_utf8_lossy(&masked.stderr)
            .contains("Can't mount proc on /newroot/proc: Operation not permitted"),
        "{}",
        output_text(&masked)
    );
    let unmasked = storage.run(
        &[
            UNMASK_PROC,
            &[
                "--user",
                "0",
                "--cap-drop",
                "all",
                "--cap-add",
                "SETUID,SETGID",
            ],
        ]
        .concat(),
        &["sh", "-c", BWRAP_AS_NOBODY],
    );
    assert!(unmasked.status.success(), "{}", output_text(&unmasked));

    // The bundled example, in the container as its default user: the run starts mcp-host
    // (with the test peers' everything server, mounted) and sandbox-host (bubblewrap) in
    // the container, and the report lands in the mounted directory.
    let work = storage.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&work, Some(10001), Some(10001)).unwrap();
    std::fs::write(work.join("extensions_config.json"), EVERYTHING_EXTENSIONS).unwrap();
    let node_modules = repo().join("tests/node_modules");
    assert!(
        node_modules.join(".bin/mcp-server-everything").exists(),
        "install the npm test peers with `cd tests && npm ci` (scripts/test.sh does this)"
    );
    let mount = |from: &Path, to: &str| format!("{}:{to}:ro", from.display());
    let run = storage.run(
        &[
            UNMASK_PROC,
            &[
                "--volume",
                &mount(&repo().join("examples/report"), "/example"),
                "--volume",
                &mount(&node_modules, "/opt/node_modules"),
                "--volume",
                &format!("{}:/work", work.display()),
                "--env",
                "PATH=/opt/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
                "--env",
                "ANTLER_EXTENSIONS_CONFIG_PATH=/work/extensions_config.json",
                "--env",
                "ANTLER_SANDBOX_BASE_DIR=/work/base",
                "--env",
                "ANTLER_GATEWAY_ADDR=off",
                "--env",
                "RUST_LOG=error",
                "--workdir",
                "/work",
            ],
        ]
        .concat(),
        &[
            "antler",
            "--runtime-dir",
            "/work/run",
            "run",
            "Write a short report",
            "--playbook",
            "/example/playbook.yaml",
            "--config",
            "/example/config.yaml",
            "--user",
            "alice",
            "--thread",
            "t1",
            "--json",
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let out: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}", output_text(&run)));
    assert!(run.status.success(), "{}", output_text(&run));
    assert_eq!(out["status"], "success", "{}", output_text(&run));
    assert_eq!(out["delivery"]["stage"], "presented", "{out}");
    assert_eq!(
        out["delivery"]["matched_paths"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    let report = work.join("base/users/alice/threads/t1/user-data/outputs/report.md");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "# Report\n\nThe everything server's echo tool answered.\n"
    );
    let left = storage.podman(&["ps", "--all", "--quiet"]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout),
        "",
        "{}",
        output_text(&left)
    );

    the_image_runs_a_cluster_in_a_pod(&storage, &node_modules);
}

/// The cluster of deploy/base in one podman pod (the containers share its loopback, as a
/// pod's do): `antler cluster init` in the image makes the certificates, mcp-host,
/// sandbox-host (root, /proc unmasked) and a worker run as the manifests run them, the
/// lead (`antler up`) reaches all three, the bundled example runs through it and delivers
/// its report into sandbox-host's mounted thread directories, and `podman pod stop`
/// (SIGTERM through tini) ends every process with status 0.
fn the_image_runs_a_cluster_in_a_pod(storage: &Storage, node_modules: &Path) {
    let secret = storage.path().join("secret");
    let pod = storage.path().join("pod");
    let threads = storage.path().join("threads");
    for dir in [&secret, &pod, &threads] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for dir in [&secret, &pod] {
        std::os::unix::fs::chown(dir, Some(10001), Some(10001)).unwrap();
    }
    let secret_volume = format!("{}:/secret:ro", secret.display());
    let init = storage.run(
        &["--volume", &format!("{}:/secret", secret.display())],
        &["antler", "cluster", "init", "/secret"],
    );
    assert!(init.status.success(), "{}", output_text(&init));
    let example = std::fs::read_to_string(repo().join("examples/report/config.yaml")).unwrap();
    std::fs::write(
        pod.join("config.yaml"),
        format!(
            "{example}antler:\n  tls: {{ca: /secret/ca.crt, cert: /secret/lead.crt, key: /secret/lead.key}}\n  \
             cluster:\n    sandbox_hosts: [\"tcp:127.0.0.1:7103\"]\n    \
             mcp_hosts: [\"tcp:127.0.0.1:7102\"]\n    workers: [\"tcp:127.0.0.1:7104\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(pod.join("extensions_config.json"), EVERYTHING_EXTENSIONS).unwrap();
    let token = std::fs::read_to_string(secret.join("token")).unwrap();

    let created = storage.podman(&["pod", "create", "--name", "antler", "--network", "none"]);
    assert!(created.status.success(), "{}", output_text(&created));
    let host = |role: &str, port: u16| -> Vec<String> {
        [
            format!("--listen=tcp:127.0.0.1:{port}"),
            format!("--node-id={role}-0"),
            "--token-file=/secret/token".into(),
            "--tls-ca=/secret/ca.crt".into(),
            format!("--tls-cert=/secret/{role}.crt"),
            format!("--tls-key=/secret/{role}.key"),
        ]
        .into()
    };
    let pod_volume = format!("{}:/pod:ro", pod.display());
    let node_volume = format!("{}:/opt/node_modules:ro", node_modules.display());
    let example_volume = format!("{}:/example:ro", repo().join("examples/report").display());
    let state_volume = format!("{}:/var/lib/antler", pod.display());
    let threads_volume = format!("{}:/var/lib/antler/threads", threads.display());
    let configs = [
        "--config=/pod/config.yaml",
        "--extensions=/pod/extensions_config.json",
    ];
    let containers: [(&str, Vec<&str>, Vec<String>); 4] = [
        (
            "mcp-host",
            vec![
                "--volume",
                &node_volume,
                "--env",
                "PATH=/opt/node_modules/.bin:/usr/local/bin:/usr/bin:/bin",
            ],
            [vec!["antler-mcp-host".to_string()], host("mcp-host", 7102)].concat(),
        ),
        (
            "sandbox-host",
            [UNMASK_PROC, &["--user", "0", "--volume", &threads_volume]].concat(),
            [
                vec!["antler-sandbox-host".to_string()],
                host("sandbox-host", 7103),
                vec!["--base-dir=/var/lib/antler/threads".into()],
            ]
            .concat(),
        ),
        (
            "subagent",
            vec![],
            [vec!["antler-subagent".to_string()], host("subagent", 7104)].concat(),
        ),
        (
            "lead",
            vec![
                "--volume",
                &example_volume,
                "--volume",
                &state_volume,
                "--env",
                "ANTLER_GATEWAY_ADDR=off",
            ],
            [
                "antler",
                "--runtime-dir",
                "/var/lib/antler/run",
                "up",
                "--config",
                "/pod/config.yaml",
            ]
            .map(String::from)
            .into(),
        ),
    ];
    for (name, options, command) in &containers {
        let mut args = vec!["run", "--detach", "--pod", "antler", "--name", name];
        args.extend(["--volume", &secret_volume, "--volume", &pod_volume]);
        args.extend(["--env", "RUST_LOG=warn"]);
        let cluster_token = format!("ANTLER_CLUSTER_TOKEN={}", token.trim());
        if *name == "lead" {
            args.extend(["--env", &cluster_token]);
        }
        args.extend(options.iter().copied());
        args.push(IMAGE);
        args.extend(command.iter().map(String::as_str));
        if matches!(*name, "mcp-host" | "sandbox-host") {
            args.extend(configs);
        }
        let started = storage.podman(&args);
        assert!(
            started.status.success(),
            "{name}: {}",
            output_text(&started)
        );
    }
    let logs = || -> String {
        containers
            .iter()
            .map(|(name, ..)| {
                let out = storage.podman(&["logs", name]);
                format!(
                    "--- {name}\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .collect()
    };
    let in_lead = |args: &[&str]| -> Output {
        storage.podman(
            &[
                &[
                    "exec",
                    "lead",
                    "antler",
                    "--runtime-dir",
                    "/var/lib/antler/run",
                ][..],
                args,
            ]
            .concat(),
        )
    };

    let healthy = wait_for(Duration::from_secs(60), || {
        let out = in_lead(&["status", "--json"]);
        let processes: Vec<Value> = serde_json::from_slice(&out.stdout).ok()?;
        (processes.len() == 4 && processes.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    if healthy.is_none() {
        let status = in_lead(&["status"]);
        panic!(
            "the lead did not reach every host: {}\n{}",
            output_text(&status),
            logs()
        );
    }
    let run = in_lead(&[
        "run",
        "Write a short report",
        "--playbook",
        "/example/playbook.yaml",
        "--user",
        "alice",
        "--thread",
        "t1",
        "--json",
    ]);
    let out: Value = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}): {}\n{}",
            output_text(&run),
            logs()
        )
    });
    assert_eq!(
        out["status"],
        "success",
        "{}\n{}",
        output_text(&run),
        logs()
    );
    assert_eq!(out["delivery"]["stage"], "presented", "{out}");
    let report = threads.join("users/alice/threads/t1/user-data/outputs/report.md");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap_or_default(),
        "# Report\n\nThe everything server's echo tool answered.\n",
        "{}",
        logs()
    );

    let stopped = storage.podman(&["pod", "stop", "--time", "30", "antler"]);
    assert!(stopped.status.success(), "{}", output_text(&stopped));
    for (name, ..) in &containers {
        let code = storage.podman(&["inspect", "--format", "{{.State.ExitCode}}", name]);
        assert_eq!(
            String::from_utf8_lossy(&code.stdout).trim(),
            "0",
            "{name} did not end cleanly on SIGTERM\n{}",
            logs()
        );
    }
    let removed = storage.podman(&["pod", "rm", "antler"]);
    assert!(removed.status.success(), "{}", output_text(&removed));
}
