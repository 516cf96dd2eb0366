//! The tool catalog (being written).
