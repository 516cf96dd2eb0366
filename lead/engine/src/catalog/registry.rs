//! The registry of tool implementations that `tools[].use` ids resolve to. Antler's own ids
//! (`antler.sandbox:bash`) and DeerFlow's (`deerflow.sandbox.tools:bash_tool`, every id in
//! DeerFlow's `config.example.yaml`, active or commented out) both resolve. An id whose
//! implementation Antler does not have yet is known but unavailable.

use serde_json::{json, Value};

/// One implementation a `use:` id can name.
#[derive(Debug)]
pub struct Implementation {
    /// Antler's id for it.
    pub id: &'static str,
    /// The tool name the implementation binds (DeerFlow: the tool object's `.name`).
    pub name: &'static str,
    /// Where it runs.
    pub place: Place,
    /// Whether Antler can run it; an unavailable tool is left out with a warning.
    pub available: bool,
    /// What the model reads.
    pub description: &'static str,
    /// The JSON-schema parameters.
    pub parameters: fn() -> Value,
}

/// Where a configured tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In sandbox-host, inside the thread's sandbox.
    Sandbox,
    /// A web service (search, fetch, capture) from the lead.
    Web,
    /// A browser session.
    Browser,
}

/// How a `use:` id resolved.
#[derive(Debug)]
pub enum Resolution {
    Found(&'static Implementation),
    /// Not a known id: the closest known ids, best first.
    Unknown {
        closest: Vec<&'static str>,
    },
}

fn description_param() -> Value {
    json!({"type": "string", "description": "Explain why you are running this tool in short words. ALWAYS PROVIDE THIS PARAMETER FIRST."})
}

fn object(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

fn bash_params() -> Value {
    object(
        json!({"description": description_param(), "command": {"type": "string", "description": "The bash command to execute. Always use absolute paths for files and directories."}}),
        &["description", "command"],
    )
}
fn ls_params() -> Value {
    object(
        json!({"description": description_param(), "path": {"type": "string", "description": "The **absolute** path to the directory to list."}}),
        &["description", "path"],
    )
}
fn read_file_params() -> Value {
    object(
        json!({"description": description_param(), "path": {"type": "string", "description": "The **absolute** path to the file to read."}, "start_line": {"type": "integer", "description": "Optional starting line number (1-indexed, inclusive)."}, "end_line": {"type": "integer", "description": "Optional ending line number (1-indexed, inclusive)."}}),
        &["description", "path"],
    )
}
fn write_file_params() -> Value {
    object(
        json!({"description": description_param(), "path": {"type": "string", "description": "The **absolute** path to the file to write to."}, "content": {"type": "string", "description": "The content to write to the file."}, "append": {"type": "boolean", "default": false, "description": "Append to the file instead of overwriting it."}}),
        &["description", "path", "content"],
    )
}
fn str_replace_params() -> Value {
    object(
        json!({"description": description_param(), "path": {"type": "string", "description": "The **absolute** path to the file to edit."}, "old_str": {"type": "string", "description": "The exact text to replace; it must occur exactly once unless replace_all is true."}, "new_str": {"type": "string", "description": "The replacement text."}, "replace_all": {"type": "boolean", "default": false, "description": "Replace every occurrence."}}),
        &["description", "path", "old_str", "new_str"],
    )
}
fn glob_params() -> Value {
    object(
        json!({"description": description_param(), "pattern": {"type": "string", "description": "The glob pattern to match, e.g. `**/*.py`."}, "path": {"type": "string", "description": "The **absolute** directory to search under."}, "include_dirs": {"type": "boolean", "default": false}, "max_results": {"type": "integer", "default": 200}}),
        &["description", "pattern", "path"],
    )
}
fn grep_params() -> Value {
    object(
        json!({"description": description_param(), "pattern": {"type": "string", "description": "The regular expression (or literal text) to search for."}, "path": {"type": "string", "description": "The **absolute** file or directory to search."}, "glob": {"type": "string", "description": "Only search files matching this glob."}, "literal": {"type": "boolean", "default": false}, "case_sensitive": {"type": "boolean", "default": false}, "max_results": {"type": "integer", "default": 100}}),
        &["description", "pattern", "path"],
    )
}
fn url_params() -> Value {
    object(
        json!({"url": {"type": "string", "description": "The URL to fetch."}}),
        &["url"],
    )
}
fn web_search_params() -> Value {
    object(
        json!({"query": {"type": "string", "description": "The query to search for."}}),
        &["query"],
    )
}
fn ddg_search_params() -> Value {
    object(
        json!({"query": {"type": "string", "description": "Search keywords describing what you want to find. Be specific for better results."}, "max_results": {"type": "integer", "default": 5, "description": "Maximum number of results to return. Default is 5."}}),
        &["query"],
    )
}
fn ddg_image_params() -> Value {
    object(
        json!({
            "query": {"type": "string", "description": "Search keywords describing the images you want to find. Be specific for better results (e.g., \"Japanese woman street photography 1990s\" instead of just \"woman\")."},
            "max_results": {"type": "integer", "default": 5, "description": "Maximum number of images to return. Default is 5."},
            "size": {"type": "string", "description": "Image size filter. Options: \"Small\", \"Medium\", \"Large\", \"Wallpaper\". Use \"Large\" for reference images."},
            "color": {"type": "string", "description": "Color filter. Options: \"color\", \"Monochrome\", \"Red\", \"Orange\", \"Yellow\", \"Green\", \"Blue\", \"Purple\", \"Pink\", \"Brown\", \"Black\", \"Gray\", \"Teal\", \"White\"."},
            "type_image": {"type": "string", "description": "Image type filter. Options: \"photo\", \"clipart\", \"gif\", \"transparent\", \"line\". Use \"photo\" for realistic references."},
            "layout": {"type": "string", "description": "Layout filter. Options: \"Square\", \"Tall\", \"Wide\". Choose based on your generation needs."},
            "license_image": {"type": "string", "description": "License filter. Options: \"any\", \"Public\", \"Share\", \"ShareCommercially\", \"Modify\", \"ModifyCommercially\"."}
        }),
        &["query"],
    )
}
fn search_with_count_params() -> Value {
    object(
        json!({"query": {"type": "string", "description": "The query to search for."}, "max_results": {"type": "integer", "default": 5, "description": "Maximum number of results to return. Default is 5."}}),
        &["query"],
    )
}
fn web_fetch_params() -> Value {
    object(
        json!({"url": {"type": "string", "description": "The URL to fetch the contents of."}}),
        &["url"],
    )
}
fn web_capture_params() -> Value {
    object(
        json!({
            "url": {"type": "string", "description": "The http(s) URL to capture."},
            "filename": {"type": "string", "description": "Optional output filename. Directories are ignored and the extension is determined by output_format."},
            "full_page": {"type": "boolean", "description": "Optional override for full-page capture."},
            "output_format": {"type": "string", "description": "Optional image format: png, jpeg, or webp."},
            "viewport_width": {"type": "integer", "description": "Optional viewport width in pixels."},
            "viewport_height": {"type": "integer", "description": "Optional viewport height in pixels."}
        }),
        &["url"],
    )
}
fn infoquest_image_params() -> Value {
    object(
        json!({"query": {"type": "string", "description": "The query to search for images."}}),
        &["query"],
    )
}
fn no_params() -> Value {
    object(json!({}), &[])
}
fn browser_target_params() -> Value {
    object(
        json!({"target": {"type": "string", "description": "The element reference from the last snapshot."}, "text": {"type": "string"}}),
        &["target"],
    )
}

macro_rules! sandbox_tool {
    ($id:literal, $name:literal, $desc:literal, $params:ident) => {
        Implementation {
            id: $id,
            name: $name,
            place: Place::Sandbox,
            available: true,
            description: $desc,
            parameters: $params,
        }
    };
}

macro_rules! web_tool {
    ($id:literal, $name:literal, $desc:expr, $params:ident) => {
        Implementation {
            id: $id,
            name: $name,
            place: Place::Web,
            available: true,
            description: $desc,
            parameters: $params,
        }
    };
}

/// Every `web_fetch`'s description (DeerFlow's docstring).
pub(crate) const WEB_FETCH_DESCRIPTION: &str = "Fetch the contents of a web page at a given URL.\nOnly fetch EXACT URLs that have been provided directly by the user or have been returned in results from the web_search and web_fetch tools.\nThis tool can NOT access content that requires authentication, such as private Google Docs or pages behind login walls.\nDo NOT add www. to URLs that do NOT have them.\nURLs must include the schema: https://example.com is a valid URL while example.com is an invalid URL.";

/// DuckDuckGo's `image_search` description (DeerFlow's docstring).
pub(crate) const IMAGE_SEARCH_DESCRIPTION: &str = "Search for images online. Use this tool BEFORE image generation to find reference images for characters, portraits, objects, scenes, or any content requiring visual accuracy.\n\n**When to use:**\n- Before generating character/portrait images: search for similar poses, expressions, styles\n- Before generating specific objects/products: search for accurate visual references\n- Before generating scenes/locations: search for architectural or environmental references\n- Before generating fashion/clothing: search for style and detail references\n\nThe returned image URLs can be used as reference images in image generation to significantly improve quality.";

/// Browserless `web_capture`'s description (DeerFlow's docstring).
pub(crate) const WEB_CAPTURE_DESCRIPTION: &str = "Capture a rendered webpage screenshot and present it as an artifact.\n\nUse this tool when you need a visual capture of a public webpage, especially JavaScript-heavy pages, UI states, dashboards, or visual evidence for a report.\nOnly capture exact URLs provided by the user or discovered through other tools. Do not use this for private pages behind login unless the user has explicitly configured Browserless outside DeerFlow.\nURLs must include the schema: https://example.com is valid while example.com is invalid.";

macro_rules! unavailable {
    ($id:literal, $name:literal, $place:expr, $desc:literal, $params:ident) => {
        Implementation {
            id: $id,
            name: $name,
            place: $place,
            available: false,
            description: $desc,
            parameters: $params,
        }
    };
}

/// Every implementation Antler knows, by Antler id.
pub(crate) static IMPLEMENTATIONS: &[Implementation] = &[
    sandbox_tool!("antler.sandbox:bash", "bash", "Execute a bash command in a Linux environment.\n\n- Use `python` to run Python code.\n- Prefer a thread-local virtual environment in `/mnt/user-data/workspace/.venv`.\n- Use `pip install` to install Python packages.", bash_params),
    sandbox_tool!("antler.sandbox:ls", "ls", "List the contents of a directory up to 2 levels deep in tree format.", ls_params),
    sandbox_tool!("antler.sandbox:read_file", "read_file", "Read the contents of a text file. Use this to examine source code, configuration files, logs, or any text-based file.", read_file_params),
    sandbox_tool!("antler.sandbox:write_file", "write_file", "Write text content to a file.\n\nSIZE POLICY: a single call may write at most 81920 bytes; split larger content and use append=True or str_replace for the next sections.", write_file_params),
    sandbox_tool!("antler.sandbox:str_replace", "str_replace", "Replace a substring in a file with another substring. The old string must appear exactly once unless replace_all is true.", str_replace_params),
    sandbox_tool!("antler.sandbox:glob", "glob", "Find files or directories that match a glob pattern under a root directory.", glob_params),
    sandbox_tool!("antler.sandbox:grep", "grep", "Search for matching lines inside text files under a root directory.", grep_params),
    web_tool!("antler.web:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.ddg_search:web_search", "web_search", "Search the web for information. Use this tool to find current information, news, articles, and facts from the internet.", ddg_search_params),
    web_tool!("antler.web.image_search:image_search", "image_search", IMAGE_SEARCH_DESCRIPTION, ddg_image_params),
    web_tool!("antler.web.tavily:web_search", "web_search", "Search the web.", web_search_params),
    web_tool!("antler.web.tavily:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.jina_ai:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.searxng:web_search", "web_search", "Search the web using SearXNG.", web_search_params),
    web_tool!("antler.web.serper:web_search", "web_search", "Search the web.", search_with_count_params),
    web_tool!("antler.web.brave:web_search", "web_search", "Search the web.", search_with_count_params),
    web_tool!("antler.web.infoquest:web_search", "web_search", "Search the web.", web_search_params),
    web_tool!("antler.web.exa:web_search", "web_search", "Search the web.", web_search_params),
    web_tool!("antler.web.firecrawl:web_search", "web_search", "Search the web.", web_search_params),
    web_tool!("antler.web.groundroute:web_search", "web_search", "Search the web.", search_with_count_params),
    web_tool!("antler.web.fastcrw:web_search", "web_search", "Search the web.", web_search_params),
    web_tool!("antler.web.browserless:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.crawl4ai:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.exa:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.infoquest:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.firecrawl:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.groundroute:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.fastcrw:web_fetch", "web_fetch", WEB_FETCH_DESCRIPTION, web_fetch_params),
    web_tool!("antler.web.browserless:web_capture", "web_capture", WEB_CAPTURE_DESCRIPTION, web_capture_params),
    web_tool!("antler.web.infoquest:image_search", "image_search", IMAGE_SEARCH_DESCRIPTION, infoquest_image_params),
    web_tool!("antler.web.serper:image_search", "image_search", IMAGE_SEARCH_DESCRIPTION, search_with_count_params),
    web_tool!("antler.web.brave:image_search", "image_search", IMAGE_SEARCH_DESCRIPTION, search_with_count_params),
    unavailable!("antler.browser:navigate", "browser_navigate", Place::Browser, "Navigate the browser to a URL.", url_params),
    unavailable!("antler.browser:snapshot", "browser_snapshot", Place::Browser, "Take an accessibility snapshot of the current page.", no_params),
    unavailable!("antler.browser:click", "browser_click", Place::Browser, "Click an element of the current page.", browser_target_params),
    unavailable!("antler.browser:type", "browser_type", Place::Browser, "Type text into an element of the current page.", browser_target_params),
    unavailable!("antler.browser:get_text", "browser_get_text", Place::Browser, "Read the text of the current page.", no_params),
    unavailable!("antler.browser:back", "browser_back", Place::Browser, "Go back in the browser history.", no_params),
    unavailable!("antler.browser:screenshot", "browser_screenshot", Place::Browser, "Take a screenshot of the current page.", no_params),
    unavailable!("antler.browser:close", "browser_close", Place::Browser, "Close the browser session.", no_params),
];

/// DeerFlow's `use:` ids and the Antler implementation each names. Every id that appears in
/// DeerFlow's `config.example.yaml`, active or commented out.
pub(crate) static DEERFLOW_ALIASES: &[(&str, &str)] = &[
    ("deerflow.sandbox.tools:bash_tool", "antler.sandbox:bash"),
    ("deerflow.sandbox.tools:ls_tool", "antler.sandbox:ls"),
    (
        "deerflow.sandbox.tools:read_file_tool",
        "antler.sandbox:read_file",
    ),
    (
        "deerflow.sandbox.tools:write_file_tool",
        "antler.sandbox:write_file",
    ),
    (
        "deerflow.sandbox.tools:str_replace_tool",
        "antler.sandbox:str_replace",
    ),
    ("deerflow.sandbox.tools:glob_tool", "antler.sandbox:glob"),
    ("deerflow.sandbox.tools:grep_tool", "antler.sandbox:grep"),
    (
        "deerflow.community.ddg_search.tools:web_search_tool",
        "antler.web.ddg_search:web_search",
    ),
    (
        "deerflow.community.searxng.tools:web_search_tool",
        "antler.web.searxng:web_search",
    ),
    (
        "deerflow.community.serper.tools:web_search_tool",
        "antler.web.serper:web_search",
    ),
    (
        "deerflow.community.brave.tools:web_search_tool",
        "antler.web.brave:web_search",
    ),
    (
        "deerflow.community.tavily.tools:web_search_tool",
        "antler.web.tavily:web_search",
    ),
    (
        "deerflow.community.tavily.tools:web_fetch_tool",
        "antler.web.tavily:web_fetch",
    ),
    (
        "deerflow.community.infoquest.tools:web_search_tool",
        "antler.web.infoquest:web_search",
    ),
    (
        "deerflow.community.exa.tools:web_search_tool",
        "antler.web.exa:web_search",
    ),
    (
        "deerflow.community.firecrawl.tools:web_search_tool",
        "antler.web.firecrawl:web_search",
    ),
    (
        "deerflow.community.groundroute.tools:web_search_tool",
        "antler.web.groundroute:web_search",
    ),
    (
        "deerflow.community.fastcrw.tools:web_search_tool",
        "antler.web.fastcrw:web_search",
    ),
    (
        "deerflow.community.browserless.tools:web_fetch_tool",
        "antler.web.browserless:web_fetch",
    ),
    (
        "deerflow.community.crawl4ai.tools:web_fetch_tool",
        "antler.web.crawl4ai:web_fetch",
    ),
    (
        "deerflow.community.exa.tools:web_fetch_tool",
        "antler.web.exa:web_fetch",
    ),
    (
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        "antler.web.jina_ai:web_fetch",
    ),
    (
        "deerflow.community.infoquest.tools:web_fetch_tool",
        "antler.web.infoquest:web_fetch",
    ),
    (
        "deerflow.community.firecrawl.tools:web_fetch_tool",
        "antler.web.firecrawl:web_fetch",
    ),
    (
        "deerflow.community.groundroute.tools:web_fetch_tool",
        "antler.web.groundroute:web_fetch",
    ),
    (
        "deerflow.community.fastcrw.tools:web_fetch_tool",
        "antler.web.fastcrw:web_fetch",
    ),
    (
        "deerflow.community.browserless.tools:web_capture_tool",
        "antler.web.browserless:web_capture",
    ),
    (
        "deerflow.community.image_search.tools:image_search_tool",
        "antler.web.image_search:image_search",
    ),
    (
        "deerflow.community.infoquest.tools:image_search_tool",
        "antler.web.infoquest:image_search",
    ),
    (
        "deerflow.community.serper.tools:image_search_tool",
        "antler.web.serper:image_search",
    ),
    (
        "deerflow.community.brave.tools:image_search_tool",
        "antler.web.brave:image_search",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_navigate_tool",
        "antler.browser:navigate",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_snapshot_tool",
        "antler.browser:snapshot",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_click_tool",
        "antler.browser:click",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_type_tool",
        "antler.browser:type",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_get_text_tool",
        "antler.browser:get_text",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_back_tool",
        "antler.browser:back",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_screenshot_tool",
        "antler.browser:screenshot",
    ),
    (
        "deerflow.community.browser_automation.tools:browser_close_tool",
        "antler.browser:close",
    ),
];

/// Resolves a `use:` id (Antler's or DeerFlow's).
pub fn resolve(use_id: &str) -> Resolution {
    let antler_id = DEERFLOW_ALIASES
        .iter()
        .find(|(alias, _)| *alias == use_id)
        .map(|(_, id)| *id)
        .unwrap_or(use_id);
    match IMPLEMENTATIONS.iter().find(|i| i.id == antler_id) {
        Some(found) => Resolution::Found(found),
        None => Resolution::Unknown {
            closest: closest_ids(use_id),
        },
    }
}

/// Every known id, Antler's then DeerFlow's.
pub(crate) fn known_ids() -> impl Iterator<Item = &'static str> {
    IMPLEMENTATIONS
        .iter()
        .map(|i| i.id)
        .chain(DEERFLOW_ALIASES.iter().map(|(a, _)| *a))
}

/// The three known ids nearest to `id` by edit distance (ties in registry order).
fn closest_ids(id: &str) -> Vec<&'static str> {
    closest(id, known_ids()).into_iter().take(3).collect()
}

