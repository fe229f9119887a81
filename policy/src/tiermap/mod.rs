//! The tier map `CLAUDE_CMDS.md`: parsing, canonical bytes, signature trailer, verification.
