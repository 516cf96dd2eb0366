//! `deploy/`, the Kubernetes manifests, checked offline as a user applying them would meet
//! them: each overlay builds with `kubectl kustomize` and passes `kubernetes-validate`
//! (strict, against the bundled schemas of Kubernetes 1.30, the oldest version the
//! manifests need), and the built output holds what the issue promises: every kind, a
//! sandbox-host replica per `sandbox_hosts` entry, requests, limits and probes on the ports
//! the processes listen on, only flags the binaries have, NetworkPolicies under which only
//! the lead and workers reach the hosts and sandbox-host reaches nothing, no key material
//! unless given, images pinned by tag. A Secret made from `antler cluster init` gives every
//! pod the keys it names; a broken manifest is rejected, so the validator is live.
//! The `ha` overlay (components/ha-leads) runs three leads as a Deployment on the
//! PostgreSQL its Secret names, with a budget, one lead per node and no SQLite volume; the
//! cloudnative-pg component wires the leads to the operator's Secrets over verified TLS;
//! each lead advertises its pod IP's gateway, and the leads (only) reach each other's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use antler_tests::bin;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

/// The Kubernetes version the output is validated against: the first whose schema has
/// `securityContext.appArmorProfile`, which sandbox-host sets.
const KUBERNETES_VERSION: &str = "1.30.0";
const OVERLAYS: &[&str] = &["small", "large"];
/// Those and the overlay of several leads, for the checks every workload must pass.
const EVERY_OVERLAY: &[&str] = &["small", "large", "ha"];
/// The files of `antler cluster init` that go into the Secret (all but ca.key), and the
/// gateway's operator token added beside them.
const SECRET_FILES: &[&str] = &[
    "ca.crt",
    "token",
    "gateway-token",
    "lead.crt",
    "lead.key",
    "mcp-host.crt",
    "mcp-host.key",
    "sandbox-host.crt",
    "sandbox-host.key",
    "subagent.crt",
    "subagent.key",
    "mcp-oauth.key",
];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .canonicalize()
        .unwrap()
}

/// `path` as kustomize accepts it from `from`: relative (it refuses absolute roots).
fn relative(from: &Path, path: &Path) -> String {
    let from = from.canonicalize().unwrap();
    let ups = from.components().count() - 1;
    let rest = path.strip_prefix("/").unwrap();
    format!("{}{}", "../".repeat(ups), rest.display())
}

/// The output of `kubectl kustomize dir`.
fn kustomize(dir: &Path) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is not installed (the machine image has it at /usr/bin/kubectl)");
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every document of a multi-document YAML stream.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Runs kubernetes-validate (strict) on `yaml`: (exit code, output).
fn kubernetes_validate(yaml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            KUBERNETES_VERSION,
        ])
        .arg(&file)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("No module named kubernetes_validate"),
        "kubernetes-validate is not installed: pip install -r tests/requirements.txt"
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Asserts that every resource of `yaml` passed, each against a schema it has.
fn assert_valid(what: &str, yaml: &str) -> Vec<Value> {
    let docs = documents(yaml);
    let (code, text) = kubernetes_validate(yaml);
    assert_eq!(code, 0, "{what} did not validate:\n{text}");
    // A kind without a schema is only a WARN with exit 0: count the passes instead.
    let passed = text
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    assert_eq!(
        passed,
        docs.len(),
        "{what}: not every resource was validated:\n{text}"
    );
    docs
}

/// The built, validated output of an overlay.
fn overlay(name: &str) -> Vec<Value> {
    let yaml = kustomize(&deploy_dir().join("overlays").join(name));
    assert_valid(&format!("overlay {name}"), &yaml)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the output"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

/// The workloads (Deployments and StatefulSets).
fn workloads(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "StatefulSet")
        .collect()
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

/// The pod labels of the workload whose component is `component`.
fn pod_labels<'a>(docs: &'a [Value], component: &str) -> &'a Value {
    let w = workloads(docs)
        .into_iter()
        .find(|w| {
            w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .unwrap_or_else(|| panic!("no workload for {component}"));
    &w["spec"]["template"]["metadata"]["labels"]
}

/// config.yaml as the lead reads it, from the ConfigMap.
fn lead_config(docs: &[Value]) -> Value {
    let cm = of_kind(docs, "ConfigMap")
        .find(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("antler-config")
        })
        .expect("the antler-config ConfigMap");
    serde_yaml::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
}

