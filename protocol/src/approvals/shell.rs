//! Shell analysis: a bash command line → every simple command it would run, found in the
//! syntax tree (brush-parser), never in the raw text: each command of pipelines and lists,
//! subshells, groups, compound bodies, function bodies, command and process substitutions,
//! `bash -c` strings, and the programs behind wrappers ([`super::programs`]). Words
//! ([`super::words`]) come with quotes removed and say whether any part is known only at run
//! time. A program that cannot be known statically makes the whole analysis
//! [`Analysis::Unanalysable`]. Never panics.

use brush_parser::ast;
use brush_parser::ParserOptions;

use super::programs;

/// The longest command line analysed; a longer one is unanalysable.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// How deeply `bash -c` strings and substitutions may nest.
const MAX_DEPTH: usize = 8;
/// The deepest nesting of brackets and compound keywords a text may have: the parser recurses
/// on each level (about 5 KiB of stack a level in a debug build; 350 levels overflow a 2 MiB
/// thread stack), and the stack is not ours to overflow.
pub const MAX_NESTING: usize = 100;

/// One word of a command, quotes removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The word's text; an expansion (`$X`, `$(…)`, `~`) stands as written.
    pub text: String,
    /// Whether some part of the word is known only at run time (an expansion, a brace
    /// expansion, an ANSI-C string with escapes).
    pub dynamic: bool,
    /// Whether the word has unquoted glob characters (`*`, `?`, `[`).
    pub glob: bool,
    /// The length of `text`'s leading part that is known statically.
    pub literal_len: usize,
}

impl Word {
    /// A word known statically.
    pub fn literal(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            literal_len: text.len(),
            text,
            dynamic: false,
            glob: false,
        }
    }

    /// A word known only at run time (`{}` of `find -exec`, the items `xargs` appends).
    pub fn unknown(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            dynamic: true,
            glob: false,
            literal_len: 0,
        }
    }

    /// The statically known leading part.
    pub fn literal_part(&self) -> &str {
        self.text.get(..self.literal_len).unwrap_or("")
    }

    /// Whether the word may be an option (`-x`, `--name`): it starts with `-`, or with an
    /// expansion.
    pub fn may_be_option(&self) -> bool {
        let lit = self.literal_part();
        (lit.starts_with('-') && self.text.len() > 1) || (self.dynamic && lit.is_empty())
    }
}

/// One simple command the line would run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The program, by basename (`/usr/bin/git` → `git`); empty for a command of assignments
    /// or redirections only.
    pub program: String,
    /// The arguments after the program.
    pub args: Vec<Word>,
    /// Paths the command writes: redirection targets, and what the program writes by its
    /// arguments (`tee`, `cp` destinations, ...; [`super::programs`]).
    pub writes: Vec<Word>,
    /// The directory the command runs in, as far as earlier `cd`s in the line tell.
    pub cwd: Cwd,
}

/// Where a command runs, relative to where the line started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cwd {
    /// Where the line started (the sandbox's working directory).
    #[default]
    Start,
    /// This path, absolute or relative to the start (after `cd build`, `cd /tmp`).
    Path(String),
    /// Unknown (after `cd $X`, `cd -`, `popd`).
    Unknown,
}

impl Cwd {
    /// The directory after `cd target` from here (`None` target: `cd` alone, home).
    fn change(&self, target: Option<&Word>) -> Cwd {
        match (self, target) {
            (_, Some(t)) if !t.dynamic && !t.glob && t.text != "-" => {
                match (self, t.text.starts_with('/')) {
                    (_, true) => Cwd::Path(t.text.clone()),
                    (Cwd::Start, false) => Cwd::Path(t.text.clone()),
                    (Cwd::Path(base), false) => Cwd::Path(format!("{base}/{}", t.text)),
                    (Cwd::Unknown, false) => Cwd::Unknown,
                }
            }
            _ => Cwd::Unknown,
        }
    }
}

impl SimpleCommand {
    /// A command running `program` with `args`.
    pub fn new(program: &str, args: Vec<Word>) -> Self {
        Self {
            program: basename(program).to_owned(),
            args,
            writes: Vec::new(),
            cwd: Cwd::Start,
        }
    }
}

/// What a command line runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Analysis {
    /// Every simple command, in source order (a wrapper before the program it runs).
    Commands(Vec<SimpleCommand>),
    /// What the line runs cannot be known statically; `partial` holds the commands that were
    /// found before or beside the reason.
    Unanalysable {
        /// Why, for the person asked.
        reason: String,
        /// The commands found anyway.
        partial: Vec<SimpleCommand>,
    },
}

impl Analysis {
    /// Every command found (all of them, or the partial ones).
    pub fn commands(&self) -> &[SimpleCommand] {
        match self {
            Analysis::Commands(c) => c,
            Analysis::Unanalysable { partial, .. } => partial,
        }
    }

