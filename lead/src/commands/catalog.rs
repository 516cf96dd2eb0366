//! `antler catalog show|search|hash`: the catalog as assembly builds it, for operators and
//! for scripts that check Antler against DeerFlow. `--catalog FILE` reads a JSON array of
//! `{name, description, parameters}`, each an MCP tool with no server prefix (the shape of
//! `catalog` in DeerFlow's tool_search conformance vectors).

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use antler_protocol::{
    calls::McpCalls,
    config::{
        load_app_config, load_extensions_config, process_env, resolve_app_config_path, AppConfig,
    },
    messages::McpTool,
    Role,
};
use anyhow::{bail, Context};
use clap::Subcommand;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{extensions::ExtensionsFile, on_host, Ctx};
use antler_engine::catalog::{
    assemble, origins, AssemblyRequest, Catalog, McpSourceTool, McpTools, Sources, ToolSpec,
};

/// The catalog commands.
#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Every tool of the assembled catalog with its source, group and deferred flag, the
    /// warnings, and the catalog hash.
    Show {
        /// config.yaml (default: found as `antler up` finds it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Use these MCP tools instead of asking mcp-host.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Print one JSON object: the tools (name, source, group, deferred), warnings and
        /// the catalog hash.
        #[arg(long)]
        json: bool,
    },
    /// Run a tool_search query; `--json` prints the matched names in result order.
    Search {
        /// The query, as the model writes it: `select:a,b`, `+required words`, or a regex.
        query: String,
        /// A JSON array of MCP tools {name, description, parameters} to search instead of
        /// mcp-host's.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// config.yaml (default: found as `antler up` finds it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the matched tool names as a JSON array, in result order.
        #[arg(long)]
        json: bool,
    },
    /// Print the catalog hash alone.
    Hash {
        /// A JSON array of MCP tools {name, description, parameters} to hash instead of
        /// mcp-host's.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// config.yaml (default: found as `antler up` finds it).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Deserialize)]
struct FileTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "empty_object")]
    parameters: Value,
}

fn empty_object() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Reads a catalog file: a JSON array of `{name, description, parameters}`.
pub fn read_catalog_file(path: &PathBuf) -> anyhow::Result<Vec<McpSourceTool>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let tools: Vec<FileTool> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a JSON array of {{name, description, parameters}}",
            path.display()
        )
    })?;
    Ok(tools
        .into_iter()
        .enumerate()
        .map(|(i, t)| McpSourceTool {
            server: String::new(),
            original_name: t.name.clone(),
            name: t.name,
            description: t.description,
            input_schema: t.parameters,
            position: i as u32,
        })
        .collect())
}

/// A catalog built from a file alone: every tool MCP-tagged and deferred.
fn file_catalog(path: &PathBuf) -> anyhow::Result<Catalog> {
    let specs: Vec<ToolSpec> = read_catalog_file(path)?
        .into_iter()
        .map(|t| ToolSpec::mcp(t.name, t.description, t.input_schema, None, t.original_name))
        .collect();
    Ok(Catalog::build(specs, true)?)
}

/// The catalog hash of a file's tools, as [`file_catalog`]'s would be, without building it.
/// The array is read one tool at a time: each tool's schema is normalised, its hash entry
/// written, and the tool dropped before the next is parsed, so memory stays small (at
/// 5,000 tools most of the time went to faulting in the pages of every parsed schema).
fn file_hash(path: &PathBuf) -> anyhow::Result<Option<antler_engine::catalog::CatalogHash>> {
    use antler_engine::catalog::{entry_of, BlobHasher};
    use serde::de::{Deserializer as _, SeqAccess, Visitor};

    /// Visits the array, keeping (name, hash entry) of each tool.
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Vec<(String, Box<str>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array of {name, description, parameters}")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(t) = seq.next_element::<FileTool>()? {
                let spec = ToolSpec::mcp(t.name.clone(), t.description, t.parameters, None, t.name);
                let entry = entry_of(&spec);
                entries.push((spec.name, entry));
            }
            Ok(entries)
        }
    }

    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let mut entries = de
        .deserialize_seq(Entries)
        .and_then(|e| de.end().map(|()| e))
        .with_context(|| {
            format!(
                "{} is not a JSON array of {{name, description, parameters}}",
                path.display()
            )
        })?;
    if entries.is_empty() {
        return Ok(None);
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(dup) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(
            antler_engine::catalog::CatalogError::DuplicateToolName(dup[0].0.clone()).into(),
        );
    }
    let mut blob = BlobHasher::new();
    blob.written_entries(entries.iter().map(|(_, e)| &**e));
    Ok(Some(blob.finish()))
}

pub(crate) fn load_config(config: Option<&PathBuf>) -> anyhow::Result<(AppConfig, Vec<String>)> {
    let cwd = std::env::current_dir()?;
    match resolve_app_config_path(config.map(|p| p.as_path()), &cwd, &process_env)? {
        Some(path) => {
            let loaded = load_app_config(&path)?;
            Ok((
                loaded.value,
                loaded.warnings.iter().map(|w| w.to_string()).collect(),
            ))
        }
        None => Ok((AppConfig::default(), Vec::new())),
    }
}

