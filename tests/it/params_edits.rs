//! The files pipe edits for `-S` (a run's `params.yaml`, `pipe apply`'s
//! params files) are edited only where the edit means what the run
//! records: never an anchor other params share, every character written so
//! that PyYAML reads it back, never through another name of the file, a
//! byte order mark kept, and no temporary file left in the project by a
//! killed pipe (docs/ARCHITECTURE.md, "A recorded param is the value the
//! command saw").

use std::os::unix::fs::MetadataExt;

use pipe_test_support::TestProject;

use crate::params_overrides::python;

const PARAMS: &str =
    "train:\n  lr: &lr 0.1   # the base rate\n  warm_lr: *lr\n  alpha: 1.0\n  name: 'base'\n";

/// A script that writes what it read from `params.yaml`, with PyYAML, as
/// JSON.
const READER: &str = "import json, sys, yaml\nparams = yaml.safe_load(open('params.yaml'))\nopen(sys.argv[1], 'w').write(json.dumps(params['train'], sort_keys=True))\n";

/// A command reading `train` from `params.yaml` by itself: by its
/// `params:` list, or (`reads` = `deps`) by depending on the file.
fn project(reads: &str) -> TestProject {
    let project = TestProject::new();
    project.write("params.yaml", PARAMS);
    project.write("read.py", READER);
    let reads = match reads {
        "deps" => "deps: [read.py, params.yaml]",
        _ => "deps: [read.py]\n    params: [train]",
    };
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  train:\n    run: {} read.py seen.json\n    {reads}\n    outs: [seen.json]\n",
            python().display()
        ),
    );
    project
}

fn seen(project: &TestProject) -> serde_json::Value {
    serde_json::from_str(&project.read("seen.json")).expect("the script's JSON")
}

