//! The kernel-paths table (`policy/tests/kernel_table/cases.txt`) through the real hook binary on
//! a real file system, with no daemon: a case the policy allows as a read is allowed locally; every
//! other case is not (it goes to the daemon, which is down here, so it is denied naming it). The
//! daemon's half of the same table is `tests/tests/kernel_paths.rs`.

use crate::common::World;

#[allow(dead_code)] // the in-memory half is for the policy's test
#[path = "../../../policy/tests/kernel_table/mod.rs"]
mod kernel_table;

#[test]
fn kernel_paths_table_through_the_hook() {
    let mut failures = Vec::new();
    for case in kernel_table::cases("$W") {
        let mut w = World::new();
        let root = w.path("gate");
        let root_s = root.display().to_string();
        let case = kernel_table::cases(&root_s)
            .into_iter()
            .find(|c| c.name == case.name)
            .unwrap();
        kernel_table::make_gate(&root);
        let proj = root.join("proj");
        for s in &case.setup {
            kernel_table::apply_real(&proj, s);
        }
        w.set("HOME", &format!("{root_s}/home"));
        w.set("CMDGATE_CONFIG_DIR", &format!("{root_s}/conf"));
        w.set("CMDGATE_HOME", &format!("{root_s}/data"));
        w.set("CLAUDE_PROJECT_DIR", &proj.display().to_string());
        let mut event: serde_json::Value =
            serde_json::from_slice(&w.pre(&case.tool, case.input())).unwrap();
        event["cwd"] = proj.display().to_string().into();
        let run = w.run(&serde_json::to_vec(&event).unwrap(), &[]);
        let (verdict, reason) = run.decision();
        let local_read = case.verdict == "allow" && case.tool != "Write" && case.tool != "Edit";
        let ok = if local_read {
            verdict == "allow"
        } else {
            verdict == "deny" && reason.contains("cmdgate up")
        };
        if !ok {
            failures.push(format!(
                "{}: {} {:?} => {verdict} ({reason})",
                case.name, case.tool, case.arg
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
