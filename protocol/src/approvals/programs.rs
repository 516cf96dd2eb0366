//! What the shell analysis knows of particular programs: wrappers that run another program
//! (sudo, env, nice, nohup, timeout, time, command, exec, xargs, `find -exec`, ...), whose
//! inner program is recorded after the wrapper; shells whose `-c` string is parsed again;
//! programs that run code the analysis cannot see (eval, source, a shell reading a script or
//! standard input); git's global options; and the paths a program writes by its arguments.

use super::shell::{SimpleCommand, Walker, Word};

/// How many wrappers deep a command is followed.
const MAX_WRAPPERS: usize = 16;

/// Shells whose `-c` string is a command line.
const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "ash", "mksh", "fish"];

/// What a wrapper or shell runs.
enum Inner {
    /// A program, with its arguments.
    Run(SimpleCommand),
    /// Shell code (`bash -c`'s string).
    Parse(String),
    /// Something the analysis cannot see.
    Refuse(String),
}

/// Records `command` and every program it runs through wrappers.
pub(super) fn run(walker: &mut Walker, command: SimpleCommand) {
    run_nested(walker, command, 0);
}

fn run_nested(walker: &mut Walker, mut command: SimpleCommand, depth: usize) {
    if depth >= MAX_WRAPPERS {
        return walker.refuse("wrappers nested too deeply");
    }
    add_argument_writes(&mut command);
    let inner = inner_commands(&command);
    let git = without_git_options(&command);
    walker.record(command);
    if let Some(git) = git {
        walker.record(git);
    }
    for inner in inner {
        match inner {
            Inner::Run(command) => run_nested(walker, command, depth + 1),
            Inner::Parse(code) => walker.program_text(&code),
            Inner::Refuse(reason) => walker.refuse(reason),
        }
    }
}

/// What `command` runs as a wrapper or shell (nothing for an ordinary program).
fn inner_commands(command: &SimpleCommand) -> Vec<Inner> {
    let args = &command.args;
    let inner = match command.program.as_str() {
        "sudo" => {
            let start = skip_options(
                args,
                "ugpChDrtURT",
                &[
                    "--user",
                    "--group",
                    "--prompt",
                    "--close-from",
                    "--chdir",
                    "--role",
                    "--type",
                    "--other-user",
                    "--command-timeout",
                    "--host",
                    "--chroot",
                ],
            );
            // sudoedit, list, validate: no program runs.
            let no_program = args[..start].iter().any(|a| {
                let t = a.text.as_str();
                matches!(t, "--edit" | "--list" | "--validate" | "--version")
                    || (short_cluster(t).is_some_and(|c| c.contains(['e', 'l', 'v', 'V'])))
            });
            if no_program {
                return Vec::new();
            }
            from_words(skip_assignments(&args[start..]))
        }
        "doas" => from_words(&args[skip_options(args, "uC", &[])..]),
        "env" => {
            let start = skip_options(args, "uCS", &["--unset", "--chdir", "--split-string"]);
            let split = args[..start].iter().any(|a| {
                a.text.starts_with("--split-string")
                    || short_cluster(&a.text).is_some_and(|c| c.contains('S'))
            });
            if split {
                return refuse("env -S splits a string into a command");
            }
            from_words(skip_assignments(&args[start..]))
        }
        "nice" => from_words(&args[skip_options(args, "n", &["--adjustment"])..]),
        "ionice" => from_words(&args[skip_options(args, "cn", &["--class"])..]),
        "stdbuf" => {
            from_words(&args[skip_options(args, "ioe", &["--input", "--output", "--error"])..])
        }
        "nohup" | "builtin" | "busybox" | "setsid" | "unbuffer" => {
            from_words(&args[skip_options(args, "", &[])..])
        }
        "timeout" => {
            let start = skip_options(args, "sk", &["--signal", "--kill-after"]);
            // The duration, then the program.
            from_words(args.get(start + 1..).unwrap_or(&[]))
        }
        "time" => from_words(&args[skip_options(args, "fo", &["--format", "--output"])..]),
        "command" => {
            let start = skip_options(args, "", &[]);
            // `command -v git` only looks the program up.
            if args[..start]
                .iter()
                .any(|a| short_cluster(&a.text).is_some_and(|c| c.contains(['v', 'V'])))
            {
                return Vec::new();
            }
            from_words(&args[start..])
        }
        "exec" => from_words(&args[skip_options(args, "a", &[])..]),
        "chroot" => {
            let start = skip_options(args, "", &["--userspec", "--groups"]);
            from_words(args.get(start + 1..).unwrap_or(&[]))
        }
        "xargs" => xargs(args),
        "find" => return find_exec(args),
        "eval" => return refuse("eval runs text built at run time"),
        "source" | "." => return refuse("source runs the commands of a file"),
        "trap" => {
            let operands = &args[skip_options(args, "", &[])..];
            match operands {
                [action, _, ..] if action.dynamic => {
                    return refuse("a trap action from an expansion")
                }
                [action, _, ..] if action.text != "-" => Some(Inner::Parse(action.text.clone())),
                _ => None,
            }
        }
        "su" | "runuser" => Some(su(args)),
        shell if SHELLS.contains(&shell) => shell_command(args),
        _ => None,
    };
    inner.into_iter().collect()
}

