//! The lead's `<subagent_system>` section and its two companion bullets (spec A.6): when to
//! delegate with `task`, the hard per-response and per-run limits, and the subagents on
//! offer. Rendered only when the catalog offers `task` and the run has subagent settings;
//! the limits are clamped to DeerFlow's bounds (1..=4 per response, 1..=50 per run). The
//! strings of spec A.6/A.8 are exact; the prose is Antler's own.

use crate::catalog::deferred::html_escape;

/// The built-in general-purpose subagent's name.
pub const GENERAL_PURPOSE_NAME: &str = "general-purpose";
/// The built-in bash subagent's name.
pub const BASH_NAME: &str = "bash";

/// The lead prompt's fixed one-liner for `general-purpose` (not its config description).
pub const GENERAL_PURPOSE_DESCRIPTION: &str = "For complex, multi-step work that needs exploration and action: research, coding, file work. Works autonomously and returns a summary.";
/// The lead prompt's fixed one-liner for `bash`.
pub const BASH_DESCRIPTION: &str = "A command execution specialist for sequences of shell commands (git, builds, tests, deploys) whose output need not fill this conversation.";

/// The subagent settings the lead's prompt shows.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct SubagentPromptInputs<'a> {
    /// `max_concurrent_subagents`: `task` calls per response (clamped to 1..=4).
    pub max_concurrent: usize,
    /// `subagents.max_total_per_run`: `task` calls per run (clamped to 1..=50).
    pub max_total: usize,
    /// The offered subagents as (name, config description), in the registry's order. For
    /// `general-purpose` and `bash` the fixed one-liners above are shown instead; for a
    /// custom agent the first line of its description, stripped and escaped here.
    pub available: &'a [(String, String)],
    /// Host bash is usable, so the examples show `bash`.
    pub bash_available: bool,
}

/// The clamped limits `(n, total)`.
fn limits(inputs: &SubagentPromptInputs<'_>) -> (usize, usize) {
    (
        inputs.max_concurrent.clamp(1, 4),
        inputs.max_total.clamp(1, 50),
    )
}

/// The description shown for the subagent `name` whose config description is `description`.
pub fn shown_description(name: &str, description: &str) -> String {
    let text = match name {
        GENERAL_PURPOSE_NAME => GENERAL_PURPOSE_DESCRIPTION,
        BASH_NAME => BASH_DESCRIPTION,
        _ => description.lines().next().unwrap_or("").trim(),
    };
    let mut out = String::with_capacity(text.len());
    html_escape(&mut out, text);
    out
}

