//! What `skill_manage` checks before it touches a skill (spec G.1): the skill's name,
//! the front matter of a `SKILL.md` it would write, and the path of a supporting file,
//! which must stay inside one of the skill's support directories even through symlinks.

use std::path::{Component, Path, PathBuf};

use serde_yaml::Value;

/// A name that is not hyphen-case.
pub const NAME_NOT_HYPHEN_CASE: &str =
    "Skill name must be hyphen-case using lowercase letters, digits, and hyphens only.";
/// A name over [`MAX_NAME_CHARS`].
pub const NAME_TOO_LONG: &str = "Skill name must be 64 characters or fewer.";
pub const MAX_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// DeerFlow's text for a skill without `SKILL.md` (kept as the spec's text: `skill_manage`
/// always writes the file it validates, so Antler never reports it).
#[allow(dead_code)]
pub const SKILL_MD_NOT_FOUND: &str = "SKILL.md not found";
pub const INVALID_FRONTMATTER: &str = "Invalid frontmatter format";
pub const UNEXPECTED_KEYS: &str = "Unexpected key(s) in SKILL.md frontmatter: {keys}";
pub const MISSING_NAME: &str = "Missing 'name' in frontmatter";
pub const MISSING_DESCRIPTION: &str = "Missing 'description' in frontmatter";
pub const DESCRIPTION_ANGLE_BRACKETS: &str = "Description cannot contain angle brackets (< or >)";
pub const DESCRIPTION_TOO_LONG: &str =
    "Description is too long ({n} characters). Maximum is 1024 characters.";
pub const NAME_MISMATCH: &str = "Frontmatter name '{p}' must match requested skill name '{n}'.";
/// The front matter keys a `SKILL.md` may have.
pub const ALLOWED_KEYS: [&str; 6] = [
    "allowed-tools",
    "compatibility",
    "description",
    "license",
    "metadata",
    "name",
];

pub const PATH_NEEDS_FILENAME: &str = "Supporting file path must include a filename.";
pub const PATH_NOT_RELATIVE: &str = "Supporting file path must be relative.";
pub const PATH_TRAVERSAL: &str =
    "Supporting file path must not contain parent-directory traversal.";
pub const PATH_NOT_IN_SUPPORT_DIR: &str =
    "Supporting files must live under one of: assets, references, scripts, templates.";
pub const PATH_ESCAPES: &str =
    "Supporting file path must stay within the selected support directory.";
/// The directories of a skill that may hold supporting files.
pub const SUPPORT_DIRS: [&str; 4] = ["assets", "references", "scripts", "templates"];

/// `name.strip()` checked against `^[a-z0-9]+(?:-[a-z0-9]+)*$` and the length limit.
pub fn skill_name(raw: &str) -> Result<&str, &'static str> {
    let name = raw.trim();
    let hyphen_case = !name.is_empty()
        && name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !hyphen_case {
        return Err(NAME_NOT_HYPHEN_CASE);
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(NAME_TOO_LONG);
    }
    Ok(name)
}

/// DeerFlow's `_validate_skill_frontmatter` on the text of a `SKILL.md` to be written
/// for skill `name`.
pub fn frontmatter(content: &str, name: &str) -> Result<(), String> {
    let text = content.strip_prefix('\u{feff}').unwrap_or(content);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Err(INVALID_FRONTMATTER.to_owned());
    };
    let end = rest
        .find("\n---")
        .ok_or_else(|| INVALID_FRONTMATTER.to_owned())?;
    let parsed: Value = serde_yaml::from_str(&rest[..end])
        .map_err(|e| format!("Invalid YAML in frontmatter: {e}"))?;
    let Value::Mapping(map) = parsed else {
        return Err("Frontmatter must be a YAML dictionary".to_owned());
    };
    let mut unexpected: Vec<String> = map
        .keys()
        .map(|k| match k {
            Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        })
        .filter(|k| !ALLOWED_KEYS.contains(&k.as_str()))
        .collect();
    if !unexpected.is_empty() {
        unexpected.sort();
        return Err(format!(
            "{}. Allowed properties are: {}",
            UNEXPECTED_KEYS.replacen("{keys}", &unexpected.join(", "), 1),
            ALLOWED_KEYS.join(", ")
        ));
    }
    let field = |key: &str| map.get(Value::String(key.to_owned()));
    let declared = match field("name") {
        None | Some(Value::Null) => return Err(MISSING_NAME.to_owned()),
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(_) => return Err(NAME_NOT_HYPHEN_CASE.to_owned()),
    };
    let description = match field("description") {
        None | Some(Value::Null) => return Err(MISSING_DESCRIPTION.to_owned()),
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(_) => return Err(MISSING_DESCRIPTION.to_owned()),
    };
    skill_name(&declared).map_err(str::to_owned)?;
    if description.contains(['<', '>']) {
        return Err(DESCRIPTION_ANGLE_BRACKETS.to_owned());
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(DESCRIPTION_TOO_LONG.replacen("{n}", &chars.to_string(), 1));
    }
    if declared != name {
        return Err(NAME_MISMATCH
            .replacen("{p}", &declared, 1)
            .replacen("{n}", name, 1));
    }
    Ok(())
}

