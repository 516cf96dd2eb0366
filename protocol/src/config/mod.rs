//! Configuration: DeerFlow `config.yaml` and `extensions_config.json` (being written).