fn refuse(reason: &str) -> Vec<Inner> {
    vec![Inner::Refuse(reason.to_owned())]
}

/// The command made of `words` (a program and its arguments), if any.
fn from_words(words: &[Word]) -> Option<Inner> {
    let (program, rest) = words.split_first()?;
    if program.dynamic {
        return Some(Inner::Refuse(format!(
            "the program name comes from an expansion: `{}`",
            program.text
        )));
    }
    Some(Inner::Run(SimpleCommand::new(&program.text, rest.to_vec())))
}

/// The index of the first operand after the options at the start of `args`. The short
/// options in `short_value` and the long ones in `long_value` take the next word as their
/// value (unless it is attached: `-uroot`, `--user=root`). A word from an expansion ends the
/// options (it is taken as the operand).
fn skip_options(args: &[Word], short_value: &str, long_value: &[&str]) -> usize {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg.dynamic {
            return i;
        }
        let text = arg.text.as_str();
        if text == "--" {
            return i + 1;
        }
        if let Some(long) = text.strip_prefix("--") {
            let takes_value = !long.contains('=') && long_value.contains(&text);
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        let Some(cluster) = short_cluster(text) else {
            return i;
        };
        let mut takes_next = false;
        for (at, c) in cluster.char_indices() {
            if short_value.contains(c) {
                // The rest of the cluster is the value; with none, the next word is.
                takes_next = at + c.len_utf8() == cluster.len();
                break;
            }
        }
        i += if takes_next { 2 } else { 1 };
    }
    args.len()
}

/// The letters of a short-option word (`-rf` → `rf`), if it is one.
fn short_cluster(text: &str) -> Option<&str> {
    let cluster = text.strip_prefix('-')?;
    (!cluster.is_empty() && !cluster.starts_with('-')).then_some(cluster)
}

/// `args` after the leading `NAME=value` words.
fn skip_assignments(args: &[Word]) -> &[Word] {
    let start = args
        .iter()
        .position(|a| !is_assignment(a))
        .unwrap_or(args.len());
    &args[start..]
}

fn is_assignment(word: &Word) -> bool {
    let literal = word.literal_part();
    match literal.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        None => false,
    }
}

/// `xargs [options] [program [args]]`: the program runs with the items read from standard
/// input, unknown here, appended (or in place of the replace string).
fn xargs(args: &[Word]) -> Option<Inner> {
    let start = skip_options(
        args,
        "adEILnPs",
        &[
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
    );
    let mut replace: Option<String> = None;
    for (i, arg) in args[..start].iter().enumerate() {
        let text = arg.text.as_str();
        if text == "-I" {
            replace = args.get(i + 1).map(|w| w.text.clone());
        } else if text == "-i" || text == "--replace" {
            replace = Some("{}".to_owned());
        } else if let Some(r) = text
            .strip_prefix("-I")
            .or(text.strip_prefix("--replace="))
            .or(text.strip_prefix("-i"))
        {
            replace = Some(r.to_owned());
        }
    }
    let operands = &args[start..];
    if operands.is_empty() {
        return Some(Inner::Run(SimpleCommand::new(
            "echo",
            vec![Word::unknown("{items}")],
        )));
    }
    let mut inner = from_words(operands)?;
    if let Inner::Run(command) = &mut inner {
        match replace.filter(|r| !r.is_empty()) {
            Some(r) => {
                for arg in &mut command.args {
                    if arg.text.contains(&r) {
                        *arg = Word::unknown(arg.text.clone());
                    }
                }
            }
            None => command.args.push(Word::unknown("{items}")),
        }
    }
    Some(inner)
}

/// The commands of `find`'s `-exec`, `-execdir`, `-ok` and `-okdir` actions; `{}` is each
/// path found, unknown here.
fn find_exec(args: &[Word]) -> Vec<Inner> {
    let mut commands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let action = &args[i];
        i += 1;
        if action.dynamic
            || !matches!(
                action.text.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir"
            )
        {
            continue;
        }
        let end = args[i..]
            .iter()
            .position(|a| !a.dynamic && (a.text == ";" || a.text == "+"))
            .map_or(args.len(), |p| i + p);
        let words: Vec<Word> = args[i..end]
            .iter()
            .map(|a| match a.text.contains("{}") {
                true => Word::unknown(a.text.clone()),
                false => a.clone(),
            })
            .collect();
        commands.extend(from_words(&words));
        i = end + 1;
    }
    commands
}