/// DeerFlow's `ensure_safe_support_path`: where `path` is inside `skill_dir`. The path is
/// relative, has a filename, no `..`, starts with a support directory, and once every
/// symlink on the way is resolved it is still inside that directory of this skill.
pub fn support_path(skill_dir: &Path, path: &str) -> Result<PathBuf, &'static str> {
    if path.trim().is_empty() || path.ends_with('/') || path.ends_with('\\') {
        return Err(PATH_NEEDS_FILENAME);
    }
    let relative = Path::new(path);
    if relative.is_absolute() || path.starts_with('\\') || path.get(1..2) == Some(":") {
        return Err(PATH_NOT_RELATIVE);
    }
    let mut parts: Vec<&str> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str().ok_or(PATH_NOT_IN_SUPPORT_DIR)?),
            Component::CurDir => {}
            Component::ParentDir => return Err(PATH_TRAVERSAL),
            Component::RootDir | Component::Prefix(_) => return Err(PATH_NOT_RELATIVE),
        }
    }
    if parts
        .iter()
        .any(|p| p.contains('\\') && p.split('\\').any(|s| s == ".."))
    {
        return Err(PATH_TRAVERSAL);
    }
    let (support, rest) = parts.split_first().ok_or(PATH_NEEDS_FILENAME)?;
    if !SUPPORT_DIRS.contains(support) || rest.is_empty() {
        return Err(PATH_NOT_IN_SUPPORT_DIR);
    }
    let target = parts
        .iter()
        .fold(skill_dir.to_path_buf(), |p, part| p.join(part));
    // The support directory as it should be: inside the real skill directory.
    let real_skill = skill_dir.canonicalize().map_err(|_| PATH_ESCAPES)?;
    let allowed = real_skill.join(support);
    // Resolve the deepest part of the target that exists (symlinks included).
    let mut existing = target.as_path();
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let resolved = loop {
        if existing.symlink_metadata().is_ok() {
            match existing.canonicalize() {
                Ok(real) => break real,
                // A dangling symlink: where it would write cannot be known.
                Err(_) => return Err(PATH_ESCAPES),
            }
        }
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            return Err(PATH_ESCAPES);
        };
        missing.push(name);
        existing = parent;
    };
    let resolved = missing.iter().rev().fold(resolved, |p, part| p.join(part));
    if resolved == allowed || !resolved.starts_with(&allowed) {
        return Err(PATH_ESCAPES);
    }
    Ok(target)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_hyphen_case_and_short() {
        assert_eq!(skill_name("  my-skill2 "), Ok("my-skill2"));
        for bad in ["", "My-skill", "a--b", "-a", "a-", "a_b", "a b", "../x"] {
            assert_eq!(skill_name(bad), Err(NAME_NOT_HYPHEN_CASE), "{bad}");
        }
        assert_eq!(skill_name(&"a".repeat(65)), Err(NAME_TOO_LONG));
        assert!(skill_name(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn frontmatter_errors_say_what_is_wrong() {
        let ok = "---\nname: x\ndescription: Does x.\n---\n# X\n";
        assert_eq!(frontmatter(ok, "x"), Ok(()));
        assert_eq!(
            frontmatter("# no front", "x").unwrap_err(),
            INVALID_FRONTMATTER
        );
        assert_eq!(
            frontmatter("---\nname: x\n---\n", "x").unwrap_err(),
            MISSING_DESCRIPTION
        );
        assert_eq!(
            frontmatter("---\ndescription: d\n---\n", "x").unwrap_err(),
            MISSING_NAME
        );
        assert!(frontmatter(
            "---\nname: x\ndescription: d\nzeta: 1\nalpha: 2\n---\n",
            "x"
        )
        .unwrap_err()
        .starts_with("Unexpected key(s) in SKILL.md frontmatter: alpha, zeta."));
        assert_eq!(
            frontmatter("---\nname: x\ndescription: a <b>\n---\n", "x").unwrap_err(),
            DESCRIPTION_ANGLE_BRACKETS
        );
        let long = format!("---\nname: x\ndescription: {}\n---\n", "d".repeat(1025));
        assert_eq!(
            frontmatter(&long, "x").unwrap_err(),
            "Description is too long (1025 characters). Maximum is 1024 characters."
        );
        assert_eq!(
            frontmatter(ok, "y").unwrap_err(),
            "Frontmatter name 'x' must match requested skill name 'y'."
        );
    }

    #[test]
    fn support_paths_stay_in_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("s");
        std::fs::create_dir_all(skill.join("scripts")).unwrap();
        assert_eq!(
            support_path(&skill, "scripts/run.sh").unwrap(),
            skill.join("scripts/run.sh")
        );
        assert!(support_path(&skill, "templates/a/b.md").is_ok());
        assert_eq!(support_path(&skill, "scripts/"), Err(PATH_NEEDS_FILENAME));
        assert_eq!(support_path(&skill, ""), Err(PATH_NEEDS_FILENAME));
        assert_eq!(support_path(&skill, "/etc/passwd"), Err(PATH_NOT_RELATIVE));
        assert_eq!(support_path(&skill, "scripts/../../x"), Err(PATH_TRAVERSAL));
        assert_eq!(
            support_path(&skill, "SKILL.md"),
            Err(PATH_NOT_IN_SUPPORT_DIR)
        );
        assert_eq!(support_path(&skill, "bin/x"), Err(PATH_NOT_IN_SUPPORT_DIR));
        assert_eq!(
            support_path(&skill, "scripts"),
            Err(PATH_NOT_IN_SUPPORT_DIR)
        );
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, skill.join("scripts/out")).unwrap();
        assert_eq!(support_path(&skill, "scripts/out/x.sh"), Err(PATH_ESCAPES));
        std::os::unix::fs::symlink(&outside, skill.join("assets")).unwrap();
        assert_eq!(support_path(&skill, "assets/x.png"), Err(PATH_ESCAPES));
        std::os::unix::fs::symlink("/nonexistent/x", skill.join("scripts/dangling")).unwrap();
        assert_eq!(support_path(&skill, "scripts/dangling"), Err(PATH_ESCAPES));
    }
}
