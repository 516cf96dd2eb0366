//! One module per former integration-test file (each was its own test binary), in the
//! order of their names.

mod run_loop_detection;
mod run_model_fallback;
mod run_model_mistakes;
mod run_reasoning;
mod run_streaming;
mod skill_manage_blocked_write;
mod skill_manage_create;
mod skill_manage_moderation_model;
mod skill_manage_other_user;
mod skill_manage_parallel_skills;
mod skill_manage_patch;
mod skill_manage_public_read_only;
mod skill_manage_same_skill_serialised;
mod skill_manage_traversal;
mod skill_manage_write_file;
mod task_graph;
mod task_graph_model_fallback;
mod web_address_guard;
mod web_capture_browserless;
mod web_crawler_handoff;
mod web_exa;
mod web_fetch_browserless;
mod web_fetch_crawl4ai;
mod web_fetch_jina;
mod web_fetch_own;
mod web_firecrawl;
mod web_groundroute;
mod web_infoquest;
mod web_results_untrusted;
mod web_search_brave;
mod web_search_duckduckgo;
mod web_search_searxng;
mod web_search_serper;
mod web_subagent;
mod web_tavily;
