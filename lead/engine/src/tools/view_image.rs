//! `view_image` (spec 3.3, vision models only): checks an image under the thread's
//! workspace, uploads or outputs and records it in `viewed_images`; the bytes are not
//! kept in the state. Every refusal is an `Error: ...` tool message, in DeerFlow's
//! check order.

use std::collections::BTreeMap;
use std::path::Path;

use antler_protocol::messages::{FileContent, ThreadFileError};
use serde_json::Value;

use super::mcp_result;
use crate::catalog::builtins::VIEW_IMAGE;
use crate::model::ImagePart;
use crate::thread::context::{RunContext, VIRTUAL_USER_DATA};
use crate::thread::state::{Message, StateUpdate, ToolCall, ToolStatus, ViewedImage};

/// The reply on success.
pub const IMAGE_READ: &str = "Successfully read image";
/// A path outside the three allowed directories.
pub const ONLY_IMAGE_DIRS: &str = "Only image paths under /mnt/user-data/workspace, /mnt/user-data/uploads, /mnt/user-data/outputs are allowed";
pub const NOT_FOUND: &str = "Image file not found: {path}";
pub const NOT_A_FILE: &str = "Path is not a file: {path}";
pub const UNSUPPORTED: &str =
    "Unsupported image format: {suffix}. Supported formats: .jpg, .jpeg, .png, .webp, .gif";
pub const TOO_LARGE: &str =
    "Image file is too large: {n} bytes. Maximum supported size is 20971520 bytes";
pub const CHANGED: &str = "Image file changed during read";
pub const NOT_AN_IMAGE: &str = "File contents do not match a supported image format";
pub const MISMATCH: &str = "Image contents are {detected}, but file extension indicates {expected}";
pub const TRAVERSAL: &str = "Access denied: path traversal detected";

pub use super::mcp_result::MAX_IMAGE_BYTES;

const ALLOWED_DIRS: [&str; 3] = ["workspace", "uploads", "outputs"];

/// `view_image(image_path)`.
pub async fn view_image(call: &ToolCall, context: &RunContext) -> StateUpdate {
    let path = call
        .args
        .get("image_path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match check(path, context).await {
        Ok((image, _)) => StateUpdate {
            messages: vec![Message::tool(
                &call.id,
                VIEW_IMAGE,
                IMAGE_READ,
                ToolStatus::Success,
            )],
            viewed_images: Some(BTreeMap::from([(path.to_owned(), image)])),
            ..StateUpdate::default()
        },
        Err(reason) => StateUpdate::messages([Message::tool(
            &call.id,
            VIEW_IMAGE,
            format!("Error: {reason}"),
            ToolStatus::Error,
        )]),
    }
}

