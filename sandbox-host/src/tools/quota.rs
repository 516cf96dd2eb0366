//! `sandbox.disk_quota`: what a thread's user-data directories may hold, counted beneath a
//! handle on them (links never followed). A write that would pass it is refused; a command
//! that passed it gets the error in front of its output. The limit a command cannot pass
//! is the user's own filesystem (`crate::user_volume`), sized by `sandbox.user_disk_quota`
//! or an explicitly set `disk_quota`.

use std::path::Path;

use antler_protocol::beneath::Dir;

use super::ToolContext;

/// The error past the quota; `{used}` and `{quota}` in bytes.
pub const QUOTA_EXCEEDED: &str = "Error: Disk quota exceeded: the thread's files under /mnt/user-data would use {used} bytes, over the sandbox.disk_quota of {quota} bytes. Delete files under /mnt/user-data to make room.";

fn message(used: u64, quota: u64) -> String {
    QUOTA_EXCEEDED
        .replacen("{used}", &used.to_string(), 1)
        .replacen("{quota}", &quota.to_string(), 1)
}

/// The bytes the thread's user-data directories hold now (`None` when unreadable).
pub fn usage(user_data: &Path) -> Option<u64> {
    Dir::open(user_data).and_then(|d| d.usage()).ok()
}

/// The error when the thread is over its quota now.
pub fn over(ctx: &ToolContext) -> Option<String> {
    let used = usage(&ctx.map.thread.user_data)?;
    (used > ctx.settings.disk_quota).then(|| message(used, ctx.settings.disk_quota))
}

/// The error when writing `adding` bytes in place of `replacing` would pass the quota.
pub fn check_write(ctx: &ToolContext, adding: u64, replacing: u64) -> Result<(), String> {
    let Some(used) = usage(&ctx.map.thread.user_data) else {
        return Ok(());
    };
    let after = used.saturating_sub(replacing).saturating_add(adding);
    if after > ctx.settings.disk_quota {
        return Err(message(after, ctx.settings.disk_quota));
    }
    Ok(())
}