#[test]
fn an_override_of_a_param_shared_through_an_anchor_or_alias_exits_2_before_anything_runs() {
    for (reads, at) in [("params", "pipe.yaml:5:14"), ("deps", "pipe.yaml:4:21")] {
        let project = project(reads);
        // The alias, and the anchor it reads: writing either in place
        // changes the other, which the run would record unchanged.
        for argument in ["train.warm_lr=0.5", "train.lr=0.5"] {
            let run = project.run(&["-S", argument]);
            assert_eq!(run.code, 2, "{reads}, -S {argument}: {}", run.stderr);
            assert!(
                run.stderr.contains("error[override-unseen]")
                    && run
                        .stderr
                        .contains("through a YAML anchor (`&name`) or alias (`*name`)")
                    && run.stderr.contains(at)
                    && run.stderr.contains("in place of the anchor or alias"),
                "{reads}, -S {argument}: {}",
                run.stderr
            );
            assert!(!project.exists("seen.json"), "nothing ran");
            assert_eq!(project.read("params.yaml"), PARAMS);
            let validate = project.pipe(&["validate", "-S", argument]);
            assert_eq!(validate.status.code(), Some(2), "{reads}, -S {argument}");
        }
        // A param of its own is written as before; the shared ones stay.
        project.run_ok(&["-S", "train.alpha=0.5"]);
        let seen = seen(&project);
        assert_eq!(seen["alpha"], serde_json::json!(0.5), "{seen}");
        assert_eq!(seen["lr"], serde_json::json!(0.1), "{seen}");
        assert_eq!(seen["warm_lr"], serde_json::json!(0.1), "{seen}");
        assert_eq!(project.read("params.yaml"), PARAMS);
    }

    // A tag (`!!str 5` is the string "5" to PyYAML) is refused when the
    // file is read, so no `-S` of it is ever written.
    let project = project("params");
    project.write("params.yaml", "train:\n  name: !!str 5\n");
    let run = project.run(&["-S", "train.name=6"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[yaml-tag]") && run.stderr.contains("params.yaml:2:9"),
        "{}",
        run.stderr
    );
    assert_eq!(project.read("params.yaml"), "train:\n  name: !!str 5\n");
}

#[test]
fn a_value_with_nel_del_or_c1_characters_reaches_a_pyyaml_reader_as_given() {
    let project = project("params");
    // NEL, which PyYAML folds to a space when raw; DEL, which it refuses
    // raw; a C1 control; the line separator; a tab and a quote.
    let value = "a\u{85}b\u{7f}c\u{9b}d\u{2028}e\tf\"g";
    let argument = format!("train.name={value}");
    let run = project.run(&["-S", &argument]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(seen(&project)["name"], serde_json::json!(value));
    assert_eq!(
        project.read("params.yaml"),
        PARAMS,
        "put back byte for byte"
    );
    let record = project.show_settled("last");
    assert_eq!(record["params"]["train"]["name"], serde_json::json!(value));
}

/// A process id no process has: one that has ended.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("start true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid
}

#[test]
fn a_temporary_file_a_killed_run_left_with_its_values_is_removed_by_the_next_command() {
    let project = project("params");
    let digest = |text: &str| blake3::hash(text.as_bytes()).to_hex().to_string();
    let during = PARAMS.replace("alpha: 1.0", "alpha: 0.3");
    // What a `pipe run -S train.alpha=0.3` killed while it wrote
    // params.yaml leaves: its journal, the copy from before, and the
    // temporary file beside params.yaml (where an older pipe wrote it)
    // or under .pipe/.
    let dead = dead_pid();
    project.write(".pipe/params-override/original", PARAMS);
    project.write(
        ".pipe/params-override/journal.json",
        &serde_json::json!({
            "file": "params.yaml",
            "original": digest(PARAMS),
            "written": digest(&during),
        })
        .to_string(),
    );
    let left = [
        format!(".params.yaml.pipe-tmp-{dead}"),
        format!(".pipe/params-override/.params.yaml.pipe-tmp-{dead}"),
        format!(".pipe/params-override/.original.pipe-tmp-{dead}"),
    ];
    for file in &left {
        project.write(file, &during);
    }
    // One whose process lives (this test's) is another pipe's, at work.
    let live = format!(".params.yaml.pipe-tmp-{}", std::process::id());
    project.write(&live, &during);

    let status = project.pipe(&["status"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    for file in &left {
        assert!(!project.exists(file), "{file} was left");
    }
    assert!(project.exists(&live));
    assert!(!project.exists(".pipe/params-override/journal.json"));
    assert_eq!(project.read("params.yaml"), PARAMS);

    // A run writes its temporary files under .pipe/, never beside
    // params.yaml, and leaves none.
    std::fs::remove_file(project.path(&live)).expect("remove");
    project.run_ok(&["-S", "train.alpha=0.2"]);
    let names: Vec<String> = std::fs::read_dir(project.root())
        .expect("list")
        .chain(std::fs::read_dir(project.path(".pipe/params-override")).expect("list"))
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.contains(".pipe-tmp-"))
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

#[test]
fn a_hard_linked_params_yaml_is_refused_and_keeps_its_inode() {
    let project = project("params");
    std::fs::hard_link(project.path("params.yaml"), project.path("shared.yaml")).expect("link");
    let inode = std::fs::metadata(project.path("params.yaml"))
        .expect("stat")
        .ino();
    let run = project.run(&["-S", "train.alpha=0.2"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("has 2 names (hard links)")
            && run.stderr.contains("nothing ran")
            && run.stderr.contains("give it a copy of its own"),
        "{}",
        run.stderr
    );
    assert!(!project.exists("seen.json"), "nothing ran");
    let found = std::fs::metadata(project.path("params.yaml")).expect("stat");
    assert_eq!((found.ino(), found.nlink()), (inode, 2));
    assert_eq!(project.read("shared.yaml"), PARAMS);
    assert!(!project.exists(".pipe/params-override/journal.json"));
    // Without `-S` nothing is written, and the run goes ahead.
    project.run_ok(&[]);
}

#[test]
fn a_params_yaml_with_a_byte_order_mark_takes_the_override_and_gets_its_mark_back() {
    let project = project("params");
    // The values on the mark's line: an edit there lands where the
    // pipeline read it, not one character off.
    let marked = "\u{feff}train: {alpha: 1.0, lr: 0.1}\n";
    project.write("params.yaml", marked);
    let run = project.run(&["-S", "train.alpha=0.2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(seen(&project), serde_json::json!({"alpha": 0.2, "lr": 0.1}));
    assert_eq!(
        project.read("params.yaml"),
        marked,
        "put back, mark and all"
    );

    // A sweep's work trees get the file so edited too.
    project.write(
        "pipe.yaml",
        &project
            .read("pipe.yaml")
            .replace("outs: [seen.json]", "metrics: [seen.json]"),
    );
    let sweep = project.run(&["-m", "-S", "train.alpha=0.3,0.4"]);
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    let record = project.show_settled("last");
    let mut alphas: Vec<f64> = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter_map(|stage| stage["metrics"]["alpha"].as_f64())
        .collect();
    alphas.sort_by(f64::total_cmp);
    assert_eq!(alphas, [0.3, 0.4], "{record}");
    assert_eq!(project.read("params.yaml"), marked);
}

/// The reader's project with `params` as its `params.yaml`, run once.
fn applied_project(params: &str) -> TestProject {
    let project = project("params");
    project.write("params.yaml", params);
    project.run_ok(&[]);
    project
}

#[test]
fn pipe_apply_writes_params_files_under_the_rules_of_a_run() {
    let stderr =
        |output: &std::process::Output| String::from_utf8_lossy(&output.stderr).into_owned();
    let plain = "train:\n  lr: 0.1\n  warm_lr: 0.1\n  name: 'base'\n";

    // A param the file now shares through an anchor: writing the anchor
    // would change `lr` too, which the run did not have.
    let project = applied_project(plain);
    project.run_ok(&["-S", "train.warm_lr=0.5"]);
    let shared = "train:\n  lr: &lr 0.1\n  warm_lr: *lr\n  name: 'base'\n";
    project.write("params.yaml", shared);
    let apply = project.pipe(&["apply", "2"]);
    assert_eq!(apply.status.code(), Some(2), "{}", stderr(&apply));
    assert!(
        stderr(&apply).contains("-S train.warm_lr=0.5")
            && stderr(&apply).contains("through a YAML anchor (`&name`) or alias (`*name`)"),
        "{}",
        stderr(&apply)
    );
    assert_eq!(project.read("params.yaml"), shared);

    // A hard-linked file: refused, its inode and its other name unchanged.
    let project = applied_project(plain);
    project.run_ok(&["-S", "train.lr=0.5"]);
    std::fs::hard_link(project.path("params.yaml"), project.path("shared.yaml")).expect("link");
    let inode = std::fs::metadata(project.path("params.yaml"))
        .expect("stat")
        .ino();
    let apply = project.pipe(&["apply", "2"]);
    assert_eq!(apply.status.code(), Some(2), "{}", stderr(&apply));
    assert!(
        stderr(&apply).contains("has 2 names (hard links)"),
        "{}",
        stderr(&apply)
    );
    let found = std::fs::metadata(project.path("params.yaml")).expect("stat");
    assert_eq!((found.ino(), found.nlink()), (inode, 2));
    assert_eq!(project.read("params.yaml"), plain);

    // A symbolic link: refused, not replaced by a file of its own.
    let project = applied_project(plain);
    project.run_ok(&["-S", "train.lr=0.5"]);
    std::fs::create_dir(project.path("kept")).expect("mkdir");
    std::fs::rename(
        project.path("params.yaml"),
        project.path("kept/params.yaml"),
    )
    .expect("move");
    std::os::unix::fs::symlink("kept/params.yaml", project.path("params.yaml")).expect("link");
    let apply = project.pipe(&["apply", "2"]);
    assert_eq!(apply.status.code(), Some(2), "{}", stderr(&apply));
    assert!(
        stderr(&apply).contains("is a symbolic link"),
        "{}",
        stderr(&apply)
    );
    let link = std::fs::symlink_metadata(project.path("params.yaml")).expect("stat");
    assert!(link.file_type().is_symlink());
    assert_eq!(project.read("kept/params.yaml"), plain);

    // A byte order mark is kept, and control characters are written so
    // that PyYAML reads the run's value back.
    let marked = format!("\u{feff}{plain}");
    let project = applied_project(&marked);
    let value = "a\u{85}b\u{7f}c";
    project.run_ok(&["-S", &format!("train.name={value}")]);
    let apply = project.pipe(&["apply", "2"]);
    assert!(apply.status.success(), "{}", stderr(&apply));
    let now = project.read("params.yaml");
    assert_eq!(
        now,
        marked.replace("'base'", "\"a\\u0085b\\u007Fc\""),
        "{now:?}"
    );
    project.run_ok(&["-S", "train.lr=0.3"]);
    assert_eq!(seen(&project)["name"], serde_json::json!(value));
    let leftovers = std::fs::read_dir(project.root())
        .expect("list")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.file_name().to_string_lossy().contains(".pipe-tmp-"))
        })
        .count();
    assert_eq!(leftovers, 0);
}
