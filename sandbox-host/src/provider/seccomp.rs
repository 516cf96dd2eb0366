//! The sandboxes' seccomp filter: the system calls that open the kernel's attack surface
//! to a sandbox (new user and other namespaces, keyrings, bpf, perf events, tracing other
//! processes, mounts, modules, io_uring, handle-based opens, terminal injection), denied
//! with EPERM, as Flatpak and codex deny them. Compiled once by `seccompiler` into the
//! classic BPF programs bubblewrap loads before it runs the supervisor (`--add-seccomp-fd`):
//! one that answers EPERM and one that answers ENOSYS for `clone3` (whose flags a filter
//! cannot read; glibc then falls back to `clone`, whose flags it can). A system call of
//! another architecture (32-bit compat on x86_64) kills the process.

use std::{
    collections::BTreeMap,
    io::{Seek, Write},
    os::fd::{FromRawFd, OwnedFd},
    sync::OnceLock,
};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Why the filter cannot be built or handed over.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filter: this architecture ({0}) is not one seccompiler supports")]
    Architecture(String),
    #[error("seccomp filter: {0}")]
    Compile(String),
    #[error("seccomp filter: cannot hand the program to bubblewrap: {0}")]
    Io(String),
}

/// Every namespace flag of `clone`/`unshare`: a sandbox makes no namespace of its own.
const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// System calls denied whatever their arguments.
fn denied_outright() -> Vec<libc::c_long> {
    let mut calls = vec![
        // Namespaces: entering or making one (user namespaces are the usual way in to
        // kernel privilege escalation).
        libc::SYS_unshare,
        libc::SYS_setns,
        // Keyrings.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        // eBPF and perf events.
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        // Reading or writing other processes.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_kcmp,
        libc::SYS_pidfd_getfd,
        // Mounts (bubblewrap made every one the sandbox has).
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        // The kernel itself.
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_syslog,
        libc::SYS_quotactl,
        libc::SYS_vhangup,
        // Memory placement across NUMA nodes (Flatpak: information leaks, DoS).
        libc::SYS_move_pages,
        libc::SYS_mbind,
        libc::SYS_get_mempolicy,
        libc::SYS_set_mempolicy,
        libc::SYS_migrate_pages,
        // A large, often-vulnerable surface few tools need.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_userfaultfd,
        // Opening files by handle walks past the mounts (Docker's "shocker").
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_uselib,
        libc::SYS_modify_ldt,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_lookup_dcookie,
    ]);
    calls
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| SeccompError::Compile(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|e| SeccompError::Compile(e.to_string()))
}

fn arch() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Architecture(std::env::consts::ARCH.to_string()))
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()?)
        .map_err(|e| SeccompError::Compile(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SeccompError::Compile(e.to_string()))
}

/// The program that answers EPERM.
fn eperm_program() -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for call in denied_outright() {
        rules.insert(call, Vec::new());
    }
    // `clone` with any namespace flag (its flags are the first argument everywhere).
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f as u64), *f as u64)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // Pushing characters into a terminal's input, or its console ioctls.
    let ioctl_rules = [libc::TIOCSTI, libc::TIOCLINUX]
        .iter()
        .map(|r| rule(vec![cond(1, SeccompCmpOp::Eq, *r)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    compile(rules, SeccompAction::Errno(libc::EPERM as u32))
}

/// The program that answers ENOSYS for `clone3`.
fn enosys_program() -> Result<BpfProgram, SeccompError> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    compile(rules, SeccompAction::Errno(libc::ENOSYS as u32))
}

/// A program as the kernel's `struct sock_filter` array, in native byte order.
fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

/// The compiled programs, built once per process.
pub fn programs() -> Result<&'static [Vec<u8>], SeccompError> {
    static PROGRAMS: OnceLock<Result<Vec<Vec<u8>>, SeccompError>> = OnceLock::new();
    PROGRAMS
        .get_or_init(|| {
            Ok(vec![
                to_bytes(&eperm_program()?),
                to_bytes(&enosys_program()?),
            ])
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

/// The programs in memory files, read from their start, for bubblewrap to inherit (the
/// caller clears their close-on-exec flag in the child).
pub fn program_files() -> Result<Vec<OwnedFd>, SeccompError> {
    programs()?
        .iter()
        .map(|bytes| {
            // SAFETY: memfd_create takes a C string and flags; it returns a descriptor or -1.
            let fd = unsafe { libc::memfd_create(c"antler-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(SeccompError::Io(
                    std::io::Error::last_os_error().to_string(),
                ));
            }
            // SAFETY: a new descriptor that nothing else owns.
            let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            file.write_all(bytes)
                .and_then(|()| file.rewind())
                .map_err(|e| SeccompError::Io(e.to_string()))?;
            Ok(OwnedFd::from(file))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_programs_compile_to_whole_instructions() {
        let programs = programs().expect("programs");
        assert_eq!(programs.len(), 2);
        for p in programs {
            assert!(!p.is_empty() && p.len() % 8 == 0, "{}", p.len());
        }
        let files = program_files().expect("files");
        assert_eq!(files.len(), 2);
    }
}