/// The images of the last AI message's `view_image` calls, once every call of that message
/// has its result (spec C.1), read again for the next model call only: each is checked as
/// the tool checked it and must still be the file it was (same size, same type); one that
/// is not gets no bytes. The images its MCP calls returned follow (see `mcp_result`). An
/// image is sent once: the call after the next one sees it no more.
pub async fn images_for_next_call(
    messages: &[Message],
    viewed: &BTreeMap<String, ViewedImage>,
    context: &RunContext,
) -> Vec<ImagePart> {
    use base64::Engine as _;
    let Some((at, calls)) = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::Ai { tool_calls, .. } => Some((i, tool_calls)),
            _ => None,
        })
    else {
        return Vec::new();
    };
    let answered = |id: &str| {
        messages[at + 1..]
            .iter()
            .any(|m| matches!(m, Message::Tool { tool_call_id, .. } if tool_call_id == id))
    };
    if calls.is_empty() || !calls.iter().all(|c| answered(&c.id)) {
        return Vec::new();
    }
    let mut parts = Vec::new();
    for call in calls.iter().filter(|c| c.name == VIEW_IMAGE) {
        let Some(path) = call.args.get("image_path").and_then(Value::as_str) else {
            continue;
        };
        let Some(seen) = viewed.get(path) else {
            continue;
        };
        if parts.iter().any(|p: &ImagePart| p.path == path) {
            continue;
        }
        let base64 = match check(path, context).await {
            Ok((now, bytes)) if now.size == seen.size && now.mime_type == seen.mime_type => {
                Some(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            _ => None,
        };
        parts.push(ImagePart {
            path: path.to_owned(),
            mime_type: seen.mime_type.clone(),
            base64,
        });
    }
    // The images MCP tools returned for the same calls.
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    parts.extend(mcp_result::attached_images(&messages[at + 1..], &ids));
    parts
}

async fn check(path: &str, context: &RunContext) -> Result<(ViewedImage, Vec<u8>), String> {
    let allowed = ALLOWED_DIRS.iter().any(|dir| {
        let root = format!("{VIRTUAL_USER_DATA}/{dir}");
        path == root || path.starts_with(&format!("{root}/"))
    });
    if !allowed {
        return Err(ONLY_IMAGE_DIRS.to_owned());
    }
    let relative = &path[VIRTUAL_USER_DATA.len() + 1..];
    if relative.split('/').any(|part| part == "..") {
        return Err(TRAVERSAL.to_owned());
    }
    let with_path = |template: &str| template.replacen("{path}", path, 1);
    // Everything beneath a handle on the thread's user data (on this disk or on the
    // sandbox-host that owns the thread): a link planted or swapped in by sandboxed code
    // never leads the read outside the thread.
    let read = context
        .files
        .read(path, MAX_IMAGE_BYTES)
        .await
        .map_err(|e| match e {
            ThreadFileError::Escape { .. } => TRAVERSAL.to_owned(),
            e @ ThreadFileError::Unavailable(_) => e.to_string(),
            _ => with_path(NOT_FOUND),
        })?;
    let real = Path::new(&read.resolved);
    if !ALLOWED_DIRS.iter().any(|dir| real.starts_with(dir)) {
        return Err(TRAVERSAL.to_owned());
    }
    if !read.is_file {
        return Err(with_path(NOT_A_FILE));
    }
    let actual = context.paths.user_data().join(real);
    let suffix = real
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy().to_lowercase()))
        .unwrap_or_default();
    let expected = match suffix.as_str() {
        ".jpg" | ".jpeg" => "image/jpeg",
        ".png" => "image/png",
        ".webp" => "image/webp",
        ".gif" => "image/gif",
        _ => return Err(UNSUPPORTED.replacen("{suffix}", &suffix, 1)),
    };
    let bytes = match read.content {
        FileContent::Bytes(bytes) => bytes,
        FileContent::TooLarge => {
            return Err(TOO_LARGE.replacen("{n}", &read.size.to_string(), 1));
        }
        FileContent::NotAFile => return Err(with_path(NOT_A_FILE)),
        FileContent::Unreadable => {
            return Err("Error reading image file: the file could not be read".to_owned())
        }
    };
    let meta_len = read.size;
    if bytes.len() as u64 != meta_len {
        return Err(CHANGED.to_owned());
    }
    let detected = detect(&bytes).ok_or_else(|| NOT_AN_IMAGE.to_owned())?;
    if detected != expected {
        return Err(MISMATCH.replacen("{detected}", detected, 1).replacen(
            "{expected}",
            expected,
            1,
        ));
    }
    Ok((
        ViewedImage {
            mime_type: detected.to_owned(),
            size: meta_len,
            actual_path: actual.display().to_string(),
        },
        bytes,
    ))
}

