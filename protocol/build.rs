//! Fingerprints the wire schema: the source of every type that crosses a connection
//! (`src/messages/`, the envelope, the handshake, the codec, the framing and the JSON value
//! type), with comments, blank lines, indentation and test modules left out, hashed into
//! `SCHEMA_FINGERPRINT`.
//! Two builds whose messages differ get different fingerprints, and the handshake refuses
//! to join them (bincode would otherwise fail every frame after a successful hello).

use std::{fs, path::Path};

/// The files whose types are encoded on the wire.
const WIRE_FILES: &[&str] = &[
    "src/envelope.rs",
    "src/handshake.rs",
    "src/codec.rs",
    "src/frame.rs",
    "src/json.rs",
];
const WIRE_DIR: &str = "src/messages";

fn main() {
    let mut files: Vec<String> = WIRE_FILES.iter().map(|f| f.to_string()).collect();
    let mut dir: Vec<String> = fs::read_dir(WIRE_DIR)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| format!("{WIRE_DIR}/{}", e.file_name().to_string_lossy()))
                .filter(|p| p.ends_with(".rs"))
                .collect()
        })
        .unwrap_or_default();
    dir.sort();
    files.extend(dir);
    println!("cargo:rerun-if-changed={WIRE_DIR}");
    // FNV-1a, 64 bits: a fingerprint, not a defence against anyone.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
        let text = fs::read_to_string(file).unwrap_or_default();
        for byte in file.bytes().chain(significant(&text).bytes()) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let out = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let _ = fs::write(
        Path::new(&out).join("schema_fingerprint.rs"),
        format!("/// The wire schema's fingerprint (see `build.rs`).\npub const SCHEMA_FINGERPRINT: u64 = 0x{hash:016x};\n"),
    );
}

/// The code of a source file: its lines trimmed, without comment lines, blank lines and
/// anything from the test module (`#[cfg(test)]`) on.
fn significant(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
