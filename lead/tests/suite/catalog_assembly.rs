//! Assembly as a user of Antler meets it: dedup priority, the host-bash gate, unknown and
//! unavailable `use:` ids, name mismatches, groups, MCP name checks, ACP, authorization
//! that `tool_search` cannot undo, a hash that follows the schemas, deterministic order,
//! subagent catalogs that validate the parent's promotions, and the actor under 100
//! concurrent requests while its sources change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, sync::Arc};

use antler_engine::catalog::{
    assemble, merge_promoted, Assemble, AssemblyError, AssemblyRequest, Catalog, CatalogActor,
    McpSourceTool, McpTools, Principal, SetMcpTools, Sources, ToolSource,
};
use antler_protocol::config::{
    parse_app_config, parse_extensions_config, AppConfig, ExtensionsConfig,
};
use serde_json::json;

fn no_env(_: &str) -> Option<String> {
    None
}

fn config(yaml: &str) -> Arc<AppConfig> {
    Arc::new(
        parse_app_config(Path::new("config.yaml"), yaml, &no_env)
            .expect("config")
            .value,
    )
}

fn extensions(json: &str) -> Arc<ExtensionsConfig> {
    Arc::new(
        parse_extensions_config(Path::new("extensions_config.json"), json, &no_env)
            .expect("extensions")
            .value,
    )
}

fn mcp(server: &str, tool: &str, position: u32) -> McpSourceTool {
    McpSourceTool {
        server: server.into(),
        name: format!("{server}_{tool}"),
        original_name: tool.into(),
        description: format!("{tool} on {server}"),
        input_schema: json!({"type": "object", "title": "Args", "properties": {"q": {"type": "string", "title": "Q"}}, "required": ["q"]}),
        position,
    }
}

fn names(catalog: &Catalog) -> Vec<&str> {
    catalog.tools().iter().map(|t| t.name.as_str()).collect()
}

const SANDBOX_TOOLS: &str = r#"
tool_search:
  enabled: true
tools:
  - name: read_file
    group: file:read
    use: deerflow.sandbox.tools:read_file_tool
  - name: write_file
    group: file:write
    use: antler.sandbox:write_file
  - name: bash
    group: bash
    use: deerflow.sandbox.tools:bash_tool
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
"#;

#[test]
fn config_tools_win_over_builtins_and_mcp_with_one_warning_per_duplicate() {
    let sources = Sources {
        config: config(SANDBOX_TOOLS),
        extensions: None,
        mcp: McpTools::new(vec![
            McpSourceTool {
                name: "read_file".into(),
                ..mcp("fs", "read_file", 0)
            },
            McpSourceTool {
                name: "present_files".into(),
                ..mcp("fs", "present", 1)
            },
            mcp("srv", "x", 0),
        ]),
    };
    let a = assemble(&sources, &AssemblyRequest::lead()).unwrap();
    let n = names(&a.catalog);
    assert_eq!(&n[..2], ["read_file", "write_file"]);
    assert_eq!(
        &n[2..5],
        ["present_files", "ask_clarification", "list_uploaded_files"]
    );
    assert_eq!(&n[5..], ["srv_x", "tool_search"]);
    assert!(matches!(
        a.catalog.get("read_file").unwrap().source,
        ToolSource::Config { .. }
    ));
    let dups: Vec<&String> = a
        .warnings
        .iter()
        .filter(|w| w.starts_with("Duplicate tool name"))
        .collect();
    assert_eq!(dups.len(), 2, "{:?}", a.warnings);
    assert!(dups[0].starts_with("Duplicate tool name 'read_file' detected and skipped — check your config.yaml and MCP server registrations (issue #1803)."));
    assert!(
        dups[0].contains("kept: config (deerflow.sandbox.tools:read_file_tool)")
            && dups[0].contains("dropped: mcp (fs)"),
        "{}",
        dups[0]
    );
}