/// The image type from the magic bytes.
fn detect(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(&[0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
        Some("image/png")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use serde_json::json;

    const PNG: &[u8] = &[0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0];

    fn context(dir: &std::path::Path) -> RunContext {
        let context = RunContext::local(dir, "u1", "t1", "run-1");
        context.paths.create().unwrap();
        context
    }

    fn view(context: &RunContext, path: &str) -> StateUpdate {
        crate::tools::builtins::tests::block(view_image(
            &ToolCall {
                id: "c1".into(),
                name: VIEW_IMAGE.into(),
                args: json!({ "image_path": path }),
            },
            context,
        ))
    }

    fn text(update: &StateUpdate) -> &str {
        match &update.messages[0] {
            Message::Tool { content, .. } => content,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_png_in_outputs_is_recorded_without_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let context = context(dir.path());
        std::fs::write(context.paths.outputs().join("chart.png"), PNG).unwrap();
        let update = view(&context, "/mnt/user-data/outputs/chart.png");
        assert_eq!(text(&update), "Successfully read image");
        let images = update.viewed_images.unwrap();
        let image = &images["/mnt/user-data/outputs/chart.png"];
        assert_eq!((image.mime_type.as_str(), image.size), ("image/png", 10));
    }

    #[test]
    fn each_refusal_has_deerflows_text() {
        let dir = tempfile::tempdir().unwrap();
        let context = context(dir.path());
        let outputs = context.paths.outputs();
        std::fs::write(outputs.join("fake.png"), b"not an image").unwrap();
        std::fs::write(outputs.join("photo.jpg"), PNG).unwrap();
        std::fs::write(outputs.join("notes.txt"), b"x").unwrap();
        let cases = [
            ("/etc/passwd", "Error: Only image paths under /mnt/user-data/workspace, /mnt/user-data/uploads, /mnt/user-data/outputs are allowed"),
            ("/mnt/user-data/outputs/../../x.png", "Error: Access denied: path traversal detected"),
            ("/mnt/user-data/outputs/none.png", "Error: Image file not found: /mnt/user-data/outputs/none.png"),
            ("/mnt/user-data/outputs", "Error: Path is not a file: /mnt/user-data/outputs"),
            ("/mnt/user-data/outputs/notes.txt", "Error: Unsupported image format: .txt. Supported formats: .jpg, .jpeg, .png, .webp, .gif"),
            ("/mnt/user-data/outputs/fake.png", "Error: File contents do not match a supported image format"),
            ("/mnt/user-data/outputs/photo.jpg", "Error: Image contents are image/png, but file extension indicates image/jpeg"),
        ];
        for (path, expected) in cases {
            let update = view(&context, path);
            assert_eq!(text(&update), expected, "{path}");
            assert!(update.viewed_images.is_none());
        }
    }

    /// Swaps `a` and `b` (renameat2 RENAME_EXCHANGE) in a tight loop until `stop`.
    fn swapper(
        a: std::path::PathBuf,
        b: std::path::PathBuf,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        use std::os::unix::ffi::OsStrExt;
        std::thread::spawn(move || {
            let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
            let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: valid C strings; renameat2 only reads them.
                unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    );
                }
            }
        })
    }

    #[test]
    fn an_image_swapped_for_a_link_while_it_is_read_is_never_read_outside() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        // The host's image differs from the thread's in size, so a read of it shows.
        let mut host_png = PNG.to_vec();
        host_png.extend_from_slice(&[7; 100]);
        std::fs::write(host.path().join("i.png"), &host_png).unwrap();
        let context = context(dir.path());
        let outputs = context.paths.outputs();
        std::fs::create_dir(outputs.join("swap")).unwrap();
        std::fs::write(outputs.join("swap/i.png"), PNG).unwrap();
        std::os::unix::fs::symlink(host.path(), outputs.join("alt")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = swapper(outputs.join("swap"), outputs.join("alt"), stop.clone());
        for _ in 0..2_000 {
            let update = view(&context, "/mnt/user-data/outputs/swap/i.png");
            if let Some(images) = update.viewed_images {
                let image = &images["/mnt/user-data/outputs/swap/i.png"];
                assert_eq!(image.size, PNG.len() as u64, "a host file was read");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn an_image_behind_a_link_out_of_the_thread_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret.png"), PNG).unwrap();
        let context = context(dir.path());
        let outputs = context.paths.outputs();
        std::os::unix::fs::symlink(host.path(), outputs.join("out")).unwrap();
        std::os::unix::fs::symlink(host.path().join("secret.png"), outputs.join("s.png")).unwrap();
        std::os::unix::fs::symlink("../../../../../../../../../..", outputs.join("up")).unwrap();
        for path in [
            "/mnt/user-data/outputs/out/secret.png",
            "/mnt/user-data/outputs/s.png",
            "/mnt/user-data/outputs/up/tmp/x.png",
        ] {
            let update = view(&context, path);
            assert_eq!(
                text(&update),
                "Error: Access denied: path traversal detected",
                "{path}"
            );
            assert!(update.viewed_images.is_none());
        }
    }
}
