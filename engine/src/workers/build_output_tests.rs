use super::*;

#[test]
fn pips_lines_become_what_it_is_doing_and_the_rest_is_left_to_the_log() {
    assert_eq!(
        pip_detail("  Downloading torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl (887.9 MB)"),
        Some("downloading torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl (887.9 MB)".into())
    );
    assert_eq!(
        pip_detail(
            "  Downloading https://example.org/whl/cu130/torch-2.11.0-cp311-none.whl (1.2 MB)"
        ),
        Some("downloading torch-2.11.0-cp311-none.whl (1.2 MB)".into())
    );
    assert_eq!(
        pip_detail("Installing collected packages: mpmath, sympy, torch"),
        Some("installing 3 packages into .venv/".into())
    );
    assert_eq!(
        pip_detail("Installing collected packages: torch"),
        Some("installing 1 package into .venv/".into())
    );
    assert_eq!(
        pip_detail("Collecting torch==2.11.0"),
        Some("collecting torch==2.11.0".into())
    );
    assert_eq!(
        pip_detail("     ━━━━━━━━━━━━━━━ 887.9/887.9 MB 25.1 MB/s eta 0:00:00"),
        None
    );
    assert_eq!(
        pip_detail("Requirement already satisfied: filelock in ./.venv/lib"),
        None
    );
    let long = format!("Collecting {}", "x".repeat(300));
    assert_eq!(
        pip_detail(&long).map(|text| text.chars().count()),
        Some(121)
    );
}

#[test]
fn what_pip_downloaded_is_what_its_unpack_directories_hold() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(downloaded(tmp.path()), 0);
    let unpack = tmp.path().join("pip-unpack-abc");
    std::fs::create_dir(&unpack).unwrap();
    std::fs::write(unpack.join("torch.whl"), vec![0u8; 1000]).unwrap();
    std::fs::write(unpack.join("sympy.whl"), vec![0u8; 24]).unwrap();
    // The HTTP cache's buffer of the same bytes is not a second download.
    std::fs::write(tmp.path().join("tmpk2j4"), vec![0u8; 1000]).unwrap();
    assert_eq!(downloaded(tmp.path()), 1024);
}

#[test]
fn the_crates_to_build_are_those_the_packages_reach_without_dev_dependencies() {
    let metadata: Metadata = serde_json::from_value(serde_json::json!({
        "packages": [
            {"id": "w 0.1", "name": "worker"},
            {"id": "p 0.1", "name": "pipe"},
            {"id": "a 1", "name": "a"},
            {"id": "b 1", "name": "b"},
            {"id": "t 1", "name": "only-for-tests"},
        ],
        "workspace_members": ["w 0.1", "p 0.1"],
        "resolve": {"nodes": [
            {"id": "w 0.1", "deps": [
                {"pkg": "a 1", "dep_kinds": [{"kind": null}]},
                {"pkg": "t 1", "dep_kinds": [{"kind": "dev"}]},
            ]},
            {"id": "a 1", "deps": [{"pkg": "b 1", "dep_kinds": [{"kind": "build"}]}]},
            {"id": "b 1", "deps": []},
            {"id": "t 1", "deps": []},
            {"id": "p 0.1", "deps": [{"pkg": "t 1", "dep_kinds": [{"kind": null}]}]},
        ]},
    }))
    .unwrap();
    assert_eq!(metadata.reachable_from(&["worker"]), 3);
    assert_eq!(metadata.reachable_from(&["worker", "pipe"]), 5);
    assert_eq!(metadata.reachable_from(&["absent"]), 0);
}

#[test]
fn cargos_artifacts_are_counted_once_per_crate_and_its_text_goes_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = BuildLog::create(&dir.path().join("build.log")).unwrap();
    let mut watch = Watch::cargo(Some(2));
    let artifact =
        |id: &str| format!(r#"{{"reason":"compiler-artifact","package_id":"{id}","fresh":false}}"#);
    assert!(watch.read(Stream::Out, &artifact("serde 1"), &mut log));
    // A build script and the library it builds: one crate.
    assert!(!watch.read(Stream::Out, &artifact("serde 1"), &mut log));
    assert!(!watch.read(
        Stream::Out,
        r#"{"reason":"build-finished","success":true}"#,
        &mut log
    ));
    assert!(!watch.read(Stream::Err, "   Compiling libc v0.2.1", &mut log));
    assert!(watch.read(Stream::Out, &artifact("libc 0.2"), &mut log));
    assert_eq!((watch.done(), watch.total()), (2, Some(2)));
    assert_eq!(log.tail(), "   Compiling libc v0.2.1");
    let written = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(written, "   Compiling libc v0.2.1\n");
}

#[test]
fn a_failure_shows_the_last_lines_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = BuildLog::create(&dir.path().join("build.log")).unwrap();
    for number in 0..100 {
        log.line(&format!("line {number}"));
    }
    let tail = log.tail();
    assert_eq!(tail.lines().count(), TAIL_LINES);
    assert_eq!(tail.lines().next(), Some("line 70"));
    assert_eq!(tail.lines().last(), Some("line 99"));
}

#[test]
fn a_step_tells_its_progress_from_start_to_end_and_logs_the_tools_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = BuildLog::create(&dir.path().join("build.log")).unwrap();
    let mut command = Command::new("sh");
    command.args([
        "-c",
        r#"echo '{"reason":"compiler-artifact","package_id":"a 1"}'
           echo '   Compiling a v1' >&2
           echo '{"reason":"compiler-artifact","package_id":"b 1"}'
           echo 'error: could not compile `b`' >&2
           exit 3"#,
    ]);
    let seen = std::sync::Mutex::new(Vec::new());
    let observer = |event: Event<'_>| {
        if let Event::WorkerBuildProgress {
            step, done, total, ..
        } = event
        {
            seen.lock().unwrap().push((step, done, total));
        }
    };
    let progress = Progress {
        workers: &["pipe-stage"],
        observer: &observer,
        stop: &std::sync::atomic::AtomicBool::new(false),
    };
    let mut watch = Watch::cargo(Some(5));
    let status = run_step(command, BuildStep::Cargo, &mut watch, &mut log, &progress).unwrap();
    assert_eq!(status.code(), Some(3));
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.first(), Some(&(BuildStep::Cargo, 0, Some(5))));
    assert_eq!(seen.last(), Some(&(BuildStep::Cargo, 2, Some(5))));
    let written = std::fs::read_to_string(log.path()).unwrap();
    assert!(written.starts_with("$ sh -c "), "{written}");
    assert!(
        written.ends_with("   Compiling a v1\nerror: could not compile `b`\n"),
        "{written}"
    );
}
