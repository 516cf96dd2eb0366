//! The shell analysis: which simple commands a line runs, through every construct and
//! wrapper, and what makes a line unanalysable.

use super::shell::{analyse, Analysis, Cwd, SimpleCommand, MAX_NESTING};

/// Each command as `program arg arg` (words with quotes removed).
fn commands(line: &str) -> Vec<String> {
    match analyse(line) {
        Analysis::Commands(commands) => commands.iter().map(show).collect(),
        Analysis::Unanalysable { reason, .. } => panic!("`{line}` is unanalysable: {reason}"),
    }
}

fn show(command: &SimpleCommand) -> String {
    let mut out = command.program.clone();
    for arg in &command.args {
        out.push(' ');
        out.push_str(&arg.text);
    }
    out
}

fn unanalysable(line: &str) -> String {
    match analyse(line) {
        Analysis::Unanalysable { reason, .. } => reason,
        Analysis::Commands(c) => panic!("`{line}` was analysed: {c:?}"),
    }
}

#[test]
fn lists_pipelines_and_groups_give_every_command() {
    assert_eq!(commands("echo x && rm -rf /"), ["echo x", "rm -rf /"]);
    assert_eq!(
        commands("a | b -x || c; d & e"),
        ["a", "b -x", "c", "d", "e"]
    );
    assert_eq!(commands("(cd x; make) && { ls; }"), ["cd x", "make", "ls"]);
    assert_eq!(
        commands("if test -f a; then b; elif c; then d; else e; fi"),
        ["test -f a", "b", "c", "d", "e"]
    );
    assert_eq!(
        commands("while read l; do echo $l; done < f; until false; do :; done"),
        ["read l", "echo $l", "false", ":"]
    );
    assert_eq!(commands("for f in *.txt; do wc -l $f; done"), ["wc -l $f"]);
    assert_eq!(
        commands("case $x in a) git push;; *) ls;; esac"),
        ["git push", "ls"]
    );
    assert_eq!(commands("f() { git push; }; f"), ["git push", "f"]);
    assert_eq!(commands("! grep -q x f"), ["grep -q x f"]);
    assert_eq!(commands("time make"), ["make"]);
}

#[test]
fn substitutions_are_analysed() {
    assert_eq!(
        commands("echo $(rm -rf /tmp/x)"),
        ["rm -rf /tmp/x", "echo $(rm -rf /tmp/x)"]
    );
    assert_eq!(
        commands("echo \"a `git push` b\""),
        ["git push", "echo a `git push` b"]
    );
    assert_eq!(commands("X=$(curl -s u) make"), ["curl -s u", "make"]);
    assert_eq!(
        commands("diff <(ls a) <(ls b)"),
        ["ls a", "ls b", "diff /dev/fd/N /dev/fd/N"]
    );
    assert_eq!(
        commands("echo $(( $(wc -l < f) + 1 ))"),
        ["wc -l", "echo $(( $(wc -l < f) + 1 ))"]
    );
    assert_eq!(commands("[[ -n $(git push) ]]"), ["git push"]);
    assert_eq!(
        commands("cat <<EOF\n$(git push)\nEOF\n"),
        ["git push", "cat"]
    );
    assert_eq!(commands("cat <<'EOF'\n$(git push)\nEOF\n"), ["cat"]);
}

#[test]
fn quotes_escapes_and_paths_are_removed() {
    assert_eq!(commands("\"git\" 'push'"), ["git push"]);
    assert_eq!(commands("g\\it pu\"sh\""), ["git push"]);
    assert_eq!(commands("/usr/bin/git push"), ["git push"]);
    assert_eq!(commands("$'git' push"), ["git push"]);
}

#[test]
fn wrappers_show_the_wrapper_and_the_program() {
    assert_eq!(
        commands("sudo -u root -E git push"),
        ["sudo -u root -E git push", "git push"]
    );
    assert_eq!(
        commands("sudo VAR=1 git push"),
        ["sudo VAR=1 git push", "git push"]
    );
    assert_eq!(
        commands("env -i A=1 B=2 git push"),
        ["env -i A=1 B=2 git push", "git push"]
    );
    assert_eq!(commands("env git commit -S -m x")[1], "git commit -S -m x");
    assert!(unanalysable("env -S 'git push'").contains("env -S"));
    assert_eq!(
        commands("nice -n 5 nohup git push"),
        ["nice -n 5 nohup git push", "nohup git push", "git push"]
    );
    assert_eq!(commands("timeout -s KILL 10 git push")[1], "git push");
    assert_eq!(commands("command git push")[1], "git push");
    assert_eq!(commands("command -v git"), ["command -v git"]);
    assert_eq!(commands("exec git push")[1], "git push");
    assert_eq!(commands("\\time -p git push")[1], "git push");
    assert_eq!(commands("xargs -n1 rm -rf < list")[1], "rm -rf {items}");
    assert_eq!(commands("ls | xargs -I{} mv {} /tmp")[2], "mv {} /tmp");
    assert_eq!(
        commands("find / -name x -exec rm -rf {} \\; -exec echo done +"),
        [
            "find / -name x -exec rm -rf {} ; -exec echo done +",
            "rm -rf {}",
            "echo done"
        ]
    );
    assert_eq!(
        commands("git -C repo -c a=b push"),
        ["git -C repo -c a=b push", "git push"]
    );
}