    /// Why the line cannot be analysed, if it cannot.
    pub fn unanalysable(&self) -> Option<&str> {
        match self {
            Analysis::Commands(_) => None,
            Analysis::Unanalysable { reason, .. } => Some(reason),
        }
    }
}

/// Analyses a bash command line.
pub fn analyse(command: &str) -> Analysis {
    let mut walker = Walker::default();
    walker.program_text(command);
    walker.finish()
}

/// The last path component of a program (`/usr/bin/git` → `git`).
pub fn basename(program: &str) -> &str {
    match program.trim_end_matches('/').rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => name,
        _ => program,
    }
}

/// Collects commands while walking a syntax tree.
#[derive(Default)]
pub(super) struct Walker {
    commands: Vec<SimpleCommand>,
    unanalysable: Option<String>,
    depth: usize,
    cwd: Cwd,
}

impl Walker {
    fn finish(self) -> Analysis {
        match self.unanalysable {
            None => Analysis::Commands(self.commands),
            Some(reason) => Analysis::Unanalysable {
                reason,
                partial: self.commands,
            },
        }
    }

    /// Marks the analysis unanalysable (the first reason is kept).
    pub(super) fn refuse(&mut self, reason: impl Into<String>) {
        if self.unanalysable.is_none() {
            self.unanalysable = Some(reason.into());
        }
    }

    /// Records a command found.
    pub(super) fn record(&mut self, mut command: SimpleCommand) {
        command.cwd = self.cwd.clone();
        if matches!(command.program.as_str(), "cd" | "pushd" | "popd") {
            let target = super::programs::operands(&command.args).next();
            self.cwd = match command.program.as_str() {
                "popd" => Cwd::Unknown,
                _ => self.cwd.change(target),
            };
        }
        self.commands.push(command);
    }

