//! The multi-host layout's network: a hub namespace with a bridge, and a namespace per
//! host (and the lead's), each joined to the bridge by a veth, at 10.78.0.0/24 inside
//! them only; this process entered into the lead's. All through `ip` (iproute2).

use std::process::{Command, Stdio};

use anyhow::Context as _;

use super::{lead_ip, Node, SUBNET};

/// Runs `ip ARGS`; its error output is the error.
pub(super) fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip` (iproute2; scripts/chaos.sh installs it)")?;
    if !out.status.success() {
        anyhow::bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates the hub (`TAG-hub`, its bridge), the lead's namespace (`TAG-0`) and each
/// node's, each with its veth on the bridge and its address.
pub(super) fn connect(tag: &str, nodes: &[Node]) -> anyhow::Result<()> {
    let hub = format!("{tag}-hub");
    ip(&["netns", "add", &hub])?;
    ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
    ip(&["-n", &hub, "link", "set", "br0", "up"])?;
    let lead_ns = format!("{tag}-0");
    let mut all: Vec<(String, String, String)> = vec![(lead_ns.clone(), "h0".into(), lead_ip())];
    for n in nodes {
        all.push((
            n.namespace(tag),
            n.hub_link(),
            format!("{SUBNET}.{}", 10 + n.number),
        ));
    }
    for (ns, hub_end, addr) in &all {
        ip(&["netns", "add", ns])?;
        ip(&[
            "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", hub_end, "netns", &hub,
        ])?;
        ip(&["-n", &hub, "link", "set", hub_end, "master", "br0"])?;
        ip(&["-n", &hub, "link", "set", hub_end, "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    Ok(())
}

/// Moves this process into the network namespace `namespace`. Must run before any thread
/// starts (a namespace is per thread, and the threads started afterwards inherit it).
pub(super) fn enter(namespace: &str) -> anyhow::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{namespace}"))
        .context("cannot open the lead's namespace")?;
    // SAFETY: setns on a namespace file this process opened; no thread has started yet,
    // so every thread and child from here on is in the lead's namespace.
    if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) } != 0 {
        anyhow::bail!(
            "cannot enter the lead's namespace: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