/// The MCP tools of the cluster's mcp-host (running, or ephemeral for this command).
fn cluster_mcp_tools(ctx: &Ctx) -> anyhow::Result<Vec<McpSourceTool>> {
    let timeout = Duration::from_secs(60);
    let tools = actix::System::new().block_on(on_host(ctx, Role::McpHost, 0, async |host| {
        host.list_tools(None, timeout).await
    }))?;
    Ok(mcp_source_tools(tools))
}

/// The MCP tools of a `ListTools` answer, with each tool's place in its server's listing.
pub(crate) fn mcp_source_tools(tools: Vec<McpTool>) -> Vec<McpSourceTool> {
    let mut position = std::collections::HashMap::<String, u32>::new();
    tools
        .into_iter()
        .map(|t| {
            let p = position.entry(t.server.clone()).or_default();
            *p += 1;
            McpSourceTool {
                input_schema: t.input_schema.into(),
                server: t.server,
                name: t.name,
                original_name: t.original_name,
                description: t.description,
                position: *p - 1,
            }
        })
        .collect()
}

fn assembled_catalog(
    ctx: &Ctx,
    config: Option<&PathBuf>,
    catalog: Option<&PathBuf>,
) -> anyhow::Result<(antler_engine::catalog::Assembled, Vec<String>)> {
    let (app, mut warnings) = load_config(config)?;
    let cwd = std::env::current_dir()?;
    let config_path = resolve_app_config_path(config.map(|p| p.as_path()), &cwd, &process_env)?;
    // Pinned, so an ephemeral cluster started for the MCP tools reads the same file.
    let extensions = match super::extensions::pin(config_path.as_deref()) {
        ExtensionsFile::Found(p) => Some(Arc::new(load_extensions_config(&p)?.value)),
        ExtensionsFile::Unusable(why) => bail!("{why}"),
        ExtensionsFile::NotFound => None,
    };
    let mcp = match catalog {
        Some(file) => read_catalog_file(file)?,
        None if extensions
            .as_ref()
            .is_some_and(|e| e.mcp_servers.values().any(|s| s.enabled)) =>
        {
            cluster_mcp_tools(ctx)?
        }
        None => Vec::new(),
    };
    let sources = Sources {
        config: Arc::new(app),
        extensions,
        mcp: McpTools::new(mcp),
    };
    let assembled = assemble(&sources, &AssemblyRequest::lead())?;
    warnings.extend(assembled.warnings.iter().cloned());
    Ok((assembled, warnings))
}

pub fn run(ctx: &Ctx, command: CatalogCommand) -> anyhow::Result<ExitCode> {
    match command {
        CatalogCommand::Hash { catalog, config } => {
            let hash = match (&catalog, &config) {
                // Only the hash: no search index is built. Every tool of a file is
                // MCP-tagged and deferred, so the hash is over them all.
                (Some(file), None) => file_hash(file)?.map(|h| h.to_string()),
                _ => assembled_catalog(ctx, config.as_ref(), catalog.as_ref())?
                    .0
                    .catalog
                    .hash()
                    .map(|h| h.to_string()),
            };
            match hash {
                Some(h) => println!("{h}"),
                None => println!("(no deferred tools: no catalog hash)"),
            }
            Ok(ExitCode::SUCCESS)
        }
        CatalogCommand::Search {
            query,
            catalog,
            config,
            json,
        } => {
            let built;
            let cat = match (&catalog, &config) {
                (Some(file), None) => {
                    built = Arc::new(file_catalog(file)?);
                    &built
                }
                _ => {
                    built = assembled_catalog(ctx, config.as_ref(), catalog.as_ref())?
                        .0
                        .catalog;
                    &built
                }
            };
            if json {
                let names: Vec<&str> = cat
                    .search(&query)
                    .into_iter()
                    .map(|t| t.name.as_str())
                    .collect();
                println!("{}", serde_json::to_string(&names)?);
            } else {
                match cat.tool_search(&query, "cli") {
                    Ok(out) => println!("{}", out.message.content),
                    Err(e) => bail!("{e}"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        CatalogCommand::Show {
            config,
            catalog,
            json,
        } => {
            let (assembled, warnings) = assembled_catalog(ctx, config.as_ref(), catalog.as_ref())?;
            let cat = &assembled.catalog;
            let tools: Vec<Value> = origins(cat)
                .into_iter()
                .map(|o| {
                    json!({"name": o.name, "source": o.source, "group": o.group, "deferred": cat.is_deferred(&o.name)})
                })
                .collect();
            if json {
                let out = json!({
                    "hash": cat.hash().map(|h| h.to_string()),
                    "tools": tools,
                    "denied": assembled.denied,
                    "warnings": warnings,
                    "prompt_section": cat.prompt_section(),
                });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("{:<32} {:<9} {:<12} SOURCE", "TOOL", "DEFERRED", "GROUP");
                for t in &tools {
                    println!(
                        "{:<32} {:<9} {:<12} {}",
                        t["name"].as_str().unwrap_or(""),
                        if t["deferred"] == true { "yes" } else { "no" },
                        t["group"].as_str().unwrap_or("-"),
                        t["source"].as_str().unwrap_or("")
                    );
                }
                println!(
                    "\ncatalog hash: {}",
                    cat.hash()
                        .map(|h| h.to_string())
                        .unwrap_or_else(|| "(none: nothing deferred)".into())
                );
                for d in &assembled.denied {
                    println!("denied by authorization: {d}");
                }
                for w in &warnings {
                    println!("warning: {w}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