/// `known`, nearest to `value` by edit distance first (ties in the order given): the
/// "closest known" hints of the catalog, `config check` and `tool call`.
pub fn closest<'k>(value: &str, known: impl IntoIterator<Item = &'k str>) -> Vec<&'k str> {
    let mut scored: Vec<(usize, usize, &'k str)> = known
        .into_iter()
        .enumerate()
        .map(|(i, k)| (edit_distance(value, k), i, k))
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, _, k)| k).collect()
}

/// Levenshtein distance of two names.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_use_id_of_deerflows_example_config_is_known() {
        let text = include_str!("../../../../../shared/conformance/deerflow-config.example.yaml");
        let tools_section = &text[text.find("\ntools:").expect("tools section")
            ..text.find("\ntool_search:").expect("tool_search section")];
        let mut seen = 0;
        for line in tools_section.lines() {
            let l = line.trim_start_matches([' ', '#']).trim();
            if let Some(id) = l.strip_prefix("use: ") {
                seen += 1;
                assert!(
                    matches!(resolve(id.trim()), Resolution::Found(_)),
                    "unknown DeerFlow id {id}"
                );
            }
        }
        assert_eq!(seen, 38, "the example config names 38 tool ids");
    }

    #[test]
    fn antler_and_deerflow_ids_resolve_to_one_implementation() {
        let (Resolution::Found(a), Resolution::Found(b)) = (
            resolve("antler.sandbox:bash"),
            resolve("deerflow.sandbox.tools:bash_tool"),
        ) else {
            panic!("both must resolve");
        };
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.name, "bash");
    }

    #[test]
    fn an_unknown_id_suggests_the_closest_known_ones() {
        let Resolution::Unknown { closest } = resolve("deerflow.sandbox.tools:bash_tol") else {
            panic!("must be unknown");
        };
        assert_eq!(closest[0], "deerflow.sandbox.tools:bash_tool");
    }
}
