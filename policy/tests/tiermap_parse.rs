//! Table tests for parsing `CLAUDE_CMDS.md`: accepted maps and every diagnostic with its line.

use cmdgate_policy::tiermap::{parse, Tier, STARTER_MAP};

#[test]
fn starter_map_parses() {
    let map = parse(STARTER_MAP).unwrap_or_else(|d| panic!("{d:#?}"));
    assert_eq!(map.revision, 1);
    assert!(map.entries_in(Tier::Deny).count() > 5);
    assert_eq!(
        map.classify(&["git", "push", "--force", "origin"])
            .map(|(t, _)| t),
        Some(Tier::Deny)
    );
}