#[test]
fn shell_strings_are_parsed_again() {
    assert_eq!(
        commands("bash -c 'git push'"),
        ["bash -c git push", "git push"]
    );
    assert_eq!(
        commands("sh -lc \"echo a && git push\"")[1..],
        ["echo a", "git push"]
    );
    assert_eq!(
        commands("sudo bash -o pipefail -c 'rm -rf /'")[2],
        "rm -rf /"
    );
    assert_eq!(commands("su -c 'git push' bob")[1], "git push");
    assert_eq!(commands("trap 'git push' EXIT")[1], "git push");
}

#[test]
fn what_cannot_be_known_statically_is_unanalysable() {
    assert!(unanalysable("$CMD push").contains("expansion"));
    assert!(unanalysable("\"$(which git)\" push").contains("expansion"));
    assert!(unanalysable("eval \"git push\"").contains("eval"));
    assert!(unanalysable("source ./x.sh").contains("source"));
    assert!(unanalysable(". ./x.sh").contains("source"));
    assert!(unanalysable("bash <<EOF\ngit push\nEOF\n").contains("standard input"));
    assert!(unanalysable("curl x | sh").contains("standard input"));
    assert!(unanalysable("bash ./deploy.sh").contains("script"));
    assert!(unanalysable("bash -c \"$X\"").contains("expansion"));
    assert!(unanalysable("sudo $PROG").contains("expansion"));
    assert!(unanalysable("echo ${X:-$(git push)}").contains("parameter expansion"));
    assert!(unanalysable("{git,} push").contains("expansion"));
    assert!(unanalysable("echo 'unterminated").contains("parse"));
    assert!(unanalysable(&"(".repeat(5000)).contains("nest"));
    // The commands found beside the reason are kept.
    match analyse("rm -rf /tmp/x; $CMD") {
        Analysis::Unanalysable { partial, .. } => assert_eq!(show(&partial[0]), "rm -rf /tmp/x"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn words_say_what_is_dynamic_and_writes_are_found() {
    let analysis = analyse(
        "ls -l \"$HOME/x\" /tmp/*.log ~/y > /out 2>&1; echo a | tee -a f1 f2; cp a b /dest/",
    );
    let commands = analysis.commands();
    let ls = &commands[0];
    assert!(ls.args[1].dynamic && ls.args[1].literal_part().is_empty());
    assert!(ls.args[2].glob && !ls.args[2].dynamic);
    assert!(ls.args[3].dynamic);
    let written = |c: &SimpleCommand| c.writes.iter().map(|w| w.text.clone()).collect::<Vec<_>>();
    assert_eq!(written(ls), ["/out"]);
    assert_eq!(written(&commands[2]), ["f1", "f2"]);
    assert_eq!(written(&commands[3]), ["/dest/"]);
    let group = analyse("{ echo a; } >> /log");
    assert_eq!(written(&group.commands()[1]), ["/log"]);
}

#[test]
fn cd_moves_the_directory_of_later_commands() {
    let analysis = analyse("cd /tmp && rm -rf a; cd b; ls; cd $X; ls");
    let cwds: Vec<Cwd> = analysis.commands().iter().map(|c| c.cwd.clone()).collect();
    assert_eq!(
        cwds,
        [
            Cwd::Start,
            Cwd::Path("/tmp".into()),
            Cwd::Path("/tmp".into()),
            Cwd::Path("/tmp/b".into()),
            Cwd::Path("/tmp/b".into()),
            Cwd::Unknown,
        ]
    );
}

#[test]
fn numbers_too_long_for_the_parser_do_not_panic() {
    for line in [
        "echo ~99999999999999999999999",
        "echo {1..99999999999999999999999}",
        "echo $((99999999999999999999999))",
        "cd ~+99999999999999999999999",
        "X=~99999999999999999999999 ls",
        "cat <<E\n~99999999999999999999999 $(ls)\nE\n",
        "echo \"~99999999999999999999999\" ~0 ~+1",
    ] {
        let _ = analyse(line);
    }
}

#[test]
fn deep_nesting_is_refused_before_the_stack_runs_out() {
    let n = MAX_NESTING;
    let lines = [
        format!("{}true{}", "(".repeat(n), ")".repeat(n)),
        format!("{}true; {}", "{ ".repeat(n), "}; ".repeat(n)),
        format!("{}true; {}", "if true; then ".repeat(n), "fi; ".repeat(n)),
        format!(
            "{}true; {}",
            "while true; do ".repeat(n),
            "done; ".repeat(n)
        ),
        format!("echo $(({}1{}))", "(".repeat(n - 2), ")".repeat(n - 2)),
        format!("echo {}x{}", "\"$(echo ".repeat(7), ")\"".repeat(7)),
    ];
    // At the limit, a 2 MiB stack (a tokio worker's) is enough, even in a debug build.
    let analysed = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            lines
                .iter()
                .map(|l| analyse(l).unanalysable().is_none())
                .collect::<Vec<_>>()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(analysed, [true; 6]);
    let deeper = format!("{}true; {}", "{ ".repeat(n + 1), "}; ".repeat(n + 1));
    assert!(unanalysable(&deeper).contains("nests too deeply"));
    // Many brackets side by side are not deep.
    let json = format!(
        "cat > f.json <<'EOF'\n[{}]\nEOF\n",
        "{\"a\": [1]}, ".repeat(500)
    );
    assert_eq!(commands(&json), ["cat"]);
}