    /// Parses `text` as a shell program (a line, a `bash -c` string, a substitution) and
    /// walks it.
    pub(super) fn program_text(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            return self.refuse("shell code nested too deeply");
        }
        if text.len() > MAX_COMMAND_BYTES {
            return self.refuse(format!(
                "the command is longer than {MAX_COMMAND_BYTES} bytes"
            ));
        }
        if nesting_depth(text) > MAX_NESTING {
            return self.refuse("the command nests too deeply");
        }
        let options = ParserOptions::default();
        // The parser has unchecked arithmetic on some inputs (very long numbers); a panic
        // there is a command we cannot analyse, not a crash of the caller.
        let parsed = std::panic::catch_unwind(|| {
            brush_parser::Parser::new(text.as_bytes(), &options).parse_program()
        });
        let program = match parsed {
            Ok(Ok(program)) => program,
            Ok(Err(error)) => return self.refuse(format!("the command does not parse: {error}")),
            Err(_) => return self.refuse("the command does not parse"),
        };
        self.depth += 1;
        for list in &program.complete_commands {
            self.compound_list(list);
        }
        self.depth -= 1;
    }

    fn compound_list(&mut self, list: &ast::CompoundList) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) {
        for command in &pipeline.seq {
            self.command(command);
        }
    }

    fn command(&mut self, command: &ast::Command) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirect_list(redirects.as_ref());
            }
            ast::Command::Function(function) => {
                // The body runs whenever the function is called: analyse it as if it ran.
                let ast::FunctionBody(body, redirects) = &function.body;
                self.compound(body);
                self.redirect_list(redirects.as_ref());
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr);
                self.redirect_list(redirects.as_ref());
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand) {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(a) => self.arithmetic(&a.expr.value),
            C::ArithmeticForClause(f) => {
                for expr in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&expr.value);
                }
                self.compound_list(&f.body.list);
            }
            C::BraceGroup(g) => self.compound_list(&g.list),
            C::Subshell(s) => self.compound_list(&s.list),
            C::ForClause(f) => {
                for value in f.values.iter().flatten() {
                    self.word(&value.value);
                }
                self.compound_list(&f.body.list);
            }
            C::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for pattern in &item.patterns {
                        self.word(&pattern.value);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list);
                    }
                }
            }
            C::IfClause(i) => {
                self.compound_list(&i.condition);
                self.compound_list(&i.then);
                for clause in i.elses.iter().flatten() {
                    if let Some(condition) = &clause.condition {
                        self.compound_list(condition);
                    }
                    self.compound_list(&clause.body);
                }
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.compound_list(&w.0);
                self.compound_list(&w.1.list);
            }
            C::Coprocess(c) => self.command(&c.body),
        }
    }

    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr) {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a);
                self.extended_test(b);
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a),
            E::UnaryTest(_, w) => {
                self.word(&w.value);
            }
            E::BinaryTest(_, a, b) => {
                self.word(&a.value);
                self.word(&b.value);
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) {
        let mut words: Vec<Word> = Vec::new();
        let mut writes: Vec<Word> = Vec::new();
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, None, &mut writes);
        }
        let program = simple
            .word_or_name
            .as_ref()
            .map(|name| self.word(&name.value));
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, Some(&mut words), &mut writes);
        }
        let Some(program) = program else {
            if !writes.is_empty() {
                self.record(SimpleCommand {
                    writes,
                    ..SimpleCommand::new("", Vec::new())
                });
            }
            return;
        };
        if program.dynamic {
            return self.refuse(format!(
                "the program name comes from an expansion: `{}`",
                program.text
            ));
        }
        let mut command = SimpleCommand::new(&program.text, words);
        command.writes = writes;
        programs::run(self, command);
    }

    /// One prefix or suffix item; `args` collects a suffix's arguments.
    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        args: Option<&mut Vec<Word>>,
        writes: &mut Vec<Word>,
    ) {
        use ast::CommandPrefixOrSuffixItem as I;
        match item {
            I::IoRedirect(redirect) => self.redirect(redirect, writes),
            I::Word(word) => {
                let word = self.word(&word.value);
                if let Some(args) = args {
                    args.push(word);
                }
            }
            I::AssignmentWord(assignment, word) => match args {
                // `declare X=1`, `export X=$(…)`: an argument of the program.
                Some(args) => args.push(self.word(&word.value)),
                None => self.assignment(assignment),
            },
            I::ProcessSubstitution(_, subshell) => {
                self.compound_list(&subshell.list);
                if let Some(args) = args {
                    args.push(Word::unknown("/dev/fd/N"));
                }
            }
        }
    }

    fn assignment(&mut self, assignment: &ast::Assignment) {
        match &assignment.value {
            ast::AssignmentValue::Scalar(word) => {
                self.word(&word.value);
            }
            ast::AssignmentValue::Array(items) => {
                for (key, value) in items {
                    if let Some(key) = key {
                        self.word(&key.value);
                    }
                    self.word(&value.value);
                }
            }
        }
        if let ast::AssignmentName::ArrayElementName(_, index) = &assignment.name {
            self.arithmetic(index);
        }
    }

    fn redirect_list(&mut self, redirects: Option<&ast::RedirectList>) {
        let Some(redirects) = redirects else { return };
        let mut writes = Vec::new();
        for redirect in &redirects.0 {
            self.redirect(redirect, &mut writes);
        }
        if !writes.is_empty() {
            self.record(SimpleCommand {
                writes,
                ..SimpleCommand::new("", Vec::new())
            });
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect, writes: &mut Vec<Word>) {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                T::Filename(word) => {
                    let word = self.word(&word.value);
                    if matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite) {
                        writes.push(word);
                    }
                }
                T::Duplicate(word) => {
                    // `>&file` writes a file; `>&2`, `>&-` duplicate or close a descriptor.
                    let word = self.word(&word.value);
                    let descriptor = word.text == "-"
                        || (!word.text.is_empty()
                            && word
                                .text
                                .trim_end_matches('-')
                                .bytes()
                                .all(|b| b.is_ascii_digit()));
                    if matches!(kind, K::DuplicateOutput) && !descriptor {
                        writes.push(word);
                    }
                }
                T::ProcessSubstitution(_, subshell) => self.compound_list(&subshell.list),
                T::Fd(_) => {}
            },
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    self.heredoc(&doc.doc.value);
                }
            }
            ast::IoRedirect::HereString(_, word) => {
                self.word(&word.value);
            }
            ast::IoRedirect::OutputAndError(word, _) => {
                let word = self.word(&word.value);
                writes.push(word);
            }
        }
    }

    /// Walks an arithmetic expression's text for command substitutions.
    pub(super) fn arithmetic(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') || text.contains("<(") {
            self.word(text);
        }
    }
}

/// The deepest nesting of brackets (`(`, `{`, `[`) and compound keywords (`if` … `fi`, `while`,
/// `until`, `for` … `done`, `case` … `esac`, `select`, `coproc`) in `text`, overestimated:
/// quotes are not followed.
fn nesting_depth(text: &str) -> usize {
    const OPENING: &[&str] = &["if", "while", "until", "for", "case", "select", "coproc"];
    const CLOSING: &[&str] = &["fi", "done", "esac"];
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut deepest = 0usize;
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'{' | b'[' => depth += 1,
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            b'a'..=b'z' if i == 0 || !is_word_byte(bytes[i - 1]) => {
                if starts_keyword(&bytes[i..], OPENING) {
                    depth += 1;
                } else if starts_keyword(&bytes[i..], CLOSING) {
                    depth = depth.saturating_sub(1);
                }
            }
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    deepest
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `rest` starts with one of `keywords` as a whole word.
fn starts_keyword(rest: &[u8], keywords: &[&str]) -> bool {
    keywords.iter().any(|k| {
        rest.starts_with(k.as_bytes()) && rest.get(k.len()).is_none_or(|c| !is_word_byte(*c))
    })
}
