use super::*;

#[test]
fn a_format_patch_date_is_read_as_seconds_since_1970() {
    assert_eq!(rfc2822_epoch("Thu, 1 Jan 1970 00:00:00 +0000"), Some(0));
    // 2026-12-01T12:00:00Z.
    assert_eq!(
        rfc2822_epoch("Tue, 1 Dec 2026 12:00:00 +0000"),
        Some(1_796_126_400)
    );
    assert_eq!(
        rfc2822_epoch("Tue, 1 Dec 2026 13:30:00 +0130"),
        Some(1_796_126_400)
    );
    assert_eq!(
        rfc2822_epoch("Mon, 29 Feb 2016 00:00:00 +0000"),
        Some(1_456_704_000)
    );
    assert_eq!(rfc2822_epoch("yesterday"), None);
}

#[test]
fn the_fork_s_metadata_moves_upstream_s_pins_to_its_own_version() {
    let upstream = "Metadata-Version: 2.4\nName: mlx\nVersion: 0.32.2\nSummary: x\nHome-page: h\nAuthor-email: a\nLicense: MIT\nRequires-Python: >=3.10\nLicense-File: LICENSE\nRequires-Dist: mlx-metal==0.32.2; platform_system == \"Darwin\"\nProvides-Extra: dev\nRequires-Dist: numpy>=2; extra == \"dev\"\nProvides-Extra: cpu\nRequires-Dist: mlx-cpu==0.32.2; platform_system == \"Linux\" and extra == \"cpu\"\nDynamic: summary\n\n# MLX\nupstream's readme\n";
    let v = "0.32.2+fork.abcdef12";
    let m = fork_metadata(
        upstream,
        "0.32.2",
        v,
        "S",
        "B\n",
        &[format!("mlx-cpu=={v}")],
    )
    .unwrap();
    assert!(
        m.contains("\nVersion: 0.32.2+fork.abcdef12\nSummary: S\n"),
        "{m}"
    );
    assert!(
        m.contains(
            "Requires-Dist: mlx-metal==0.32.2+fork.abcdef12; platform_system == \"Darwin\""
        ),
        "{m}"
    );
    assert!(m.contains("Requires-Dist: mlx-cpu==0.32.2+fork.abcdef12; platform_system == \"Linux\" and extra == \"cpu\""), "{m}");
    assert!(
        m.contains("Requires-Dist: numpy>=2; extra == \"dev\""),
        "{m}"
    );
    assert!(
        m.contains("Provides-Extra: cpu\n") && m.contains("License-File: LICENSE\n"),
        "{m}"
    );
    assert!(
        m.contains("Requires-Dist: mlx-cpu==0.32.2+fork.abcdef12\n\nB\n"),
        "{m}"
    );
    for gone in ["Home-page", "Author-email", "Dynamic", "upstream's readme"] {
        assert!(!m.contains(gone), "{gone} kept: {m}");
    }
    let wrong = fork_metadata(
        &upstream.replace("Version: 0.32.2", "Version: 0.32.3"),
        "0.32.2",
        v,
        "S",
        "B",
        &[],
    );
    assert!(wrong.is_err());
}
