//! The training-data export's pure parts: secret redaction, the example record (one JSON line per
//! decided request, documented in `docs/export.md` and `docs/export.schema.json`), labels, and the
//! stable train/test split and dedup keys. The daemon's `cmdgate export` reads the store and feeds
//! rows through these; nothing here performs IO.

pub mod record;
pub mod redact;
pub mod split;

pub use record::{
    label_for, relative_cwd, Example, ExampleContext, ExampleDecision, ExampleOutcome,
    ExampleRequest, HumanDecision, Label, RedactedField, SCHEMA_ID,
};
pub use redact::{redact, redact_argv, Redaction, SecretKind};
pub use split::{command_key, dedup_key, normalized_command, split_for, Split};