/// The `<subagent_system>` section, ending in a newline.
pub fn section(inputs: &SubagentPromptInputs<'_>) -> String {
    let (n, total) = limits(inputs);
    let parallel = n > 1;
    let mut out = String::with_capacity(4 * 1024);
    out.push_str(
        "<subagent_system>\n## Subagent Routing: Delegate Only for Clear Net Benefit\n\
Default to direct execution. A subagent starts with none of this conversation, so delegating \
costs time and tokens; call `task` only when that cost clearly pays off.\n\n\
**DELEGATION CHECK** (before any `task` call):\n",
    );
    if parallel {
        out.push_str(
            "- Expected benefit = parallel wall-clock savings + specialist capability + context isolation\n",
        );
    } else {
        out.push_str("- Expected benefit = specialist capability + context isolation\n");
    }
    out.push_str(
        "- Expected cost = startup + duplicate discovery + briefing + synthesis + conflict and side-effect risk\n\
Delegate only when the benefit is clearly larger.\n\n",
    );
    if parallel {
        out.push_str(
            "**Hard vetoes for parallel dispatch:**\n\
- A subtask needs another's result: run them in order, never in one batch.\n\
- Subtasks would change the same files or other shared state: do that work yourself, or in sequence.\n\n",
        );
    }
    out.push_str(
        "**Costs and negative signals:**\n\
- Duplicate discovery: the subagent re-reads what you already know.\n\
- A cheap direct path: a few tool calls you can make yourself.\n\
- Coordination burden: splitting, briefing and merging outweigh the work.\n\
- Routine git, build, test, or deploy operations are not sufficient reason to delegate.\n\n\
**Clarify first:** if the request is unclear, ask before delegating.\n\n\
**Valid sources of benefit:**\n",
    );
    if parallel {
        out.push_str("- Independent subtasks that run at once and cut wall-clock time.\n");
    }
    out.push_str(
        "- Specialist capability of a subagent type.\n\
- Context isolation: a large exploration whose details need not enter this conversation.\n",
    );
    if !parallel {
        out.push_str(
            "- Parallel dispatch cannot reduce wall-clock latency in this configuration: one subagent runs at a time.\n",
        );
    }
    out.push_str(&format!(
        "\n**Hard limits:**\n\
- **MAXIMUM {n} `task` CALLS PER RESPONSE - NEVER emit more. VIOLATION IS A HARD ERROR.** Excess calls are discarded and their work is lost.\n\
- **MAXIMUM {total} `task` CALLS PER RUN - NEVER exceed it. VIOLATION IS A HARD ERROR.** Count only delegations for the current user request/run; older thread history does not consume this run's allowance.\n"
    ));
    if parallel {
        out.push_str(&format!(
            "- More than {n} subtasks: send them in batches of at most {n}, one batch per response.\n\
- Wait for a batch's results before sending the next.\n"
        ));
    } else {
        out.push_str(
            "- Send one `task` call per response.\n- Wait for its result before sending the next.\n",
        );
    }
    out.push_str("\n**Available Subagents:**\n");
    for (name, description) in inputs.available {
        out.push_str("- **");
        html_escape(&mut out, name);
        out.push_str("**: ");
        out.push_str(&shown_description(name, description));
        out.push('\n');
    }
    out.push_str(&format!(
        "\n**Delegation workflow:**\n\
1. Run the DELEGATION CHECK.\n\
2. Split the work into self-contained subtasks.\n\
3. Give each `task` prompt all the context it needs; the subagent sees nothing else.\n\
4. Send at most {n} `task` call(s) in this response.\n\
5. Read the results and send the next batch, if any.\n\
6. Combine the results into one answer.\n\n\
**Example:**\n\
```python\n\
task(description=\"Survey vendors\", prompt=\"List the five largest vendors of X with sources.\", subagent_type=\"{GENERAL_PURPOSE_NAME}\")\n\
```\n"
    ));
    if parallel {
        let rest = 2;
        let all = n + rest;
        out.push_str(&format!(
            "\n**Multi-batch example (limit {n}):** {all} independent questions: send {n} `task` \
calls, wait for their results, send the remaining {rest}, then combine all {all}.\n"
        ));
    }
    if inputs.bash_available {
        out.push_str(
            "\nOtherwise execute directly using available tools (bash, ls, read_file, web_search, etc.):\n\
```python\nbash(\"npm test\")\n```\n",
        );
    } else {
        out.push_str(
            "\nOtherwise execute directly using available tools (ls, read_file, web_search, etc.):\n\
```python\nread_file(\"/mnt/user-data/workspace/README.md\")\n```\n",
        );
    }
    out.push_str(
        "\nThe `task` tool waits for the subagent and returns its result directly; no polling is needed.\n\
</subagent_system>\n",
    );
    out
}

/// `{subagent_thinking}`: the DELEGATION CHECK bullet of `<thinking_style>`.
pub fn thinking(inputs: &SubagentPromptInputs<'_>) -> String {
    let (n, total) = limits(inputs);
    if n > 1 {
        format!(
            "- **DELEGATION CHECK: delegate only when parallel latency, specialist capability or \
context isolation clearly beats doing it yourself; never exceed {n} `task` calls in one response \
or {total} total in this run.**\n"
        )
    } else {
        format!(
            "- **DELEGATION CHECK: delegate only when specialist capability or context isolation \
clearly beats doing it yourself; send one `task` call at a time and never exceed {n} `task` calls \
in one response or {total} total in this run.**\n"
        )
    }
}

/// `{subagent_reminder}`: the Benefit-Based Delegation bullet of `<critical_reminders>`.
pub fn reminder(inputs: &SubagentPromptInputs<'_>) -> String {
    let (n, total) = limits(inputs);
    let benefit = if n > 1 {
        "expected benefit from real parallel latency, specialist capability, or context isolation"
    } else {
        "expected benefit from specialist capability or context isolation"
    };
    format!(
        "- **Benefit-Based Delegation**: Default to direct execution. Use `task` only when \
{benefit} clearly exceeds its costs; use the fewest subagents needed. HARD LIMITS ARE \
NON-NEGOTIABLE: max {n} `task` calls per response, max {total} per run; excess calls are \
discarded and their work is lost.\n"
    )
}