#[test]
fn the_host_bash_gate_follows_the_sandbox_provider() {
    let req = AssemblyRequest::lead();
    let has_bash = |yaml: &str| {
        let a = assemble(
            &Sources {
                config: config(yaml),
                ..Sources::default()
            },
            &req,
        )
        .unwrap();
        a.catalog.get("bash").is_some()
    };
    assert!(
        !has_bash(SANDBOX_TOOLS),
        "local provider without allow_host_bash"
    );
    assert!(has_bash(&SANDBOX_TOOLS.replace(
        "LocalSandboxProvider",
        "LocalSandboxProvider\n  allow_host_bash: true"
    )));
    assert!(has_bash(&SANDBOX_TOOLS.replace(
        "deerflow.sandbox.local:LocalSandboxProvider",
        "deerflow.community.aio_sandbox:AioSandboxProvider"
    )));
    let no_sandbox = SANDBOX_TOOLS.split("sandbox:\n").next().unwrap();
    assert!(!has_bash(no_sandbox), "no sandbox section");
    // A renamed alias in group bash is dropped too.
    let renamed = SANDBOX_TOOLS.replace(
        "  - name: bash\n    group: bash",
        "  - name: shell\n    group: bash",
    );
    let a = assemble(
        &Sources {
            config: config(&renamed),
            ..Sources::default()
        },
        &req,
    )
    .unwrap();
    assert!(a.catalog.get("shell").is_none() && a.catalog.get("bash").is_none());
}

#[test]
fn unknown_ids_fail_and_unavailable_ids_are_left_out_with_a_warning() {
    let bad = "tools:\n  - name: reader\n    group: file:read\n    use: deerflow.sandbox.tools:read_fil_tool\n";
    let Err(err) = assemble(
        &Sources {
            config: config(bad),
            ..Sources::default()
        },
        &AssemblyRequest::lead(),
    ) else {
        panic!("an unknown id must fail assembly");
    };
    match &err {
        AssemblyError::UnknownUseId {
            tool,
            use_id,
            closest,
        } => {
            assert_eq!(tool, "reader");
            assert_eq!(use_id, "deerflow.sandbox.tools:read_fil_tool");
            assert_eq!(closest[0], "deerflow.sandbox.tools:read_file_tool");
        }
        other => panic!("{other:?}"),
    }
    assert!(err
        .to_string()
        .contains("closest known ids: deerflow.sandbox.tools:read_file_tool"));

    // A tool Antler has not built yet is left out with a warning...
    let browser = "tools:\n  - name: browser_navigate\n    group: web\n    use: deerflow.community.browser_automation.tools:browser_navigate_tool\n";
    let a = assemble(
        &Sources {
            config: config(browser),
            ..Sources::default()
        },
        &AssemblyRequest::lead(),
    )
    .unwrap();
    assert!(a.catalog.get("browser_navigate").is_none());
    assert!(
        a.warnings
            .iter()
            .any(|w| w.contains("'browser_navigate'") && w.contains("not available in Antler")),
        "{:?}",
        a.warnings
    );
    // ...Browserless web_capture is built, with DeerFlow's description and parameters...
    let capture = "tools:\n  - name: web_capture\n    group: web\n    use: deerflow.community.browserless.tools:web_capture_tool\n";
    let a = assemble(
        &Sources {
            config: config(capture),
            ..Sources::default()
        },
        &AssemblyRequest::lead(),
    )
    .unwrap();
    let spec = a
        .catalog
        .get("web_capture")
        .expect("web_capture is offered");
    assert!(spec
        .description
        .starts_with("Capture a rendered webpage screenshot and present it as an artifact."));
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // ...while a built one is offered with its DeerFlow description.
    let tavily = "tools:\n  - name: web_search\n    group: web\n    use: deerflow.community.tavily.tools:web_search_tool\n";
    let a = assemble(
        &Sources {
            config: config(tavily),
            ..Sources::default()
        },
        &AssemblyRequest::lead(),
    )
    .unwrap();
    assert_eq!(
        a.catalog.get("web_search").unwrap().description,
        "Search the web."
    );
}