#[test]
fn every_kind_the_issue_lists_is_built_and_wired() {
    for name in OVERLAYS {
        let docs = overlay(name);
        let lead = find(&docs, "StatefulSet", "antler-lead");
        assert_eq!(
            lead["spec"]["replicas"], 1,
            "{name}: the lead is one replica"
        );
        assert_eq!(lead["spec"]["serviceName"], "antler-lead");
        find(&docs, "Service", "antler-lead");
        find(&docs, "Deployment", "antler-mcp-host");
        let sandbox = find(&docs, "StatefulSet", "antler-sandbox-host");
        assert_eq!(sandbox["spec"]["serviceName"], "antler-sandbox-host");
        assert!(
            !sandbox["spec"]["volumeClaimTemplates"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{name}: each sandbox-host replica gets its own volume"
        );
        find(&docs, "Deployment", "antler-subagent");
        // The lead resolves these names to every replica: they must be headless.
        for s in ["antler-mcp-host", "antler-sandbox-host", "antler-subagent"] {
            assert_eq!(
                find(&docs, "Service", s)["spec"]["clusterIP"],
                "None",
                "{name}: {s} is headless"
            );
        }
        let cm = of_kind(&docs, "ConfigMap").next().expect("a ConfigMap");
        assert!(cm["data"]["config.yaml"].is_string());
        assert!(cm["data"]["extensions_config.json"].is_string());
        find(&docs, "Secret", "antler-cluster");
        assert!(of_kind(&docs, "PodDisruptionBudget").count() >= 3);
        let hpa = find(&docs, "HorizontalPodAutoscaler", "antler-subagent");
        assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
        assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "antler-subagent");
        assert!(of_kind(&docs, "NetworkPolicy").count() >= 5);

        // Every Service and PodDisruptionBudget selects pods that exist, and a Service's
        // target port is one its pods declare.
        for svc in of_kind(&docs, "Service") {
            let selector = &svc["spec"]["selector"];
            let pods: Vec<&Value> = workloads(&docs)
                .into_iter()
                .filter(|w| labels_match(selector, &w["spec"]["template"]["metadata"]["labels"]))
                .collect();
            assert_eq!(
                pods.len(),
                1,
                "{name}: {} selects one workload",
                svc["metadata"]["name"]
            );
            let declared: Vec<&Value> = pods[0]["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c["ports"].as_array().unwrap())
                .map(|p| &p["name"])
                .collect();
            for port in svc["spec"]["ports"].as_array().unwrap() {
                assert!(
                    declared.contains(&&port["targetPort"]),
                    "{name}: {port} is declared"
                );
            }
        }
        for pdb in of_kind(&docs, "PodDisruptionBudget") {
            let selector = &pdb["spec"]["selector"]["matchLabels"];
            assert!(
                workloads(&docs)
                    .iter()
                    .any(|w| labels_match(selector, &w["spec"]["template"]["metadata"]["labels"])),
                "{name}: {} selects pods",
                pdb["metadata"]["name"]
            );
            assert_ne!(
                selector["app.kubernetes.io/component"], "lead",
                "a budget on the one lead would block every node drain"
            );
        }
    }
}

#[test]
fn sandbox_host_replicas_match_the_leads_sandbox_hosts() {
    let mut counts = Vec::new();
    for name in OVERLAYS {
        let docs = overlay(name);
        let replicas = find(&docs, "StatefulSet", "antler-sandbox-host")["spec"]["replicas"]
            .as_u64()
            .unwrap();
        let config = lead_config(&docs);
        let listed: Vec<&str> = config["antler"]["cluster"]["sandbox_hosts"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: config.yaml has antler.cluster.sandbox_hosts"))
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        // One entry per replica, each the replica's stable name, none left out.
        let expected: Vec<String> = (0..replicas)
            .map(|i| format!("tcp:antler-sandbox-host-{i}.antler-sandbox-host:7103"))
            .collect();
        assert_eq!(
            listed, expected,
            "{name}: sandbox_hosts names every replica"
        );
        assert_eq!(
            config["antler"]["cluster"]["mcp_hosts"][0],
            "tcp:antler-mcp-host:7102"
        );
        assert_eq!(
            config["antler"]["cluster"]["workers"][0],
            "tcp:antler-subagent:7104"
        );
        let hpa = find(&docs, "HorizontalPodAutoscaler", "antler-subagent");
        counts.push((
            replicas,
            find(&docs, "Deployment", "antler-mcp-host")["spec"]["replicas"]
                .as_u64()
                .unwrap(),
            hpa["spec"]["minReplicas"].as_u64().unwrap(),
            hpa["spec"]["maxReplicas"].as_u64().unwrap(),
        ));
    }
    // small: one sandbox-host, one mcp-host, two workers; large: more of each.
    assert_eq!(
        (counts[0].0, counts[0].1, counts[0].2),
        (1, 1, 2),
        "small overlay"
    );
    let (small, large) = (counts[0], counts[1]);
    assert!(large.0 > small.0 && large.1 > small.1 && large.2 > small.2 && large.3 > small.3);
}

/// `--flag` names of a binary's help text.
fn flags_of(help: &str) -> BTreeSet<String> {
    help.split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| {
            w.trim_end_matches([',', '.'])
                .split('=')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn every_container_has_requests_limits_probes_and_real_flags() {
    for name in EVERY_OVERLAY {
        let docs = overlay(name);
        for w in workloads(&docs) {
            let spec = &w["spec"]["template"]["spec"];
            for c in spec["containers"].as_array().unwrap() {
                let at = format!("{name}: {}/{}", w["metadata"]["name"], c["name"]);
                for k in ["requests", "limits"] {
                    for r in ["cpu", "memory"] {
                        assert!(c["resources"][k][r].is_string(), "{at}: resources.{k}.{r}");
                    }
                }
                let image = c["image"].as_str().unwrap();
                let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
                assert!(
                    !tag.is_empty() && !tag.contains('/') && tag != "latest",
                    "{at}: image {image} is pinned by tag"
                );

                // The flags exist in the binary the container runs.
                let command: Vec<&str> = c["command"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                let help = Command::new(bin(command[0]))
                    .args(&command[1..])
                    .arg("--help")
                    .output()
                    .unwrap();
                assert!(help.status.success(), "{at}: {command:?} --help");
                let known = flags_of(&String::from_utf8_lossy(&help.stdout));
                let args: Vec<&str> = c["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                for a in &args {
                    let flag = a.split('=').next().unwrap();
                    assert!(known.contains(flag), "{at}: {command:?} has no flag {flag}");
                }

                // Probes on the port the process serves: the gateway's /ready and
                // /health for the lead, the listen port for a host.
                let ports = c["ports"].as_array().unwrap();
                let port_number = |p: &Value| -> u64 {
                    match p {
                        Value::Number(n) => n.as_u64().unwrap(),
                        Value::String(s) => ports.iter().find(|q| q["name"] == *s).unwrap()
                            ["containerPort"]
                            .as_u64()
                            .unwrap(),
                        _ => panic!("{at}: probe port {p}"),
                    }
                };
                let serves: u64 = match args.iter().find_map(|a| a.strip_prefix("--listen=tcp:")) {
                    Some(addr) => addr.rsplit(':').next().unwrap().parse().unwrap(),
                    None => {
                        let env = c["env"].as_array().unwrap();
                        let gw = env
                            .iter()
                            .find(|e| e["name"] == "ANTLER_GATEWAY_ADDR")
                            .unwrap();
                        gw["value"]
                            .as_str()
                            .unwrap()
                            .rsplit(':')
                            .next()
                            .unwrap()
                            .parse()
                            .unwrap()
                    }
                };
                for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                    let p = &c[probe];
                    let port = if p["httpGet"].is_object() {
                        // Readiness waits until runs can be prepared (the hosts
                        // linked); start-up and liveness are the process answering.
                        let path = match probe {
                            "readinessProbe" => "/ready",
                            _ => "/health",
                        };
                        assert_eq!(p["httpGet"]["path"], path, "{at}: {probe}");
                        port_number(&p["httpGet"]["port"])
                    } else {
                        assert!(p["tcpSocket"].is_object(), "{at}: {probe}");
                        port_number(&p["tcpSocket"]["port"])
                    };
                    assert_eq!(port, serves, "{at}: {probe} checks the served port");
                }
            }
        }
    }
}

#[test]
fn only_sandbox_host_is_privileged_and_the_rest_are_locked_down() {
    for name in EVERY_OVERLAY {
        let docs = overlay(name);
        for w in workloads(&docs) {
            let spec = &w["spec"]["template"]["spec"];
            let c = &spec["containers"][0];
            let sc = &c["securityContext"];
            let at = format!("{name}: {}", w["metadata"]["name"]);
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{at}");
            if w["metadata"]["name"] == "antler-sandbox-host" {
                // What bubblewrap needs: an unmasked /proc, unshare and mount allowed.
                assert_eq!(sc["privileged"], true, "{at}");
                assert_eq!(sc["seccompProfile"]["type"], "Unconfined", "{at}");
                assert_eq!(sc["appArmorProfile"]["type"], "Unconfined", "{at}");
            } else {
                assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{at}");
                assert_eq!(
                    spec["securityContext"]["seccompProfile"]["type"],
                    "RuntimeDefault"
                );
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{at}");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{at}"
                );
                assert!(sc["privileged"].is_null() && sc["capabilities"]["add"].is_null());
            }
        }
    }
}

/// A connection `from` (pod labels) to `to` (pod labels) on `port`, under the
/// NetworkPolicies of `docs` (pod selectors with matchLabels, as the manifests use).
fn ingress_allowed(docs: &[Value], from: &Value, to: &Value, port: u64) -> bool {
    let selecting: Vec<&Value> = of_kind(docs, "NetworkPolicy")
        .filter(|p| {
            let sel = &p["spec"]["podSelector"]["matchLabels"];
            sel.is_null() || labels_match(sel, to)
        })
        .filter(|p| {
            p["spec"]["policyTypes"]
                .as_array()
                .unwrap()
                .contains(&"Ingress".into())
        })
        .collect();
    assert!(!selecting.is_empty(), "every pod is isolated for ingress");
    selecting.iter().any(|p| {
        p["spec"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| {
                let from_ok = match rule["from"].as_array() {
                    None => true,
                    Some(peers) => peers.iter().any(|peer| {
                        peer["namespaceSelector"].is_null()
                            && peer["ipBlock"].is_null()
                            && labels_match(&peer["podSelector"]["matchLabels"], from)
                    }),
                };
                let port_ok = match rule["ports"].as_array() {
                    None => true,
                    Some(ports) => ports.iter().any(|p| p["port"] == port),
                };
                from_ok && port_ok
            })
    })
}

/// The egress rules that apply to pods with `labels`.
fn egress_rules<'a>(docs: &'a [Value], labels: &Value) -> Vec<&'a Value> {
    let selecting: Vec<&Value> = of_kind(docs, "NetworkPolicy")
        .filter(|p| {
            let sel = &p["spec"]["podSelector"]["matchLabels"];
            sel.is_null() || labels_match(sel, labels)
        })
        .filter(|p| {
            p["spec"]["policyTypes"]
                .as_array()
                .unwrap()
                .contains(&"Egress".into())
        })
        .collect();
    assert!(!selecting.is_empty(), "every pod is isolated for egress");
    selecting
        .iter()
        .flat_map(|p| p["spec"]["egress"].as_array().into_iter().flatten())
        .collect()
}

#[test]
fn network_policies_let_only_the_lead_and_workers_reach_the_hosts() {
    for name in EVERY_OVERLAY {
        let docs = overlay(name);
        let deny = find(&docs, "NetworkPolicy", "antler-default-deny");
        assert_eq!(deny["spec"]["podSelector"], serde_json::json!({}));
        let lead = pod_labels(&docs, "lead");
        let mcp = pod_labels(&docs, "mcp-host");
        let sandbox = pod_labels(&docs, "sandbox-host");
        let worker = pod_labels(&docs, "subagent");
        let stranger = serde_json::json!({"app": "something-else"});

        assert!(
            ingress_allowed(&docs, &stranger, lead, 8001),
            "{name}: the gateway is open"
        );
        assert!(
            !ingress_allowed(&docs, &stranger, lead, 7102),
            "{name}: only the gateway"
        );
        for (host, port) in [(mcp, 7102), (sandbox, 7103)] {
            assert!(
                ingress_allowed(&docs, lead, host, port),
                "{name}: lead -> {port}"
            );
            assert!(
                ingress_allowed(&docs, worker, host, port),
                "{name}: worker -> {port}"
            );
            assert!(
                !ingress_allowed(&docs, &stranger, host, port),
                "{name}: others -> {port}"
            );
            assert!(
                !ingress_allowed(&docs, lead, host, 9999),
                "{name}: other ports"
            );
        }
        assert!(
            !ingress_allowed(&docs, mcp, sandbox, 7103),
            "{name}: mcp-host -/-> sandbox"
        );
        assert!(
            !ingress_allowed(&docs, sandbox, mcp, 7102),
            "{name}: sandbox -/-> mcp-host"
        );
        assert!(
            ingress_allowed(&docs, lead, worker, 7104),
            "{name}: lead -> worker"
        );
        assert!(
            !ingress_allowed(&docs, worker, worker, 7104),
            "{name}: worker -/-> worker"
        );
        assert!(
            !ingress_allowed(&docs, &stranger, worker, 7104),
            "{name}: others -/-> worker"
        );

        // sandbox-host: no egress rule at all, so nothing, not even DNS.
        assert!(
            egress_rules(&docs, sandbox).is_empty(),
            "{name}: sandbox-host has no egress"
        );
        // mcp-host reaches the internet (MCP servers); the lead and workers reach DNS.
        assert!(egress_rules(&docs, mcp)
            .iter()
            .any(|r| r.as_object().unwrap().is_empty()));
        for who in [lead, worker] {
            assert!(egress_rules(&docs, who).iter().any(|r| {
                r["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["port"] == 53)
                    && r["to"][0]["podSelector"]["matchLabels"]["k8s-app"] == "kube-dns"
            }));
        }
    }
}

/// Whether any Secret in `docs` holds PEM private key material.
fn secrets_with_private_keys(docs: &[Value]) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut found = Vec::new();
    for s in of_kind(docs, "Secret") {
        let mut values: Vec<(String, String)> = Vec::new();
        for (k, v) in s["data"].as_object().into_iter().flatten() {
            // kubectl kustomize folds long values over several lines.
            let text: String = v.as_str().unwrap().split_whitespace().collect();
            let bytes = b64.decode(text).unwrap();
            values.push((k.clone(), String::from_utf8_lossy(&bytes).into_owned()));
        }
        for (k, v) in s["stringData"].as_object().into_iter().flatten() {
            values.push((k.clone(), v.as_str().unwrap().to_string()));
        }
        for (k, v) in values {
            if v.contains("PRIVATE KEY") {
                found.push(format!("{}/{k}", s["metadata"]["name"].as_str().unwrap()));
            }
        }
    }
    found
}

#[test]
fn the_shipped_overlays_hold_no_key_material() {
    for name in EVERY_OVERLAY {
        let docs = overlay(name);
        assert_eq!(
            secrets_with_private_keys(&docs),
            Vec::<String>::new(),
            "{name}"
        );
        let secret = find(&docs, "Secret", "antler-cluster");
        assert!(
            secret["data"].is_null() && secret["stringData"].is_null(),
            "{name}: a placeholder"
        );
    }
}

/// A throwaway overlay in a temp dir: `kustomization` (its `resources` relative to the
/// temp dir) and the files it needs.
struct TempOverlay {
    dir: tempfile::TempDir,
}

impl TempOverlay {
    fn new() -> TempOverlay {
        TempOverlay {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path_to(&self, deploy_path: &str) -> String {
        relative(self.dir.path(), &deploy_dir().join(deploy_path))
    }

    fn build(&self, kustomization: &str) -> String {
        std::fs::write(self.dir.path().join("kustomization.yaml"), kustomization).unwrap();
        kustomize(self.dir.path())
    }
}

/// The Secret keys each workload's pods name (projected items and secretKeyRefs).
fn secret_keys_named(w: &Value) -> BTreeSet<String> {
    let spec = &w["spec"]["template"]["spec"];
    let mut keys = BTreeSet::new();
    for v in spec["volumes"].as_array().unwrap() {
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            for item in s["secret"]["items"].as_array().into_iter().flatten() {
                keys.insert(item["key"].as_str().unwrap().to_string());
            }
        }
    }
    for c in spec["containers"].as_array().unwrap() {
        for e in c["env"].as_array().into_iter().flatten() {
            if let Some(k) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
                keys.insert(k.to_string());
            }
        }
    }
    keys
}

#[test]
fn a_secret_from_cluster_init_gives_every_pod_its_keys_and_only_its_own() {
    let overlay = TempOverlay::new();
    let secret = overlay.dir.path().join("secret");
    let out = Command::new(bin("antler"))
        .args(["cluster", "init"])
        .arg(&secret)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        secret.join("gateway-token"),
        "0123456789abcdef0123456789abcdef",
    )
    .unwrap();
    let files: Vec<String> = SECRET_FILES.iter().map(|f| format!("secret/{f}")).collect();
    for base in OVERLAYS {
        let yaml = overlay.build(&format!(
            "resources: [{}]\nsecretGenerator:\n  - name: antler-cluster\n    behavior: replace\n    files: [{}]\n",
            overlay.path_to(&format!("overlays/{base}")),
            files.join(", ")
        ));
        let docs = assert_valid(&format!("{base} with the Secret"), &yaml);
        let s = find(&docs, "Secret", "antler-cluster");
        let held: BTreeSet<String> = s["data"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(held, SECRET_FILES.iter().map(|f| f.to_string()).collect());
        // The keys are there (the generator read the files), ca.key is not.
        assert_eq!(
            secrets_with_private_keys(&docs).len(),
            4,
            "{base}: the four roles' keys"
        );
        for w in workloads(&docs) {
            let named = secret_keys_named(w);
            let component = w["spec"]["template"]["metadata"]["labels"]
                ["app.kubernetes.io/component"]
                .as_str()
                .unwrap();
            for k in &named {
                assert!(
                    held.contains(k),
                    "{base}: {component} names {k}, missing from the Secret"
                );
            }
            // The OAuth sealing key is mcp-host's alone: the lead keeps the sealed logins
            // and must not be able to open them.
            assert_eq!(
                named.iter().any(|k| k == "mcp-oauth.key"),
                component == "mcp-host",
                "{base}: {component} and the OAuth sealing key"
            );
            let keys: Vec<&String> = named
                .iter()
                .filter(|k| k.ends_with(".key") && *k != "mcp-oauth.key")
                .collect();
            assert_eq!(
                keys,
                vec![&format!("{component}.key")],
                "{base}: {component}'s own key only"
            );
        }
    }

    // Created with `kubectl create secret` instead: the overlay deletes the placeholder, so
    // an apply never touches the Secret.
    let yaml = overlay.build(&format!(
        "resources: [{}]\npatches:\n  - patch: |-\n      $patch: delete\n      apiVersion: v1\n      kind: Secret\n      metadata:\n        name: antler-cluster\n",
        overlay.path_to("overlays/small")
    ));
    let docs = assert_valid("small without the Secret", &yaml);
    assert_eq!(of_kind(&docs, "Secret").count(), 0);
}

#[test]
fn the_user_namespace_component_drops_privileged_for_an_unmasked_proc() {
    let overlay = TempOverlay::new();
    let yaml = overlay.build(&format!(
        "resources: [{}]\ncomponents: [{}]\n",
        overlay.path_to("overlays/large"),
        overlay.path_to("components/sandbox-userns")
    ));
    let docs = assert_valid("large with sandbox-userns", &yaml);
    let sandbox = find(&docs, "StatefulSet", "antler-sandbox-host");
    let spec = &sandbox["spec"]["template"]["spec"];
    assert_eq!(spec["hostUsers"], false);
    let sc = &spec["containers"][0]["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["procMount"], "Unmasked");
    assert_eq!(sc["seccompProfile"]["type"], "Unconfined");
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    // The other workloads are as they were.
    let lead = find(&docs, "StatefulSet", "antler-lead");
    assert!(lead["spec"]["template"]["spec"]["hostUsers"].is_null());
}

#[test]
fn the_shipped_configuration_files_parse() {
    for name in EVERY_OVERLAY {
        let docs = overlay(name);
        let cm = of_kind(&docs, "ConfigMap").next().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (file, kind) in [
            ("extensions_config.json", "extensions config"),
            ("config.yaml", "app config"),
        ] {
            let path = dir.path().join(file);
            std::fs::write(&path, cm["data"][file].as_str().unwrap()).unwrap();
            let out = Command::new(bin("antler"))
                .args(["config", "check"])
                .arg(&path)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{name}: {file}: {text}");
            assert!(
                text.contains(&format!("{kind}: 0 error(s)")),
                "{name}: {file}: {text}"
            );
            // A warning (an unknown or misspelt key) is a mistake in the file too.
            let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("warning")).collect();
            assert!(warnings.is_empty(), "{name}: {file}: {warnings:#?}");
        }
    }
}

#[test]
fn the_validator_rejects_a_broken_manifest() {
    let deployment = |spec_extra: &str, replicas: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: broken}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{a: b}}}}\n  template:\n    metadata: {{labels: {{a: b}}}}\n    spec:\n      containers:\n        - name: c\n          image: antler:0.1.0\n{spec_extra}"
        )
    };
    // The well-formed one passes, so what fails below fails for its one mistake.
    assert_valid("a good deployment", &deployment("", "1"));
    for (mistake, yaml) in [
        ("a string for replicas", deployment("", "\"two\"")),
        (
            "an unknown field",
            deployment("          imagePullPolicyy: Always\n", "1"),
        ),
        (
            "a container without a name",
            deployment("        - image: x:1\n", "1"),
        ),
    ] {
        let (code, text) = kubernetes_validate(&yaml);
        assert_ne!(code, 0, "{mistake} passed:\n{text}");
        assert!(
            text.contains("ERROR") && text.contains("deployment/broken"),
            "{mistake}: {text}"
        );
    }
}

