//! The secret table (`policy::secrets`), compiled once per set of homes instead of once per
//! decision. A compiled table is a pure function of the homes it is anchored at and the
//! operator's `secret_paths` (fixed for the engine's life); `SECRET_TABLE` is built in. So a kept
//! table answers exactly as a table compiled for the decision would: nothing here reads the file
//! system or the clock, and no answer depends on an earlier decision. A compile is about 140 k
//! instructions and its copy into the policy as many again: a tenth of a routed decision each.
//!
//! The homes come from the request (the agent's `$HOME`), so the number kept is bounded: the
//! least recently used set goes first.

use std::sync::{Arc, Mutex, PoisonError};

use cmdgate_policy::secrets::SecretPaths;

/// Sets of homes kept (an agent uid's `$HOME` and its password-database home, per agent).
const KEPT: usize = 16;

/// Compiled secret tables by the homes they are anchored at.
pub(crate) struct SecretTables {
    /// The operator's `secret_paths`.
    extra: Vec<String>,
    /// Most recently used last.
    kept: Mutex<Vec<(Vec<String>, Arc<SecretPaths>)>>,
}

impl SecretTables {
    pub(crate) fn new(extra: Vec<String>) -> SecretTables {
        SecretTables {
            extra,
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The table for `homes` (the agent's `$HOME` first, then its password-database home when
    /// that differs): what is secret under one is secret under the other.
    pub(crate) fn for_homes(&self, homes: &[&str]) -> Arc<SecretPaths> {
        {
            // A panic elsewhere cannot leave the list half-changed (a push or a remove), so a
            // poisoned lock still holds whole tables.
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = kept.iter().position(|(h, _)| h.iter().eq(homes.iter())) {
                let hit = kept.remove(i);
                let table = Arc::clone(&hit.1);
                kept.push(hit);
                return table;
            }
        }
        let table = Arc::new(compile(homes, &self.extra));
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept.iter().any(|(h, _)| h.iter().eq(homes.iter())) {
            if kept.len() >= KEPT {
                kept.remove(0);
            }
            kept.push((
                homes.iter().map(|h| (*h).to_owned()).collect(),
                Arc::clone(&table),
            ));
        }
        table
    }
}

/// The table as each decision compiled it before it was kept.
fn compile(homes: &[&str], extra: &[String]) -> SecretPaths {
    match homes {
        [home] => SecretPaths::builtin(home, extra),
        _ => SecretPaths::builtin_homes(homes, extra),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept table judges every path as a freshly compiled one does, for one home and two,
    /// and the least recently used set goes first.
    #[test]
    fn a_kept_table_answers_as_a_new_one() {
        let tables = SecretTables::new(vec!["~/vault".into(), "/srv/keys".into()]);
        let paths = [
            "/home/a/.ssh/id_ed25519",
            "/home/b/.ssh/id_ed25519",
            "/root/.aws/credentials",
            "/home/a/vault/x",
            "/home/b/vault/x",
            "/srv/keys/k",
            "/home/a/proj/.env",
            "/home/a/proj/src/main.rs",
            "/home/a/notes.txt",
        ];
        for homes in [&["/home/a"][..], &["/home/a", "/root"], &["/home/b"]] {
            let fresh = compile(homes, &tables.extra);
            for _ in 0..2 {
                let kept = tables.for_homes(homes);
                // The same table, entry for entry (anchored at these homes, not others).
                assert_eq!(format!("{kept:?}"), format!("{fresh:?}"), "{homes:?}");
                for p in paths {
                    for glob in [false, true] {
                        assert_eq!(
                            kept.matches(p, &[], glob),
                            fresh.matches(p, &[], glob),
                            "{homes:?} {p}"
                        );
                    }
                }
            }
        }
        // A secret under one home of the set is one under the other.
        let two = tables.for_homes(&["/home/a", "/root"]);
        assert!(two.matches("/root/vault/x", &[], false));
        assert!(two.matches("/home/a/vault/x", &[], false));
        // Bounded: the oldest set goes.
        for i in 0..KEPT {
            tables.for_homes(&[&format!("/home/u{i}")]);
        }
        let kept = tables.kept.lock().unwrap();
        assert_eq!(kept.len(), KEPT);
        assert!(!kept.iter().any(|(h, _)| h == &["/home/a"]));
    }
}
