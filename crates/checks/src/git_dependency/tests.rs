use super::judge::*;
use super::*;

fn src() -> GitSource {
    GitSource {
        url: "file:///w/fork".into(),
        rev: "0123456789abcdef0123456789abcdef01234567".into(),
    }
}

const LOCK: &str = "# header\nversion = 4\n\n[[package]]\nname = \"half\"\nversion = \"2.7.1\"\nsource = \"registry+x\"\nchecksum = \"c\"\n\n[[package]]\nname = \"mlx-patched\"\nversion = \"0.1.0\"\ndependencies = [\n \"mlx-facts\",\n]\n\n[[package]]\nname = \"mlx-sys-git\"\nversion = \"0.0.0\"\ndependencies = [\n \"mlx-sys\",\n]\n";

#[test]
fn the_manifest_names_the_git_source_in_place_of_the_path() {
    let m = git_manifest(&format!("[patch.crates-io]\n{PATH_PATCH}\n"), &src()).unwrap();
    assert_eq!(
        m,
        "[patch.crates-io]\nmlx-sys = { git = \"file:///w/fork\", rev = \"0123456789abcdef0123456789abcdef01234567\" }\n"
    );
    assert!(git_manifest("[patch.crates-io]\n", &src()).is_err());
}

#[test]
fn the_lock_gives_the_fork_s_packages_the_git_source_and_no_other() {
    let lock = git_lock(LOCK, &src(), OWN_PACKAGES).unwrap();
    let source = "source = \"git+file:///w/fork?rev=0123456789abcdef0123456789abcdef01234567#0123456789abcdef0123456789abcdef01234567\"";
    assert!(
        lock.contains(&format!(
            "name = \"mlx-patched\"\nversion = \"0.1.0\"\n{source}\ndependencies"
        )),
        "{lock}"
    );
    assert_eq!(lock.matches(source).count(), 1, "{lock}");
    assert_eq!(lock.replace(&format!("{source}\n"), ""), LOCK);
    // A lock with nothing of the fork's is the wrong file.
    assert!(git_lock(LOCK, &src(), &["mlx-patched", "mlx-sys-git"]).is_err());
}

#[test]
fn only_cargo_s_mark_may_be_in_its_checkout() {
    assert!(written_into_checkout("?? .cargo-ok\n").is_empty());
    assert_eq!(
        written_into_checkout(
            "?? .cargo-ok\n!! target/\n M crates/mlx-sys/shims/std_format.h\n"
        ),
        ["!! target/", " M crates/mlx-sys/shims/std_format.h"]
    );
}

#[test]
fn a_second_build_that_compiles_a_unit_is_seen() {
    let fresh = r#"{"reason":"compiler-artifact","package_id":"a","fresh":true}
{"reason":"build-script-executed","package_id":"b"}
{"reason":"build-finished","success":true}"#;
    assert_eq!(compiled_units(fresh), (1, vec![]));
    let again = format!(
        "{fresh}\n{}",
        r#"{"reason":"compiler-artifact","package_id":"mlx-sys","fresh":false}"#
    );
    assert_eq!(compiled_units(&again), (2, vec!["mlx-sys".to_string()]));
    assert_eq!(compiled_units("not json\n"), (0, vec![]));
}

fn evidence() -> Evidence {
    let ok = |out: &str| Ran {
        success: true,
        status: "exit status: 0".into(),
        stdout: out.into(),
        stderr: String::new(),
    };
    let state = Some((b"key".to_vec(), std::time::SystemTime::UNIX_EPOCH));
    Evidence {
        source: src(),
        snapshot: false,
        build: ok(""),
        retained: vec![0; 10],
        digests: vec!["ff".into(); 10],
        scenario: ok(""),
        dependent: ok("dependent variant patched version 0.32.2 twice 3\n"),
        release: "0.32.2".into(),
        checkout: PathBuf::from("/h/.cargo/git/checkouts/x/0123456"),
        checkout_status: ok("?? .cargo-ok\n"),
        again: ok(""),
        again_units: (40, vec![]),
        mlx_before: vec![state.clone(), state.clone()],
        mlx_after: vec![state.clone(), state],
    }
}

#[test]
fn the_judge_passes_the_fork_and_fails_each_way_it_can_fail() {
    let x = Expectations::new(false);
    assert!(judge(&evidence(), &x).failures.is_empty());
    let spoiled: Vec<fn(&mut Evidence)> = vec![
        |e| e.build.success = false,
        |e| e.retained[9] = 24 << 20,
        |e| e.retained.clear(),
        |e| e.digests[3] = "00".into(),
        |e| e.dependent.stdout = "dependent variant none version 0.32.2 twice 3\n".into(),
        |e| e.checkout_status.stdout += "?? crates/mlx-sys/build.log\n",
        |e| e.again_units.1.push("mlx-sys".into()),
        |e| e.again_units.0 = 0,
        |e| e.mlx_after[1] = None,
        |e| e.mlx_before = vec![None, None],
    ];
    for (i, spoil) in spoiled.iter().enumerate() {
        let mut e = evidence();
        spoil(&mut e);
        assert_eq!(judge(&e, &x).failures.len(), 1, "spoiled evidence {i}");
    }
}