/// A shell: its `-c` string is parsed again; a script file or standard input cannot be seen.
fn shell_command(args: &[Word]) -> Option<Inner> {
    let mut command_mode = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg.dynamic {
            break;
        }
        let text = arg.text.as_str();
        if text == "--" || text == "-" {
            i += 1;
            break;
        }
        if matches!(text, "--version" | "--help") {
            return None;
        }
        if text.starts_with("--") {
            i += if matches!(text, "--rcfile" | "--init-file") {
                2
            } else {
                1
            };
            continue;
        }
        let cluster = text.strip_prefix('-').or_else(|| text.strip_prefix('+'));
        match cluster {
            Some(cluster) if !cluster.is_empty() => {
                command_mode |= cluster.contains('c');
                // `-o name` / `-O name` take the option's name.
                i += if cluster.contains(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    let reason = match (command_mode, args.get(i)) {
        (true, Some(code)) if !code.dynamic => return Some(Inner::Parse(code.text.clone())),
        (true, Some(_)) => "a shell runs a command string from an expansion",
        (true, None) => return None,
        (false, Some(_)) => "a shell runs a script file",
        (false, None) => "a shell reads commands from standard input",
    };
    Some(Inner::Refuse(reason.to_owned()))
}

/// `su [options] [user] -c CMD`: CMD is parsed again; without `-c`, a shell reads standard input.
fn su(args: &[Word]) -> Inner {
    for (i, arg) in args.iter().enumerate() {
        if arg.dynamic {
            continue;
        }
        let text = arg.text.as_str();
        let code = if matches!(text, "-c" | "--command" | "--session-command") {
            args.get(i + 1)
        } else if let Some(code) = text
            .strip_prefix("--command=")
            .or(text.strip_prefix("--session-command="))
        {
            return Inner::Parse(code.to_owned());
        } else {
            continue;
        };
        return match code {
            Some(code) if !code.dynamic => Inner::Parse(code.text.clone()),
            Some(_) => Inner::Refuse("su runs a command string from an expansion".to_owned()),
            None => Inner::Refuse("su -c without a command".to_owned()),
        };
    }
    Inner::Refuse("su without -c reads commands from standard input".to_owned())
}

/// `git` with its global options (`-C dir`, `-c k=v`, `--no-pager`, ...) removed, when it
/// has any: `git -C x push` is also `git push`.
fn without_git_options(command: &SimpleCommand) -> Option<SimpleCommand> {
    if command.program != "git" {
        return None;
    }
    let args = &command.args;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg.dynamic {
            return None;
        }
        let text = arg.text.as_str();
        if matches!(
            text,
            "-C" | "-c"
                | "--git-dir"
                | "--work-tree"
                | "--namespace"
                | "--config-env"
                | "--super-prefix"
                | "--list-cmds"
        ) {
            i += 2;
        } else if text.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    (i > 0 && i < args.len()).then(|| SimpleCommand::new("git", args[i..].to_vec()))
}

/// Adds the paths `command` writes by its arguments to its writes.
fn add_argument_writes(command: &mut SimpleCommand) {
    let operands: Vec<&Word> = operands(&command.args).collect();
    let written: Vec<Word> = match command.program.as_str() {
        "tee" | "touch" | "mkdir" | "rm" | "rmdir" | "truncate" | "shred" | "unlink" => {
            operands.into_iter().cloned().collect()
        }
        "chmod" | "chown" | "chgrp" => operands.into_iter().skip(1).cloned().collect(),
        "cp" | "mv" | "install" | "ln" | "rsync" | "scp" => {
            let target = command.args.iter().enumerate().find_map(|(i, a)| {
                match a.text.strip_prefix("--target-directory=") {
                    Some(dir) => Some(Word::literal(dir)),
                    None if a.text == "-t" => command.args.get(i + 1).cloned(),
                    None => None,
                }
            });
            match target {
                Some(target) => vec![target],
                None if operands.len() >= 2 => {
                    operands.last().map(|w| (*w).clone()).into_iter().collect()
                }
                None => Vec::new(),
            }
        }
        "dd" => command
            .args
            .iter()
            .filter_map(|a| {
                let path = a.text.strip_prefix("of=")?;
                Some(Word {
                    text: path.to_owned(),
                    dynamic: a.dynamic,
                    glob: false,
                    literal_len: a.literal_len.saturating_sub(3),
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    command.writes.extend(written);
}

/// The words of `args` that are not options (everything after `--`).
pub(super) fn operands(args: &[Word]) -> impl Iterator<Item = &Word> {
    let mut after_dashes = false;
    args.iter().filter(move |a| {
        if after_dashes {
            return true;
        }
        if !a.dynamic && a.text == "--" {
            after_dashes = true;
            return false;
        }
        !(a.literal_part().starts_with('-') && a.text.len() > 1)
    })
}
