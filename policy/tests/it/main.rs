//! The policy's integration tests, one module per subject, linked into one test binary (link time
//! dominates CI). A new test file goes here as a module.

mod decide_table;
mod kernel_paths;
mod read_classification;
mod read_packs;
mod secret_index;
mod secret_table;
mod shell_analysis;
mod shell_properties;
mod tiermap_match;
mod tiermap_parse;
mod tiermap_props;
mod tiermap_verify;
