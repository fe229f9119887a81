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
        let local_read = case.verdict == "allow"
            && !["Write", "Edit", "MultiEdit", "NotebookEdit"].contains(&case.tool.as_str());
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

#[test]
fn escape_hatch_does_not_lift_cmdgates_own_files_for_any_tool() {
    let mut w = World::new();
    w.set("CMDGATE_ESCAPE_HATCH", "incident 42");
    let conf = w.path("config");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("dev-signing-key"), "secret\n").unwrap();
    std::os::unix::fs::symlink(conf.join("dev-signing-key"), w.path("work/notes.txt")).unwrap();
    let key = conf.join("dev-signing-key").display().to_string();
    for (tool, input) in [
        ("Read", serde_json::json!({"file_path": key})),
        ("Read", serde_json::json!({"file_path": "notes.txt"})),
        ("Grep", serde_json::json!({"pattern": "x", "path": conf})),
        (
            "Write",
            serde_json::json!({"file_path": conf.join("trusted-keys"), "content": "k"}),
        ),
        ("Edit", serde_json::json!({"file_path": "notes.txt"})),
    ] {
        let reason = w.run(&w.pre(tool, input.clone()), &[]).denied();
        assert!(reason.contains("catastrophic"), "{tool} {input}: {reason}");
    }
    // Anything else under the hatch: cmdgate steps aside.
    std::fs::write(w.path("work/plain.txt"), "x\n").unwrap();
    let run = w.run(
        &w.pre(
            "Write",
            serde_json::json!({"file_path": "plain.txt", "content": ""}),
        ),
        &[],
    );
    assert!(run.stdout.contains("ESCAPE HATCH"), "{run:?}");
}