#[test]
fn the_implementation_name_binds_over_a_mismatched_config_name() {
    let y = "tools:\n  - name: cat_file\n    group: file:read\n    use: antler.sandbox:read_file\n";
    let a = assemble(
        &Sources {
            config: config(y),
            ..Sources::default()
        },
        &AssemblyRequest::lead(),
    )
    .unwrap();
    assert!(a.catalog.get("read_file").is_some() && a.catalog.get("cat_file").is_none());
    assert!(a
        .warnings
        .iter()
        .any(|w| w.contains("'cat_file'") && w.contains("'read_file'")));
}

#[test]
fn groups_filter_only_config_tools() {
    let sources = Sources {
        config: config(SANDBOX_TOOLS),
        mcp: McpTools::new(vec![mcp("srv", "x", 0)]),
        ..Sources::default()
    };
    let with = |groups: Option<Vec<&str>>| {
        let req = AssemblyRequest {
            groups: groups.map(|g| g.into_iter().map(String::from).collect()),
            ..AssemblyRequest::lead()
        };
        let a = assemble(&sources, &req).unwrap();
        names(&a.catalog)
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let all = with(None);
    assert!(all.contains(&"read_file".into()) && all.contains(&"write_file".into()));
    let none = with(Some(vec![]));
    assert!(
        !none.contains(&"read_file".into())
            && none.contains(&"present_files".into())
            && none.contains(&"srv_x".into())
    );
    let read = with(Some(vec!["file:read"]));
    assert!(read.contains(&"read_file".into()) && !read.contains(&"write_file".into()));
}

#[test]
fn builtins_follow_their_conditions() {
    let y = "models:\n  - name: eye\n    use: langchain_openai:ChatOpenAI\n    model: gpt\n    supports_vision: true\nskill_evolution:\n  enabled: true\nacp_agents:\n  coder:\n    command: coder-acp\n    description: Writes code\n";
    let sources = Sources {
        config: config(y),
        ..Sources::default()
    };
    let mut req = AssemblyRequest::lead();
    req.builtins.subagent_enabled = true;
    req.builtins.bootstrap = true;
    req.builtins.agent_name = Some("sales".into());
    let a = assemble(&sources, &req).unwrap();
    assert_eq!(
        names(&a.catalog),
        [
            "present_files",
            "ask_clarification",
            "list_uploaded_files",
            "skill_manage",
            "task",
            "view_image",
            "setup_agent",
            "update_agent",
            "invoke_acp_agent"
        ]
    );
    assert!(a
        .catalog
        .get("invoke_acp_agent")
        .unwrap()
        .description
        .contains("- coder: Writes code"));
    req.builtins.interactive = false;
    req.builtins.channel = Some("github".into());
    let a = assemble(&sources, &req).unwrap();
    assert!(
        a.catalog.get("ask_clarification").is_none() && a.catalog.get("update_agent").is_none()
    );
}

#[test]
fn mcp_names_outside_the_safe_alphabet_are_dropped_with_a_warning() {
    let sources = Sources {
        mcp: McpTools::new(vec![
            McpSourceTool {
                name: "evil<tool>".into(),
                ..mcp("srv", "evil", 0)
            },
            mcp("srv", "ok", 1),
        ]),
        ..Sources::default()
    };
    let a = assemble(&sources, &AssemblyRequest::lead()).unwrap();
    assert!(a.catalog.get("evil<tool>").is_none() && a.catalog.get("srv_ok").is_some());
    assert!(
        a.warnings.iter().any(|w| w.contains("'evil<tool>'")),
        "{:?}",
        a.warnings
    );
}

const AUTHZ: &str = r#"
tool_search:
  enabled: true
authorization:
  enabled: true
  default_role: member
  provider:
    use: antler.authz:AllowlistPolicy
    config:
      roles:
        member:
          denied_tools: [crm_export_all]
"#;

#[test]
fn a_denied_tool_never_enters_the_catalog_and_tool_search_cannot_bring_it_back() {
    let sources = Sources {
        config: config(AUTHZ),
        mcp: McpTools::new(vec![mcp("crm", "export_all", 0), mcp("crm", "lookup", 1)]),
        ..Sources::default()
    };
    let req = AssemblyRequest {
        principal: Principal {
            user: Some("bob".into()),
            ..Principal::default()
        },
        ..AssemblyRequest::lead()
    };
    let a = assemble(&sources, &req).unwrap();
    assert_eq!(a.denied, ["crm_export_all"]);
    assert!(a.catalog.get("crm_export_all").is_none());
    assert!(!a.catalog.is_deferred("crm_export_all") && a.catalog.is_deferred("crm_lookup"));
    let out = a
        .catalog
        .tool_search("select:crm_export_all,crm_lookup", "c1")
        .unwrap();
    assert_eq!(out.promoted.names, ["crm_lookup"]);
    let out = a.catalog.tool_search("export", "c2").unwrap();
    assert_eq!(out.message.content, "No tools found matching: export");
    // The deferred filter refuses the call as well: the tool is not in the catalog at all.
    let state = merge_promoted(None, Some(out.promoted));
    assert!(a
        .catalog
        .deferred_filter(state.as_ref())
        .visible_tools()
        .all(|t| t.name != "crm_export_all"));
}

#[test]
fn the_hash_follows_schemas_and_not_arrival_order() {
    let base = vec![mcp("a", "one", 0), mcp("a", "two", 1), mcp("b", "three", 0)];
    let build = |tools: Vec<McpSourceTool>| {
        let sources = Sources {
            config: config("tool_search:\n  enabled: true\n"),
            mcp: McpTools::new(tools),
            ..Sources::default()
        };
        assemble(&sources, &AssemblyRequest::lead()).unwrap()
    };
    let a = build(base.clone());
    let mut reversed = base.clone();
    reversed.reverse();
    let b = build(reversed);
    assert_eq!(names(&a.catalog), names(&b.catalog));
    assert_eq!(a.catalog.hash(), b.catalog.hash());
    let mut changed = base.clone();
    changed[1].description = "two, described differently".into();
    let c = build(changed);
    assert_ne!(a.catalog.hash(), c.catalog.hash());
    let d = build(base[..2].to_vec());
    assert_ne!(a.catalog.hash(), d.catalog.hash());
}

#[test]
fn mcp_order_follows_the_server_order_of_the_extensions_config() {
    let ext =
        extensions(r#"{"mcpServers": {"zeta": {"command": "z"}, "alpha": {"command": "a"}}}"#);
    let sources = Sources {
        config: config("tool_search:\n  enabled: false\n"),
        extensions: Some(ext),
        mcp: McpTools::new(vec![
            mcp("alpha", "t", 0),
            mcp("zeta", "t2", 1),
            mcp("zeta", "t1", 0),
        ]),
    };
    let a = assemble(&sources, &AssemblyRequest::lead()).unwrap();
    let n = names(&a.catalog);
    let mcp_names: Vec<&str> = n
        .iter()
        .copied()
        .filter(|x| {
            x.contains('_')
                && !x.starts_with("present")
                && !x.starts_with("ask")
                && !x.starts_with("list")
        })
        .collect();
    assert_eq!(mcp_names, ["zeta_t1", "zeta_t2", "alpha_t"]);
}

#[test]
fn a_subagent_catalog_validates_the_parents_promotions_without_changing_them() {
    let sources = Sources {
        config: config("tool_search:\n  enabled: true\n"),
        mcp: McpTools::new(vec![mcp("srv", "a", 0), mcp("srv", "b", 1)]),
        ..Sources::default()
    };
    let parent_req = AssemblyRequest {
        builtins: antler_engine::catalog::builtins::BuiltinConditions {
            subagent_enabled: true,
            interactive: true,
            ..Default::default()
        },
        ..AssemblyRequest::lead()
    };
    let parent = assemble(&sources, &parent_req).unwrap();
    assert!(parent.catalog.get("task").is_some());
    let promoted = parent
        .catalog
        .tool_search("select:srv_a", "c1")
        .unwrap()
        .promoted;
    let parent_state = merge_promoted(None, Some(promoted.clone()));

    let child = assemble(
        &sources,
        &AssemblyRequest::subagent_of(&parent_req, None, vec![]),
    )
    .unwrap();
    assert!(child.catalog.get("task").is_none(), "no recursion");
    assert!(
        child.catalog.get("ask_clarification").is_none()
            && child.catalog.get("list_uploaded_files").is_none()
    );
    assert_eq!(
        child.catalog.hash(),
        parent.catalog.hash(),
        "same MCP schemas, same hash"
    );
    let visible: Vec<String> = child
        .catalog
        .deferred_filter(parent_state.as_ref())
        .visible_tools()
        .map(|t| t.name.clone())
        .collect();
    assert!(visible.contains(&"srv_a".to_string()) && !visible.contains(&"srv_b".to_string()));
    assert_eq!(
        parent_state,
        merge_promoted(None, Some(promoted)),
        "the parent's state is untouched"
    );

    // A subagent that denies srv_b has a different catalog: the parent's hash no longer matches.
    let narrowed = assemble(
        &sources,
        &AssemblyRequest::subagent_of(&parent_req, None, vec!["srv_b".into()]),
    )
    .unwrap();
    assert_ne!(narrowed.catalog.hash(), parent.catalog.hash());
    assert!(narrowed
        .catalog
        .deferred_filter(parent_state.as_ref())
        .visible_tools()
        .all(|t| t.name != "srv_a"));
}

#[test]
fn a_subagent_is_not_offered_skill_manage_or_invoke_acp_agent() {
    let sources = Sources {
        config: config(
            "skill_evolution:\n  enabled: true\nacp_agents:\n  coder:\n    command: coder-acp\n    description: Writes code\n",
        ),
        ..Sources::default()
    };
    let parent_req = AssemblyRequest::lead();
    let parent = assemble(&sources, &parent_req).unwrap();
    assert!(parent.catalog.get("skill_manage").is_some());
    assert!(parent.catalog.get("invoke_acp_agent").is_some());
    let child = assemble(
        &sources,
        &AssemblyRequest::subagent_of(&parent_req, None, vec![]),
    )
    .unwrap();
    assert!(child.catalog.get("skill_manage").is_none());
    assert!(child.catalog.get("invoke_acp_agent").is_none());
}

#[actix_rt::test]
async fn concurrent_requests_while_sources_change_always_get_a_consistent_catalog() {
    use actix::Actor;
    let sources = Sources {
        config: config("tool_search:\n  enabled: true\n"),
        ..Sources::default()
    };
    let actor = CatalogActor::new(sources).start();
    let mut replies = Vec::new();
    let mut updates = Vec::new();
    for i in 0..100u32 {
        if i % 10 == 0 {
            let tools: Vec<McpSourceTool> = (0..=i / 10)
                .map(|k| mcp("srv", &format!("t{k}"), k))
                .collect();
            updates.push(actor.send(SetMcpTools {
                server: Some("srv".into()),
                tools,
            }));
        }
        let mut req = AssemblyRequest::lead();
        req.principal.user = Some(format!("user{}", i % 7));
        replies.push(actor.send(Assemble(req)));
    }
    let replies = futures::future::join_all(replies).await;
    futures::future::join_all(updates).await;
    let mut versions = std::collections::BTreeSet::new();
    for r in replies {
        let built = r.unwrap().unwrap();
        versions.insert(built.version);
        // Rebuilding from the reply's own tool list gives the reply's hash: tools and hash agree.
        let tools: Vec<_> = built
            .assembled
            .catalog
            .tools()
            .iter()
            .filter(|t| t.name != "tool_search")
            .cloned()
            .collect();
        let again = Catalog::build(tools, true).unwrap();
        assert_eq!(again.hash(), built.assembled.catalog.hash());
        let mcp_count = built
            .assembled
            .catalog
            .tools()
            .iter()
            .filter(|t| t.is_mcp())
            .count() as u64;
        assert_eq!(
            mcp_count,
            built.version - 1,
            "version {} saw {mcp_count} MCP tools",
            built.version
        );
    }
    assert!(versions.len() > 1, "sources changed during the requests");
}

#[test]
fn ingested_tools_hash_like_fresh_ones_and_share_their_schemas() {
    let listing: Vec<McpSourceTool> = (0..40)
        .map(|i| {
            let mut tool = mcp(&format!("srv{}", i % 3), &format!("t{i}"), i);
            tool.description = format!("Tool «{i}»\twith \"quotes\" and \\ and é");
            tool.input_schema["properties"]["n"] =
                json!({"type": "number", "default": 0.1 + f64::from(i), "enum": [1e16, 1e-5]});
            tool
        })
        .collect();
    let fresh: Vec<antler_engine::catalog::ToolSpec> = listing
        .iter()
        .cloned()
        .map(|t| {
            antler_engine::catalog::ToolSpec::mcp(
                t.name,
                t.description,
                t.input_schema,
                Some(t.server),
                t.original_name,
            )
        })
        .collect();
    let sources = Sources {
        config: config("tool_search:\n  enabled: true\n"),
        extensions: None,
        mcp: McpTools::new(listing),
    };
    let first = assemble(&sources, &AssemblyRequest::lead()).unwrap();
    let second = assemble(&sources, &AssemblyRequest::lead()).unwrap();
    let expected = antler_engine::catalog::CatalogHash::of_tools(&fresh);
    assert_eq!(first.catalog.hash(), Some(&expected));
    assert_eq!(second.catalog.hash(), Some(&expected));
    let a = first.catalog.get("srv1_t7").unwrap();
    let b = second.catalog.get("srv1_t7").unwrap();
    assert_eq!(a.parameters, b.parameters);
    assert!(std::ptr::eq(a.parameters.value(), b.parameters.value()));
}

/// An assembled catalog takes its features, name order and hash entries from ingestion;
/// a catalog built from the same tools computes them itself. Both must answer alike,
/// whether every ingested tool is deferred or a subagent's denylist leaves gaps.
#[test]
fn assembled_catalogs_answer_like_catalogs_built_from_scratch() {
    let verbs = ["send", "post", "list", "get", "archive"];
    let listing: Vec<McpSourceTool> = (0..700)
        .map(|i| {
            let server = format!("svc{}", i % 9);
            let mut tool = mcp(&server, &format!("{}_{i}", verbs[i as usize % 5]), i);
            tool.description = format!(
                "{} record {i} in {server}; Ünïcode «ok»",
                verbs[i as usize % 5]
            );
            tool
        })
        .collect();
    let sources = Sources {
        config: config("tool_search:\n  enabled: true\n"),
        extensions: None,
        mcp: McpTools::new(listing),
    };
    let lead = AssemblyRequest::lead();
    let gaps = AssemblyRequest::subagent_of(
        &lead,
        None,
        (0..700)
            .step_by(7)
            .map(|i| format!("svc{}_{}_{i}", i % 9, verbs[i % 5]))
            .collect(),
    );
    for request in [lead, gaps] {
        let assembled = assemble(&sources, &request).unwrap().catalog;
        let deferred: Vec<antler_engine::catalog::ToolSpec> =
            assembled.deferred_tools().cloned().collect();
        assert!(deferred.len() >= 600, "{} deferred", deferred.len());
        let scratch = Catalog::build(deferred, true).unwrap();
        assert_eq!(assembled.hash(), scratch.hash());
        assert_eq!(assembled.prompt_section(), scratch.prompt_section());
        for query in [
            "select:svc3_get_3,svc0_send_0,svc8_archive_44,nope",
            "+svc2 record",
            "+SVC4",
            "archive",
            "ÜNÏCODE",
            "svc\\d_(send|post)_1\\d\\b",
            "record 69",
            "post svc5 nothing",
        ] {
            let names = |c: &Catalog| -> Vec<String> {
                c.search(query)
                    .into_iter()
                    .map(|t| t.name.clone())
                    .collect()
            };
            assert_eq!(names(&assembled), names(&scratch), "{query}");
            assert_eq!(
                assembled.tool_search(query, "c").unwrap().message.content,
                scratch.tool_search(query, "c").unwrap().message.content,
                "{query}"
            );
        }
    }
}