/// The lead's container of a workload.
fn lead_container(lead: &Value) -> &Value {
    &lead["spec"]["template"]["spec"]["containers"][0]
}

/// The lead container's environment variable `name`.
fn env_var<'a>(lead: &'a Value, name: &str) -> &'a Value {
    lead_container(lead)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("the lead has no {name}"))
}

#[test]
fn the_ha_overlay_runs_three_leads_on_the_secrets_postgres() {
    let docs = overlay("ha");
    assert!(
        !of_kind(&docs, "StatefulSet").any(|s| s["metadata"]["name"] == "antler-lead"),
        "the lead is no StatefulSet"
    );
    let lead = find(&docs, "Deployment", "antler-lead");
    assert_eq!(lead["spec"]["replicas"], 3);
    assert!(lead["spec"]["serviceName"].is_null());
    let labels = &lead["spec"]["template"]["metadata"]["labels"];
    assert!(labels_match(
        &lead["spec"]["selector"]["matchLabels"],
        labels
    ));
    // Behind the one Service.
    let svc = find(&docs, "Service", "antler-lead");
    assert!(labels_match(&svc["spec"]["selector"], labels));
    assert_ne!(svc["spec"]["clusterIP"], "None", "a ClusterIP Service");

    // The runs store and the leases: the Secret's DSN, nothing else.
    for name in ["ANTLER_STORE_DSN", "ANTLER_HA_DSN"] {
        assert_eq!(
            env_var(lead, name)["valueFrom"]["secretKeyRef"],
            serde_json::json!({"name": "antler-postgres", "key": "dsn"}),
            "{name}"
        );
    }
    // The server's CA, optional, where a DSN's sslrootcert can name it.
    let spec = &lead["spec"]["template"]["spec"];
    let etc = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "etc")
        .unwrap();
    assert!(etc["projected"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["secret"]["name"] == "antler-postgres"
            && s["secret"]["optional"] == true
            && s["secret"]["items"]
                == serde_json::json!([{"key": "ca.crt", "path": "postgres/ca.crt"}])));

    // No SQLite volume: no claim anywhere, /var/lib/antler an emptyDir.
    assert!(lead["spec"]["volumeClaimTemplates"].is_null());
    assert_eq!(of_kind(&docs, "PersistentVolumeClaim").count(), 0);
    for v in spec["volumes"].as_array().unwrap() {
        assert!(v["persistentVolumeClaim"].is_null(), "{v}");
    }
    let state = lead_container(lead)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/antler")
        .unwrap();
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == state["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "{volume}");

    // Two of three through voluntary disruptions; the budget selects the leads, and only.
    let pdb = find(&docs, "PodDisruptionBudget", "antler-lead");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    assert_eq!(pdb["metadata"]["namespace"], "antler");
    let selected: Vec<&Value> = workloads(&docs)
        .into_iter()
        .filter(|w| {
            labels_match(
                &pdb["spec"]["selector"]["matchLabels"],
                &w["spec"]["template"]["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0]["metadata"]["name"], "antler-lead");

    // One lead per node, and a rollout that never needs a fourth node.
    let anti =
        &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(anti[0]["topologyKey"], "kubernetes.io/hostname");
    assert!(labels_match(
        &anti[0]["labelSelector"]["matchLabels"],
        labels
    ));
    assert_eq!(lead["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0);

    // Ready on the gateway's readiness route, alive on its health route.
    let c = lead_container(lead);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/health");

    // The leads reach PostgreSQL; the workers do not.
    let lead_egress = egress_rules(&docs, labels);
    assert!(lead_egress.iter().any(|r| r["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["port"] == 5432)));
    let worker = pod_labels(&docs, "subagent");
    assert!(!egress_rules(&docs, worker).iter().any(|r| r["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["port"] == 5432)));
}

/// A connection `from` (pod labels) may open to `to` (pod labels) on `port` under the
/// egress rules that apply to `from` (pod selectors with matchLabels, as the manifests use).
fn egress_allowed(docs: &[Value], from: &Value, to: &Value, port: u64) -> bool {
    egress_rules(docs, from).iter().any(|rule| {
        let to_ok = match rule["to"].as_array() {
            None => true,
            Some(peers) => peers.iter().any(|peer| {
                peer["namespaceSelector"].is_null()
                    && peer["ipBlock"].is_null()
                    && labels_match(&peer["podSelector"]["matchLabels"], to)
            }),
        };
        let port_ok = match rule["ports"].as_array() {
            None => true,
            Some(ports) => ports.iter().any(|p| p["port"] == port),
        };
        to_ok && port_ok
    })
}

/// The port the lead's gateway listens on: `ANTLER_GATEWAY_ADDR`'s, which is the
/// container's `gateway` port.
fn gateway_port(lead: &Value) -> u64 {
    let addr = env_var(lead, "ANTLER_GATEWAY_ADDR")["value"]
        .as_str()
        .unwrap();
    let port: u64 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let declared = lead_container(lead)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "gateway")
        .unwrap();
    assert_eq!(declared["containerPort"], port);
    port
}

/// Each lead of the `ha` overlay advertises `http://` + its pod IP + the gateway's port
/// (the downward API's `status.podIP`, defined before the variable that expands it), and
/// the NetworkPolicies let a lead open that port on another lead, which the single-lead
/// overlays do not: a write to a run another lead drives is forwarded there.
#[test]
fn the_ha_leads_advertise_their_pod_ip_and_reach_each_others_gateway() {
    let docs = overlay("ha");
    let lead = find(&docs, "Deployment", "antler-lead");
    let port = gateway_port(lead);
    let env: Vec<&str> = lead_container(lead)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        env_var(lead, "POD_IP")["valueFrom"],
        serde_json::json!({"fieldRef": {"fieldPath": "status.podIP"}})
    );
    assert_eq!(
        env_var(lead, "ANTLER_HA_ADVERTISE_URL")["value"],
        format!("http://$(POD_IP):{port}").as_str()
    );
    // Kubernetes expands $(VAR) only for variables defined before.
    let at = |name: &str| env.iter().position(|n| *n == name).unwrap();
    assert!(at("POD_IP") < at("ANTLER_HA_ADVERTISE_URL"), "{env:?}");

    let labels = &lead["spec"]["template"]["metadata"]["labels"];
    assert!(
        egress_allowed(&docs, labels, labels, port),
        "lead -> lead egress"
    );
    assert!(
        ingress_allowed(&docs, labels, labels, port),
        "lead -> lead ingress"
    );
    let peers = find(&docs, "NetworkPolicy", "antler-lead-peers");
    assert_eq!(peers["metadata"]["namespace"], "antler");
    // Only the gateway's port, and only to leads.
    assert!(!egress_allowed(&docs, labels, labels, 7102));
    for other in ["mcp-host", "sandbox-host", "subagent"] {
        let to = pod_labels(&docs, other);
        assert!(
            !egress_allowed(&docs, labels, to, port),
            "lead -/-> {other}"
        );
    }

    // One lead: no forwarding, no advertised address, no lead -> lead egress.
    for name in OVERLAYS {
        let docs = overlay(name);
        let lead = find(&docs, "StatefulSet", "antler-lead");
        let labels = &lead["spec"]["template"]["metadata"]["labels"];
        assert!(
            !egress_allowed(&docs, labels, labels, gateway_port(lead)),
            "{name}"
        );
        assert!(!lead_container(lead)["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "ANTLER_HA_ADVERTISE_URL"));
    }
}

#[test]
fn the_cloudnative_pg_component_gives_the_leads_its_dsn_over_verified_tls() {
    let overlay = TempOverlay::new();
    let yaml = overlay.build(&format!(
        "resources: [{}]\ncomponents: [{}]\n",
        overlay.path_to("overlays/ha"),
        overlay.path_to("components/cloudnative-pg")
    ));
    // The operator's Cluster has no schema among Kubernetes' own: the rest is validated,
    // the Cluster checked below.
    let (clusters, rest): (Vec<Value>, Vec<Value>) = documents(&yaml)
        .into_iter()
        .partition(|d| d["kind"] == "Cluster");
    let rest_yaml: Vec<String> = rest
        .iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect();
    let docs = assert_valid("ha with cloudnative-pg", &rest_yaml.join("---\n"));
    assert_eq!(clusters.len(), 1);
    let cluster = &clusters[0];
    assert_eq!(cluster["apiVersion"], "postgresql.cnpg.io/v1");
    assert_eq!(cluster["metadata"]["name"], "antler-postgres");
    assert_eq!(cluster["metadata"]["namespace"], "antler");
    assert_eq!(cluster["spec"]["instances"], 3);
    assert_eq!(cluster["spec"]["bootstrap"]["initdb"]["owner"], "antler");
    assert_eq!(
        cluster["spec"]["postgresql"]["pg_hba"],
        serde_json::json!(["hostnossl all all all reject"])
    );
    let image = cluster["spec"]["imageName"].as_str().unwrap();
    assert!(!image.ends_with(":latest") && image.rsplit_once(':').is_some());

    // The DSN is the operator's `uri` with verify-full against the operator's CA, which
    // the lead mounts where sslrootcert names it.
    let lead = find(&docs, "Deployment", "antler-lead");
    let env: Vec<&str> = lead_container(lead)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let uri_at = env
        .iter()
        .position(|n| *n == "ANTLER_POSTGRES_URI")
        .unwrap();
    assert_eq!(
        env_var(lead, "ANTLER_POSTGRES_URI")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "antler-postgres-app", "key": "uri"})
    );
    // The advertised gateway stays as ha-leads set it.
    assert!(
        env.iter().position(|n| *n == "POD_IP").unwrap()
            < env
                .iter()
                .position(|n| *n == "ANTLER_HA_ADVERTISE_URL")
                .unwrap()
    );
    assert_eq!(
        env_var(lead, "ANTLER_HA_ADVERTISE_URL")["value"],
        "http://$(POD_IP):8001"
    );
    for name in ["ANTLER_STORE_DSN", "ANTLER_HA_DSN"] {
        // Kubernetes expands $(VAR) only for variables defined before.
        assert!(
            env.iter().position(|n| *n == name).unwrap() > uri_at,
            "{name}"
        );
        assert_eq!(
            env_var(lead, name)["value"],
            "$(ANTLER_POSTGRES_URI)?sslmode=verify-full&sslrootcert=/etc/antler/postgres/ca.crt",
            "{name}"
        );
        assert!(env_var(lead, name)["valueFrom"].is_null());
    }
    let sources = lead["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"]
        .as_array()
        .unwrap();
    assert!(sources
        .iter()
        .any(|s| s["secret"]["name"] == "antler-postgres-ca"
            && s["secret"]["items"]
                == serde_json::json!([{"key": "ca.crt", "path": "postgres/ca.crt"}])));
    assert!(!sources
        .iter()
        .any(|s| s["secret"]["name"] == "antler-postgres"));

    // The instances take the leads' connections, not the workers' nor anyone else's.
    let pg = serde_json::json!({"cnpg.io/cluster": "antler-postgres"});
    let lead_labels = pod_labels(&docs, "lead");
    assert!(ingress_allowed(&docs, lead_labels, &pg, 5432));
    assert!(ingress_allowed(&docs, &pg, &pg, 5432), "replication");
    assert!(!ingress_allowed(
        &docs,
        pod_labels(&docs, "subagent"),
        &pg,
        5432
    ));
    assert!(!ingress_allowed(
        &docs,
        &serde_json::json!({"app": "x"}),
        &pg,
        5432
    ));
    assert!(!egress_rules(&docs, &pg).is_empty());
}
